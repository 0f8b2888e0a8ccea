/*  mc_proc - the gateway processes: started from a kernelspec, stopped,
    reaped. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "mc_proc.h"
#include "mc_spec.h"
#include "ch_sig.h"
#include "ch_child.h"

//  s with every "{connection_file}" replaced by conn; new.
static char *
s_subst (const char *s, const char *conn)
{
    const char *key = "{connection_file}";
    size_t klen = strlen (key), n = 0;
    char *out = malloc (strlen (s) * (strlen (conn) + 1) + 1);
    if (!out)
        abort ();
    while (*s) {
        if (strncmp (s, key, klen) == 0) {
            n += (size_t) sprintf (out + n, "%s", conn);
            s += klen;
        }
        else
            out [n++] = *s++;
    }
    out [n] = 0;
    return out;
}

//  argv [0] resolved through PATH when it has no slash; new.
static char *
s_resolve (const char *prog)
{
    if (strchr (prog, '/'))
        return strdup (prog);
    const char *path = getenv ("PATH");
    char *copy = strdup (path ? path : "/usr/bin:/bin"), *save = NULL, buf [PATH_MAX];
    char *found = NULL;
    for (char *d = strtok_r (copy, ":", &save); d && !found; d = strtok_r (NULL, ":", &save)) {
        snprintf (buf, sizeof buf, "%s/%s", d, prog);
        if (access (buf, X_OK) == 0)
            found = strdup (buf);
    }
    free (copy);
    return found ? found : strdup (prog);
}

//  Our environment, with the spec's env and JPY_PARENT_PID set; new.
static char **
s_envp (const mc_spec_t *spec)
{
    extern char **environ;
    json_t *env = mc_spec_env (spec);
    size_t n = 0;
    while (environ [n])
        n++;
    char **envp = calloc (n + json_object_size (env) + 2, sizeof *envp);
    size_t k = 0;
    const char *key;
    json_t *v;
    for (size_t i = 0; i < n; i++) {
        size_t klen = strcspn (environ [i], "=");
        bool replaced = strncmp (environ [i], "JPY_PARENT_PID=", 15) == 0;
        json_object_foreach (env, key, v)
            replaced = replaced || (strlen (key) == klen && strncmp (key, environ [i], klen) == 0);
        if (!replaced)
            envp [k++] = strdup (environ [i]);
    }
    json_object_foreach (env, key, v)
        if (json_is_string (v) && asprintf (&envp [k], "%s=%s", key, json_string_value (v)) > 0)
            k++;
    if (asprintf (&envp [k], "JPY_PARENT_PID=%d", (int) getpid ()) > 0)
        k++;
    return envp;
}

static void
s_strv_free (char **v)
{
    for (size_t i = 0; v && v [i]; i++)
        free (v [i]);
    free (v);
}

//  After fork, in the child: only async-signal-safe calls.
static void
s_child (char **argv, char **envp, int logfd, int nullfd, int errfd)
{
    //  Dispositions and the mask survive exec: the gateway starts from the
    //  ordinary ones, not ours (SIGPIPE ignored, SIGTERM blocked) nor whatever
    //  cellvm-mcp's own launcher ignored (SIGINT for a background job).
    ch_sig_defaults ();
    setsid ();
    ch_child_tie (0, SIGTERM);
    int rc = ch_child_fds ((const int []) { nullfd, logfd, logfd, errfd }, 4, false);
    fcntl (3, F_SETFD, FD_CLOEXEC);
    if (rc == 0)
        execve (argv [0], argv, envp);
    else
        errno = -rc;
    ch_child_exec_failed (rc == 0 ? 3 : errfd);
}

//  Fork and exec; wait for the exec through the CLOEXEC pipe.
static pid_t
s_fork_exec (char **argv, char **envp, int logfd, int nullfd, char *err, size_t errlen)
{
    int pipefd [2];
    if (pipe2 (pipefd, O_CLOEXEC) != 0)
        return -errno;
    pid_t pid = fork ();
    if (pid == 0)
        s_child (argv, envp, logfd, nullfd, pipefd [1]);
    int e = errno;
    close (pipefd [1]);
    int rc = pid > 0 ? ch_child_wait_exec (pipefd [0]) : 0;
    close (pipefd [0]);
    if (pid < 0) {
        snprintf (err, errlen, "cannot fork: %s", strerror (e));
        return -EAGAIN;
    }
    if (rc < 0) {
        waitpid (pid, NULL, 0);
        snprintf (err, errlen, "cannot run %s: %s", argv [0], strerror (-rc));
        return rc;
    }
    return pid;
}

pid_t
mc_proc_spawn (const mc_spec_t *spec, const char *conn_path, const char *const *extra,
               const char *log_path, char *err, size_t errlen)
{
    assert (spec && conn_path && log_path);
    const json_t *spec_argv = mc_spec_argv (spec);
    size_t argc = json_array_size (spec_argv), nextra = 0;
    while (extra && extra [nextra])
        nextra++;
    char **argv = calloc (argc + nextra + 1, sizeof *argv), **envp = s_envp (spec);
    for (size_t i = 0; i < argc; i++)
        argv [i] = s_subst (json_string_value (json_array_get (spec_argv, i)), conn_path);
    for (size_t i = 0; i < nextra; i++)
        argv [argc + i] = strdup (extra [i]);
    char *prog = s_resolve (argv [0]);
    free (argv [0]);
    argv [0] = prog;
    int logfd = open (log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
    int nullfd = open ("/dev/null", O_RDONLY | O_CLOEXEC);
    pid_t pid = -EIO;
    if (logfd < 0 || nullfd < 0)
        snprintf (err, errlen, "cannot open %s: %s", log_path, strerror (errno));
    else
        pid = s_fork_exec (argv, envp, logfd, nullfd, err, errlen);
    if (logfd >= 0)
        close (logfd);
    if (nullfd >= 0)
        close (nullfd);
    s_strv_free (argv);
    s_strv_free (envp);
    return pid;
}

int
mc_proc_reap (pid_t pid, int *status_p)
{
    int status = 0;
    pid_t r = waitpid (pid, &status, WNOHANG);
    if (r == 0)
        return 0;
    if (r < 0)
        return -errno;
    if (status_p)
        *status_p = status;
    return 1;
}

void
mc_proc_describe (int status, char *out, size_t cap)
{
    if (WIFEXITED (status))
        snprintf (out, cap, "exited with status %d", WEXITSTATUS (status));
    else if (WIFSIGNALED (status))
        snprintf (out, cap, "was killed by signal %d (SIG%s)", WTERMSIG (status),
                  sigabbrev_np (WTERMSIG (status)) ? sigabbrev_np (WTERMSIG (status)) : "?");
    else
        snprintf (out, cap, "ended (wait status %d)", status);
}

void
mc_proc_log_tail (const char *path, char *out, size_t cap)
{
    assert (out && cap > 0);
    out [0] = 0;
    int fd = open (path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return;
    off_t end = lseek (fd, 0, SEEK_END);
    off_t from = end > (off_t) cap - 1 ? end - (off_t) cap + 1 : 0;
    ssize_t n = pread (fd, out, cap - 1, from);
    close (fd);
    out [n > 0 ? n : 0] = 0;
    char *nl = from > 0 ? strchr (out, '\n') : NULL;
    if (nl)
        memmove (out, nl + 1, strlen (nl + 1) + 1);
}
