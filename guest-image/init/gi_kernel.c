/*  gi_kernel - the supervised cellvm-kernel process. */
#include "gi_kernel.h"
#include "ch_sig.h"
#include "gi_log.h"
#include "gi_sys.h"
#include "ch_clock.h"
#include "ch_child.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define S_EVENTS GI_CGROUP "/memory.events"

struct _gi_kernel_t {
    pid_t pid;                  //  0 when not running
    uint64_t mem_limit;
    int restarts;               //  starts after the first
    int starts;
    int stopping;               //  the next death was asked for
    long oom_base;              //  oom_kill counter when it started
    int64_t started;            //  ch_clock_mono_ms
    json_t *last_exit;
};

//  OOM kills so far: of the kernel's cgroup, else of the whole guest.
static long
s_oom_count (void)
{
    long n = gi_sys_read_key (S_EVENTS, "oom_kill");
    return n >= 0 ? n : gi_sys_read_key ("/proc/vmstat", "oom_kill");
}

gi_kernel_t *
gi_kernel_new (uint64_t mem_limit)
{
    gi_kernel_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->mem_limit = mem_limit;
    return self;
}

void
gi_kernel_destroy (gi_kernel_t **self_p)
{
    assert (self_p);
    gi_kernel_t *self = *self_p;
    if (!self)
        return;
    json_decref (self->last_exit);
    free (self);
    *self_p = NULL;
}

int
gi_drop_privileges (uid_t uid, gid_t gid)
{
    for (int cap = 0; cap <= 63; cap++)
        if (prctl (PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno == EINVAL)
            break;
    prctl (PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    if (setgroups (0, NULL) < 0
    ||  setresgid (gid, gid, gid) < 0
    ||  setresuid (uid, uid, uid) < 0)
        return -errno;
    //  setresuid away from 0 clears every capability set; this bars regaining any.
    if (prctl (PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return -errno;
    return 0;
}

//  In the child: cgroup, OOM preference, limits, signals, fds.
static void
s_child_setup (void)
{
    gi_sys_write_file (GI_CGROUP "/cgroup.procs", "0");
    //  Inherited -1000 from init: make the kernel the OOM killer's first choice.
    gi_sys_write_file ("/proc/self/oom_score_adj", "500");
    setsid ();
    struct rlimit nproc = { GI_PIDS_MAX, GI_PIDS_MAX }, core = { 0, 0 };
    setrlimit (RLIMIT_NPROC, &nproc);
    setrlimit (RLIMIT_CORE, &core);
    ch_sig_defaults ();
    //  stdin /dev/null; stdout and stderr stay the console.
    ch_child_fds ((const int []) { open ("/dev/null", O_RDONLY | O_CLOEXEC), -1, -1 }, 3, false);
}

static void
s_child (void)
{
    s_child_setup ();
    if (chdir (GI_WORKSPACE) < 0 || gi_drop_privileges (GI_KERNEL_UID, GI_KERNEL_GID) < 0) {
        gi_log (CH_LOG_ERROR, "kernel.setup_failed", "reason=\"%s\"", strerror (errno));
        _exit (126);
    }
    //  A clean environment: nothing from the host or the kernel command line.
    char *envp [] = {
        "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp/home", "USER=cellvm",
        "LOGNAME=cellvm", "SHELL=/bin/bash", "LANG=C.UTF-8", "TMPDIR=/tmp",
        "TERM=xterm-256color", "MPLCONFIGDIR=/var/cache/cellvm/matplotlib", NULL
    };
    char *argv [] = { GI_KERNEL_BIN, "--device", "/dev/virtio-ports/" GI_KERNEL_PORT,
                      "--outdir", GI_WORKSPACE "/out", NULL };
    execve (argv [0], argv, envp);
    gi_log (CH_LOG_ERROR, "kernel.exec_failed", "path=%s reason=\"%s\"", argv [0],
            strerror (errno));
    _exit (127);
}

//  Wait up to ms for the kernel cgroup to report "populated 0". 0 or -ETIMEDOUT.
static int
s_wait_cgroup_empty (int ms)
{
    for (int waited = 0; waited < ms; waited += 10) {
        char buf [256] = "";
        FILE *f = fopen (GI_CGROUP "/cgroup.events", "re");
        size_t n = f ? fread (buf, 1, sizeof buf - 1, f) : 0;
        if (f)
            fclose (f);
        buf [n] = 0;
        if (!f || strstr (buf, "populated 0"))
            return 0;
        usleep (10 * 1000);
    }
    return -ETIMEDOUT;
}

int
gi_kernel_clear_cgroup (int wait_ms)
{
    gi_sys_write_file (GI_CGROUP "/cgroup.kill", "1");
    int rc = s_wait_cgroup_empty (wait_ms);
    if (rc < 0)
        gi_log (CH_LOG_WARN, "kernel.cgroup_populated", "waited_ms=%d", wait_ms);
    return rc;
}

int
gi_kernel_start (gi_kernel_t *self)
{
    assert (self);
    if (self->pid)
        return -EALREADY;
    //  Anything the last kernel left in its cgroup goes first, and is gone
    //  before the new one starts: dying processes still hold their memory.
    gi_kernel_clear_cgroup (5000);
    if (mkdir ("/tmp/home", 0700) == 0 || errno == EEXIST)
        if (chown ("/tmp/home", GI_KERNEL_UID, GI_KERNEL_GID) < 0)
            gi_log (CH_LOG_WARN, "kernel.home_chown", "path=/tmp/home reason=\"%s\"",
                    strerror (errno));
    self->oom_base = s_oom_count ();
    pid_t pid = fork ();
    if (pid < 0)
        return -errno;
    if (pid == 0)
        s_child ();
    self->pid = pid;
    self->started = ch_clock_mono_ms ();
    self->stopping = 0;
    if (self->starts++ > 0)
        self->restarts++;
    gi_log (CH_LOG_INFO, "kernel.started", "pid=%d start=%d", (int) pid, self->starts);
    return 0;
}

int
gi_kernel_signal (gi_kernel_t *self, int sig)
{
    assert (self);
    if (!self->pid)
        return -ESRCH;
    if (sig == SIGKILL && gi_sys_write_file (GI_CGROUP "/cgroup.kill", "1") == 0)
        return 0;
    return kill (self->pid, sig) < 0 ? -errno : 0;
}

int
gi_kernel_stop (gi_kernel_t *self)
{
    assert (self);
    if (!self->pid)
        return 0;
    self->stopping = 1;
    gi_kernel_signal (self, SIGKILL);
    int status;
    pid_t pid = self->pid;
    while (waitpid (pid, &status, 0) < 0)
        if (errno != EINTR)
            return -errno;
    gi_kernel_reaped (self, pid, status);
    return 0;
}

//  Name of a signal number ("SIGSEGV"), "SIG<n>" if unknown.
static const char *
s_signal_name (int sig, char *buf, size_t len)
{
    const char *abbrev = sigabbrev_np (sig);
    if (abbrev)
        snprintf (buf, len, "SIG%s", abbrev);
    else
        snprintf (buf, len, "SIG%d", sig);
    return buf;
}

int
gi_signal_from_name (const char *name)
{
    for (int sig = 1; name && sig < NSIG; sig++) {
        char buf [32];
        if (strcmp (name, s_signal_name (sig, buf, sizeof buf)) == 0)
            return sig;
    }
    return -1;
}

//  The words a user reads: what happened, and for OOM, what to do about it.
static void
s_describe (gi_kernel_t *self, int status, int oom, char *text, size_t len)
{
    char name [32];
    int sig = WIFSIGNALED (status) ? WTERMSIG (status) : 0;
    if (oom)
        snprintf (text, len, "The kernel was killed for exceeding the session's %llu MiB of "
                  "memory (out-of-memory kill). Process the data in chunks or sample it.",
                  (unsigned long long) (self->mem_limit >> 20));
    else if (self->stopping)
        snprintf (text, len, "The kernel was stopped on request.");
    else if (sig)
        snprintf (text, len, "The kernel died from signal %s (%s)%s.",
                  s_signal_name (sig, name, sizeof name), strsignal (sig),
                  WCOREDUMP (status) ? ", core dumped" : "");
    else
        snprintf (text, len, "The kernel exited with status %d.", WEXITSTATUS (status));
}

int
gi_kernel_reaped (gi_kernel_t *self, pid_t pid, int status)
{
    assert (self);
    if (pid != self->pid || (!WIFEXITED (status) && !WIFSIGNALED (status)))
        return 0;
    int sig = WIFSIGNALED (status) ? WTERMSIG (status) : 0;
    long ooms = s_oom_count ();
    int oom = sig == SIGKILL && !self->stopping && ooms > self->oom_base;
    char text [320], name [32];
    s_describe (self, status, oom, text, sizeof text);
    const char *reason = oom ? "oom_killed" : self->stopping ? "requested"
                       : sig ? "signaled" : "exited";
    json_decref (self->last_exit);
    self->last_exit = json_pack ("{s:i, s:s, s:i, s:o, s:o, s:b, s:b, s:s, s:f, s:i}",
        "pid", (int) pid, "reason", reason, "code", sig ? 128 + sig : WEXITSTATUS (status),
        "exit_code", sig ? json_null () : json_integer (WEXITSTATUS (status)),
        "signal", sig ? json_string (s_signal_name (sig, name, sizeof name)) : json_null (),
        "oom_killed", oom, "requested", self->stopping, "description", text,
        "runtime_s", (double) (ch_clock_mono_ms () - self->started) / 1e3,
        "restarts", self->restarts);
    gi_log (CH_LOG_INFO, "kernel.gone", "pid=%d how=\"%s\"", (int) pid, text);
    self->pid = 0;
    self->stopping = 0;
    return 1;
}

pid_t
gi_kernel_pid (const gi_kernel_t *self)
{
    return self->pid;
}

json_t *
gi_kernel_last_exit (const gi_kernel_t *self)
{
    return self->last_exit ? json_incref (self->last_exit) : NULL;
}

json_t *
gi_kernel_state (const gi_kernel_t *self)
{
    return json_pack ("{s:s, s:i, s:i, s:f, s:I, s:o}",
        "state", self->pid ? "running" : self->starts ? "exited" : "not_started",
        "pid", (int) self->pid, "restarts", self->restarts,
        "uptime_s", self->pid ? (double) (ch_clock_mono_ms () - self->started) / 1e3 : 0.0,
        "memory_limit_bytes", (json_int_t) self->mem_limit,
        "last_exit", self->last_exit ? json_incref (self->last_exit) : json_null ());
}
