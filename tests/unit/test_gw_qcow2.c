/*  test_gw_qcow2 - the empty disks gw_qcow2 makes are the bytes
    `qemu-img create` makes, for sizes and backing names of every shape;
    what it refuses; and that it never writes over a file or a symlink.
*/
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "disk/gw_qcow2.h"
#include "tu.h"

typedef struct {
    char dir [TU_DIR_MAX];
} fixture_t;

static int
s_setup (void **state)
{
    *state = tu_fixture_new (sizeof (fixture_t), "test_gw_qcow2");
    return 0;
}

//  path's bytes, malloc'd, into *len.
static uint8_t *
s_slurp (const char *path, size_t *len)
{
    FILE *f = fopen (path, "rb");
    assert_non_null (f);
    assert_int_equal (fseek (f, 0, SEEK_END), 0);
    long n = ftell (f);
    assert_true (n > 0);
    rewind (f);
    uint8_t *buf = malloc ((size_t) n);
    assert_non_null (buf);
    assert_int_equal (fread (buf, 1, (size_t) n, f), (size_t) n);
    fclose (f);
    *len = (size_t) n;
    return buf;
}

//  qemu-img's image for size and backing against ours, byte for byte.
static void
s_same_as_qemu_img (const char *dir, uint64_t size, const char *backing)
{
    char theirs [256], ours [256], cmd [2048];
    snprintf (theirs, sizeof theirs, "%s/theirs.qcow2", dir);
    snprintf (ours, sizeof ours, "%s/ours.qcow2", dir);
    unlink (theirs);
    unlink (ours);
    snprintf (cmd, sizeof cmd, "qemu-img create -q -f qcow2 %s%s%s %s %llu", backing ? "-u -b '" : "",
              backing ? backing : "", backing ? "' -F qcow2" : "", theirs,
              (unsigned long long) size);
    assert_int_equal (system (cmd), 0);
    assert_int_equal (gw_qcow2_create (ours, size, backing, backing ? "qcow2" : NULL), 0);
    size_t a_len = 0, b_len = 0;
    uint8_t *a = s_slurp (theirs, &a_len), *b = s_slurp (ours, &b_len);
    if (a_len != b_len || memcmp (a, b, a_len) != 0) {
        size_t i = 0;
        while (i < a_len && i < b_len && a [i] == b [i])
            i++;
        fail_msg ("size %llu backing %s: qemu-img %zu bytes, ours %zu; first difference at %#zx",
                  (unsigned long long) size, backing ? backing : "-", a_len, b_len, i);
    }
    free (a);
    free (b);
}

static void
test_the_bytes_are_qemu_imgs (void **state)
{
    fixture_t *fx = *state;
    if (system ("qemu-img --version >/dev/null 2>&1") != 0)
        tu_skip ("no qemu-img on PATH (scripts/deps.sh installs it)");
    char long_name [1024];
    memset (long_name, 'x', sizeof long_name - 1);
    long_name [0] = '/';
    long_name [sizeof long_name - 1] = '\0';
    const uint64_t sizes [] = { 1, 1000000, 512ULL << 20, (512ULL << 20) + 1, 1ULL << 30,
                                4ULL << 30, 1ULL << 40, 5ULL << 40 };
    const char *backings [] = { NULL, "base.qcow2", "/var/tmp/cellvm-0/templates/k/disk.qcow2",
                                "a b", long_name };
    for (size_t s = 0; s < sizeof sizes / sizeof sizes [0]; s++)
        for (size_t b = 0; b < sizeof backings / sizeof backings [0]; b++)
            s_same_as_qemu_img (fx->dir, sizes [s], backings [b]);
}

static void
test_what_it_refuses (void **state)
{
    (void) state;
    uint8_t *img = (uint8_t *) "untouched";
    size_t len = 7;
    char too_long [GW_QCOW2_BACKING_MAX + 2];
    memset (too_long, 'y', sizeof too_long - 1);
    too_long [sizeof too_long - 1] = '\0';
    assert_int_equal (gw_qcow2_encode (0, NULL, NULL, &img, &len), -EINVAL);
    assert_null (img);
    assert_int_equal (gw_qcow2_encode (GW_QCOW2_SIZE_MAX + 1, NULL, NULL, &img, &len), -EINVAL);
    assert_int_equal (gw_qcow2_encode (1 << 20, "b.qcow2", NULL, &img, &len), -EINVAL);
    assert_int_equal (gw_qcow2_encode (1 << 20, NULL, "qcow2", &img, &len), -EINVAL);
    assert_int_equal (gw_qcow2_encode (1 << 20, "", "qcow2", &img, &len), -EINVAL);
    assert_int_equal (gw_qcow2_encode (1 << 20, too_long, "qcow2", &img, &len), -EINVAL);
    too_long [GW_QCOW2_BACKING_MAX] = '\0';     //  exactly the limit is fine
    assert_int_equal (gw_qcow2_encode (1 << 20, too_long, "qcow2", &img, &len), 0);
    assert_non_null (img);
    free (img);
    assert_int_equal (gw_qcow2_encode (GW_QCOW2_SIZE_MAX, NULL, NULL, &img, &len), 0);
    assert_int_equal (len, 3 * 65536 + (GW_QCOW2_SIZE_MAX >> 29) * 8);
    free (img);
}

static void
test_it_never_writes_over_a_file_or_through_a_link (void **state)
{
    fixture_t *fx = *state;
    char file [128], link [128], target [128];
    tu_write_file (fx->dir, "taken", "keep me");
    tu_path (file, sizeof file, fx->dir, "taken");
    assert_int_equal (gw_qcow2_create (file, 1 << 20, NULL, NULL), -EEXIST);
    size_t len = 0;
    uint8_t *kept = s_slurp (file, &len);
    assert_int_equal (len, 7);
    assert_memory_equal (kept, "keep me", 7);
    free (kept);
    tu_path (target, sizeof target, fx->dir, "target");
    tu_path (link, sizeof link, fx->dir, "link");
    assert_int_equal (symlink (target, link), 0);
    assert_int_equal (gw_qcow2_create (link, 1 << 20, NULL, NULL), -EEXIST);
    assert_int_equal (access (target, F_OK), -1);
    //  A refused size leaves no file behind.
    tu_path (file, sizeof file, fx->dir, "none");
    assert_int_equal (gw_qcow2_create (file, 0, NULL, NULL), -EINVAL);
    assert_int_equal (access (file, F_OK), -1);
}

int
main (void)
{
#define S_TEST(name) cmocka_unit_test_setup_teardown (name, s_setup, tu_fixture_teardown)
    const struct CMUnitTest tests [] = {
        S_TEST (test_the_bytes_are_qemu_imgs),
        S_TEST (test_what_it_refuses),
        S_TEST (test_it_never_writes_over_a_file_or_through_a_link),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
