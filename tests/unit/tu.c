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
#include <unistd.h>
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

static int s_cap_fd = -1, s_cap_saved = -1;
static FILE *s_cap_file;

void
tu_capture_begin (int fd)
{
    assert_int_equal (s_cap_fd, -1);
    s_cap_file = tmpfile ();
    assert_non_null (s_cap_file);
    fflush (NULL);
    s_cap_saved = dup (fd);
    assert_true (s_cap_saved >= 0);
    assert_true (dup2 (fileno (s_cap_file), fd) == fd);
    s_cap_fd = fd;
}

const char *
tu_capture_end (void)
{
    static char text [16384];
    fflush (NULL);
    assert_true (dup2 (s_cap_saved, s_cap_fd) == s_cap_fd);
    close (s_cap_saved);
    s_cap_fd = s_cap_saved = -1;
    rewind (s_cap_file);
    size_t n = fread (text, 1, sizeof text - 1, s_cap_file);
    text [n] = 0;
    fclose (s_cap_file);
    return text;
}

void
tu_assert_one_log_line (const char *text, const char *want)
{
    size_t len = strlen (text);
    assert_true (len > 40);
    assert_int_equal (text [4], '-');           //  2026-11-29T12:00:00.123Z level=
    assert_int_equal (text [10], 'T');
    assert_int_equal (text [23], 'Z');
    assert_memory_equal (text + 24, " level=", 7);
    assert_non_null (strstr (text, " event="));
    assert_int_equal (text [len - 1], '\n');
    for (size_t i = 0; i + 1 < len; i++)
        assert_false ((unsigned char) text [i] < 0x20 || text [i] == 0x7f);
    assert_non_null (strstr (text, want));
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
