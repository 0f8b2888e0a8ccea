/*  gw_runout - run a short program and take what it prints (gw_runout.h). */
#include "base/gw_runout.h"
#include "ch_clock.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static int
s_spawn (char *const argv [], char *const envp [], int out_fd, pid_t *pid)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init (&fa);
    posix_spawn_file_actions_addopen (&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2 (&fa, out_fd, 1);
    posix_spawn_file_actions_addopen (&fa, 2, "/dev/null", O_WRONLY, 0);
    posix_spawnattr_t attr;
    sigset_t all, none;
    sigfillset (&all);
    sigemptyset (&none);
    posix_spawnattr_init (&attr);
    posix_spawnattr_setflags (&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
    posix_spawnattr_setsigdefault (&attr, &all);
    posix_spawnattr_setsigmask (&attr, &none);
    int rc = posix_spawnp (pid, argv [0], &fa, &attr, argv, envp ? envp : environ);
    posix_spawn_file_actions_destroy (&fa);
    posix_spawnattr_destroy (&attr);
    return rc;
}

//  Read fd to its end or the deadline; false when the deadline came first.
static bool
s_read_until (int fd, char *out, size_t cap, int64_t deadline)
{
    size_t have = 0;
    char sink [4096];
    for (;;) {
        int64_t left = deadline - ch_clock_mono_ms ();
        struct pollfd p = { fd, POLLIN, 0 };
        if (left <= 0 || (poll (&p, 1, (int) left) == 0))
            break;
        bool room = have < cap - 1;
        ssize_t r = read (fd, room ? out + have : sink, room ? cap - 1 - have : sizeof sink);
        if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN))
            break;
        if (r > 0 && room)
            have += (size_t) r;
    }
    out [have] = '\0';
    return ch_clock_mono_ms () < deadline;
}

int
gw_runout (char *const argv [], char *const envp [], char *out, size_t cap, int timeout_ms)
{
    assert (argv && argv [0] && out && cap > 0);
    out [0] = '\0';
    int pipe_fd [2];
    if (pipe2 (pipe_fd, O_CLOEXEC) < 0)
        return -errno;
    pid_t pid;
    int rc = s_spawn (argv, envp, pipe_fd [1], &pid);
    close (pipe_fd [1]);
    if (rc != 0) {
        close (pipe_fd [0]);
        return -rc;
    }
    bool ended = s_read_until (pipe_fd [0], out, cap, ch_clock_mono_ms () + timeout_ms);
    close (pipe_fd [0]);
    if (!ended)
        kill (pid, SIGKILL);
    int status = 0;
    while (waitpid (pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!ended)
        return -ETIMEDOUT;
    return WIFEXITED (status) ? WEXITSTATUS (status) : -EINTR;
}
