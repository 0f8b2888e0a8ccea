/*  test_gw_fs - trees deleted and files copied, never through a symlink. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/gw_fs.h"
#include "ch_util.h"
#include "tu.h"

typedef struct {
    char dir [TU_DIR_MAX];
} fixture_t;

static int
s_setup (void **state)
{
    *state = tu_fixture_new (sizeof (fixture_t), "test_gw_fs");
    return 0;
}

static bool
s_exists (const char *path)
{
    struct stat st;
    return lstat (path, &st) == 0;
}

static void
test_gw_fs_remove_tree_deletes_all_and_follows_no_link (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char tree [PATH_MAX], sub [PATH_MAX], outside [PATH_MAX], link [PATH_MAX], p [PATH_MAX];
    tu_path (tree, sizeof tree, f->dir, "tree");
    tu_path (sub, sizeof sub, tree, "a");
    tu_path (outside, sizeof outside, f->dir, "outside");
    assert_int_equal (mkdir (tree, 0700), 0);
    assert_int_equal (mkdir (sub, 0700), 0);
    assert_int_equal (mkdir (outside, 0700), 0);
    tu_write_file (sub, "file", "x");
    tu_write_file (outside, "kept", "y");
    assert_int_equal (symlink (outside, tu_path (link, sizeof link, sub, "link")), 0);
    assert_int_equal (gw_fs_remove_tree (tree), 0);
    assert_false (s_exists (tree));
    assert_true (s_exists (tu_path (p, sizeof p, outside, "kept")));
    assert_int_equal (gw_fs_remove_tree (tree), 0);          //  gone already: fine
}

static void
test_gw_fs_copy_replaces_but_never_writes_through_a_link (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char src [PATH_MAX], dst [PATH_MAX], victim [PATH_MAX], link [PATH_MAX], text [64];
    tu_write_file (f->dir, "src", "the layer");
    tu_write_file (f->dir, "dst", "an older, longer file");
    tu_write_file (f->dir, "victim", "untouched");
    tu_path (src, sizeof src, f->dir, "src");
    tu_path (dst, sizeof dst, f->dir, "dst");
    tu_path (victim, sizeof victim, f->dir, "victim");
    assert_int_equal (gw_fs_copy (src, dst, true), 0);
    assert_int_equal (ch_read_small (dst, text, sizeof text), 9);
    assert_memory_equal (text, "the layer", 9);
    assert_int_equal (symlink (victim, tu_path (link, sizeof link, f->dir, "link")), 0);
    assert_int_equal (gw_fs_copy (src, link, false), -ELOOP);
    assert_int_equal (ch_read_small (victim, text, sizeof text), 9);
    assert_memory_equal (text, "untouched", 9);
    assert_int_equal (gw_fs_copy ("/nonexistent/src", dst, false), -ENOENT);
    assert_false (s_exists (dst));                           //  a failed copy leaves none
}

int
main (void)
{
#define S_TEST(name) cmocka_unit_test_setup_teardown (name, s_setup, tu_fixture_teardown)
    const struct CMUnitTest tests [] = {
        S_TEST (test_gw_fs_remove_tree_deletes_all_and_follows_no_link),
        S_TEST (test_gw_fs_copy_replaces_but_never_writes_through_a_link),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
