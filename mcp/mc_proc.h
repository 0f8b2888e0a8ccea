/*  mc_proc - the gateway processes: found through a kernelspec, started,
    stopped, reaped.

    A kernelspec is looked up as jupyter_client does: kernels/NAME/kernel.json
    under each directory of $JUPYTER_PATH, then the user's and the system's
    Jupyter data directories, then share/jupyter beside this binary (the
    build tree, or PREFIX after make install). Its argv has
    {connection_file} replaced; its env is added to ours.

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

typedef struct _mc_spec_t mc_spec_t;

//  Load kernelspec name (or, when name holds a '/', the kernel.json at that
//  path). NULL with err in words (where it looked).
mc_spec_t *mc_spec_load (const char *name, char *err, size_t errlen);
void mc_spec_destroy (mc_spec_t **self_p);

//  Where the kernel.json was found (borrowed).
const char *mc_spec_path (const mc_spec_t *self);

//  True when the spec runs the unsafe-local backend (metadata.cellvm_backend,
//  or "--backend unsafe-local" in its argv): no isolation at all.
bool mc_spec_unsafe (const mc_spec_t *self);

//  The value a lifetime option of the gateway (option: "--idle-timeout" or
//  "--ttl") has for a gateway started from spec: ours when >= 0, appended
//  after the spec's argv (the gateway takes the last); else the spec's own
//  ("--ttl S" or "--ttl=S" in its argv, the last one); else fallback,
//  appended when > 0. 0 is no limit. *append_p: whether to append it.
double mc_spec_lifetime (const mc_spec_t *spec, const char *option, double ours,
                         double fallback, bool *append_p);

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
