/*  gw_priv - privilege separation: a gateway started as root runs as a
    service user (--user NAME), and a small helper that stays root
    (gw_privd) does the one thing that needs root: jailing QEMU.

    gw_priv_drop forks the helper, then this process takes the user's uid
    and gid, with the jail range's gids as supplementary groups (files its
    VMs write are theirs, group-readable: console log, sockets, migration
    state), no capabilities, and HOME at the user's home (stores and run
    dirs follow the uid, as for any user). Everything else (clients,
    guests' frames, QMP, files, qemu-img) runs unprivileged.

    The requests are synchronous and serialised (a mutex): one SEQPACKET
    round trip each, fds passed as SCM_RIGHTS. See docs/security.md.
*/
#ifndef GW_PRIV_H
#define GW_PRIV_H

#include "jail/gw_jail.h"
#include "jail/gw_vmspawn.h"

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct _gw_priv_t gw_priv_t;

//  This process's helper once gw_priv_drop ran, else NULL.
gw_priv_t *gw_priv (void);

//  As root, before any thread exists: start the helper (jail: the VMs'
//  options; qemu: the only binary it will start, resolved), then become
//  user (a name or a uid). 0, or -errno with the reason in err. Not root:
//  -EPERM, unless this process already is that user (0, nothing done).
int gw_priv_drop (const char *user, const gw_jail_opts_t *jail, const char *qemu, char *err,
                  size_t errlen);

//  What the helper says of a spawned QEMU, for the log.
typedef struct {
    unsigned uid;
    char kind [16];
    char cgroup [256];
} gw_priv_jail_t;

//  Jail and start sp->argv (QEMU) for vm, with sp's log and null fds,
//  rlimit and cwd (the run dir). 0 with *pid_p and *pidfd_p (ours, to
//  poll for its exit), or -errno with the reason in err.
int gw_priv_spawn (gw_priv_t *self, const gw_jail_vm_t *vm, const gw_vmspawn_t *sp,
                   pid_t *pid_p, int *pidfd_p, gw_priv_jail_t *info, char *err, size_t errlen);

//  SIGKILL to a VM the helper started.
int gw_priv_kill (gw_priv_t *self, pid_t pid);

//  Its exit status once it exited (block: wait for it); -EAGAIN not yet.
//  why gets the jail's explanation of the death, "" when none.
int gw_priv_reap (gw_priv_t *self, pid_t pid, bool block, int *wstatus, char *why, size_t cap);

//  QEMU's descriptor of its console log at path (gw_fdborrow).
int gw_priv_console (gw_priv_t *self, pid_t pid, const char *path, int *fd_p);

#endif
