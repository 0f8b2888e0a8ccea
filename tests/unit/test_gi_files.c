/*  test_gi_files - init's put/get under /workspace, on the host.

    gi_files_set_root points "/workspace" at a fresh mkdtemp directory; the
    paths the tests pass and read back still say /workspace, as on the wire.
*/
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "ch_util.h"
#include "gi_files.h"
#include "gi_sys.h"
#include "tu.h"

#define S_SHA_HELLO "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
#define S_SHA_EMPTY "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

typedef struct {
    char root [TU_DIR_MAX];                     //  stands for /workspace
    char outside [64];                          //  a sibling a symlink may point at
} fixture_t;

static int
s_setup (void **state)
{
    fixture_t *f = tu_fixture_new (sizeof *f, "test_gi_files");
    tu_tmpdir (f->outside, sizeof f->outside, "test_gi_files_out");
    assert_int_equal (gi_files_set_root (f->root), 0);
    umask (022);
    *state = f;
    return 0;
}

static int
s_teardown (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char mnt [PATH_MAX];
    gi_files_set_root (NULL);
    umount2 (tu_path (mnt, sizeof mnt, f->root, "mnt"), MNT_DETACH);   //  left by a failed test
    tu_rmtree (f->outside);
    return tu_fixture_teardown (state);
}

//  root/rel on disk.
static const char *
s_disk (const fixture_t *f, const char *rel, char *buf, size_t len)
{
    return tu_path (buf, len, f->root, rel);
}

//  The whole file at root/rel as a string ("" when missing).
static const char *
s_read (const fixture_t *f, const char *rel)
{
    static char text [4096];
    char path [PATH_MAX];
    text [0] = 0;
    FILE *file = fopen (s_disk (f, rel, path, sizeof path), "r");
    if (file) {
        size_t n = fread (text, 1, sizeof text - 1, file);
        text [n] = 0;
        fclose (file);
    }
    return text;
}

static int
s_exists (const fixture_t *f, const char *rel)
{
    char path [PATH_MAX];
    struct stat st;
    return lstat (s_disk (f, rel, path, sizeof path), &st) == 0;
}

//  The mode of root/rel, which put made: handed to the kernel user when
//  we are root.
static mode_t
s_made_mode (const fixture_t *f, const char *rel)
{
    char path [PATH_MAX];
    struct stat st;
    assert_int_equal (stat (s_disk (f, rel, path, sizeof path), &st), 0);
    if (geteuid () == 0)
        assert_int_equal (st.st_uid, GI_KERNEL_UID);
    return st.st_mode;
}

static int
s_put (const char *path, const char *text, int append, unsigned mode)
{
    gi_file_info_t info;
    return gi_files_put (path, (const uint8_t *) text, strlen (text), append, mode, &info);
}

static void
test_gi_files_relative_accepts_paths_below_workspace_only (void **state)
{
    (void) state;
    const struct { const char *path, *rel; } accepted [] = {
        { "a/b.csv", "a/b.csv" },
        { "/workspace/a/b.csv", "a/b.csv" },
        { "/workspace//out/x", "out/x" },
        { "./a", "./a" },
        { "a/../b", "a/../b" },                 //  stays inside
        { "...", "..." },                       //  a name
    };
    for (size_t i = 0; i < sizeof accepted / sizeof accepted [0]; i++)
        assert_string_equal (gi_files_relative (accepted [i].path), accepted [i].rel);
    const char *refused [] = {
        "", "/workspace", "/workspace/", "/workspacex/a", "/etc/passwd", "/tmp/x",
        "..", "../etc/passwd", "/workspace/../etc/passwd", "out/../../etc/shadow",
        "a/./../../b", "//workspace/a",
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused [0]; i++)
        if (gi_files_relative (refused [i]))
            fail_msg ("\"%s\" was accepted", refused [i]);
    assert_null (gi_files_relative (NULL));
}

static void
test_gi_files_put_creates_a_file_and_reports_size_and_sha256 (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    gi_file_info_t info;
    assert_int_equal (gi_files_put ("/workspace/hello.txt", (const uint8_t *) "hello", 5, 0, 0,
                                    &info), 0);
    assert_string_equal (info.path, "/workspace/hello.txt");
    assert_int_equal (info.size, 5);
    assert_string_equal (info.sha256, S_SHA_HELLO);
    assert_string_equal (s_read (f, "hello.txt"), "hello");
    assert_int_equal (s_made_mode (f, "hello.txt") & 07777, 0644);
}

static void
test_gi_files_put_relative_path_creates_missing_parents (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    gi_file_info_t info;
    assert_int_equal (gi_files_put ("data/deep/in.csv", (const uint8_t *) "a,b\n", 4, 0, 0,
                                    &info), 0);
    assert_string_equal (info.path, "/workspace/data/deep/in.csv");
    assert_string_equal (s_read (f, "data/deep/in.csv"), "a,b\n");
    mode_t mode = s_made_mode (f, "data/deep");
    assert_true (S_ISDIR (mode));
    assert_int_equal (mode & 0777, 0755);
    //  Existing directories are taken as they are.
    assert_int_equal (s_put ("data/other.csv", "x", 0, 0), 0);
    assert_string_equal (s_read (f, "data/deep/in.csv"), "a,b\n");
}

static void
test_gi_files_put_truncates_unless_append (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    gi_file_info_t info;
    assert_int_equal (s_put ("f.txt", "abcdef", 0, 0), 0);
    assert_int_equal (s_put ("f.txt", "xy", 0, 0), 0);
    assert_string_equal (s_read (f, "f.txt"), "xy");
    assert_int_equal (gi_files_put ("f.txt", (const uint8_t *) "hello", 5, 1, 0, &info), 0);
    assert_string_equal (s_read (f, "f.txt"), "xyhello");
    assert_int_equal (info.size, 7);                    //  the whole file
    assert_string_equal (info.sha256, S_SHA_HELLO);     //  the bytes of this request
    assert_int_equal (s_put ("new.txt", "z", 1, 0), 0); //  append creates, too
    assert_string_equal (s_read (f, "new.txt"), "z");
}

static void
test_gi_files_put_mode_applies_to_new_files_only (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char path [PATH_MAX];
    struct stat st;
    assert_int_equal (s_put ("secret", "s", 0, 0600), 0);
    assert_int_equal (stat (s_disk (f, "secret", path, sizeof path), &st), 0);
    assert_int_equal (st.st_mode & 07777, 0600);
    assert_int_equal (s_put ("secret", "t", 0, 0644), 0);
    assert_int_equal (stat (path, &st), 0);
    assert_int_equal (st.st_mode & 07777, 0600);
    assert_int_equal (s_put ("suid", "s", 0, 04755), 0);     //  no set-id bits, ever
    assert_int_equal (stat (s_disk (f, "suid", path, sizeof path), &st), 0);
    assert_int_equal (st.st_mode & 07777, 0755);
}

static void
test_gi_files_put_without_bytes_makes_an_empty_file (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    gi_file_info_t info;
    tu_write_file (f->root, "full.txt", "old");
    assert_int_equal (gi_files_put ("full.txt", NULL, 0, 0, 0, &info), 0);
    assert_int_equal (info.size, 0);
    assert_string_equal (info.sha256, S_SHA_EMPTY);
    assert_string_equal (s_read (f, "full.txt"), "");
}

static void
test_gi_files_put_refuses_growing_past_the_file_cap (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char path [PATH_MAX];
    tu_write_file (f->root, "big", "");
    assert_int_equal (truncate (s_disk (f, "big", path, sizeof path), (off_t) GI_FILE_MAX), 0);
    assert_int_equal (s_put ("big", "x", 1, 0), -EFBIG);
    struct stat st;
    assert_int_equal (stat (path, &st), 0);
    assert_int_equal ((uint64_t) st.st_size, GI_FILE_MAX);    //  nothing written
    gi_file_info_t info;
    assert_int_equal (gi_files_put ("big", NULL, 0, 1, 0, &info), 0);    //  up to the cap
    assert_int_equal (info.size, GI_FILE_MAX);
}

static void
test_gi_files_put_refuses_paths_outside_workspace (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char abs [PATH_MAX];
    snprintf (abs, sizeof abs, "%s/x", f->root);        //  the disk path is not /workspace
    const char *refused [] = {
        "", "/workspace", "/workspace/", "/etc/cellvm-test", "../x", "/workspace/../x",
        "a/../../x", "/workspacex/a", abs,
        "a/../b",                   //  no ".." on the way at all: refused before mkdir
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused [0]; i++)
        if (s_put (refused [i], "x", 0, 0) != -EXDEV)
            fail_msg ("put \"%s\" was not refused with -EXDEV", refused [i]);
    assert_false (s_exists (f, "a"));
    assert_false (s_exists (f, "x"));
    assert_int_equal (access ("/etc/cellvm-test", F_OK), -1);
}

//  /notebook: the host's copy of a notebook's folder. Root's (the kernel user
//  reads, never writes), absolute paths only, the same refusals as /workspace.
static void
test_gi_files_put_writes_the_notebook_copy_as_root (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char nb [TU_DIR_MAX], path [PATH_MAX];
    struct stat st;
    tu_tmpdir (nb, sizeof nb, "test_gi_files_nb");
    assert_int_equal (gi_files_set_notebook_root (nb), 0);
    gi_file_info_t info;
    assert_int_equal (gi_files_put ("/notebook/data/sales.csv", (const uint8_t *) "hello", 5, 0,
                                    0, &info), 0);
    assert_string_equal (info.path, "/notebook/data/sales.csv");
    assert_string_equal (info.sha256, S_SHA_HELLO);
    assert_int_equal (stat (tu_path (path, sizeof path, nb, "data/sales.csv"), &st), 0);
    assert_int_equal (st.st_uid, geteuid ());   //  not handed to the kernel user
    assert_int_equal (st.st_mode & 07777, 0644);
    assert_int_equal (stat (tu_path (path, sizeof path, nb, "data"), &st), 0);
    assert_int_equal (st.st_uid, geteuid ());
    assert_false (s_exists (f, "data"));         //  nothing in /workspace
    const char *refused [] = { "/notebook", "/notebook/", "/notebook/../x", "/notebookx/a",
                               "/notebook/a/../../x", "/notebook/a/../b" };
    for (size_t i = 0; i < sizeof refused / sizeof refused [0]; i++)
        if (s_put (refused [i], "x", 0, 0) != -EXDEV)
            fail_msg ("put \"%s\" was not refused with -EXDEV", refused [i]);
    //  Only an absolute /notebook path goes there; "notebook/x" is /workspace's.
    assert_null (gi_files_notebook_relative ("notebook/x"));
    assert_int_equal (s_put ("notebook/x", "w", 0, 0), 0);
    assert_string_equal (s_read (f, "notebook/x"), "w");
    gi_files_set_notebook_root (NULL);
    tu_rmtree (nb);
}

static void
test_gi_files_put_refuses_symlinks_anywhere_on_the_way (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char path [PATH_MAX], target [PATH_MAX];
    tu_write_file (f->root, "target.txt", "keep");
    assert_int_equal (symlink ("target.txt", s_disk (f, "link", path, sizeof path)), 0);
    assert_int_equal (symlink (f->outside, s_disk (f, "dirlink", path, sizeof path)), 0);
    assert_int_equal (mkdir (s_disk (f, "sub", path, sizeof path), 0755), 0);
    assert_int_equal (symlink ("..", s_disk (f, "sub/up", path, sizeof path)), 0);
    assert_int_equal (s_put ("link", "evil", 0, 0), -ELOOP);        //  even to inside
    assert_int_equal (s_put ("link", "evil", 1, 0), -ELOOP);
    assert_int_equal (s_put ("dirlink/evil", "evil", 0, 0), -ELOOP);
    assert_int_equal (s_put ("/workspace/dirlink/new/evil", "evil", 0, 0), -ELOOP);
    assert_int_equal (s_put ("sub/up/target.txt", "evil", 0, 0), -ELOOP);
    assert_string_equal (s_read (f, "target.txt"), "keep");
    snprintf (target, sizeof target, "%s/evil", f->outside);
    assert_int_equal (access (target, F_OK), -1);
    snprintf (target, sizeof target, "%s/new", f->outside);
    assert_int_equal (access (target, F_OK), -1);
}

static void
test_gi_files_put_refuses_what_is_not_a_regular_file (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char path [PATH_MAX];
    assert_int_equal (mkdir (s_disk (f, "dir", path, sizeof path), 0755), 0);
    assert_int_equal (s_put ("dir", "x", 0, 0), -EISDIR);
    assert_int_equal (s_put ("dir/", "x", 0, 0), -EISDIR);
    assert_int_equal (s_put ("dir/.", "x", 0, 0), -EISDIR);
    //  A fifo the cell made must not block PID 1, with or without a reader.
    assert_int_equal (mkfifo (s_disk (f, "fifo", path, sizeof path), 0666), 0);
    assert_int_equal (s_put ("fifo", "x", 0, 0), -EINVAL);
    int reader = open (path, O_RDONLY | O_NONBLOCK);
    assert_true (reader >= 0);
    assert_int_equal (s_put ("fifo", "x", 1, 0), -EINVAL);
    close (reader);
}

//  RESOLVE_NO_XDEV: a mount below /workspace is not /workspace.
static void
test_gi_files_refuse_crossing_a_mount (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char path [PATH_MAX];
    assert_int_equal (mkdir (s_disk (f, "mnt", path, sizeof path), 0755), 0);
    if (mount ("none", path, "tmpfs", 0, "size=1m") < 0)
        tu_skip ("cannot mount a tmpfs (%s): not root, nothing to cross", strerror (errno));
    tu_write_file (f->root, "mnt/in.txt", "mounted");
    uint8_t *data = NULL;
    gi_file_info_t info;
    assert_int_equal (gi_files_get ("mnt/in.txt", 0, 100, &data, &info), -EXDEV);
    assert_int_equal (s_put ("mnt/in.txt", "x", 0, 0), -EXDEV);
    assert_int_equal (s_put ("mnt/sub/new.txt", "x", 0, 0), -EXDEV);
    assert_string_equal (s_read (f, "mnt/in.txt"), "mounted");
    assert_false (s_exists (f, "mnt/sub"));
    assert_int_equal (umount (path), 0);
}

static void
test_gi_files_get_reads_chunks_until_eof (void **state)
{
    (void) state;
    char text [1001], sha [65];
    for (int i = 0; i < 1000; i++)
        text [i] = (char) ('a' + i % 26);
    text [1000] = 0;
    assert_int_equal (s_put ("out/data.txt", text, 0, 0), 0);
    uint8_t *data = NULL;
    gi_file_info_t info;
    assert_int_equal (gi_files_get ("/workspace/out/data.txt", 0, 10, &data, &info), 0);
    assert_string_equal (info.path, "/workspace/out/data.txt");
    assert_int_equal (info.size, 1000);
    assert_int_equal (info.offset, 0);
    assert_int_equal (info.length, 10);
    assert_false (info.eof);
    assert_memory_equal (data, text, 10);
    ch_sha256_hex ((const uint8_t *) text, 10, sha);
    assert_string_equal (info.sha256, sha);                 //  of the chunk
    free (data);
    assert_int_equal (gi_files_get ("out/data.txt", 990, 100, &data, &info), 0);
    assert_int_equal (info.length, 10);
    assert_true (info.eof);
    assert_memory_equal (data, text + 990, 10);
    free (data);
    assert_int_equal (gi_files_get ("out/data.txt", 5000, 100, &data, &info), 0);
    assert_null (data);                                     //  past the end: empty
    assert_int_equal (info.offset, 1000);
    assert_int_equal (info.length, 0);
    assert_true (info.eof);
    assert_string_equal (info.sha256, S_SHA_EMPTY);
    assert_int_equal (gi_files_get ("out/../out/data.txt", 0, 1, &data, &info), 0);
    assert_string_equal (info.path, "/workspace/out/../out/data.txt");
    free (data);
}

static void
test_gi_files_get_caps_a_chunk_at_chunk_max (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char path [PATH_MAX];
    tu_write_file (f->root, "huge", "");
    assert_int_equal (truncate (s_disk (f, "huge", path, sizeof path),
                                (off_t) GI_CHUNK_MAX + 10), 0);
    uint8_t *data = NULL;
    gi_file_info_t info;
    assert_int_equal (gi_files_get ("huge", 0, SIZE_MAX, &data, &info), 0);
    assert_int_equal (info.length, GI_CHUNK_MAX);
    assert_false (info.eof);
    free (data);
    assert_int_equal (gi_files_get ("huge", info.length, SIZE_MAX, &data, &info), 0);
    assert_int_equal (info.length, 10);
    assert_true (info.eof);
    free (data);
}

static void
test_gi_files_get_refuses_what_is_not_a_regular_file (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char path [PATH_MAX];
    uint8_t *data = NULL;
    gi_file_info_t info;
    assert_int_equal (mkdir (s_disk (f, "dir", path, sizeof path), 0755), 0);
    assert_int_equal (mkfifo (s_disk (f, "fifo", path, sizeof path), 0666), 0);
    assert_int_equal (gi_files_get ("dir", 0, 10, &data, &info), -EINVAL);
    assert_int_equal (gi_files_get ("fifo", 0, 10, &data, &info), -EINVAL);
    assert_int_equal (gi_files_get ("missing.txt", 0, 10, &data, &info), -ENOENT);
    assert_int_equal (gi_files_get ("/workspace", 0, 10, &data, &info), -EXDEV);
    assert_int_equal (gi_files_get ("", 0, 10, &data, &info), -EXDEV);
    assert_null (data);
}

static void
test_gi_files_get_refuses_symlinks_and_escapes (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char path [PATH_MAX], abs [PATH_MAX];
    tu_write_file (f->root, "real.txt", "real");
    assert_int_equal (symlink ("real.txt", s_disk (f, "link", path, sizeof path)), 0);
    assert_int_equal (symlink ("/etc", s_disk (f, "etc", path, sizeof path)), 0);
    uint8_t *data = NULL;
    gi_file_info_t info;
    assert_int_equal (gi_files_get ("link", 0, 10, &data, &info), -ELOOP);
    assert_int_equal (gi_files_get ("/workspace/etc/passwd", 0, 10, &data, &info), -ELOOP);
    assert_int_equal (gi_files_get ("../etc/passwd", 0, 10, &data, &info), -EXDEV);
    assert_int_equal (gi_files_get ("/etc/passwd", 0, 10, &data, &info), -EXDEV);
    snprintf (abs, sizeof abs, "%s/real.txt", f->root);
    assert_int_equal (gi_files_get (abs, 0, 10, &data, &info), -EXDEV);
    assert_null (data);
}

int
main (void)
{
#define S_TEST(name) cmocka_unit_test_setup_teardown (name, s_setup, s_teardown)
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_gi_files_relative_accepts_paths_below_workspace_only),
        S_TEST (test_gi_files_put_creates_a_file_and_reports_size_and_sha256),
        S_TEST (test_gi_files_put_relative_path_creates_missing_parents),
        S_TEST (test_gi_files_put_truncates_unless_append),
        S_TEST (test_gi_files_put_mode_applies_to_new_files_only),
        S_TEST (test_gi_files_put_without_bytes_makes_an_empty_file),
        S_TEST (test_gi_files_put_refuses_growing_past_the_file_cap),
        S_TEST (test_gi_files_put_refuses_paths_outside_workspace),
        S_TEST (test_gi_files_put_writes_the_notebook_copy_as_root),
        S_TEST (test_gi_files_put_refuses_symlinks_anywhere_on_the_way),
        S_TEST (test_gi_files_put_refuses_what_is_not_a_regular_file),
        S_TEST (test_gi_files_refuse_crossing_a_mount),
        S_TEST (test_gi_files_get_reads_chunks_until_eof),
        S_TEST (test_gi_files_get_caps_a_chunk_at_chunk_max),
        S_TEST (test_gi_files_get_refuses_what_is_not_a_regular_file),
        S_TEST (test_gi_files_get_refuses_symlinks_and_escapes),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
