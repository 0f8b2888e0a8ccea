/*  test_gw_snapstore - the snapshot store: names, durable publishing,
    checked reads of a hostile store, removal against readers, listing and
    collection. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "ch_util.h"
#include "snap/gw_snapstore.h"
#include "tu.h"
#include "ch_clock.h"

typedef struct {
    char dir [TU_DIR_MAX];                      //  tu_fixture_new's scratch dir
    char store [TU_DIR_MAX + 16];
    gw_snapstore_t *ss;
    char err [1024];
} fx_t;

static int
s_setup (void **state)
{
    fx_t *fx = tu_fixture_new (sizeof *fx, "test_gw_snapstore");
    snprintf (fx->store, sizeof fx->store, "%s/store", fx->dir);
    fx->ss = gw_snapstore_new (fx->store, fx->err, sizeof fx->err);
    assert_non_null (fx->ss);
    *state = fx;
    return 0;
}

static int
s_teardown (void **state)
{
    fx_t *fx = *state;
    gw_snapstore_destroy (&fx->ss);
    assert_null (fx->ss);
    return tu_fixture_teardown (state);
}

static void
s_write (const char *dir, const char *name, const void *data, size_t len)
{
    char path [PATH_MAX];
    int fd = open (tu_path (path, sizeof path, dir, name), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true (fd >= 0);
    assert_int_equal (write (fd, data, len), (ssize_t) len);
    assert_int_equal (close (fd), 0);
}

//  STORE/snap/file into path; returns path.
static const char *
s_file (fx_t *fx, const char *snap, const char *file, char *path, size_t cap)
{
    snprintf (path, cap, "%s/%s%s%s", fx->store, snap, file ? "/" : "", file ? file : "");
    return path;
}

//  Stage name with a state of state_len bytes and a 4 KiB qcow2-looking
//  disk; the meta to publish it with (new reference), staging into out.
static json_t *
s_stage (fx_t *fx, const char *name, double created, size_t state_len, char *out, size_t cap)
{
    char path [PATH_MAX], sha [65];
    assert_int_equal (gw_snapstore_stage (fx->ss, name, out, cap, fx->err, sizeof fx->err), 0);
    char *buf = calloc (1, state_len > 4096 ? state_len : 4096);
    assert_non_null (buf);
    for (size_t i = 0; i < state_len; i++)
        buf [i] = (char) ('a' + i % 26);
    s_write (out, GW_SNAP_STATE, buf, state_len);
    memset (buf, 0, 4096);
    memcpy (buf, "QFI\xfb", 4);
    s_write (out, GW_SNAP_DISK, buf, 4096);
    free (buf);
    assert_int_equal (ch_sha256_file (tu_path (path, sizeof path, out, GW_SNAP_STATE), 0, sha,
                                      NULL), 0);
    json_t *meta = json_pack ("{s:f, s:s, s:i, s:i, s:s, s:s, s:I, s:s, s:I}", "created", created,
                              "image_hash", "img-1", "mem_mib", 512, "vcpus", 1, "accel", "tcg",
                              "qemu_version", "8.2.0", "state_bytes", (json_int_t) state_len,
                              "state_sha256", sha, "disk_file_bytes", (json_int_t) 4096);
    assert_non_null (meta);
    return meta;
}

//  A published snapshot.
static void
s_snap (fx_t *fx, const char *name, double created, size_t state_len)
{
    char staging [PATH_MAX];
    json_t *meta = s_stage (fx, name, created, state_len, staging, sizeof staging);
    assert_int_equal (gw_snapstore_publish (fx->ss, staging, name, meta, fx->err,
                                            sizeof fx->err), 0);
    json_decref (meta);
}

//  Entries in the store whose name starts with a dot (staging, trash).
static int
s_dot_entries (fx_t *fx)
{
    DIR *d = opendir (fx->store);
    struct dirent *de;
    int n = 0;
    assert_non_null (d);
    while ((de = readdir (d)))
        n += de->d_name [0] == '.' && strcmp (de->d_name, ".") && strcmp (de->d_name, "..");
    closedir (d);
    return n;
}

static int
s_open_rc (fx_t *fx, const char *name)
{
    int rc = 1;
    gw_snapref_t *ref = gw_snapstore_open (fx->ss, name, &rc, fx->err, sizeof fx->err);
    assert_true ((ref != NULL) == (rc == 0));
    gw_snapref_destroy (&ref);
    return rc;
}

#define assert_err_has(fx, text) do {                                            \
    if (!strstr ((fx)->err, (text)))                                            \
        fail_msg ("err \"%s\" lacks \"%s\"", (fx)->err, (text));                \
} while (0)

//  ==========================================================================

static void
test_gw_snapstore_names (void **state)
{
    (void) state;
    char name [80];
    memset (name, 'a', 64);
    name [64] = 0;
    assert_true (gw_snapstore_name_ok (name));
    assert_true (gw_snapstore_name_ok ("snap_1-X"));
    name [64] = 'a';
    name [65] = 0;
    assert_false (gw_snapstore_name_ok (name));             //  65 characters
    const char *bad [] = { "", "..", ".", "a/b", "../x", "/etc", "caf\xc3\xa9", "a b",
                           ".hidden", "a\nb" };
    for (size_t i = 0; i < sizeof bad / sizeof bad [0]; i++)
        assert_false (gw_snapstore_name_ok (bad [i]));
    assert_false (gw_snapstore_name_ok (NULL));
    gw_snapstore_new_name (name, sizeof name);
    assert_int_equal (strlen (name), strlen ("snap-20260101-120000-abcd"));
    assert_int_equal (strncmp (name, "snap-2", 6), 0);
    assert_true (gw_snapstore_name_ok (name));
    assert_int_equal (strspn (name + 21, "0123456789abcdef"), 4);
}

static void
test_gw_snapstore_default_dir (void **state)
{
    (void) state;
    char out [PATH_MAX], small [8];
    setenv ("CELLVM_SNAPSHOT_DIR", "/srv/snaps", 1);
    assert_int_equal (gw_snapstore_default_dir (out, sizeof out), 0);
    assert_string_equal (out, "/srv/snaps");
    assert_int_equal (gw_snapstore_default_dir (small, sizeof small), -ENAMETOOLONG);
    setenv ("CELLVM_SNAPSHOT_DIR", "relative/ignored", 1);
    setenv ("XDG_DATA_HOME", "/xdg", 1);
    assert_int_equal (gw_snapstore_default_dir (out, sizeof out), 0);
    assert_string_equal (out, geteuid () == 0 ? "/var/lib/cellvm/snapshots"
                                              : "/xdg/cellvm/snapshots");
    unsetenv ("CELLVM_SNAPSHOT_DIR");
    unsetenv ("XDG_DATA_HOME");
}

//  The store must be our own real directory; a missing one is made.
static void
test_gw_snapstore_new_refuses_foreign_dirs (void **state)
{
    fx_t *fx = *state;
    char path [PATH_MAX], err [512];
    struct stat st;
    gw_snapstore_t *ss = gw_snapstore_new (tu_path (path, sizeof path, fx->dir, "a/b/c"), err,
                                           sizeof err);
    assert_non_null (ss);
    assert_int_equal (stat (path, &st), 0);
    assert_int_equal (st.st_mode & 07777, 0700);
    assert_string_equal (gw_snapstore_dir (ss), path);
    gw_snapstore_destroy (&ss);
    assert_int_equal (symlink (fx->store, tu_path (path, sizeof path, fx->dir, "link")), 0);
    assert_null (gw_snapstore_new (path, err, sizeof err));
    assert_non_null (strstr (err, "symlink"));
    tu_write_file (fx->dir, "file", "x");
    assert_null (gw_snapstore_new (tu_path (path, sizeof path, fx->dir, "file"), err,
                                   sizeof err));
    assert_non_null (strstr (err, "not a directory"));
    assert_int_equal (mkdir (tu_path (path, sizeof path, fx->dir, "open"), 0700), 0);
    assert_int_equal (chmod (path, 0777), 0);
    assert_null (gw_snapstore_new (path, err, sizeof err));
    assert_non_null (strstr (err, "writable by other users"));
    if (geteuid () == 0) {                      //  only root can give a dir away
        assert_int_equal (chmod (path, 0700), 0);
        assert_int_equal (chown (path, 65534, 65534), 0);
        assert_null (gw_snapstore_new (path, err, sizeof err));
        assert_non_null (strstr (err, "owned by uid 65534"));
    }
}

static void
test_gw_snapstore_publish_then_open (void **state)
{
    fx_t *fx = *state;
    char path [PATH_MAX];
    struct stat st;
    s_snap (fx, "s1", 1000, 10000);
    assert_int_equal (s_dot_entries (fx), 0);   //  staging renamed, nothing left
    assert_int_equal (stat (s_file (fx, "s1", NULL, path, sizeof path), &st), 0);
    assert_int_equal (st.st_mode & 07777, 0700);
    assert_int_equal (stat (s_file (fx, "s1", GW_SNAP_META, path, sizeof path), &st), 0);
    assert_int_equal (st.st_mode & 07777, 0600);
    int rc = 1;
    gw_snapref_t *ref = gw_snapstore_open (fx->ss, "s1", &rc, fx->err, sizeof fx->err);
    assert_non_null (ref);
    assert_int_equal (rc, 0);
    assert_string_equal (gw_snapref_name (ref), "s1");
    assert_string_equal (gw_snapref_dir (ref), s_file (fx, "s1", NULL, path, sizeof path));
    assert_string_equal (gw_snapref_state (ref), s_file (fx, "s1", "state", path, sizeof path));
    assert_string_equal (gw_snapref_disk (ref), s_file (fx, "s1", GW_SNAP_DISK, path,
                                                        sizeof path));
    json_t *meta = gw_snapref_meta (ref);
    assert_int_equal (json_integer_value (json_object_get (meta, "format")), GW_SNAP_FORMAT);
    assert_string_equal (json_string_value (json_object_get (meta, "name")), "s1");
    assert_int_equal (gw_snapref_verify_state (ref, fx->err, sizeof fx->err), 0);
    gw_snapref_destroy (&ref);
    assert_null (ref);
    //  Bad names and taken names are refused before anything is made.
    assert_int_equal (gw_snapstore_stage (fx->ss, "../x", path, sizeof path, fx->err,
                                          sizeof fx->err), -EINVAL);
    assert_int_equal (gw_snapstore_stage (fx->ss, "s1", path, sizeof path, fx->err,
                                          sizeof fx->err), -EEXIST);
    assert_int_equal (s_dot_entries (fx), 0);
}

//  Two writers of one name: the second gets -EEXIST and leaves nothing.
static void
test_gw_snapstore_publish_existing_name (void **state)
{
    fx_t *fx = *state;
    char a [PATH_MAX], b [PATH_MAX];
    json_t *ma = s_stage (fx, "s2", 1, 100, a, sizeof a);
    json_t *mb = s_stage (fx, "s2", 2, 200, b, sizeof b);
    assert_string_not_equal (a, b);
    assert_int_equal (gw_snapstore_publish (fx->ss, a, "s2", ma, fx->err, sizeof fx->err), 0);
    assert_int_equal (gw_snapstore_publish (fx->ss, b, "s2", mb, fx->err, sizeof fx->err),
                      -EEXIST);
    assert_err_has (fx, "already exists");
    assert_int_equal (access (b, F_OK), -1);    //  the loser's staging is gone
    assert_int_equal (s_dot_entries (fx), 0);
    gw_snapref_t *ref = gw_snapstore_open (fx->ss, "s2", NULL, fx->err, sizeof fx->err);
    assert_non_null (ref);                      //  the winner, whole
    assert_int_equal (json_integer_value (json_object_get (gw_snapref_meta (ref),
                                                           "state_bytes")), 100);
    gw_snapref_destroy (&ref);
    json_decref (ma);
    json_decref (mb);
}

//  publish and abort only ever touch staging directories of this store.
static void
test_gw_snapstore_publish_refuses_foreign_paths (void **state)
{
    fx_t *fx = *state;
    char out [PATH_MAX], staging [PATH_MAX];
    json_t *meta = json_object ();
    //  A sibling of the store, named like it: only the prefix check tells.
    assert_int_equal (mkdir (tu_path (out, sizeof out, fx->dir, "stor2"), 0700), 0);
    assert_int_equal (mkdir (tu_path (out, sizeof out, fx->dir, "stor2/.staging-s3-1-00000000"),
                             0700), 0);
    assert_int_equal (gw_snapstore_publish (fx->ss, out, "s3", meta, fx->err, sizeof fx->err),
                      -EINVAL);
    gw_snapstore_abort (fx->ss, out);
    gw_snapstore_abort (fx->ss, "");
    gw_snapstore_abort (fx->ss, NULL);
    assert_int_equal (access (out, F_OK), 0);   //  outside the store: untouched
    json_decref (s_stage (fx, "s3", 1, 10, staging, sizeof staging));
    assert_int_equal (gw_snapstore_publish (fx->ss, staging, "s4", meta, fx->err,
                                            sizeof fx->err), -EINVAL);
    assert_int_equal (gw_snapstore_publish (fx->ss, staging, "s", meta, fx->err,
                                            sizeof fx->err), -EINVAL);     //  a prefix of s3
    assert_int_equal (access (staging, F_OK), 0);          //  another name's: untouched
    gw_snapstore_abort (fx->ss, staging);
    assert_int_equal (access (staging, F_OK), -1);
    assert_int_equal (s_dot_entries (fx), 0);
    json_decref (meta);
}

//  A write that fails (here: over RLIMIT_FSIZE) removes the staging dir
//  and says nothing was kept.
static void
test_gw_snapstore_publish_failure_keeps_nothing (void **state)
{
    fx_t *fx = *state;
    char staging [PATH_MAX], pad [8192];
    json_t *meta = s_stage (fx, "s5", 1, 10, staging, sizeof staging);
    memset (pad, 'p', sizeof pad - 1);
    pad [sizeof pad - 1] = 0;
    json_object_set_new (meta, "pad", json_string (pad));
    struct rlimit old, small = { 4096, 4096 };
    assert_int_equal (getrlimit (RLIMIT_FSIZE, &old), 0);
    small.rlim_max = old.rlim_max;
    signal (SIGXFSZ, SIG_IGN);
    assert_int_equal (setrlimit (RLIMIT_FSIZE, &small), 0);
    int rc = gw_snapstore_publish (fx->ss, staging, "s5", meta, fx->err, sizeof fx->err);
    assert_int_equal (setrlimit (RLIMIT_FSIZE, &old), 0);
    signal (SIGXFSZ, SIG_DFL);
    assert_int_equal (rc, -EFBIG);
    assert_err_has (fx, "while writing meta.json");
    assert_err_has (fx, "nothing was kept");
    assert_int_equal (access (staging, F_OK), -1);
    assert_int_equal (s_dot_entries (fx), 0);
    assert_int_equal (s_open_rc (fx, "s5"), -ENOENT);
    json_decref (meta);
}

static void
test_gw_snapstore_open_unknown_and_bad_names (void **state)
{
    fx_t *fx = *state;
    assert_int_equal (s_open_rc (fx, "nope"), -ENOENT);
    assert_err_has (fx, "no snapshot \"nope\"");
    assert_int_equal (s_open_rc (fx, "../store"), -EINVAL);
    assert_null (gw_snapstore_open (fx->ss, "", NULL, fx->err, sizeof fx->err));
}

static void
test_gw_snapstore_open_truncated_or_grown_state (void **state)
{
    fx_t *fx = *state;
    char path [PATH_MAX];
    s_snap (fx, "s1", 1, 5678);
    assert_int_equal (truncate (s_file (fx, "s1", "state", path, sizeof path), 1234), 0);
    assert_int_equal (s_open_rc (fx, "s1"), -EBADMSG);
    assert_string_equal (fx->err, "snapshot \"s1\" is truncated: state is 1234 bytes, "
                         "meta.json says 5678");
    assert_int_equal (truncate (path, 6000), 0);
    assert_int_equal (s_open_rc (fx, "s1"), -EBADMSG);
    assert_err_has (fx, "state is 6000 bytes");
    assert_int_equal (unlink (path), 0);
    assert_int_equal (s_open_rc (fx, "s1"), -EBADMSG);
    assert_err_has (fx, "missing");
}

static void
test_gw_snapstore_open_bad_qcow2_magic (void **state)
{
    fx_t *fx = *state;
    char path [PATH_MAX];
    s_snap (fx, "s1", 1, 100);
    assert_int_equal (s_open_rc (fx, "s1"), 0);
    int fd = open (s_file (fx, "s1", GW_SNAP_DISK, path, sizeof path), O_WRONLY);
    assert_int_equal (pwrite (fd, "QFI\xfa", 4, 0), 4);
    close (fd);
    assert_int_equal (s_open_rc (fx, "s1"), -EBADMSG);
    assert_err_has (fx, "not a qcow2 image");
}

//  meta.json that is not JSON, not an object, huge, a FIFO, of another
//  snapshot or format: -EBADMSG, never a hang.
static void
test_gw_snapstore_open_bad_meta (void **state)
{
    fx_t *fx = *state;
    char dir [PATH_MAX], path [PATH_MAX];
    s_snap (fx, "s1", 1, 100);
    s_file (fx, "s1", NULL, dir, sizeof dir);
    const char *cases [] [2] = {
        { "{\"format\": 1, \"name\": ", "not JSON" }, { "[1]", "not a JSON object" },
        { "{\"format\": 1, \"name\": \"s9\"}", "names \"s9\"" },
        { "{\"format\": 3, \"name\": \"s1\"}", "has format 3" },
        { "{\"format\": 2, \"name\": \"s1\", \"state_bytes\": 100, \"ram_bytes\": 8}", "ram is missing" },
        { "{\"format\": 1, \"name\": \"s1\"}", "no state_bytes" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases [0]; i++) {
        tu_write_file (dir, GW_SNAP_META, cases [i] [0]);
        assert_int_equal (s_open_rc (fx, "s1"), -EBADMSG);
        assert_err_has (fx, cases [i] [1]);
    }
    char *big = malloc (70000);
    assert_non_null (big);
    memset (big, ' ', 70000);
    big [0] = '{';
    big [69999] = '}';
    s_write (dir, GW_SNAP_META, big, 70000);
    free (big);
    assert_int_equal (s_open_rc (fx, "s1"), -EBADMSG);
    assert_err_has (fx, "over 64 KiB");
    assert_int_equal (unlink (tu_path (path, sizeof path, dir, GW_SNAP_META)), 0);
    assert_int_equal (s_open_rc (fx, "s1"), -EBADMSG);
    assert_err_has (fx, "meta.json is missing");
    assert_int_equal (mkfifo (path, 0600), 0);
    alarm (10);                                 //  a FIFO must not block the open
    assert_int_equal (s_open_rc (fx, "s1"), -EBADMSG);
    alarm (0);
    assert_err_has (fx, "not a regular file");
}

//  Symlinks are never followed: not meta.json, not the state, not the
//  snapshot directory itself (and removing that removes only the link).
static void
test_gw_snapstore_open_refuses_symlinks (void **state)
{
    fx_t *fx = *state;
    char path [PATH_MAX], copy [PATH_MAX];
    s_snap (fx, "s1", 1, 100);
    s_snap (fx, "s2", 1, 100);
    tu_path (copy, sizeof copy, fx->dir, "meta-copy.json");
    assert_int_equal (rename (s_file (fx, "s1", GW_SNAP_META, path, sizeof path), copy), 0);
    assert_int_equal (symlink (copy, path), 0);
    assert_int_equal (s_open_rc (fx, "s1"), -EBADMSG);
    assert_err_has (fx, "meta.json is a symlink");
    tu_path (copy, sizeof copy, fx->dir, "state-copy");
    assert_int_equal (rename (s_file (fx, "s2", "state", path, sizeof path), copy), 0);
    assert_int_equal (symlink (copy, path), 0);
    assert_int_equal (s_open_rc (fx, "s2"), -EBADMSG);
    assert_err_has (fx, "not a regular file");
    //  A whole snapshot elsewhere, linked into the store.
    tu_path (copy, sizeof copy, fx->dir, "elsewhere");
    assert_int_equal (rename (s_file (fx, "s2", NULL, path, sizeof path), copy), 0);
    assert_int_equal (symlink (copy, s_file (fx, "evil", NULL, path, sizeof path)), 0);
    assert_int_equal (s_open_rc (fx, "evil"), -EBADMSG);
    assert_err_has (fx, "not a directory");
    assert_int_equal (gw_snapstore_remove (fx->ss, "evil", 0, fx->err, sizeof fx->err), 0);
    struct stat st;
    assert_int_equal (lstat (path, &st), -1);
    assert_int_equal (stat (tu_path (path, sizeof path, copy, GW_SNAP_DISK), &st), 0);
}

static void
test_gw_snapstore_verify_state_flipped_byte (void **state)
{
    fx_t *fx = *state;
    char path [PATH_MAX], c;
    s_snap (fx, "s1", 1, 3000);
    int fd = open (s_file (fx, "s1", "state", path, sizeof path), O_RDWR);
    assert_true (fd >= 0);
    assert_int_equal (pread (fd, &c, 1, 1500), 1);
    c ^= 0x01;
    assert_int_equal (pwrite (fd, &c, 1, 1500), 1);
    close (fd);
    gw_snapref_t *ref = gw_snapstore_open (fx->ss, "s1", NULL, fx->err, sizeof fx->err);
    assert_non_null (ref);                      //  the size still matches
    assert_int_equal (gw_snapref_verify_state (ref, fx->err, sizeof fx->err), -EBADMSG);
    assert_err_has (fx, "SHA-256");
    gw_snapref_destroy (&ref);
}

static void
test_gw_snapstore_mismatch_sentence (void **state)
{
    fx_t *fx = *state;
    char why [256];
    s_snap (fx, "x", 1, 100);
    gw_snapref_t *ref = gw_snapstore_open (fx->ss, "x", NULL, fx->err, sizeof fx->err);
    assert_non_null (ref);
    json_t *same = json_pack ("{s:s, s:i, s:i, s:s}", "image_hash", "img-1", "mem_mib", 512,
                              "vcpus", 1, "accel", "tcg");
    assert_null (gw_snapref_mismatch (ref, same, why, sizeof why));
    json_t *mem = json_pack ("{s:s, s:i}", "image_hash", "img-1", "mem_mib", 384);
    assert_ptr_equal (gw_snapref_mismatch (ref, mem, why, sizeof why), why);
    assert_string_equal (why, "snapshot \"x\" was taken with memory 512 MiB; this gateway "
                         "runs 384 MiB");
    json_t *qemu = json_pack ("{s:s, s:s}", "qemu_version", "9.0.0", "cpu", "max");
    assert_non_null (gw_snapref_mismatch (ref, qemu, why, sizeof why));
    assert_non_null (strstr (why, "CPU model (not recorded)"));   //  cpu comes first
    json_object_del (qemu, "cpu");
    assert_non_null (gw_snapref_mismatch (ref, qemu, why, sizeof why));
    assert_non_null (strstr (why, "QEMU \"8.2.0\"; this gateway runs \"9.0.0\""));
    assert_null (gw_snapref_mismatch (ref, NULL, why, sizeof why));
    json_decref (same);
    json_decref (mem);
    json_decref (qemu);
    gw_snapref_destroy (&ref);
}

//  Removal waits for a start that reads the snapshot, up to its bound.
static void
test_gw_snapstore_remove_waits_for_readers (void **state)
{
    fx_t *fx = *state;
    s_snap (fx, "s1", 1, 100);
    gw_snapref_t *ref = gw_snapstore_open (fx->ss, "s1", NULL, fx->err, sizeof fx->err);
    assert_non_null (ref);
    int64_t t0 = ch_clock_mono_ms ();
    assert_int_equal (gw_snapstore_remove (fx->ss, "s1", 150, fx->err, sizeof fx->err), -EBUSY);
    assert_true (ch_clock_mono_ms () - t0 >= 140);
    assert_err_has (fx, "in use");
    assert_int_equal (s_open_rc (fx, "s1"), 0);   //  still whole
    gw_snapref_destroy (&ref);
    assert_int_equal (gw_snapstore_remove (fx->ss, "s1", 0, fx->err, sizeof fx->err), 0);
    assert_int_equal (s_open_rc (fx, "s1"), -ENOENT);
    assert_int_equal (gw_snapstore_remove (fx->ss, "s1", 0, fx->err, sizeof fx->err), -ENOENT);
    assert_int_equal (gw_snapstore_remove (fx->ss, "a/b", 0, fx->err, sizeof fx->err), -EINVAL);
    assert_int_equal (s_dot_entries (fx), 0);
    //  A reader that lets go within the wait: the removal goes through.
    s_snap (fx, "s2", 1, 100);
    int sync [2];
    assert_int_equal (pipe (sync), 0);
    pid_t pid = fork ();
    assert_true (pid >= 0);
    if (pid == 0) {
        gw_snapref_t *held = gw_snapstore_open (fx->ss, "s2", NULL, NULL, 0);
        if (write (sync [1], held ? "1" : "0", 1) != 1 || !held)
            _exit (1);
        nanosleep (&(struct timespec) { 0, 300 * 1000 * 1000 }, NULL);
        _exit (0);                              //  the lock goes with the process
    }
    char c = 0;
    assert_int_equal (read (sync [0], &c, 1), 1);
    assert_int_equal (c, '1');
    t0 = ch_clock_mono_ms ();
    assert_int_equal (gw_snapstore_remove (fx->ss, "s2", 5000, fx->err, sizeof fx->err), 0);
    assert_true (ch_clock_mono_ms () - t0 >= 200);
    waitpid (pid, NULL, 0);
    close (sync [0]);
    close (sync [1]);
}

//  A start that waited for a remover finds the name gone: -ENOENT, not the
//  directory it had opened; one that waits too long: -EBUSY.
static void
test_gw_snapstore_open_races_remover (void **state)
{
    fx_t *fx = *state;
    char path [PATH_MAX], trash [PATH_MAX];
    s_snap (fx, "s1", 1, 100);
    s_file (fx, "s1", NULL, path, sizeof path);
    snprintf (trash, sizeof trash, "%s/.trash-s1-1-00000000", fx->store);
    int sync [2];
    assert_int_equal (pipe (sync), 0);
    pid_t pid = fork ();
    assert_true (pid >= 0);
    if (pid == 0) {
        int fd = open (path, O_RDONLY | O_DIRECTORY);
        if (fd < 0 || flock (fd, LOCK_EX) < 0 || write (sync [1], "1", 1) != 1)
            _exit (1);
        nanosleep (&(struct timespec) { 0, 200 * 1000 * 1000 }, NULL);
        _exit (rename (path, trash) == 0 ? 0 : 1);
    }
    char c;
    assert_int_equal (read (sync [0], &c, 1), 1);
    assert_int_equal (s_open_rc (fx, "s1"), -ENOENT);
    int status = 0;
    assert_int_equal (waitpid (pid, &status, 0), pid);
    assert_int_equal (WEXITSTATUS (status), 0);
    assert_int_equal (rename (trash, path), 0);
    int fd = open (path, O_RDONLY | O_DIRECTORY);
    assert_int_equal (flock (fd, LOCK_EX), 0);
    int64_t t0 = ch_clock_mono_ms ();
    assert_int_equal (s_open_rc (fx, "s1"), -EBUSY);
    assert_true (ch_clock_mono_ms () - t0 >= 1900);
    assert_err_has (fx, "being removed");
    close (fd);
    close (sync [0]);
    close (sync [1]);
}

static void
test_gw_snapstore_list_oldest_first (void **state)
{
    fx_t *fx = *state;
    char path [PATH_MAX], staging [PATH_MAX];
    s_snap (fx, "b", 2000, 100);
    s_snap (fx, "a", 1000, 100);
    s_snap (fx, "c", 3000, 100);
    //  Not snapshots: staging, trash, a file, a symlink; no meta: its mtime.
    json_decref (s_stage (fx, "d", 1, 10, staging, sizeof staging));
    assert_int_equal (mkdir (s_file (fx, ".trash-x-1-00000000", NULL, path, sizeof path), 0700),
                      0);
    tu_write_file (fx->store, "file", "x");
    assert_int_equal (symlink (fx->dir, s_file (fx, "link", NULL, path, sizeof path)), 0);
    assert_int_equal (mkdir (s_file (fx, "nometa", NULL, path, sizeof path), 0700), 0);
    struct timespec t [2] = { { 1500, 0 }, { 1500, 0 } };
    assert_int_equal (utimensat (AT_FDCWD, path, t, 0), 0);
    gw_snapinfo_t *items = NULL;
    int n = gw_snapstore_list (fx->ss, &items);
    assert_int_equal (n, 4);
    const char *want [] = { "a", "nometa", "b", "c" };
    for (int i = 0; i < n; i++)
        assert_string_equal (items [i].name, want [i]);
    assert_true (items [0].created == 1000.0 && items [1].created == 1500.0);
    assert_non_null (items [0].meta);
    assert_null (items [1].meta);
    assert_true (items [0].bytes >= 4096 && items [1].bytes == 0);
    gw_snapstore_list_free (&items, n);
    assert_null (items);
}

static int
s_exists (fx_t *fx, const char *name)
{
    char path [PATH_MAX];
    return access (s_file (fx, name, NULL, path, sizeof path), F_OK) == 0;
}

static void
test_gw_snapstore_gc_by_age_and_bytes (void **state)
{
    fx_t *fx = *state;
    double now = (double) time (NULL);
    s_snap (fx, "old", now - 1000, 8192);
    s_snap (fx, "mid", now - 100, 8192);
    s_snap (fx, "new", now - 10, 8192);
    s_snap (fx, "newest", now - 5, 8192);
    assert_int_equal (gw_snapstore_gc (fx->ss, 500, 0, now), 1);
    assert_false (s_exists (fx, "old"));
    assert_true (s_exists (fx, "mid") && s_exists (fx, "new") && s_exists (fx, "newest"));
    gw_snapinfo_t *items = NULL;
    int n = gw_snapstore_list (fx->ss, &items);
    assert_int_equal (n, 3);
    uint64_t total = items [0].bytes + items [1].bytes + items [2].bytes, last = items [2].bytes;
    assert_true (items [0].bytes > 0 && last > 0);
    gw_snapstore_list_free (&items, n);
    //  One byte over: only the oldest goes. Then down to the newest alone.
    assert_int_equal (gw_snapstore_gc (fx->ss, 0, total - 1, now), 1);
    assert_false (s_exists (fx, "mid"));
    assert_true (s_exists (fx, "new"));
    assert_int_equal (gw_snapstore_gc (fx->ss, 0, last, now), 1);
    assert_false (s_exists (fx, "new"));
    assert_true (s_exists (fx, "newest"));
    assert_int_equal (gw_snapstore_gc (fx->ss, 0, 0, now), 0);   //  no limits: nothing
    assert_int_equal (s_dot_entries (fx), 0);
}

//  A snapshot being read is skipped; the next oldest goes instead.
static void
test_gw_snapstore_gc_skips_locked (void **state)
{
    fx_t *fx = *state;
    double now = (double) time (NULL);
    s_snap (fx, "s1", now - 300, 8192);
    s_snap (fx, "s2", now - 200, 8192);
    s_snap (fx, "s3", now - 100, 8192);
    gw_snapref_t *ref = gw_snapstore_open (fx->ss, "s1", NULL, fx->err, sizeof fx->err);
    assert_non_null (ref);
    int64_t t0 = ch_clock_mono_ms ();
    assert_int_equal (gw_snapstore_gc (fx->ss, 150, 0, now), 1);
    assert_true (ch_clock_mono_ms () - t0 < 1000);     //  not waited for
    assert_true (s_exists (fx, "s1"));
    assert_false (s_exists (fx, "s2"));
    assert_true (s_exists (fx, "s3"));
    gw_snapref_destroy (&ref);
    assert_int_equal (gw_snapstore_gc (fx->ss, 150, 0, now), 1);
    assert_false (s_exists (fx, "s1"));
}

//  Staging and trash of a writer killed with -9 go once old; a live
//  writer's, or a young one's, stay.
static void
test_gw_snapstore_gc_leftovers (void **state)
{
    fx_t *fx = *state;
    char dead [64], live [64], young [64], path [PATH_MAX];
    pid_t pid = fork ();
    assert_true (pid >= 0);
    if (pid == 0)
        _exit (0);
    assert_int_equal (waitpid (pid, NULL, 0), pid);
    snprintf (dead, sizeof dead, ".staging-s1-%d-0123abcd", (int) pid);
    snprintf (live, sizeof live, ".trash-s1-%d-0123abcd", (int) getppid ());
    snprintf (young, sizeof young, ".trash-s2-%d-0123abcd", (int) pid);
    const char *dirs [] = { dead, live, young };
    time_t now = time (NULL);
    for (int i = 0; i < 3; i++) {
        assert_int_equal (mkdir (s_file (fx, dirs [i], NULL, path, sizeof path), 0700), 0);
        tu_write_file (path, GW_SNAP_STATE, "partial");
        struct timespec t [2] = { { now - (i < 2 ? 120 : 5), 0 }, { now - (i < 2 ? 120 : 5), 0 } };
        assert_int_equal (utimensat (AT_FDCWD, path, t, 0), 0);
    }
    assert_int_equal (gw_snapstore_gc (fx->ss, 0, 0, (double) now), 0);
    assert_false (s_exists (fx, dead));
    assert_true (s_exists (fx, live));
    assert_true (s_exists (fx, young));
}

int
main (void)
{
#define T(name) cmocka_unit_test_setup_teardown (name, s_setup, s_teardown)
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_gw_snapstore_names),
        cmocka_unit_test (test_gw_snapstore_default_dir),
        T (test_gw_snapstore_new_refuses_foreign_dirs),
        T (test_gw_snapstore_publish_then_open),
        T (test_gw_snapstore_publish_existing_name),
        T (test_gw_snapstore_publish_refuses_foreign_paths),
        T (test_gw_snapstore_publish_failure_keeps_nothing),
        T (test_gw_snapstore_open_unknown_and_bad_names),
        T (test_gw_snapstore_open_truncated_or_grown_state),
        T (test_gw_snapstore_open_bad_qcow2_magic),
        T (test_gw_snapstore_open_bad_meta),
        T (test_gw_snapstore_open_refuses_symlinks),
        T (test_gw_snapstore_verify_state_flipped_byte),
        T (test_gw_snapstore_mismatch_sentence),
        T (test_gw_snapstore_remove_waits_for_readers),
        T (test_gw_snapstore_open_races_remover),
        T (test_gw_snapstore_list_oldest_first),
        T (test_gw_snapstore_gc_by_age_and_bytes),
        T (test_gw_snapstore_gc_skips_locked),
        T (test_gw_snapstore_gc_leftovers),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
