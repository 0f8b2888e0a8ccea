/*  test_ch_sig - signals through a signalfd, and a child's reset. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "ch_sig.h"

static void
s_assert_blocked (int sig, bool blocked)
{
    sigset_t now;
    sigprocmask (SIG_BLOCK, NULL, &now);
    assert_int_equal (sigismember (&now, sig), blocked ? 1 : 0);
}

//  A signal raised is read from the fd, not delivered; SIGPIPE is ignored;
//  adding keeps what was blocked, only replaces it.
static void
test_ch_sig_fd_reads_the_signals (void **state)
{
    (void) state;
    sigset_t none;
    sigemptyset (&none);
    sigprocmask (SIG_SETMASK, &none, NULL);
    int fd = ch_sig_fd ((const int []) { SIGUSR1, SIGHUP, 0 }, false);
    assert_true (fd >= 0);
    assert_true (fcntl (fd, F_GETFL) & O_NONBLOCK);
    assert_true (fcntl (fd, F_GETFD) & FD_CLOEXEC);
    struct signalfd_siginfo si;
    assert_int_equal (read (fd, &si, sizeof si), -1);
    assert_int_equal (errno, EAGAIN);
    raise (SIGUSR1);
    assert_int_equal (read (fd, &si, sizeof si), (ssize_t) sizeof si);
    assert_int_equal (si.ssi_signo, SIGUSR1);
    struct sigaction sa;
    sigaction (SIGPIPE, NULL, &sa);
    assert_true (sa.sa_handler == SIG_IGN);
    close (fd);
    fd = ch_sig_fd ((const int []) { SIGUSR2, 0 }, false);
    s_assert_blocked (SIGHUP, true);
    s_assert_blocked (SIGUSR2, true);
    close (fd);
    fd = ch_sig_fd ((const int []) { SIGCHLD, 0 }, true);
    s_assert_blocked (SIGHUP, false);
    s_assert_blocked (SIGUSR2, false);
    s_assert_blocked (SIGCHLD, true);
    close (fd);
    sigprocmask (SIG_SETMASK, &none, NULL);
    signal (SIGPIPE, SIG_DFL);
}

//  A child after ch_sig_defaults: nothing blocked, nothing ignored.
static void
test_ch_sig_defaults_clears_mask_and_ignores (void **state)
{
    (void) state;
    signal (SIGINT, SIG_IGN);
    int fd = ch_sig_fd ((const int []) { SIGTERM, 0 }, true);
    pid_t pid = fork ();
    if (pid == 0) {
        ch_sig_defaults ();
        sigset_t now;
        struct sigaction sa;
        sigprocmask (SIG_BLOCK, NULL, &now);
        sigaction (SIGINT, NULL, &sa);
        _exit (sigismember (&now, SIGTERM) || sa.sa_handler != SIG_DFL ? 1 : 0);
    }
    int status = -1;
    assert_int_equal (waitpid (pid, &status, 0), pid);
    assert_true (WIFEXITED (status) && WEXITSTATUS (status) == 0);
    close (fd);
    signal (SIGINT, SIG_DFL);
    sigset_t none;
    sigemptyset (&none);
    sigprocmask (SIG_SETMASK, &none, NULL);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_ch_sig_fd_reads_the_signals),
        cmocka_unit_test (test_ch_sig_defaults_clears_mask_and_ignores),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
