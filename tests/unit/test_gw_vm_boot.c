/*  test_gw_vm_boot - gw_vm and gw_qmp against the real guest image.

    Skipped unless CELLVM_IMAGE_DIR names a built image (make image;
    tests/integration/test_vm.py sets it). Under TCG each boot takes seconds.

    - a cold boot: ports, QMP, init's and the kernel's hello, kill, and no
      process, socket or disk left behind;
    - a snapshot and a restore through the snapshot hooks (RAM in a shared
      file, x-ignore-shared, fd: migration after getfd), under the same
      -sandbox that forbids exec: migration.
*/
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>
#include <jansson.h>

#include "vm/gw_qmp.h"
#include "vm/gw_vm.h"
#include "ch_frame.h"
#include "tu.h"

typedef struct {
    const char *image;                          //  $CELLVM_IMAGE_DIR
    char base [64];                             //  run base
    char scratch [64];                          //  RAM file, state, disk copy (/dev/shm)
} fixture_t;

static int
s_setup (void **state)
{
    fixture_t *f = calloc (1, sizeof *f);
    f->image = getenv ("CELLVM_IMAGE_DIR");
    snprintf (f->base, sizeof f->base, "/tmp/test_gw_vm_XXXXXX");
    snprintf (f->scratch, sizeof f->scratch, "/dev/shm/test_gw_vm_XXXXXX");
    assert_non_null (mkdtemp (f->base));
    assert_non_null (mkdtemp (f->scratch));
    *state = f;
    return 0;
}

static int
s_teardown (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char cmd [200];
    snprintf (cmd, sizeof cmd, "rm -rf %s %s", f->base, f->scratch);
    assert_int_equal (system (cmd), 0);
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

static int64_t
s_ms (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

//  Frames from a port: the channel's own decoder, which skips the sync
//  marker the guest writes before every hello (docs/channel.md).
typedef struct {
    int fd;
    ch_frame_dec_t *dec;
    uint8_t buf [65536];                        //  read, not yet fed
    size_t off, len;
} s_reader_t;

static void
s_reader_init (s_reader_t *r, int fd, bool hunt)
{
    memset (r, 0, sizeof *r);
    r->fd = fd;
    r->dec = ch_frame_dec_new (1u << 20);
    if (hunt)
        ch_frame_dec_hunt (r->dec);             //  on connect: skip to the first marker
}

//  The next frame as JSON, by deadline; NULL on timeout, end or bad input.
static json_t *
s_read_frame (s_reader_t *r, int64_t deadline)
{
    while (true) {
        while (r->off < r->len) {
            long n = ch_frame_dec_feed (r->dec, r->buf + r->off, r->len - r->off);
            if (n < 0) {
                print_message ("bad frame length %u\n", ch_frame_dec_bad_length (r->dec));
                return NULL;
            }
            r->off += (size_t) n;
            size_t len = 0;
            uint8_t *frame = ch_frame_dec_take (r->dec, &len);
            json_t *msg = frame ? json_loadb ((char *) frame, len, 0, NULL) : NULL;
            free (frame);
            if (msg)
                return msg;
        }
        struct pollfd pfd = { .fd = r->fd, .events = POLLIN };
        int64_t left = deadline - s_ms ();
        if (left <= 0 || poll (&pfd, 1, (int) left) <= 0)
            return NULL;
        ssize_t n = read (r->fd, r->buf, sizeof r->buf);
        if (n <= 0)
            return NULL;
        r->off = 0;
        r->len = (size_t) n;
    }
}

static void
s_write_frame (int fd, const char *json)
{
    uint32_t len = (uint32_t) strlen (json);
    uint8_t head [4] = { (uint8_t) (len >> 24), (uint8_t) (len >> 16), (uint8_t) (len >> 8),
                         (uint8_t) len };
    assert_int_equal (write (fd, head, 4), 4);
    assert_int_equal (write (fd, json, len), (ssize_t) len);
}

static void
s_dump_console (gw_vm_t *vm)
{
    char cmd [PATH_MAX + 32];
    snprintf (cmd, sizeof cmd, "tail -n 30 %s %s/qemu.log >&2", gw_vm_console_log (vm),
              gw_vm_run_dir (vm));
    (void) !system (cmd);
}

//  Wait for the kernel's hello; NULL (and the console dumped) if none.
static json_t *
s_wait_hello (gw_vm_t *vm, s_reader_t *r, int timeout_ms)
{
    int64_t deadline = s_ms () + timeout_ms;
    json_t *msg;
    while ((msg = s_read_frame (r, deadline))) {
        const char *type = json_string_value (json_object_get (
            json_object_get (msg, "header"), "msg_type"));
        const char *chan = json_string_value (json_object_get (msg, "channel"));
        if (chan && type && !strcmp (chan, "cellvm") && !strcmp (type, "hello"))
            return msg;
        json_decref (msg);
    }
    s_dump_console (vm);
    return NULL;
}

//  Init answers a hello on its control port once it runs; a hello sent
//  before init opened the port may be lost, so repeat it until answered.
static json_t *
s_wait_init (gw_vm_t *vm, s_reader_t *r, int timeout_ms)
{
    int64_t deadline = s_ms () + timeout_ms;
    while (s_ms () < deadline) {
        s_write_frame (r->fd, "{\"channel\":\"cellvm\",\"header\":{\"msg_type\":\"hello\","
                       "\"msg_id\":\"i\"},\"content\":{\"protocol\":\"cellvm-init\","
                       "\"version\":1,\"role\":\"driver\"}}");
        json_t *msg = s_read_frame (r, s_ms () + 100);
        const char *role = json_string_value (json_object_get (
            json_object_get (msg, "content"), "role"));
        if (role && strcmp (role, "init") == 0)
            return msg;
        json_decref (msg);
    }
    s_dump_console (vm);
    return NULL;
}

static void
s_check_qmp (gw_vm_t *vm)
{
    int fd = -1;
    char err [256], status [32];
    bool running = false;
    assert_int_equal (gw_vm_wait_port (vm, "qmp", 5000, &fd), 0);
    gw_qmp_t *qmp = gw_qmp_new (fd, 0);
    int64_t t0 = s_ms ();
    assert_int_equal (gw_qmp_handshake (qmp, 5000, err, sizeof err), 0);
    assert_int_equal (gw_qmp_query_status (qmp, status, sizeof status, &running, 5000,
                                           err, sizeof err), 0);
    assert_string_equal (status, "running");
    assert_true (running);
    print_message ("qmp: handshake + query-status %lld ms\n", (long long) (s_ms () - t0));
    gw_qmp_destroy (&qmp);
}

static void
test_gw_vm_boots_the_guest_to_a_kernel_hello (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    if (!f->image || !*f->image)
        tu_skip_expected ("no CELLVM_IMAGE_DIR: a plain unit run has no guest image; "
                          "tests/integration/test_vm.py runs this with one");
    gw_vm_config_t cfg;
    gw_vm_config_defaults (&cfg);
    cfg.image_dir = f->image;
    cfg.run_base = f->base;
    char err [256], dir [PATH_MAX];
    int64_t t0 = s_ms ();
    gw_vm_t *vm = gw_vm_new (&cfg, err, sizeof err);
    if (!vm)
        fail_msg ("%s", err);
    print_message ("accel: %s\n", gw_vm_accel_reason (vm));
    assert_int_equal (gw_vm_start (vm, err, sizeof err), 0);
    int64_t t_spawned = s_ms ();
    snprintf (dir, sizeof dir, "%s", gw_vm_run_dir (vm));
    int kernel = -1, init = -1;
    assert_int_equal (gw_vm_wait_port (vm, "kernel", 10000, &kernel), 0);
    int64_t t_port = s_ms ();
    s_write_frame (kernel, "{\"channel\":\"cellvm\",\"header\":{\"msg_type\":\"hello\","
                   "\"msg_id\":\"x\"},\"content\":{\"protocol\":\"cellvm-channel\","
                   "\"version\":1,\"role\":\"driver\"}}");
    assert_int_equal (gw_vm_wait_port (vm, "init", 5000, &init), 0);
    s_check_qmp (vm);
    s_reader_t *rk = malloc (sizeof *rk), *ri = malloc (sizeof *ri);
    s_reader_init (rk, kernel, true);
    s_reader_init (ri, init, false);            //  init sends no marker
    json_t *hello = s_wait_init (vm, ri, 60000);
    int64_t t_init = s_ms ();
    assert_non_null (hello);
    print_message ("init hello: workspace_fs=%s\n", json_string_value (json_object_get (
        json_object_get (hello, "content"), "workspace_fs")));
    json_decref (hello);
    hello = s_wait_hello (vm, rk, 180000);
    int64_t t_hello = s_ms ();
    assert_non_null (hello);
    json_t *content = json_object_get (hello, "content");
    assert_string_equal (json_string_value (json_object_get (content, "protocol")),
                         "cellvm-channel");
    assert_string_equal (json_string_value (json_object_get (content, "role")), "kernel");
    json_decref (hello);
    print_message ("boot (ms after gw_vm_new): disk+spawn %lld, ports %lld, init hello %lld, "
                   "kernel hello %lld\n", (long long) (t_spawned - t0), (long long) (t_port - t0),
                   (long long) (t_init - t0), (long long) (t_hello - t0));
    s_dump_console (vm);                        //  what the guest said, for the record
    pid_t pid = gw_vm_pid (vm);
    int64_t t_kill = s_ms ();
    assert_int_equal (gw_vm_kill (vm), 0);
    int status = 0;
    while (gw_vm_reap (vm, &status) == -EAGAIN)
        usleep (1000);
    print_message ("kill to reaped: %lld ms\n", (long long) (s_ms () - t_kill));
    assert_true (WIFSIGNALED (status) && WTERMSIG (status) == SIGKILL);
    ch_frame_dec_destroy (&rk->dec);
    ch_frame_dec_destroy (&ri->dec);
    free (rk);
    free (ri);
    close (kernel);
    close (init);
    gw_vm_destroy (&vm);
    assert_true (kill (pid, 0) < 0 && errno == ESRCH);  //  no process
    assert_int_equal (access (dir, F_OK), -1);          //  no socket, log or disk
    assert_int_equal (s_count_entries (f->base), 0);
}


//  ==========================================================================
//  Snapshot and restore through the hooks.

static gw_vm_t *
s_vm_start (gw_vm_config_t *cfg)
{
    char err [256];
    gw_vm_t *vm = gw_vm_new (cfg, err, sizeof err);
    if (!vm || gw_vm_start (vm, err, sizeof err) < 0)
        fail_msg ("%s", err);
    return vm;
}

static gw_qmp_t *
s_qmp_connect (gw_vm_t *vm)
{
    int fd = -1;
    char err [256];
    assert_int_equal (gw_vm_wait_port (vm, "qmp", 5000, &fd), 0);
    gw_qmp_t *qmp = gw_qmp_new (fd, 0);
    if (gw_qmp_handshake (qmp, 5000, err, sizeof err) < 0)
        fail_msg ("%s", err);
    return qmp;
}

//  Run a command that must succeed; args are stolen.
static void
s_qmp_ok (gw_qmp_t *qmp, const char *command, json_t *args)
{
    char err [256];
    int rc = gw_qmp_execute (qmp, command, args, NULL, 10000, err, sizeof err);
    json_decref (args);
    if (rc < 0)
        fail_msg ("%s", err);
}

//  x-ignore-shared: RAM that lives in the shared file is not copied.
static void
s_ignore_shared (gw_qmp_t *qmp)
{
    s_qmp_ok (qmp, "migrate-set-capabilities", json_pack ("{s:[{s:s, s:b}]}",
              "capabilities", "capability", "x-ignore-shared", "state", 1));
}

//  Hand QEMU the state file as fd "state" (no exec: under -sandbox).
static void
s_give_state (gw_qmp_t *qmp, const char *path, int flags)
{
    char err [256];
    int fd = open (path, flags | O_CLOEXEC, 0600);
    assert_true (fd >= 0);
    if (gw_qmp_getfd (qmp, "state", fd, 5000, err, sizeof err) < 0)
        fail_msg ("%s", err);
    close (fd);                                 //  QEMU holds its own copy
}

static void
s_wait_migration (gw_qmp_t *qmp, int timeout_ms)
{
    char err [256], status [32] = "";
    int64_t deadline = s_ms () + timeout_ms;
    while (s_ms () < deadline) {
        if (gw_qmp_query_migrate (qmp, status, sizeof status, 5000, err, sizeof err) < 0)
            fail_msg ("%s", err);
        if (strcmp (status, "completed") == 0)
            return;
        if (strcmp (status, "failed") == 0)
            fail_msg ("migration failed");
        usleep (2000);
    }
    fail_msg ("migration still \"%s\" after %d ms", status, timeout_ms);
}

//  Boot a template with RAM in ram, save its device state to state and a
//  copy of its /workspace disk to disk_copy.
static void
s_make_template (fixture_t *f, const char *ram, const char *state, const char *disk_copy)
{
    gw_vm_config_t cfg;
    gw_vm_config_defaults (&cfg);
    cfg.image_dir = f->image;
    cfg.run_base = f->base;
    cfg.mem_path = ram;
    cfg.mem_share = true;
    gw_vm_t *vm = s_vm_start (&cfg);
    int fd = -1;
    assert_int_equal (gw_vm_wait_port (vm, "init", 5000, &fd), 0);
    s_reader_t *r = malloc (sizeof *r);
    s_reader_init (r, fd, false);
    json_t *hello = s_wait_init (vm, r, 60000);  //  the guest is up
    assert_non_null (hello);
    json_decref (hello);
    gw_qmp_t *qmp = s_qmp_connect (vm);
    int64_t t0 = s_ms ();
    s_ignore_shared (qmp);
    s_qmp_ok (qmp, "stop", NULL);
    s_give_state (qmp, state, O_WRONLY | O_CREAT | O_TRUNC);
    s_qmp_ok (qmp, "migrate", json_pack ("{s:s}", "uri", "fd:state"));
    s_wait_migration (qmp, 30000);
    struct stat st;
    assert_int_equal (stat (state, &st), 0);
    print_message ("template saved in %lld ms, state %lld bytes\n", (long long) (s_ms () - t0),
                   (long long) st.st_size);
    char cmd [512];
    snprintf (cmd, sizeof cmd, "cp --sparse=always %s/workspace.qcow2 %s",
              gw_vm_run_dir (vm), disk_copy);
    assert_int_equal (system (cmd), 0);
    gw_qmp_destroy (&qmp);
    ch_frame_dec_destroy (&r->dec);
    free (r);
    close (fd);
    gw_vm_destroy (&vm);
}

static void
test_gw_vm_restores_a_snapshot_under_the_sandbox (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    if (!f->image || !*f->image)
        tu_skip_expected ("no CELLVM_IMAGE_DIR: a plain unit run has no guest image; "
                          "tests/integration/test_vm.py runs this with one");
    char ram [128], saved [128], disk [128];
    snprintf (ram, sizeof ram, "%s/t.ram", f->scratch);
    snprintf (saved, sizeof saved, "%s/t.state", f->scratch);
    snprintf (disk, sizeof disk, "%s/t-workspace.qcow2", f->scratch);
    s_make_template (f, ram, saved, disk);
    //  The clone: same devices, RAM copy-on-write, its own /workspace layer.
    gw_vm_config_t cfg;
    gw_vm_config_defaults (&cfg);
    cfg.image_dir = f->image;
    cfg.run_base = f->base;
    cfg.mem_path = ram;
    cfg.incoming_defer = true;
    cfg.disk_backing = disk;
    int64_t t0 = s_ms ();
    gw_vm_t *vm = s_vm_start (&cfg);
    gw_qmp_t *qmp = s_qmp_connect (vm);
    s_ignore_shared (qmp);
    s_give_state (qmp, saved, O_RDONLY);
    s_qmp_ok (qmp, "migrate-incoming", json_pack ("{s:s}", "uri", "fd:state"));
    s_wait_migration (qmp, 30000);
    s_qmp_ok (qmp, "cont", NULL);
    int64_t t_running = s_ms ();
    int fd = -1;
    assert_int_equal (gw_vm_wait_port (vm, "init", 5000, &fd), 0);
    s_reader_t *r = malloc (sizeof *r);
    s_reader_init (r, fd, false);
    json_t *hello = s_wait_init (vm, r, 10000);
    assert_non_null (hello);                    //  the restored guest answers
    print_message ("restore: running %lld ms, init hello %lld ms after gw_vm_new "
                   "(hellos seen by this init: %lld)\n", (long long) (t_running - t0),
                   (long long) (s_ms () - t0), (long long) json_integer_value (
                   json_object_get (json_object_get (hello, "content"), "hellos")));
    json_decref (hello);
    gw_qmp_destroy (&qmp);
    ch_frame_dec_destroy (&r->dec);
    free (r);
    close (fd);
    gw_vm_destroy (&vm);
    assert_int_equal (s_count_entries (f->base), 0);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_setup_teardown (test_gw_vm_boots_the_guest_to_a_kernel_hello,
                                         s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_vm_restores_a_snapshot_under_the_sandbox,
                                         s_setup, s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
