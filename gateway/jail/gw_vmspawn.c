/*  gw_vmspawn - start one program for gw_vm (see gw_vmspawn.h). */
#include "jail/gw_vmspawn.h"
#include "ch_sig.h"
#include "ch_child.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

//  What a child that could not exec reports: errno, and the jail's step.
//  A jailed child reports { 0, S_JAILED } once in its root: the rest (its
//  cgroup, which can take an RCU grace period, privileges, exec) is its own.
typedef struct {
    int error, step;
} s_report_t;
#define S_JAILED (INT_MIN + 1)

//  Default signal dispositions, an empty mask, no core files, the size cap.
static void
s_child_reset (const gw_vmspawn_t *sp)
{
    ch_sig_defaults ();
    //  QEMU quits on SIGTERM, SIGINT and SIGHUP. Whoever signals a whole process
    //  tree (Slurm's proctrack at a requeue, systemd's control-group stop, a
    //  hang-up) means the session, and the gateway answers for it: a named
    //  session is suspended first, which needs its QEMU. The gateway itself
    //  stops QEMU by QMP or SIGKILL, and a blocked signal survives exec.
    sigset_t held;
    sigemptyset (&held);
    sigaddset (&held, SIGTERM);
    sigaddset (&held, SIGINT);
    sigaddset (&held, SIGHUP);
    sigprocmask (SIG_BLOCK, &held, NULL);
    //  Over RLIMIT_FSIZE a write fails with EFBIG instead of killing QEMU.
    struct sigaction sa;
    memset (&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    sigaction (SIGXFSZ, &sa, NULL);
    struct rlimit no_core = { 0, 0 }, fsize = { sp->fsize, sp->fsize };
    setrlimit (RLIMIT_CORE, &no_core);          //  no 512 MiB core files
    if (sp->fsize)
        setrlimit (RLIMIT_FSIZE, &fsize);
}

//  A failure the gateway no longer waits for, into the log (qemu.log):
//  "cellvm jail: step S errno E". No stdio here: digits by hand.
static void
s_say (int step, int error)
{
    char line [64] = "cellvm jail: step -", *p = line + strlen (line);
    unsigned long vals [2] = { (unsigned long) -(long) step, (unsigned long) error };
    for (int i = 0; i < 2; i++) {
        char digits [24];
        int n = 0;
        do
            digits [n++] = (char) ('0' + vals [i] % 10);
        while ((vals [i] /= 10) && n < 23);
        while (n)
            *p++ = digits [--n];
        const char *sep = i == 0 ? " errno " : "\n";
        memcpy (p, sep, strlen (sep));
        p += strlen (sep);
    }
    (void) !write (2, line, (size_t) (p - line));
}

//  _exit without its noreturn attribute: ASan's hook before a noreturn call misreads the
//  jail's clone stack as a huge one and warns.
static void
s_exit (int code)
{
    syscall (SYS_exit_group, code);
}

//  Child side, between fork and exec: async-signal-safe calls only. Never returns.
static void
s_child (const gw_vmspawn_t *sp)
{
    s_report_t r = { 0, INT_MIN };
    bool told = false;                          //  the gateway went on: no more reports
    setpgid (0, 0);                             //  killpg reaches all of it
    //  In a new pid namespace getppid is 0: the jail's lifeline tells instead.
    if (ch_child_tie (sp->jail ? 0 : sp->parent, SIGKILL) < 0) {
        s_exit (127);                           //  the gateway already died
        return;
    }
    s_child_reset (sp);
    //  The rest stays open until exec: the report pipe, the jail's own fds.
    if ((errno = -ch_child_fds ((const int []) { sp->null_fd, sp->log_fd, sp->log_fd }, 3,
                                true)) != 0)
        goto fail;
    if (sp->jail && (r.error = -gw_jail_enter (sp->jail, &r.step)) != 0)
        goto report;
    if (sp->jail) {
        s_report_t jailed = { 0, S_JAILED };
        (void) !write (sp->report_fd, &jailed, sizeof jailed);
        told = true;
        if ((r.error = -gw_jail_finish (sp->jail, &r.step)) != 0)
            goto report;                        //  reap tells
    }
    r.step = INT_MIN;
    if (chdir (sp->cwd) < 0)
        goto fail;
    close_range (3, ~0U, CLOSE_RANGE_CLOEXEC);  //  no gateway fd leaks in; report closes on exec
    if (sp->jail)                               //  nothing of the gateway's environment either
        execve (sp->argv [0], sp->argv, gw_jail_env (sp->jail));
    else if (sp->env)
        execve (sp->argv [0], sp->argv, sp->env);
    else
        execv (sp->argv [0], sp->argv);
fail:
    r.error = errno;
report:
    if (told)
        s_say (r.step, r.error);
    else
        (void) !write (sp->report_fd, &r, sizeof r);
    s_exit (127);
}

static int
s_child_cloned (void *sp)
{
    s_child (sp);
    return 127;
}

//  The jailed child is QEMU itself, pid 1 of its own pid namespace.
static pid_t
s_start_child (const gw_vmspawn_t *sp, char *err, size_t errlen)
{
    if (!sp->jail) {
        pid_t pid = fork ();
        if (pid == 0) {
            s_child (sp);
            s_exit (127);
        }
        return pid < 0 ? -errno : pid;
    }
    pid_t pid = gw_jail_clone (sp->jail, s_child_cloned, (void *) sp);
    if (pid > 0 && gw_jail_release (sp->jail, pid, err, errlen) < 0) {
        kill (pid, SIGKILL);
        waitpid (pid, NULL, 0);
        return -EPERM;
    }
    if (pid < 0)
        snprintf (err, errlen, "jail: clone into new namespaces: %s", strerror (-pid));
    return pid;
}

//  Fork (or clone into the jail) and exec; returns once the child has
//  exec'd (its report pipe closed) or with the errno it reported, the
//  reason in err.
int
gw_vmspawn (gw_vmspawn_t *sp, pid_t *pid_p, char *err, size_t errlen)
{
    int report [2];
    if (pipe2 (report, O_CLOEXEC) < 0)
        return -errno;
    sp->report_fd = report [1];
    pid_t pid = s_start_child (sp, err, errlen);
    close (report [1]);
    if (pid > 0)
        setpgid (pid, pid);                     //  also here: no race with killpg
    s_report_t r = { 0, INT_MIN };
    ssize_t n = 0;
    while (pid > 0 && (n = read (report [0], &r, sizeof r)) < 0 && errno == EINTR)
        ;
    close (report [0]);
    if (pid < 0)
        return (int) pid;
    if (n == (ssize_t) sizeof r && !(r.error == 0 && r.step == S_JAILED)) {
        waitpid (pid, NULL, 0);
        char step [PATH_MAX + 32];
        if (r.step != INT_MIN)
            snprintf (err, errlen, "jail: %s: %s", gw_jail_step_name (sp->jail, r.step, step,
                      sizeof step), strerror (r.error ? r.error : EIO));
        return -(r.error ? r.error : EIO);
    }
    *pid_p = pid;
    return 0;
}

static char *
s_var (const char *name, const char *value, const char *old)
{
    char *text = NULL;
    if (asprintf (&text, "%s=%s%s%s", name, value, old ? ":" : "", old ? old : "") < 0)
        abort ();
    return text;
}

char **
gw_vmspawn_env (const char *shim, const char *ram)
{
    extern char **environ;
    size_t n = 0, k = 0;
    while (environ [n])
        n++;
    char **env = calloc (n + 3, sizeof *env);
    if (!env)
        abort ();
    for (size_t i = 0; i < n; i++)
        if (strncmp (environ [i], "LD_PRELOAD=", 11) != 0
        &&  strncmp (environ [i], "CELLVM_JAIL_RO_RAM=", 19) != 0
        &&  !(env [k++] = strdup (environ [i])))
            abort ();
    env [k++] = s_var ("LD_PRELOAD", shim, getenv ("LD_PRELOAD"));
    env [k++] = s_var ("CELLVM_JAIL_RO_RAM", ram, NULL);
    return env;
}

void
gw_vmspawn_env_destroy (char ***env_p)
{
    if (!env_p || !*env_p)
        return;
    for (char **e = *env_p; *e; e++)
        free (*e);
    free (*env_p);
    *env_p = NULL;
}
