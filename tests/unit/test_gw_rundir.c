/*  test_gw_rundir - private run directories, and sweeping dead gateways'. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "vm/gw_rundir.h"
#include "tu.h"

typedef struct {
    char base [TU_DIR_MAX];                     //  a fresh base per test
} fixture_t;

static int
s_setup (void **state)
{
    fixture_t *f = tu_fixture_new (sizeof *f, "test_gw_rundir");
    *state = f;
    return 0;
}

static bool
s_exists (const char *path)
{
    struct stat st;
    return lstat (path, &st) == 0;
}

//  A pid that is certainly not running: a child that has been reaped.
static pid_t
s_dead_pid (void)
{
    pid_t pid = fork ();
    if (pid == 0)
        _exit (0);
    waitpid (pid, NULL, 0);
    return pid;
}

static void
test_gw_rundir_is_private_and_removed_with_all_in_it (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char err [256], path [PATH_MAX];
    gw_rundir_t *dir = gw_rundir_new (f->base, err, sizeof err);
    assert_non_null (dir);
    const char *p = gw_rundir_path (dir);
    assert_true (strncmp (p, f->base, strlen (f->base)) == 0);
    struct stat st;
    assert_int_equal (stat (p, &st), 0);
    assert_int_equal (st.st_mode & 07777, 0700);
    assert_int_equal (stat (f->base, &st), 0);
    assert_int_equal (st.st_mode & 07777, 0700);  //  mkdtemp made it 0700 too
    //  gateway.pid names us.
    char text [64];
    snprintf (path, sizeof path, "%s/gateway.pid", p);
    FILE *file = fopen (path, "r");
    assert_non_null (file);
    int pid = 0;
    assert_int_equal (fscanf (file, "%d", &pid), 1);
    fclose (file);
    assert_int_equal (pid, getpid ());
    //  Whatever a VM leaves: files, a socket, a subdirectory.
    assert_int_equal (gw_rundir_write (dir, "console.log", "boot\n"), 0);
    assert_int_equal (gw_rundir_file (dir, "kernel.sock", path, sizeof path), 0);
    int fd = socket (AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    snprintf (addr.sun_path, sizeof addr.sun_path, "%.100s", path);
    assert_int_equal (bind (fd, (struct sockaddr *) &addr, sizeof addr), 0);
    close (fd);
    snprintf (path, sizeof path, "%s/sub", p);
    assert_int_equal (mkdir (path, 0700), 0);
    tu_write_file (path, "deep", "x");
    snprintf (text, sizeof text, "%s", p);
    snprintf (path, sizeof path, "%s", p);
    gw_rundir_destroy (&dir);
    assert_null (dir);
    assert_false (s_exists (path));
    assert_true (s_exists (f->base));           //  the base stays
}

static void
test_gw_rundir_fixes_base_mode_and_refuses_unsafe_bases (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char err [256], path [PATH_MAX];
    chmod (f->base, 0777);
    gw_rundir_t *dir = gw_rundir_new (f->base, err, sizeof err);
    assert_non_null (dir);
    struct stat st;
    assert_int_equal (stat (f->base, &st), 0);
    assert_int_equal (st.st_mode & 07777, 0700);
    gw_rundir_destroy (&dir);
    //  A symlink planted where the base should be.
    snprintf (path, sizeof path, "%s/link", f->base);
    assert_int_equal (symlink ("/tmp", path), 0);
    assert_null (gw_rundir_new (path, err, sizeof err));
    assert_non_null (strstr (err, "symlink"));
    //  A base someone else owns (we are root in CI; skip otherwise).
    snprintf (path, sizeof path, "%s/theirs", f->base);
    assert_int_equal (mkdir (path, 0700), 0);
    if (geteuid () == 0 && chown (path, 65534, 65534) == 0) {
        assert_null (gw_rundir_new (path, err, sizeof err));
        assert_non_null (strstr (err, "owned by another user"));
    }
    snprintf (path, sizeof path, "%s/file", f->base);
    tu_write_file (f->base, "file", "");
    assert_null (gw_rundir_new (path, err, sizeof err));
    assert_non_null (strstr (err, "not a directory"));
}

//  A run dir as a gateway with this pid file would have left it.
static void
s_fake_dir (fixture_t *f, const char *name, const char *pidfile, char *out, size_t cap)
{
    snprintf (out, cap, "%s/%s", f->base, name);
    assert_int_equal (mkdir (out, 0700), 0);
    tu_write_file (out, "console.log", "old\n");
    if (pidfile)
        tu_write_file (out, "gateway.pid", pidfile);
}

static void
test_gw_rundir_sweep_removes_only_dead_gateways_dirs (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char err [256], dead [PATH_MAX], reused [PATH_MAX], young [PATH_MAX], old [PATH_MAX],
         other [PATH_MAX], text [64];
    gw_rundir_t *mine = gw_rundir_new (f->base, err, sizeof err);
    assert_non_null (mine);
    snprintf (text, sizeof text, "%d 12345\n", (int) s_dead_pid ());
    s_fake_dir (f, "vm-1-dead", text, dead, sizeof dead);
    snprintf (text, sizeof text, "%d 1\n", (int) getppid ());   //  alive, other start time
    s_fake_dir (f, "vm-2-reused", text, reused, sizeof reused);
    s_fake_dir (f, "vm-3-young", NULL, young, sizeof young);
    s_fake_dir (f, "vm-4-old", NULL, old, sizeof old);
    struct timespec times [2] = { { time (NULL) - 600, 0 }, { time (NULL) - 600, 0 } };
    assert_int_equal (utimensat (AT_FDCWD, old, times, 0), 0);
    s_fake_dir (f, "not-a-vm", NULL, other, sizeof other);
    assert_int_equal (utimensat (AT_FDCWD, other, times, 0), 0);

    assert_int_equal (gw_rundir_sweep (f->base), 3);
    assert_false (s_exists (dead));
    assert_false (s_exists (reused));
    assert_false (s_exists (old));
    assert_true (s_exists (young));             //  may be a gateway starting right now
    assert_true (s_exists (other));             //  not ours to judge
    assert_true (s_exists (gw_rundir_path (mine)));
    gw_rundir_destroy (&mine);
    assert_int_equal (gw_rundir_sweep ("/nonexistent/cellvm"), -ENOENT);
}

static void
test_gw_rundir_sweep_kills_a_leftover_qemu (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char dir [PATH_MAX], text [64];
    snprintf (text, sizeof text, "%d 12345\n", (int) s_dead_pid ());
    s_fake_dir (f, "vm-5-orphan", text, dir, sizeof dir);
    //  A stand-in for QEMU whose command line names the run dir, and an
    //  innocent process that does not.
    char sock [PATH_MAX + 16];
    snprintf (sock, sizeof sock, "%s/qmp.sock", dir);
    pid_t qemu = fork ();
    if (qemu == 0) {
        execl ("/bin/sleep", sock, "30", (char *) NULL);    //  argv [0] names it
        _exit (127);
    }
    pid_t innocent = fork ();
    if (innocent == 0) {
        execl ("/bin/sleep", "sleep", "30", (char *) NULL);
        _exit (127);
    }
    struct timespec ts = { 0, 50 * 1000 * 1000 };
    nanosleep (&ts, NULL);                      //  let both exec
    snprintf (text, sizeof text, "%d\n", (int) qemu);
    tu_write_file (dir, "qemu.pid", text);
    assert_int_equal (gw_rundir_sweep (f->base), 1);
    int status = 0;
    assert_int_equal (waitpid (qemu, &status, 0), qemu);
    assert_true (WIFSIGNALED (status) && WTERMSIG (status) == SIGKILL);
    //  The innocent one still runs; a pid file naming it must not kill it.
    assert_int_equal (waitpid (innocent, &status, WNOHANG), 0);
    snprintf (text, sizeof text, "%d 12345\n", (int) s_dead_pid ());
    s_fake_dir (f, "vm-6-lying", text, dir, sizeof dir);
    snprintf (text, sizeof text, "%d\n", (int) innocent);
    tu_write_file (dir, "qemu.pid", text);
    assert_int_equal (gw_rundir_sweep (f->base), 1);
    assert_int_equal (waitpid (innocent, &status, WNOHANG), 0);
    kill (innocent, SIGKILL);
    waitpid (innocent, NULL, 0);
}

int
main (void)
{
#define S_TEST(name) cmocka_unit_test_setup_teardown (name, s_setup, tu_fixture_teardown)
    const struct CMUnitTest tests [] = {
        S_TEST (test_gw_rundir_is_private_and_removed_with_all_in_it),
        S_TEST (test_gw_rundir_fixes_base_mode_and_refuses_unsafe_bases),
        S_TEST (test_gw_rundir_sweep_removes_only_dead_gateways_dirs),
        S_TEST (test_gw_rundir_sweep_kills_a_leftover_qemu),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
