/*  tu - helpers the unit tests share (tu.h). */
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <cmocka.h>

#include "tu.h"

void
tu_tmpdir (char *dir, size_t cap, const char *name)
{
    int n = snprintf (dir, cap, "/tmp/%s_XXXXXX", name);
    assert_true (n > 0 && (size_t) n < cap);
    assert_non_null (mkdtemp (dir));
}

void *
tu_fixture_new (size_t size, const char *name)
{
    assert_true (size >= TU_DIR_MAX);
    char *fixture = calloc (1, size);
    assert_non_null (fixture);
    tu_tmpdir (fixture, TU_DIR_MAX, name);
    return fixture;
}

int
tu_fixture_teardown (void **state)
{
    tu_rmtree ((const char *) *state);
    free (*state);
    *state = NULL;
    return 0;
}

static int
s_remove (const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void) st;
    (void) flag;
    (void) ftw;
    return remove (path) == 0 || errno == ENOENT ? 0 : errno;
}

//  A child still on its way out (a test's daemon, its holders) may add a
//  file as the tree goes: "not empty" is tried again, for up to 2 s.
void
tu_rmtree (const char *path)
{
    struct stat st;
    for (int tries = 1; lstat (path, &st) == 0; tries++) {
        int rc = nftw (path, s_remove, 16, FTW_DEPTH | FTW_PHYS);
        if (rc == 0)
            return;
        if (rc != ENOTEMPTY || tries == 100)
            fail_msg ("removing %s: %s", path, strerror (rc > 0 ? rc : errno));
        nanosleep (&(struct timespec) { 0, 20 * 1000 * 1000 }, NULL);
    }
    if (errno != ENOENT)
        fail_msg ("removing %s: %s", path, strerror (errno));
}

const char *
tu_path (char *buf, size_t cap, const char *dir, const char *name)
{
    int n = snprintf (buf, cap, "%s/%s", dir, name);
    assert_true (n > 0 && (size_t) n < cap);
    return buf;
}

void
tu_write_file (const char *dir, const char *name, const char *text)
{
    char path [PATH_MAX];
    FILE *file = fopen (tu_path (path, sizeof path, dir, name), "w");
    if (!file)
        fail_msg ("cannot write %s: %s", path, strerror (errno));
    assert_true (fputs (text, file) >= 0);
    assert_int_equal (fclose (file), 0);
}

void
tu_fake_image (const char *dir, const char *hash)
{
    char json [128];
    assert_int_equal (mkdir (dir, 0700), 0);
    snprintf (json, sizeof json, "{\"image_hash\": \"%s\"}", hash);
    tu_write_file (dir, "image.json", json);
    tu_write_file (dir, "vmlinux", "k");
    tu_write_file (dir, "initrd.img", "i");
    tu_write_file (dir, "rootfs.ext4", "r");
}

bool
tu_in_ci (void)
{
    const char *ci = getenv ("CI");
    return ci && strcmp (ci, "true") == 0;
}

void
tu_skip_at (const char *test, bool expected, const char *file, int line, const char *why, ...)
{
    char text [512];
    va_list args;
    va_start (args, why);
    vsnprintf (text, sizeof text, why, args);
    va_end (args);
    bool fails = !expected && tu_in_ci ();
    //  One line, whole: cmocka's own output goes to stdout, so does this.
    printf ("tu: skip %s: %s%s\n", test, text, fails ? " (CI=true: this skip is not declared "
            "expected, so the test fails)" : expected ? " (expected)" : "");
    fflush (stdout);
    if (fails)
        _fail (file, line);
    else
        _skip (file, line);
    abort ();                                   //  both return by longjmp
}
