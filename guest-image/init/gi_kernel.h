/*  gi_kernel - start, watch and stop cellvm-kernel as the unprivileged
 *  kernel user inside its own cgroup, and say in words how it died.
 *
 *  Reaping is the caller's job (PID 1 reaps everything): it hands every
 *  (pid, status) it collects to gi_kernel_reaped.
 */
#ifndef GI_KERNEL_H
#define GI_KERNEL_H

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#define GI_KERNEL_BIN "/usr/local/bin/cellvm-kernel"
#define GI_KERNEL_PORT "cellvm.kernel"

typedef struct _gi_kernel_t gi_kernel_t;

//  mem_limit is the cgroup's memory.max (0: none), quoted in death reports.
gi_kernel_t *gi_kernel_new (uint64_t mem_limit);
void gi_kernel_destroy (gi_kernel_t **self_p);

//  Start the kernel. -EALREADY if it runs; 0 or -errno.
int gi_kernel_start (gi_kernel_t *self);

//  Stop it (SIGKILL to its whole cgroup) and wait for it; the death is
//  recorded as requested. 0 when it was not running.
int gi_kernel_stop (gi_kernel_t *self);

//  Kill whatever is in the kernel's cgroup (the kernel, its children, what
//  they left behind) and wait up to wait_ms for it to empty. Reap the kernel
//  first (gi_kernel_stop) so its death is recorded. 0 or -ETIMEDOUT.
int gi_kernel_clear_cgroup (int wait_ms);

//  Send sig to the kernel process (SIGKILL: to its whole cgroup). -ESRCH
//  when it is not running.
int gi_kernel_signal (gi_kernel_t *self, int sig);

//  A reaped child. Returns 1 when it was the kernel: its death is recorded
//  and gi_kernel_last_exit describes it; 0 for any other process.
int gi_kernel_reaped (gi_kernel_t *self, pid_t pid, int status);

//  Pid of the running kernel, 0 when none.
pid_t gi_kernel_pid (const gi_kernel_t *self);

//  {"state", "pid", "restarts", "uptime_s", "memory_limit_bytes", "last_exit"}:
//  new reference.
json_t *gi_kernel_state (const gi_kernel_t *self);

//  The last death ({...} as in docs/init.md `kernel_exited`), or NULL.
//  New reference.
json_t *gi_kernel_last_exit (const gi_kernel_t *self);

//  In a forked child: become uid/gid with no supplementary groups, an
//  empty capability bounding set and PR_SET_NO_NEW_PRIVS (the kernel's
//  child, the egress proxy's). Returns -errno on failure: the caller exits.
int gi_drop_privileges (uid_t uid, gid_t gid);

//  The number of a signal's name ("SIGSEGV", or "SIG<n>"); -1 if none.
int gi_signal_from_name (const char *name);

#endif
