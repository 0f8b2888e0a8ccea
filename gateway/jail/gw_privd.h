/*  gw_privd - the privileged helper of a gateway that runs as a service
    user (--user, gw_priv). It is forked as root before the gateway drops
    its privileges, and does only what needs root: it jails and starts
    QEMU (gw_jail, gw_vmspawn), signals and reaps it, and borrows its
    console descriptor. QEMU is its child; every exit is passed on to the
    gateway as a SIGCHLD, and the gateway asks for the status (REAP).

    The gateway may be compromised (it parses what clients and guests
    send), so the helper trusts no request: the binary must be the QEMU it
    was started with, the jail is always on with its own options, every
    path it exposes must be readable by the service user, and every file
    it changes must be the service user's (or, for o+r, a jailed VM's),
    checked on the descriptor it changes. It serves until the gateway
    closes its socket or dies, then kills and reaps its VMs.
*/
#ifndef GW_PRIVD_H
#define GW_PRIVD_H

#include "jail/gw_jail.h"
#include "jail/gw_privmsg.h"

#include <sys/stat.h>
#include <sys/types.h>

#define GW_PRIVD_VMS 64                         //  VMs alive at once, per gateway

typedef struct {
    uid_t uid;                                  //  the service user the gateway runs as
    gid_t gid;
    pid_t gateway;                              //  told of exits by SIGCHLD
    const char *qemu;                           //  the only binary it starts
    gw_jail_opts_t jail;                        //  the gateway's --jail-uid-base, --cpus
} gw_privd_cfg_t;

//  Serve the gateway's requests on sock until it closes; the exit code.
int gw_privd_run (int sock, const gw_privd_cfg_t *cfg);

//  The checks, for tests: a path the jail would expose or change (gw_jail's vet hook).
int gw_privd_vet (void *cfg, const char *path, const struct stat *st, gw_jail_vet_t how);
//  A spawn request's shape: 0, or -EPERM with the reason in err.
int gw_privd_check_spawn (const gw_privd_cfg_t *cfg, const gw_privmsg_t *msg, char *err,
                          size_t errlen);

#endif
