/*  gw_vmspawn - start one program for gw_vm (QEMU, qemu-img): fork, or
    clone into a jail (gw_jail), then exec.

    The gateway has other threads (ZeroMQ's), so between fork and exec the
    child only makes async-signal-safe calls: everything it needs is in
    gw_vmspawn_t, prepared by the caller. The child gets its own process
    group, PR_SET_PDEATHSIG (SIGKILL), default signal dispositions (SIGXFSZ
    ignored), no core files, RLIMIT_FSIZE, stdin /dev/null, stdout and
    stderr to the log, every other fd closed on exec.
*/
#ifndef GW_VMSPAWN_H
#define GW_VMSPAWN_H

#include "jail/gw_jail.h"

#include <stddef.h>
#include <sys/resource.h>
#include <sys/types.h>

typedef struct {
    char **argv;                                //  argv [0] is the full path
    const char *cwd;                            //  working directory
    int log_fd;                                 //  stdout and stderr
    int null_fd;                                //  stdin
    rlim_t fsize;                               //  RLIMIT_FSIZE, 0: unchanged
    pid_t parent;                               //  the gateway
    gw_jail_t *jail;                            //  clone into it; NULL: plain fork
    char **env;                                 //  unjailed: exec with it (gw_vmspawn_env);
                                                //  NULL: ours
    int report_fd;                              //  set by gw_vmspawn: the child's report pipe
} gw_vmspawn_t;

//  Our environment with LD_PRELOAD=shim (ahead of one we have) and
//  CELLVM_JAIL_RO_RAM=ram: what an unjailed clone's QEMU needs of the shim
//  a jail gives it (jailshim.c). Free with gw_vmspawn_env_destroy.
char **gw_vmspawn_env (const char *shim, const char *ram);
void gw_vmspawn_env_destroy (char ***env_p);

//  Start sp->argv. Returns once the child has exec'd, or (jailed) once it
//  is in its jail's root: its cgroup, privileges and exec follow on its
//  own, and a failure there is an early exit for reap to tell. 0 and
//  *pid_p, or -errno with the reason in err when the child said one.
int gw_vmspawn (gw_vmspawn_t *sp, pid_t *pid_p, char *err, size_t errlen);

#endif
