/*  test_ch_io - writing it all: ch_write_bytes and ch_write_all. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "ch_io.h"

#define S_BIG (1 << 20)                         //  far more than a pipe holds

//  A pipe that a child drains slowly: its read end's byte count comes back
//  as the child's exit code (bytes / 65536).
static pid_t
s_slow_reader (int fds [2])
{
    assert_int_equal (pipe (fds), 0);
    pid_t pid = fork ();
    if (pid == 0) {
        close (fds [1]);
        static char buf [4096];
        size_t total = 0;
        ssize_t n;
        while ((n = read (fds [0], buf, sizeof buf)) > 0) {
            total += (size_t) n;
            if (total % (256 * 1024) < sizeof buf)
                usleep (1000);
        }
        _exit ((int) (total / 65536));
    }
    close (fds [0]);
    return pid;
}

static int
s_reaped (pid_t pid)
{
    int status = 0;
    assert_int_equal (waitpid (pid, &status, 0), pid);
    return WEXITSTATUS (status);
}

//  Short writes on a (non-blocking) pipe are ridden out; nothing is lost.
static void
test_ch_io_write_bytes_writes_it_all (void **state)
{
    (void) state;
    char *big = calloc (1, S_BIG);
    int fds [2];
    pid_t pid = s_slow_reader (fds);
    fcntl (fds [1], F_SETFL, O_NONBLOCK);
    assert_int_equal (ch_write_bytes (fds [1], big, S_BIG), 0);
    assert_int_equal (ch_write_bytes (fds [1], big, 0), 0);
    close (fds [1]);
    assert_int_equal (s_reaped (pid), S_BIG / 65536);
    free (big);
}

//  The failed write's own errno: a full disk, a bad fd, a reader gone.
static void
test_ch_io_write_bytes_says_the_errno (void **state)
{
    (void) state;
    int full = open ("/dev/full", O_WRONLY | O_CLOEXEC);
    assert_true (full >= 0);
    assert_int_equal (ch_write_bytes (full, "x", 1), -ENOSPC);
    close (full);
    assert_int_equal (ch_write_bytes (-1, "x", 1), -EBADF);
    int fds [2];
    assert_int_equal (pipe (fds), 0);
    close (fds [0]);
    assert_int_equal (ch_write_bytes (fds [1], "x", 1), -EPIPE);
    close (fds [1]);
}

//  ch_write_all: empty parts are skipped, any error is -EPIPE (the peer is
//  gone), a peer that stops reading is -ETIMEDOUT.
static void
test_ch_io_write_all_skips_empty_parts_and_times_out (void **state)
{
    (void) state;
    int fds [2];
    assert_int_equal (pipe2 (fds, O_NONBLOCK), 0);
    struct iovec iov [3] = { { "", 0 }, { "abc", 3 }, { "", 0 } };
    assert_int_equal (ch_write_all (fds [1], iov, 3, 1000), 0);
    char got [4] = "";
    assert_int_equal (read (fds [0], got, sizeof got), 3);
    assert_memory_equal (got, "abc", 3);
    char *big = calloc (1, S_BIG);
    struct iovec one = { big, S_BIG };
    assert_int_equal (ch_write_all (fds [1], &one, 1, 50), -ETIMEDOUT);
    free (big);
    struct iovec bad = { "x", 1 };
    assert_int_equal (ch_write_all (-1, &bad, 1, -1), -EPIPE);
    close (fds [0]);
    close (fds [1]);
}

int
main (void)
{
    signal (SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_ch_io_write_bytes_writes_it_all),
        cmocka_unit_test (test_ch_io_write_bytes_says_the_errno),
        cmocka_unit_test (test_ch_io_write_all_skips_empty_parts_and_times_out),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
