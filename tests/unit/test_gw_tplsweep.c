/*  test_gw_tplsweep - which old snapshot templates are deleted, and which
    are kept. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "snap/gw_tplmeta.h"
#include "snap/gw_tplsweep.h"
#include "tu.h"

static char s_base [64];

//  A template dir base/key whose meta.json has these inputs, written
//  age_s seconds ago. rootfs: what it recorded of its image file.
static void
s_template (const char *key, int mem_mib, const char *rootfs, long age_s)
{
    char path [512];
    snprintf (path, sizeof path, "%s/%s", s_base, key);
    assert_int_equal (mkdir (path, 0700), 0);
    snprintf (path, sizeof path, "%s/%s/ram", s_base, key);
    FILE *f = fopen (path, "w");
    fclose (f);
    snprintf (path, sizeof path, "%s/%s/meta.json", s_base, key);
    f = fopen (path, "w");
    assert_non_null (f);
    fprintf (f, "{\"key\": \"%s\", \"inputs\": {\"format\": 2, \"mem_mib\": %d, \"vcpus\": 1, "
             "\"accel\": \"tcg\", \"cpu\": \"\", \"append\": \"\", \"disk_bytes\": 1073741824, "
             "\"rootfs.ext4\": \"%s\"}}", key, mem_mib, rootfs);
    fclose (f);
    struct timespec t [2] = { { time (NULL) - age_s, 0 }, { time (NULL) - age_s, 0 } };
    assert_int_equal (utimensat (AT_FDCWD, path, t, 0), 0);
}

static int
s_exists (const char *key)
{
    char path [256];
    snprintf (path, sizeof path, "%s/%s", s_base, key);
    return access (path, F_OK) == 0;
}

#define OURS   "aaaaaaaaaaaaaaaaaaaaaaaa"
#define OLDIMG "bbbbbbbbbbbbbbbbbbbbbbbb"
#define OTHER  "cccccccccccccccccccccccc"
#define IDLE   "dddddddddddddddddddddddd"
#define BUSY   "eeeeeeeeeeeeeeeeeeeeeeee"
#define NOMETA "ffffffffffffffffffffffff"
#define GONE   "111111111111111111111111"
#define REBUILT "222222222222222222222222"

static void
test_gw_tplsweep_removes_superseded_idle_and_orphaned_only (void **state)
{
    (void) state;
    tu_tmpdir (s_base, sizeof s_base, "test_gw_tplsweep");
    char image [256], now [512], old [512], gone [512];
    tu_path (image, sizeof image, s_base, "img");
    assert_int_equal (mkdir (image, 0700), 0);  //  not a key: never judged
    tu_write_file (image, "rootfs.ext4", "the image");
    strcat (image, "/rootfs.ext4");
    gw_tplmeta_describe_file (image, now, sizeof now);
    assert_non_null (strstr (now, " size=9 mtime="));
    snprintf (old, sizeof old, "%s size=9 mtime=1.000000000", image);
    snprintf (gone, sizeof gone, "%s/gone/rootfs.ext4 size=9 mtime=1.000000000", s_base);
    s_template (OURS, 512, now, 0);
    s_template (OLDIMG, 512, old, 3600);        //  same settings, older image: goes
    s_template (OTHER, 1024, now, 3600);        //  other memory, recent: stays
    s_template (IDLE, 1024, now, 40 * 86400);   //  other memory, unused 40 days: goes
    s_template (BUSY, 512, old, 3600);          //  superseded but being rebuilt: stays
    s_template (GONE, 1024, gone, 60);          //  its image deleted: goes
    s_template (REBUILT, 2048, old, 60);        //  another file at its image's path: goes
    char path [256];
    snprintf (path, sizeof path, "%s/" NOMETA, s_base);
    assert_int_equal (mkdir (path, 0700), 0);   //  no meta.json: not judged
    snprintf (path, sizeof path, "%s/not-a-template", s_base);
    assert_int_equal (mkdir (path, 0700), 0);
    snprintf (path, sizeof path, "%s/" BUSY ".lock", s_base);
    int lock = open (path, O_RDWR | O_CREAT, 0600);
    assert_true (lock >= 0);
    assert_int_equal (flock (lock, LOCK_EX), 0);
    assert_int_equal (gw_tplsweep (s_base, OURS, GW_TPLSWEEP_IDLE_S), 4);
    assert_true (s_exists (OURS));
    assert_false (s_exists (OLDIMG));
    assert_true (s_exists (OTHER));
    assert_false (s_exists (IDLE));
    assert_true (s_exists (BUSY));
    assert_false (s_exists (GONE));
    assert_false (s_exists (REBUILT));
    assert_true (s_exists (NOMETA));
    assert_true (s_exists ("not-a-template"));
    close (lock);
    //  Nothing left to do the second time; a base that is not there is -ENOENT.
    assert_int_equal (gw_tplsweep (s_base, OURS, GW_TPLSWEEP_IDLE_S), 1);   //  BUSY, now free
    assert_false (s_exists (BUSY));
    assert_int_equal (gw_tplsweep (s_base, OURS, GW_TPLSWEEP_IDLE_S), 0);
    tu_rmtree (s_base);
    assert_int_equal (gw_tplsweep (s_base, OURS, GW_TPLSWEEP_IDLE_S), -ENOENT);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_gw_tplsweep_removes_superseded_idle_and_orphaned_only),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
