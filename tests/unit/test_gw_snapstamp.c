/*  test_gw_snapstamp - a snapshot's verification stamp: it holds only for
    the very file that was hashed. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "snap/gw_snapstamp.h"
#include "tu.h"

#define S_SHA "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static void
s_write (const char *path, const char *text)
{
    FILE *f = fopen (path, "w");
    assert_non_null (f);
    fputs (text, f);
    fclose (f);
}

//  Past the file system's timestamp granularity (a jiffy), so a change shows.
static void
s_tick (void)
{
    nanosleep (&(struct timespec) { 0, 30 * 1000 * 1000 }, NULL);
}

static void
test_gw_snapstamp_holds_for_the_hashed_file_only (void **state)
{
    (void) state;
    char dir [TU_DIR_MAX], st [PATH_MAX], other [PATH_MAX], stamp [PATH_MAX];
    tu_tmpdir (dir, sizeof dir, "test_gw_snapstamp");
    tu_path (st, sizeof st, dir, "state");
    tu_path (other, sizeof other, dir, "other");
    tu_path (stamp, sizeof stamp, dir, GW_SNAPSTAMP_FILE);
    s_write (st, "the guest's RAM");
    assert_false (gw_snapstamp_matches (dir, st, S_SHA));           //  no stamp yet
    assert_int_equal (gw_snapstamp_write (dir, st, S_SHA), 0);
    assert_true (gw_snapstamp_matches (dir, st, S_SHA));
    assert_false (gw_snapstamp_matches (dir, st, "ff" S_SHA + 4));  //  another hash
    //  A write in place (same size): its ctime moves on.
    s_tick ();
    int fd = open (st, O_WRONLY);
    assert_true (fd >= 0);
    assert_int_equal (pwrite (fd, "T", 1, 0), 1);
    close (fd);
    assert_false (gw_snapstamp_matches (dir, st, S_SHA));
    //  Stamped again, then replaced by another file under its name.
    assert_int_equal (gw_snapstamp_write (dir, st, S_SHA), 0);
    assert_true (gw_snapstamp_matches (dir, st, S_SHA));
    s_write (other, "the guest's RAM");
    assert_int_equal (rename (other, st), 0);
    assert_false (gw_snapstamp_matches (dir, st, S_SHA));
    //  A new hard link (a copy that kept the inode) changes it too.
    assert_int_equal (gw_snapstamp_write (dir, st, S_SHA), 0);
    s_tick ();
    assert_int_equal (link (st, other), 0);
    assert_false (gw_snapstamp_matches (dir, st, S_SHA));
    //  A garbage stamp is no stamp; a missing state file is no match.
    s_write (stamp, "{not json");
    assert_false (gw_snapstamp_matches (dir, st, S_SHA));
    unlink (st);
    assert_false (gw_snapstamp_matches (dir, st, S_SHA));
    assert_int_equal (gw_snapstamp_write (dir, st, S_SHA), -ENOENT);
    tu_rmtree (dir);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_gw_snapstamp_holds_for_the_hashed_file_only),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
