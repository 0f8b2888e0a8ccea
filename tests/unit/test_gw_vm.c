/*  test_gw_vm - the VM process lifecycle (the command line: test_gw_vmargv).

    The lifecycle tests run this very binary as a
    fake QEMU (TEST_GW_VM_FAKE_QEMU in the environment): it reports how it
    was started (process group, death signal, limits, fds) into its run dir
    and listens on the sockets its command line names, like QEMU does.

    The real guest image is booted by test_gw_vm_boot.
*/
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
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "vm/gw_rundir.h"
#include "vm/gw_vm.h"

#define FAKE_ENV "TEST_GW_VM_FAKE_QEMU"

//  ==========================================================================
//  The fake QEMU: this binary, re-executed.

//  Bind and listen on path (as QEMU's chardev server=on does).
static void
s_fake_listen (const char *spec, const char *key)
{
    const char *p = strstr (spec, key);
    if (!p)
        return;
    p += strlen (key);
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    size_t n = strcspn (p, ",");
    if (n >= sizeof addr.sun_path)
        _exit (90);
    memcpy (addr.sun_path, p, n);
    int fd = socket (AF_UNIX, SOCK_STREAM, 0);
    if (bind (fd, (struct sockaddr *) &addr, sizeof addr) < 0 || listen (fd, 1) < 0)
        _exit (91);
}

//  Facts about how we were started, for the test to check.
static void
s_fake_report (void)
{
    int pdeath = 0, open_fds = 0;
    prctl (PR_GET_PDEATHSIG, &pdeath);
    struct rlimit fsize, core;
    getrlimit (RLIMIT_FSIZE, &fsize);
    getrlimit (RLIMIT_CORE, &core);
    for (int fd = 3; fd < 1024; fd++)
        open_fds += fcntl (fd, F_GETFD) >= 0;
    struct stat in, null;
    fstat (0, &in);
    stat ("/dev/null", &null);
    struct sigaction xfsz;
    sigaction (SIGXFSZ, NULL, &xfsz);
    FILE *out = fopen ("fake.report", "w");
    if (!out)
        _exit (92);
    fprintf (out, "pgrp_is_self=%d pdeathsig=%d fsize=%llu core=%llu open_fds=%d "
             "stdin_null=%d xfsz_ignored=%d\n", getpgrp () == getpid (), pdeath,
             (unsigned long long) fsize.rlim_cur, (unsigned long long) core.rlim_cur,
             open_fds, in.st_rdev == null.st_rdev, xfsz.sa_handler == SIG_IGN);
    fclose (out);
}

static void
s_fake_qemu (int argc, char **argv)
{
    s_fake_report ();
    fprintf (stderr, "fake qemu: started\n");
    if (strcmp (getenv (FAKE_ENV), "exit") == 0)
        _exit (3);
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp (argv [i], "-chardev") == 0)
            s_fake_listen (argv [i + 1], "path=");
        if (strcmp (argv [i], "-qmp") == 0)
            s_fake_listen (argv [i + 1], "unix:");
    }
    while (true)
        pause ();
}

//  ==========================================================================
//  Lifecycle against the fake.

typedef struct {
    char base [64];                             //  run base for this test
    char image [64];                            //  a fake image dir
    char self [PATH_MAX];                       //  this binary
    gw_vm_config_t cfg;
} fixture_t;

static void
s_touch (const char *dir, const char *name)
{
    char path [PATH_MAX];
    snprintf (path, sizeof path, "%s/%s", dir, name);
    FILE *file = fopen (path, "w");
    assert_non_null (file);
    fclose (file);
}

static int
s_setup (void **state)
{
    fixture_t *f = calloc (1, sizeof *f);
    snprintf (f->base, sizeof f->base, "/tmp/test_gw_vm_XXXXXX");
    snprintf (f->image, sizeof f->image, "/tmp/test_gw_vm_img_XXXXXX");
    assert_non_null (mkdtemp (f->base));
    assert_non_null (mkdtemp (f->image));
    s_touch (f->image, "vmlinux");
    s_touch (f->image, "initrd.img");
    s_touch (f->image, "rootfs.ext4");
    ssize_t n = readlink ("/proc/self/exe", f->self, sizeof f->self - 1);
    assert_true (n > 0);
    f->self [n] = 0;
    gw_vm_config_defaults (&f->cfg);
    f->cfg.qemu = f->self;
    f->cfg.image_dir = f->image;
    f->cfg.run_base = f->base;
    f->cfg.accel = GW_ACCEL_TCG;
    setenv (FAKE_ENV, "listen", 1);
    *state = f;
    return 0;
}

static int
s_teardown (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char cmd [200];
    snprintf (cmd, sizeof cmd, "rm -rf %s %s", f->base, f->image);
    assert_int_equal (system (cmd), 0);
    unsetenv (FAKE_ENV);
    free (f);
    return 0;
}

//  Entries in dir other than . and ..
static int
s_count_entries (const char *dir)
{
    char cmd [128], line [64] = "";
    snprintf (cmd, sizeof cmd, "ls -A %s | wc -l", dir);
    FILE *p = popen (cmd, "r");
    assert_non_null (fgets (line, sizeof line, p));
    pclose (p);
    return atoi (line);
}

static void
s_read_report (gw_vm_t *vm, char *out, size_t cap)
{
    char path [PATH_MAX];
    snprintf (path, sizeof path, "%s/fake.report", gw_vm_run_dir (vm));
    for (int i = 0; i < 400; i++) {             //  written right after exec
        FILE *file = fopen (path, "r");
        if (file && fgets (out, (int) cap, file)) {
            fclose (file);
            return;
        }
        if (file)
            fclose (file);
        usleep (5000);
    }
    fail_msg ("no fake.report in %s", gw_vm_run_dir (vm));
}

static void
test_gw_vm_spawns_qemu_confined_and_cleans_up (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char err [256], report [256], dir [PATH_MAX];
    gw_vm_t *vm = gw_vm_new (&f->cfg, err, sizeof err);
    assert_non_null (vm);
    assert_int_equal (gw_vm_accel (vm), GW_ACCEL_TCG);
    assert_int_equal (gw_vm_pid (vm), 0);
    int fd = -1;
    assert_int_equal (gw_vm_connect_port (vm, "kernel", &fd), -ECHILD);
    assert_int_equal (gw_vm_start (vm, err, sizeof err), 0);
    assert_int_equal (gw_vm_start (vm, err, sizeof err), -EALREADY);
    assert_true (gw_vm_pid (vm) > 0);
    snprintf (dir, sizeof dir, "%s", gw_vm_run_dir (vm));
    s_read_report (vm, report, sizeof report);
    assert_non_null (strstr (report, "pgrp_is_self=1 pdeathsig=9 "));
    assert_non_null (strstr (report, "core=0 open_fds=0 stdin_null=1 xfsz_ignored=1"));
    //  The file size cap: 1 GiB disk + 1/64 + 16 MiB.
    assert_non_null (strstr (report, "fsize=1107296256 "));
    //  The workspace disk is a qcow2 of the configured virtual size.
    char path [PATH_MAX + 32], cmd [PATH_MAX + 96], line [128] = "";
    snprintf (path, sizeof path, "%s/workspace.qcow2", dir);
    snprintf (cmd, sizeof cmd, "qemu-img info --output=json %s | grep virtual-size", path);
    FILE *p = popen (cmd, "r");
    assert_non_null (fgets (line, sizeof line, p));
    pclose (p);
    assert_non_null (strstr (line, "1073741824"));
    //  Ports: each connects once QEMU listens.
    int kernel = -1, init = -1, qmp = -1;
    assert_int_equal (gw_vm_wait_port (vm, "kernel", 5000, &kernel), 0);
    assert_int_equal (gw_vm_wait_port (vm, "init", 5000, &init), 0);
    assert_int_equal (gw_vm_wait_port (vm, "qmp", 5000, &qmp), 0);
    assert_true (kernel >= 0 && init >= 0 && qmp >= 0);
    assert_true (fcntl (kernel, F_GETFD) & FD_CLOEXEC);
    assert_false (fcntl (kernel, F_GETFL) & O_NONBLOCK);
    assert_int_equal (gw_vm_connect_port (vm, "console", &fd), -EINVAL);
    int status = 0;
    assert_int_equal (gw_vm_reap (vm, &status), -EAGAIN);
    assert_int_equal (gw_vm_kill (vm), 0);
    while (gw_vm_reap (vm, &status) == -EAGAIN)
        usleep (1000);
    assert_true (WIFSIGNALED (status) && WTERMSIG (status) == SIGKILL);
    assert_int_equal (gw_vm_pid (vm), 0);
    assert_int_equal (gw_vm_reap (vm, &status), -ECHILD);
    assert_int_equal (gw_vm_kill (vm), -ESRCH);
    assert_int_equal (gw_vm_connect_port (vm, "kernel", &fd), -ESRCH);
    gw_vm_destroy (&vm);
    assert_null (vm);
    assert_int_equal (access (dir, F_OK), -1);  //  sockets, logs, disk: all gone
    assert_int_equal (s_count_entries (f->base), 0);
    close (kernel);
    close (init);
    close (qmp);
}

static void
test_gw_vm_reports_a_qemu_that_dies_at_start (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    setenv (FAKE_ENV, "exit", 1);
    char err [256];
    gw_vm_t *vm = gw_vm_new (&f->cfg, err, sizeof err);
    assert_non_null (vm);
    assert_int_equal (gw_vm_start (vm, err, sizeof err), 0);
    int fd = -1, status = 0;
    assert_int_equal (gw_vm_wait_port (vm, "kernel", 5000, &fd), -ESRCH);
    assert_int_equal (gw_vm_reap (vm, &status), 0);   //  not reaped by the peek above
    assert_true (WIFEXITED (status) && WEXITSTATUS (status) == 3);
    //  Its stderr is in qemu.log.
    char path [PATH_MAX], line [128] = "";
    snprintf (path, sizeof path, "%s/qemu.log", gw_vm_run_dir (vm));
    FILE *file = fopen (path, "r");
    assert_non_null (file);
    assert_non_null (fgets (line, sizeof line, file));
    fclose (file);
    assert_string_equal (line, "fake qemu: started\n");
    gw_vm_destroy (&vm);
    assert_int_equal (s_count_entries (f->base), 0);
}

static void
test_gw_vm_destroy_kills_a_running_qemu (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char err [256];
    gw_vm_t *vm = gw_vm_new (&f->cfg, err, sizeof err);
    assert_int_equal (gw_vm_start (vm, err, sizeof err), 0);
    pid_t pid = gw_vm_pid (vm);
    gw_vm_destroy (&vm);
    assert_int_equal (kill (pid, 0), -1);       //  reaped, not a zombie
    assert_int_equal (errno, ESRCH);
    assert_int_equal (s_count_entries (f->base), 0);
    gw_vm_destroy (&vm);                        //  NULL-safe
}

static void
test_gw_vm_new_explains_what_is_missing (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char err [256];
    gw_vm_config_t cfg = f->cfg;
    cfg.image_dir = "/nonexistent/image";
    assert_null (gw_vm_new (&cfg, err, sizeof err));
    assert_non_null (strstr (err, "/nonexistent/image/vmlinux"));
    assert_non_null (strstr (err, "make image"));
    cfg = f->cfg;
    cfg.qemu = "qemu-system-nonexistent";
    assert_null (gw_vm_new (&cfg, err, sizeof err));
    assert_non_null (strstr (err, "qemu-system-nonexistent not found"));
    cfg = f->cfg;
    cfg.disk_backing = "relative.qcow2";
    assert_null (gw_vm_new (&cfg, err, sizeof err));
    assert_non_null (strstr (err, "absolute"));
    cfg = f->cfg;
    cfg.vcpus = 1000;
    assert_null (gw_vm_new (&cfg, err, sizeof err));
    assert_non_null (strstr (err, "vcpus"));
    assert_int_equal (s_count_entries (f->base), 0);  //  nothing left behind
}

//  A gateway killed with SIGKILL takes its QEMU along (PR_SET_PDEATHSIG),
//  and the next gateway's sweep removes its run dir.
static void
test_gw_vm_dies_with_a_killed_gateway (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    assert_int_equal (prctl (PR_SET_CHILD_SUBREAPER, 1), 0);   //  orphans come to us
    int pipefd [2];
    assert_int_equal (pipe (pipefd), 0);
    pid_t gateway = fork ();
    if (gateway == 0) {
        char err [256];
        gw_vm_t *vm = gw_vm_new (&f->cfg, err, sizeof err);
        if (!vm || gw_vm_start (vm, err, sizeof err) < 0)
            _exit (1);
        int pid = gw_vm_pid (vm);
        if (write (pipefd [1], &pid, sizeof pid) != sizeof pid)
            _exit (1);
        while (true)
            pause ();
    }
    int qemu = 0;
    assert_int_equal (read (pipefd [0], &qemu, sizeof qemu), sizeof qemu);
    close (pipefd [0]);
    close (pipefd [1]);
    assert_int_equal (kill (gateway, SIGKILL), 0);
    assert_int_equal (waitpid (gateway, NULL, 0), gateway);
    int status = 0;
    assert_int_equal (waitpid (qemu, &status, 0), qemu);
    assert_true (WIFSIGNALED (status) && WTERMSIG (status) == SIGKILL);
    prctl (PR_SET_CHILD_SUBREAPER, 0);
    assert_int_equal (s_count_entries (f->base), 1);
    assert_int_equal (gw_rundir_sweep (f->base), 1);
    assert_int_equal (s_count_entries (f->base), 0);
}

//  A seed layer (made with -u over a backing that does not exist yet) is
//  copied as the next VM's disk; a missing seed falls back to qemu-img.
static void
test_gw_vm_copies_a_seed_layer (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char err [256], seed [PATH_MAX], backing [PATH_MAX], disk [PATH_MAX], cmd [PATH_MAX * 3];
    gw_vm_t *vm = gw_vm_new (&f->cfg, err, sizeof err);
    assert_non_null (vm);
    snprintf (seed, sizeof seed, "%s/seed.qcow2", f->image);
    snprintf (backing, sizeof backing, "%s/later/base.qcow2", f->image);
    assert_int_equal (gw_vm_make_layer (vm, seed, backing, err, sizeof err), 0);
    gw_vm_destroy (&vm);
    snprintf (cmd, sizeof cmd, "qemu-img info %s | grep -q 'backing file: %s'", seed, backing);
    assert_int_equal (system (cmd), 0);
    f->cfg.disk_seed = seed;
    vm = gw_vm_new (&f->cfg, err, sizeof err);
    assert_non_null (vm);
    assert_int_equal (gw_vm_start (vm, err, sizeof err), 0);
    snprintf (disk, sizeof disk, "%s/workspace.qcow2", gw_vm_run_dir (vm));
    snprintf (cmd, sizeof cmd, "cmp -s %s %s", seed, disk);
    assert_int_equal (system (cmd), 0);
    gw_vm_destroy (&vm);
    snprintf (seed, sizeof seed, "%s/no-such-seed.qcow2", f->image);
    vm = gw_vm_new (&f->cfg, err, sizeof err);
    assert_non_null (vm);
    assert_int_equal (gw_vm_start (vm, err, sizeof err), 0);
    snprintf (disk, sizeof disk, "%s/workspace.qcow2", gw_vm_run_dir (vm));
    snprintf (cmd, sizeof cmd, "qemu-img info %s | grep -q 'virtual size: 1 GiB'", disk);
    assert_int_equal (system (cmd), 0);
    gw_vm_destroy (&vm);
}

int
main (int argc, char **argv)
{
    if (getenv (FAKE_ENV))
        s_fake_qemu (argc, argv);               //  never returns
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_setup_teardown (test_gw_vm_spawns_qemu_confined_and_cleans_up,
                                         s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_vm_reports_a_qemu_that_dies_at_start,
                                         s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_vm_destroy_kills_a_running_qemu,
                                         s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_vm_new_explains_what_is_missing,
                                         s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_vm_dies_with_a_killed_gateway,
                                         s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_vm_copies_a_seed_layer, s_setup, s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
