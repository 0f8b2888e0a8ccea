/*  test_gw_status - the gateway's status file: written whole, throttled,
    deleted with it; read back with nothing trusted. */
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "cli/gw_status.h"
#include "tu.h"

#define S_ID "0123456789abcdef01234567"

typedef struct {
    char base [TU_DIR_MAX];                     //  a fresh run base per test
    char file [PATH_MAX];                       //  base/sessions/<our pid>.json
} fixture_t;

static int
s_setup (void **state)
{
    fixture_t *f = tu_fixture_new (sizeof *f, "test_gw_status");
    snprintf (f->file, sizeof f->file, "%s/sessions/%d.json", f->base, (int) getpid ());
    *state = f;
    return 0;
}

static gw_status_t *
s_new (const fixture_t *f)
{
    char err [256] = "";
    gw_status_t *st = gw_status_new (f->base, S_ID, "unsafe-local", "/tmp/kernel-1.json",
                                     "cellvm-unsafe-local", err, sizeof err);
    if (!st)
        fail_msg ("gw_status_new: %s", err);
    return st;
}

//  The file read back through gw_status_read, which must accept it.
static json_t *
s_read (const char *path)
{
    char err [PATH_MAX + 128] = "";
    json_t *st = NULL;
    int rc = gw_status_read (path, &st, err, sizeof err);
    if (rc < 0)
        fail_msg ("gw_status_read %s: %s", path, err);
    return st;
}

static const char *
s_str (const json_t *st, const char *key)
{
    return json_string_value (json_object_get (st, key));
}

static long long
s_int (const json_t *st, const char *key)
{
    return (long long) json_integer_value (json_object_get (st, key));
}

static unsigned long long
s_my_start (void)
{
    unsigned long long start = 0;
    assert_int_equal (gw_status_proc_start (getpid (), &start), 0);
    return start;
}

static void
test_gw_status_round_trip (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    gw_status_t *self = s_new (f);
    assert_string_equal (gw_status_path (self), f->file);
    struct stat sb;
    assert_int_equal (lstat (f->file, &sb), 0);
    assert_int_equal (sb.st_mode & 07777, 0600);
    char dir [PATH_MAX];
    assert_int_equal (stat (tu_path (dir, sizeof dir, f->base, "sessions"), &sb), 0);
    assert_int_equal (sb.st_mode & 07777, 0700);
    json_t *st = s_read (f->file);
    assert_int_equal (s_int (st, "pid"), getpid ());
    assert_true ((unsigned long long) s_int (st, "pid_start") == s_my_start ());
    assert_string_equal (s_str (st, "id"), S_ID);
    assert_string_equal (s_str (st, "backend"), "unsafe-local");
    assert_string_equal (s_str (st, "state"), "starting");
    assert_string_equal (s_str (st, "connection_file"), "/tmp/kernel-1.json");
    assert_string_equal (s_str (st, "kernel_name"), "cellvm-unsafe-local");
    assert_true (json_is_null (json_object_get (st, "workspace")));
    assert_true (json_is_null (json_object_get (st, "paused_snapshot")));
    assert_int_equal (s_int (st, "qemu_pid"), 0);
    assert_true (llabs (s_int (st, "started") - (long long) time (NULL)) <= 2);
    assert_true (gw_status_alive (st));
    json_decref (st);
    gw_status_set (self, "qemu_pid", json_integer (4242));
    gw_status_set (self, "workspace", json_string ("/var/tmp/x/workspace"));
    gw_status_set (self, "from_snapshot", json_string ("snap-1"));
    gw_status_set (self, "paused_snapshot", NULL);
    gw_status_set_state (self, "idle");         //  forced: no flush needed
    assert_int_equal (gw_status_sync (self), 0);
    st = s_read (f->file);
    assert_string_equal (s_str (st, "state"), "idle");
    assert_int_equal (s_int (st, "qemu_pid"), 4242);
    assert_string_equal (s_str (st, "workspace"), "/var/tmp/x/workspace");
    assert_string_equal (s_str (st, "from_snapshot"), "snap-1");
    assert_true (json_is_null (json_object_get (st, "paused_snapshot")));
    json_decref (st);
    gw_status_destroy (&self);
}

//  A reader holding the old file keeps a whole old file; the new one
//  arrives by rename (a new inode), and no temporary file is left.
static void
test_gw_status_replaces_atomically (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    gw_status_t *self = s_new (f);
    struct stat before, after;
    assert_int_equal (stat (f->file, &before), 0);
    int old_fd = open (f->file, O_RDONLY);
    assert_true (old_fd >= 0);
    gw_status_set (self, "workspace", json_string ("/w"));
    assert_int_equal (gw_status_flush (self, true), 0);
    assert_int_equal (gw_status_sync (self), 0);
    assert_int_equal (stat (f->file, &after), 0);
    assert_true (before.st_ino != after.st_ino);
    json_error_t jerr;
    json_t *old = json_loadfd (old_fd, 0, &jerr);
    close (old_fd);
    assert_non_null (old);
    assert_true (json_is_null (json_object_get (old, "workspace")));
    json_decref (old);
    json_t *st = s_read (f->file);
    assert_string_equal (s_str (st, "workspace"), "/w");
    json_decref (st);
    char dir [PATH_MAX], tmp [PATH_MAX + 32];
    tu_path (dir, sizeof dir, f->base, "sessions");
    snprintf (tmp, sizeof tmp, "%s/.%d.json.tmp", dir, (int) getpid ());
    assert_int_equal (access (tmp, F_OK), -1);
    gw_status_destroy (&self);
}

static void
test_gw_status_throttles_unforced_writes (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    gw_status_t *self = s_new (f);             //  written just now
    gw_status_set (self, "qemu_pid", json_integer (7));
    assert_int_equal (gw_status_flush (self, false), 0);
    assert_int_equal (gw_status_sync (self), 0);
    json_t *st = s_read (f->file);
    assert_int_equal (s_int (st, "qemu_pid"), 0);   //  dirty, but within 1 s
    json_decref (st);
    assert_int_equal (gw_status_flush (self, true), 0);
    assert_int_equal (gw_status_sync (self), 0);
    st = s_read (f->file);
    assert_int_equal (s_int (st, "qemu_pid"), 7);   //  forced
    json_decref (st);
    gw_status_set (self, "qemu_pid", json_integer (8));
    assert_int_equal (gw_status_flush (self, false), 0);
    assert_int_equal (gw_status_sync (self), 0);
    st = s_read (f->file);
    assert_int_equal (s_int (st, "qemu_pid"), 7);
    json_decref (st);
    struct timespec nap = { 1, 50 * 1000 * 1000 };
    nanosleep (&nap, NULL);
    gw_status_touch (self);
    assert_int_equal (gw_status_flush (self, false), 0);
    assert_int_equal (gw_status_sync (self), 0);
    st = s_read (f->file);
    assert_int_equal (s_int (st, "qemu_pid"), 8);   //  1 s later: written
    assert_true (s_int (st, "last_activity") >= s_int (st, "started"));
    json_decref (st);
    gw_status_destroy (&self);
}

static void
test_gw_status_destroy_deletes_the_file (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    gw_status_t *self = s_new (f);
    assert_int_equal (access (f->file, F_OK), 0);
    gw_status_destroy (&self);
    assert_null (self);
    assert_int_equal (access (f->file, F_OK), -1);
    gw_status_destroy (&self);                  //  NULL-safe
}

static void
test_gw_status_refuses_an_unsafe_dir (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char dir [PATH_MAX], err [256] = "";
    tu_path (dir, sizeof dir, f->base, "sessions");
    assert_int_equal (symlink ("/tmp", dir), 0);
    gw_status_t *self = gw_status_new (f->base, S_ID, "microvm", NULL, NULL, err, sizeof err);
    assert_null (self);
    assert_non_null (strstr (err, "symlink"));
}

//  ---------------------------------------------------------------------------
//  The reader

//  A valid status document for pid, started at start.
static json_t *
s_doc (long long pid, unsigned long long start)
{
    json_t *doc = json_pack ("{s:I, s:I, s:s, s:s, s:s, s:I, s:I, s:i, s:n, s:n, s:n, s:n, s:n}",
                             "pid", (json_int_t) pid, "pid_start", (json_int_t) start,
                             "id", S_ID, "backend", "microvm", "state", "idle",
                             "started", (json_int_t) 1, "last_activity", (json_int_t) 2,
                             "qemu_pid", 0, "workspace", "from_snapshot", "paused_snapshot",
                             "connection_file", "kernel_name");
    assert_non_null (doc);
    return doc;
}

//  doc (stolen) with key set to value (stolen; NULL: key deleted) into
//  dir/bad.json; gw_status_read's return code on it.
static int
s_read_with (const fixture_t *f, json_t *doc, const char *key, json_t *value)
{
    char path [PATH_MAX], err [PATH_MAX + 128] = "";
    if (value)
        json_object_set_new (doc, key, value);
    else
        json_object_del (doc, key);
    tu_path (path, sizeof path, f->base, "bad.json");
    assert_int_equal (json_dump_file (doc, path, 0), 0);
    json_decref (doc);
    json_t *out = (json_t *) (uintptr_t) 1;
    int rc = gw_status_read (path, &out, err, sizeof err);
    if (rc == 0)
        json_decref (out);
    else {
        assert_null (out);                      //  nothing handed out on failure
        assert_non_null (strstr (err, path));   //  the message names the file
    }
    return rc;
}

static void
test_gw_status_read_refuses_wrong_types (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    unsigned long long me = s_my_start ();
    assert_int_equal (s_read_with (f, s_doc (getpid (), me), "pid", json_string ("1")), -EBADMSG);
    assert_int_equal (s_read_with (f, s_doc (getpid (), me), "pid", json_integer (0)), -EBADMSG);
    assert_int_equal (s_read_with (f, s_doc (getpid (), me), "pid", json_integer (1LL << 40)),
                      -EBADMSG);
    assert_int_equal (s_read_with (f, s_doc (getpid (), me), "pid_start", json_real (1.5)),
                      -EBADMSG);
    assert_int_equal (s_read_with (f, s_doc (getpid (), me), "qemu_pid", json_integer (-1)),
                      -EBADMSG);
    assert_int_equal (s_read_with (f, s_doc (getpid (), me), "state", NULL), -EBADMSG);
    assert_int_equal (s_read_with (f, s_doc (getpid (), me), "id", json_null ()), -EBADMSG);
    assert_int_equal (s_read_with (f, s_doc (getpid (), me), "workspace", json_integer (5)),
                      -EBADMSG);
    assert_int_equal (s_read_with (f, s_doc (getpid (), me), "started", json_string ("now")),
                      -EBADMSG);
    assert_int_equal (s_read_with (f, json_array (), "x", NULL), -EBADMSG);
    //  The same document with every type right is accepted.
    json_t *ok = s_doc (getpid (), me);
    assert_int_equal (s_read_with (f, ok, "workspace", json_string ("/w")), 0);
}

//  text into base/name; gw_status_read's return code on it.
static int
s_read_text (const fixture_t *f, const char *text)
{
    char path [PATH_MAX], err [PATH_MAX + 128] = "";
    tu_write_file (f->base, "raw.json", text);
    json_t *out = NULL;
    int rc = gw_status_read (tu_path (path, sizeof path, f->base, "raw.json"), &out, err,
                             sizeof err);
    json_decref (out);
    return rc;
}

static void
test_gw_status_read_refuses_bad_files (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char path [PATH_MAX], link [PATH_MAX], err [PATH_MAX + 128];
    json_t *out = NULL;
    assert_int_equal (s_read_text (f, "not json"), -EBADMSG);
    assert_int_equal (s_read_text (f, ""), -EBADMSG);
    json_t *doc = s_doc (getpid (), s_my_start ());
    char *text = json_dumps (doc, 0);
    text [strlen (text) / 2] = 0;               //  truncated
    assert_int_equal (s_read_text (f, text), -EBADMSG);
    free (text);
    //  Oversize, although valid JSON: padded with spaces past 64 KiB.
    json_object_set_new (doc, "pad", json_string (""));
    text = json_dumps (doc, 0);
    char *big = calloc (1, GW_STATUS_MAX_BYTES + strlen (text) + 2);
    assert_non_null (big);
    memset (big, ' ', GW_STATUS_MAX_BYTES);
    strcpy (big + GW_STATUS_MAX_BYTES, text);
    assert_int_equal (s_read_text (f, big), -EFBIG);
    strcpy (big, text);                         //  the same document, small: fine
    assert_int_equal (s_read_text (f, big), 0);
    free (big);
    free (text);
    json_decref (doc);
    tu_path (path, sizeof path, f->base, "missing.json");
    assert_int_equal (gw_status_read (path, &out, err, sizeof err), -ENOENT);
    assert_int_equal (gw_status_read (f->base, &out, err, sizeof err), -EINVAL);   //  a dir
    tu_path (path, sizeof path, f->base, "fifo.json");
    assert_int_equal (mkfifo (path, 0600), 0);
    assert_int_equal (gw_status_read (path, &out, err, sizeof err), -EINVAL);      //  no hang
    tu_path (link, sizeof link, f->base, "link.json");
    assert_int_equal (symlink (tu_path (path, sizeof path, f->base, "raw.json"), link), 0);
    assert_int_equal (gw_status_read (link, &out, err, sizeof err), -ELOOP);
    assert_null (out);
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
test_gw_status_alive_checks_pid_and_start_time (void **state)
{
    (void) state;
    unsigned long long me = s_my_start ();
    json_t *doc = s_doc (getpid (), me);
    assert_true (gw_status_alive (doc));
    json_decref (doc);
    doc = s_doc (getpid (), me + 1);            //  our pid, another start: a reused pid
    assert_false (gw_status_alive (doc));
    json_decref (doc);
    doc = s_doc (s_dead_pid (), me);
    assert_false (gw_status_alive (doc));
    json_decref (doc);
    pid_t zombie = fork ();                     //  exited, not reaped yet
    if (zombie == 0)
        _exit (0);
    unsigned long long start = 0;
    struct timespec nap = { 0, 20 * 1000 * 1000 };
    for (int i = 0; i < 100 && gw_status_proc_start (zombie, &start) == 0; i++)
        nanosleep (&nap, NULL);
    assert_int_equal (gw_status_proc_start (zombie, &start), -ESRCH);
    waitpid (zombie, NULL, 0);
    assert_false (gw_status_alive (NULL));
    json_t *arr = json_array ();
    assert_false (gw_status_alive (arr));
    json_decref (arr);
}

int
main (void)
{
#define S_TEST(name) cmocka_unit_test_setup_teardown (name, s_setup, tu_fixture_teardown)
    const struct CMUnitTest tests [] = {
        S_TEST (test_gw_status_round_trip),
        S_TEST (test_gw_status_replaces_atomically),
        S_TEST (test_gw_status_throttles_unforced_writes),
        S_TEST (test_gw_status_destroy_deletes_the_file),
        S_TEST (test_gw_status_refuses_an_unsafe_dir),
        S_TEST (test_gw_status_read_refuses_wrong_types),
        S_TEST (test_gw_status_read_refuses_bad_files),
        cmocka_unit_test (test_gw_status_alive_checks_pid_and_start_time),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
