/*  test_gw_share - the walk of a notebook's folder: what is taken, what is
    left out and counted, and the caps. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "files/gw_share.h"
#include "tu.h"

static void
s_write (const char *dir, const char *rel, const char *text)
{
    char path [PATH_MAX];
    FILE *f = fopen (tu_path (path, sizeof path, dir, rel), "w");
    assert_non_null (f);
    fputs (text, f);
    fclose (f);
}

static void
s_mkdir (const char *dir, const char *rel)
{
    char path [PATH_MAX];
    assert_int_equal (mkdir (tu_path (path, sizeof path, dir, rel), 0755), 0);
}

static const gw_share_file_t *
s_find (const gw_share_file_t *files, size_t n, const char *rel)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp (files [i].rel, rel) == 0)
            return &files [i];
    return NULL;
}

static void
test_gw_share_takes_plain_files_and_counts_what_it_leaves (void **state)
{
    (void) state;
    char dir [TU_DIR_MAX], path [PATH_MAX];
    tu_tmpdir (dir, sizeof dir, "test_gw_share");
    s_write (dir, "analysis.ipynb", "{}");
    s_mkdir (dir, "data");
    s_write (dir, "data/sales.csv", "a,b\n1,2\n");
    s_mkdir (dir, ".ipynb_checkpoints");
    s_write (dir, ".ipynb_checkpoints/x.ipynb", "old");
    s_write (dir, ".env", "SECRET=1");
    assert_int_equal (symlink ("/etc/passwd", tu_path (path, sizeof path, dir, "passwd")), 0);
    assert_int_equal (symlink ("data", tu_path (path, sizeof path, dir, "alias")), 0);
    assert_int_equal (mkfifo (tu_path (path, sizeof path, dir, "pipe"), 0600), 0);

    gw_share_file_t *files = NULL;
    size_t n = 0;
    gw_share_stats_t st;
    assert_int_equal (gw_share_scan (dir, 1 << 20, &files, &n, &st), 0);
    assert_int_equal (n, 2);
    assert_int_equal (st.files, 2);
    assert_int_equal (st.bytes, 2 + 8);
    assert_int_equal (st.hidden, 2);            //  .ipynb_checkpoints, .env
    assert_int_equal (st.links, 2);
    assert_int_equal (st.special, 1);           //  the fifo: never opened
    const gw_share_file_t *csv = s_find (files, n, "data/sales.csv");
    assert_non_null (csv);
    assert_int_equal (csv->len, 8);
    assert_memory_equal (csv->data, "a,b\n1,2\n", 8);
    assert_non_null (s_find (files, n, "analysis.ipynb"));
    char line [512];
    gw_share_summary (&st, line, sizeof line);
    assert_non_null (strstr (line, "2 symlinks"));
    gw_share_files_free (files, n);
    tu_rmtree (dir);
}

static void
test_gw_share_caps_bytes_and_depth (void **state)
{
    (void) state;
    char dir [TU_DIR_MAX], rel [PATH_MAX] = "";
    tu_tmpdir (dir, sizeof dir, "test_gw_share_caps");
    s_write (dir, "a.txt", "0123456789");       //  10 bytes: taken (sorted first)
    s_write (dir, "b.txt", "0123456789");       //  10 more: past a 15-byte cap
    s_write (dir, "c.txt", "01234");            //  5: still fits
    for (unsigned i = 0; i <= GW_SHARE_MAX_DEPTH; i++) {
        strcat (rel, i ? "/d" : "d");
        s_mkdir (dir, rel);
    }
    gw_share_file_t *files = NULL;
    size_t n = 0;
    gw_share_stats_t st;
    assert_int_equal (gw_share_scan (dir, 15, &files, &n, &st), 0);
    assert_int_equal (n, 2);
    assert_non_null (s_find (files, n, "a.txt"));
    assert_non_null (s_find (files, n, "c.txt"));
    assert_null (s_find (files, n, "b.txt"));
    assert_int_equal (st.over_cap, 2);          //  b.txt, and the directory past the depth
    char line [512];
    gw_share_summary (&st, line, sizeof line);
    assert_non_null (strstr (line, "2 past the size"));
    gw_share_files_free (files, n);
    //  Nothing left out: no words for the user.
    gw_share_stats_t ok = { .files = 3 };
    gw_share_summary (&ok, line, sizeof line);
    assert_string_equal (line, "");
    assert_int_equal (gw_share_scan ("/nonexistent/cellvm", 15, &files, &n, &st), -ENOENT);
    tu_rmtree (dir);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_gw_share_takes_plain_files_and_counts_what_it_leaves),
        cmocka_unit_test (test_gw_share_caps_bytes_and_depth),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
