/*  mc_proc - the gateway processes: started from a kernelspec (mc_spec),
    stopped, reaped.

    The spec's argv has {connection_file} replaced; its env is added to ours.

    A gateway is started in its own session (setsid, as jupyter_client does),
    with stdin on /dev/null, stdout and stderr into a log file, JPY_PARENT_PID
    set to our pid (the gateway shuts itself down when we are gone) and
    PR_SET_PDEATHSIG SIGTERM (the same, at once, if we are killed).
*/
#ifndef MC_PROC_H
#define MC_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "mc_spec.h"

//  Start the spec's argv with conn_path, then extra (NULL-terminated, may
//  be NULL), output into log_path (appended). The pid, or -errno with err
//  in words (an exec failure included).
pid_t mc_proc_spawn (const mc_spec_t *spec, const char *conn_path, const char *const *extra,
                     const char *log_path, char *err, size_t errlen);

//  Has pid exited? 1 and *status_p (waitpid's) when reaped now, 0 when it
//  runs, -ECHILD when it is not our child (already reaped).
int mc_proc_reap (pid_t pid, int *status_p);

//  "exited with status 1", "was killed by signal 9 (SIGKILL)" into out.
void mc_proc_describe (int status, char *out, size_t cap);

//  The last lines of the file at path (at most cap bytes, whole lines)
//  into out; "" when unreadable.
void mc_proc_log_tail (const char *path, char *out, size_t cap);

#endif
