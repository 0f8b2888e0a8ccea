/*  test_gi_workspace - workspace_detach and the hello that mounts /workspace
    again (docs/init.md), through gi_ops_handle and a real gi_ctl (tu_gi.h).

    The session disk's mount, unmount, chown and flush go through stand-ins
    (gi_sys_set_disk) that record what init asked and answer as a test
    wants: nothing here mounts anything or starts a kernel. The disk itself
    is a file in a mkdtemp directory, absent unless a test makes it.
*/
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>

#include "gi_sys.h"
#include "tu_gi.h"

//  ---------------------------------------------------------------------------
//  The session disk's stand-ins (gi_sys_set_disk): what init asked of them,
//  and how they answer.

static struct {
    int mounts, umounts, chowns, flushes, freezes;      //  calls
    int mount_fails;                            //  mount fails this often (-1: always)
    int mount_errno;                            //  ... with this
    int busy;                                   //  umount2 says EBUSY this often (-1: always)
    char src [PATH_MAX], dst [PATH_MAX], type [16];     //  the last mount
    unsigned long flags;
    char umounted [PATH_MAX], flushed [PATH_MAX], frozen [PATH_MAX];
    int umount_flags;
    char chowned [2][PATH_MAX];                 //  the first two chowns
    uid_t uid;
    gid_t gid;
    char dir [TU_DIR_MAX];                      //  holds the disk
    char disk [PATH_MAX];                       //  dir/vdb
} s_disk;

static int
s_mock_mount (const char *src, const char *dst, const char *type, unsigned long flags,
              const void *data)
{
    (void) data;
    s_disk.mounts++;
    snprintf (s_disk.src, sizeof s_disk.src, "%s", src);
    snprintf (s_disk.dst, sizeof s_disk.dst, "%s", dst);
    snprintf (s_disk.type, sizeof s_disk.type, "%s", type);
    s_disk.flags = flags;
    if (s_disk.mount_fails == 0)
        return 0;
    s_disk.mount_fails -= s_disk.mount_fails > 0;
    errno = s_disk.mount_errno;
    return -1;
}

static int
s_mock_umount2 (const char *dir, int flags)
{
    s_disk.umounts++;
    snprintf (s_disk.umounted, sizeof s_disk.umounted, "%s", dir);
    s_disk.umount_flags = flags;
    if (s_disk.busy == 0)
        return 0;
    s_disk.busy -= s_disk.busy > 0;
    errno = EBUSY;
    return -1;
}

static int
s_mock_chown (const char *path, uid_t uid, gid_t gid)
{
    if (s_disk.chowns < 2)
        snprintf (s_disk.chowned [s_disk.chowns], PATH_MAX, "%s", path);
    s_disk.chowns++;
    s_disk.uid = uid;
    s_disk.gid = gid;
    return 0;
}

static int
s_mock_freeze (const char *dir)
{
    s_disk.freezes++;
    snprintf (s_disk.frozen, sizeof s_disk.frozen, "%s", dir);
    return 0;
}

static int
s_mock_flush (const char *disk)
{
    s_disk.flushes++;
    snprintf (s_disk.flushed, sizeof s_disk.flushed, "%s", disk);
    return 0;
}

//  /workspace is the fixture's root, on the "disk" dir/vdb, through the
//  stand-ins; ops say it is a workspace ("ext4" or "tmpfs").
static int
s_setup_disk (void **state, const char *workspace)
{
    memset (&s_disk, 0, sizeof s_disk);
    tu_gi_setup (state, "test_gi_workspace", workspace);
    tu_gi_t *f = (tu_gi_t *) *state;
    tu_tmpdir (s_disk.dir, sizeof s_disk.dir, "test_gi_workspace_disk");
    tu_path (s_disk.disk, sizeof s_disk.disk, s_disk.dir, "vdb");
    gi_sys_disk_t disk = { s_disk.disk, f->root, s_mock_mount, s_mock_umount2, s_mock_chown,
                           s_mock_flush, s_mock_freeze };
    gi_sys_set_disk (&disk);
    return 0;
}

static int
s_setup_ext4 (void **state)
{
    return s_setup_disk (state, "ext4");
}

static int
s_setup_tmpfs (void **state)
{
    return s_setup_disk (state, "tmpfs");
}

static int
s_teardown (void **state)
{
    gi_sys_set_disk (NULL);
    tu_rmtree (s_disk.dir);
    return tu_gi_teardown (state);
}

//  ---------------------------------------------------------------------------
//  workspace_detach, and the hello that mounts /workspace again

#define S_DETACHED_WORDS "/workspace is not mounted (the VM is being saved or handed over)"

static json_t *
s_simple (tu_gi_t *f, const char *type, const char *content, const char *status)
{
    char reply [128];
    ch_msg_t *req = tu_gi_req (CH_CELLVM, type, content, 0, 0);
    const char *rtype = strcmp (type, "hello") ? tu_gi_reply_type (type, reply) : "hello";
    return tu_gi_reply (f, req, rtype, status, NULL);
}

static void
s_detach_ok (tu_gi_t *f, const char *content, bool killed)
{
    json_t *c = s_simple (f, "workspace_detach_request", content, "ok");
    assert_true (json_is_true (json_object_get (c, "detached")));
    assert_true (json_is_boolean (json_object_get (c, "kernel_killed")));
    assert_int_equal (json_is_true (json_object_get (c, "kernel_killed")), killed);
    json_decref (c);
}

//  ename and evalue of an error reply to type.
static void
s_expect_error (tu_gi_t *f, const char *type, const char *content, const char *ename,
                const char *evalue)
{
    json_t *c = s_simple (f, type, content, "error");
    assert_string_equal (tu_gi_str (c, "ename"), ename);
    if (evalue)
        assert_string_equal (tu_gi_str (c, "evalue"), evalue);
    json_decref (c);
}

static bool
s_mounted (tu_gi_t *f)
{
    json_t *c = s_simple (f, "status_request", "{}", "ok");
    json_t *m = json_object_get (c, "workspace_mounted");
    assert_true (json_is_boolean (m));
    bool mounted = json_is_true (m);
    json_decref (c);
    return mounted;
}

static void
s_put_ok (tu_gi_t *f, const char *path)
{
    char content [256];
    snprintf (content, sizeof content, "{\"path\": \"%s\"}", path);
    ch_msg_t *req = tu_gi_req (CH_CELLVM, "put_request", content, 1, 10);
    json_t *c = tu_gi_reply (f, req, "put_reply", "ok", NULL);
    assert_int_equal (json_integer_value (json_object_get (c, "size")), 10);
    json_decref (c);
}

static void
test_gi_workspace_detach_unmounts_and_flushes_the_disk (void **state)
{
    tu_gi_t *f = (tu_gi_t *) *state;
    s_detach_ok (f, "{}", false);
    assert_int_equal (s_disk.umounts, 1);
    assert_string_equal (s_disk.umounted, f->root);
    assert_int_equal (s_disk.umount_flags, 0);
    assert_int_equal (s_disk.flushes, 1);               //  after the unmount
    assert_string_equal (s_disk.flushed, s_disk.disk);
    assert_false (s_mounted (f));
    //  Again: nothing left to unmount, the disk flushed once more.
    s_detach_ok (f, "{\"kill_kernel\": false}", false);
    assert_int_equal (s_disk.umounts, 1);
    assert_int_equal (s_disk.flushes, 2);
    assert_int_equal (s_disk.mounts, 0);
}

//  A restart's hand-over: the kernel is frozen, not waited for, and
//  /workspace frozen in place (no unmount), then the disk flushed.
static void
test_gi_workspace_detach_with_freeze_freezes_and_flushes (void **state)
{
    tu_gi_t *f = (tu_gi_t *) *state;
    json_t *c = s_simple (f, "workspace_detach_request", "{\"freeze\": true}", "ok");
    assert_true (json_is_true (json_object_get (c, "frozen")));
    assert_true (json_is_false (json_object_get (c, "kernel_killed")));
    json_decref (c);
    assert_int_equal (s_disk.freezes, 1);
    assert_string_equal (s_disk.frozen, f->root);
    assert_int_equal (s_disk.umounts, 0);
    assert_int_equal (s_disk.flushes, 1);
    assert_string_equal (s_disk.flushed, s_disk.disk);
    s_expect_error (f, "workspace_detach_request", "{\"freeze\": \"yes\"}", "BadRequest",
                    "freeze must be true or false: Invalid argument");
    assert_int_equal (s_disk.freezes, 1);
}

static void
test_gi_workspace_files_are_refused_while_detached (void **state)
{
    tu_gi_t *f = (tu_gi_t *) *state;
    s_put_ok (f, "before.txt");
    s_detach_ok (f, "{}", false);
    ch_msg_t *req = tu_gi_req (CH_CELLVM, "put_request", "{\"path\": \"after.txt\"}", 1, 10);
    json_t *c = tu_gi_reply (f, req, "put_reply", "error", NULL);
    assert_string_equal (tu_gi_str (c, "ename"), "WorkspaceDetached");
    assert_string_equal (tu_gi_str (c, "evalue"), S_DETACHED_WORDS);
    json_decref (c);
    s_expect_error (f, "get_request", "{\"path\": \"before.txt\"}", "WorkspaceDetached",
                    S_DETACHED_WORDS);
    char path [PATH_MAX];
    assert_int_equal (access (tu_path (path, sizeof path, f->root, "after.txt"), F_OK), -1);
}

static void
test_gi_workspace_hello_mounts_a_detached_workspace (void **state)
{
    tu_gi_t *f = (tu_gi_t *) *state;
    s_detach_ok (f, "{}", false);
    json_t *c = s_simple (f, "hello", "{\"protocol\": \"cellvm-init\"}", "ok");
    assert_true (json_is_true (json_object_get (c, "workspace_mounted")));
    assert_null (json_object_get (c, "workspace_error"));
    assert_string_equal (tu_gi_str (c, "workspace_fs"), "ext4");
    json_decref (c);
    assert_int_equal (s_disk.mounts, 1);
    assert_string_equal (s_disk.src, s_disk.disk);
    assert_string_equal (s_disk.dst, f->root);
    assert_string_equal (s_disk.type, "ext4");
    assert_int_equal (s_disk.flags, MS_NOSUID | MS_NODEV | MS_NOATIME);
    //  out/ made, and both handed to the kernel user.
    char out [PATH_MAX];
    struct stat st;
    assert_int_equal (stat (tu_path (out, sizeof out, f->root, "out"), &st), 0);
    assert_true (S_ISDIR (st.st_mode));
    assert_int_equal (s_disk.chowns, 2);
    assert_string_equal (s_disk.chowned [0], f->root);
    assert_string_equal (s_disk.chowned [1], out);
    assert_int_equal (s_disk.uid, 1000);
    assert_int_equal (s_disk.gid, 1000);
    assert_true (s_mounted (f));
    s_put_ok (f, "data/back.txt");
    //  Mounted now: the next hello leaves it be.
    json_decref (s_simple (f, "hello", "{}", "ok"));
    assert_int_equal (s_disk.mounts, 1);
}

static double
s_now (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static void
test_gi_workspace_detach_of_a_busy_workspace_is_workspace_busy (void **state)
{
    tu_gi_t *f = (tu_gi_t *) *state;
    s_disk.busy = -1;
    double t0 = s_now ();
    json_t *c = s_simple (f, "workspace_detach_request", "{}", "error");
    double took = s_now () - t0;
    assert_string_equal (tu_gi_str (c, "ename"), "WorkspaceBusy");
    assert_non_null (strstr (tu_gi_str (c, "evalue"), "EBUSY"));
    assert_non_null (strstr (tu_gi_str (c, "evalue"), "a process still uses /workspace"));
    json_decref (c);
    assert_true (took >= 0.9 && took < 5);              //  retried for about 1 s
    assert_true (s_disk.umounts >= 50 && s_disk.umounts <= 101);
    assert_int_equal (s_disk.flushes, 0);
    assert_true (s_mounted (f));                        //  still there, still usable
    s_put_ok (f, "still.txt");
}

static void
test_gi_workspace_detach_retries_a_briefly_busy_workspace (void **state)
{
    tu_gi_t *f = (tu_gi_t *) *state;
    s_disk.busy = 3;
    s_detach_ok (f, "{}", false);
    assert_int_equal (s_disk.umounts, 4);
    assert_false (s_mounted (f));
}

static void
test_gi_workspace_detach_refuses_a_tmpfs_workspace (void **state)
{
    tu_gi_t *f = (tu_gi_t *) *state;
    s_expect_error (f, "workspace_detach_request", "{\"kill_kernel\": true}",
                    "WorkspaceNotDetachable", NULL);
    assert_int_equal (s_disk.umounts, 0);
    assert_int_equal (s_disk.flushes, 0);
    assert_true (s_mounted (f));
    s_put_ok (f, "kept.txt");
}

//  A disk that will not mount and is not blank: reported, never formatted,
//  and no kernel starts in the bare mount point.
static void
test_gi_workspace_hello_reports_a_disk_it_cannot_mount (void **state)
{
    tu_gi_t *f = (tu_gi_t *) *state;
    tu_write_file (s_disk.dir, "vdb", "not a file system, but not blank either");
    s_detach_ok (f, "{}", false);
    s_disk.mount_fails = -1;
    s_disk.mount_errno = EINVAL;
    json_t *c = s_simple (f, "hello", "{}", "ok");
    assert_false (json_is_true (json_object_get (c, "workspace_mounted")));
    assert_string_equal (tu_gi_str (c, "workspace_error"),
                         "cannot mount the session disk on /workspace: Invalid argument");
    json_decref (c);
    assert_int_equal (s_disk.mounts, 1);                //  no second try after a format
    char head [8] = "";
    FILE *disk = fopen (s_disk.disk, "r");
    assert_non_null (disk);
    assert_int_equal (fread (head, 1, 7, disk), 7);
    fclose (disk);
    assert_string_equal (head, "not a f");
    s_expect_error (f, "put_request", "{\"path\": \"a\"}", "WorkspaceDetached", S_DETACHED_WORDS);
    s_expect_error (f, "restart_request", "{}", "WorkspaceError",
                    "cannot mount /workspace again, so no kernel was started: Invalid argument");
    json_t *st = s_simple (f, "status_request", "{}", "ok");
    assert_string_equal (tu_gi_str (json_object_get (st, "kernel"), "state"), "not_started");
    assert_false (json_is_true (json_object_get (st, "workspace_mounted")));
    json_decref (st);
}

//  A blank disk (another session's fresh layer) is formatted, then mounted.
static void
test_gi_workspace_hello_formats_a_blank_disk (void **state)
{
    tu_gi_t *f = (tu_gi_t *) *state;
    if (access ("/sbin/mkfs.ext4", X_OK) < 0)
        tu_skip ("no /sbin/mkfs.ext4 (e2fsprogs; the guest image's build needs it too)");
    FILE *disk = fopen (s_disk.disk, "w");
    assert_non_null (disk);
    assert_int_equal (ftruncate (fileno (disk), 8 << 20), 0);
    fclose (disk);
    s_detach_ok (f, "{}", false);
    s_disk.mount_fails = 1;                             //  blank: no file system yet
    s_disk.mount_errno = EINVAL;
    json_t *c = s_simple (f, "hello", "{}", "ok");
    assert_true (json_is_true (json_object_get (c, "workspace_mounted")));
    json_decref (c);
    assert_int_equal (s_disk.mounts, 2);
    unsigned char magic [2] = { 0, 0 };                 //  ext4's, at 1024 + 0x38
    disk = fopen (s_disk.disk, "r");
    assert_non_null (disk);
    assert_int_equal (fseek (disk, 1024 + 0x38, SEEK_SET), 0);
    assert_int_equal (fread (magic, 1, 2, disk), 2);
    fclose (disk);
    assert_int_equal (magic [0], 0x53);
    assert_int_equal (magic [1], 0xef);
}

//  kill_kernel with no kernel running: nothing to kill, still detached.
static void
test_gi_workspace_detach_with_kill_kernel_and_no_kernel (void **state)
{
    tu_gi_t *f = (tu_gi_t *) *state;
    if (access ("/sys/fs/cgroup/kernel", F_OK) == 0)
        tu_skip ("this host has a /sys/fs/cgroup/kernel, not the test's to kill");
    s_detach_ok (f, "{\"kill_kernel\": true}", false);
    assert_int_equal (s_disk.umounts, 1);
    assert_false (s_mounted (f));
}
int
main (void)
{
#define S_EXT4(name) cmocka_unit_test_setup_teardown (name, s_setup_ext4, s_teardown)
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_setup_teardown (test_gi_workspace_detach_refuses_a_tmpfs_workspace,
                                         s_setup_tmpfs, s_teardown),
        S_EXT4 (test_gi_workspace_detach_unmounts_and_flushes_the_disk),
        S_EXT4 (test_gi_workspace_detach_with_freeze_freezes_and_flushes),
        S_EXT4 (test_gi_workspace_files_are_refused_while_detached),
        S_EXT4 (test_gi_workspace_hello_mounts_a_detached_workspace),
        S_EXT4 (test_gi_workspace_detach_of_a_busy_workspace_is_workspace_busy),
        S_EXT4 (test_gi_workspace_detach_retries_a_briefly_busy_workspace),
        S_EXT4 (test_gi_workspace_hello_reports_a_disk_it_cannot_mount),
        S_EXT4 (test_gi_workspace_hello_formats_a_blank_disk),
        S_EXT4 (test_gi_workspace_detach_with_kill_kernel_and_no_kernel),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
