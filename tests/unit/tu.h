/*  tu - helpers the unit tests share: scratch directories, small files,
    fake guest images. Each fails the running cmocka test when it cannot do
    its job, so callers need not check.
*/
#ifndef TU_H_INCLUDED
#define TU_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>

//  A fresh private directory /tmp/NAME_XXXXXX, its path into dir.
void tu_tmpdir (char *dir, size_t cap, const char *name);

//  A scratch fixture: a zeroed struct of size bytes whose first member is
//  char dir [TU_DIR_MAX] (any name), holding a fresh tu_tmpdir (NAME).
#define TU_DIR_MAX 64
void *tu_fixture_new (size_t size, const char *name);

//  A cmocka teardown for tu_fixture_new's fixtures: the scratch dir and all
//  in it removed, the fixture freed.
int tu_fixture_teardown (void **state);

//  path and everything below it removed, like rm -rf (symlinks are removed,
//  never followed; a path that is not there is fine). Files that appear
//  meanwhile (a child still exiting) are waited out, for up to 2 s.
void tu_rmtree (const char *path);

//  dir/name into buf; returns buf.
const char *tu_path (char *buf, size_t cap, const char *dir, const char *name);

//  dir/name created or truncated, holding text.
void tu_write_file (const char *dir, const char *name, const char *text);

//  A fake guest image: dir made, holding image.json with this image_hash
//  and one-byte vmlinux, initrd.img and rootfs.ext4.
void tu_fake_image (const char *dir, const char *hash);

//  What fd is written from now on goes to a scratch file instead, until
//  tu_capture_end puts fd back and returns it all (a static buffer). One
//  capture at a time.
void tu_capture_begin (int fd);
const char *tu_capture_end (void);

//  text is exactly one log line of ch_log's format (a UTC stamp, level=,
//  event=, one newline at its end and no other control character) that
//  holds want.
void tu_assert_one_log_line (const char *text, const char *want);

//  Skipping the running test. Each prints one line, "tu: skip TEST: WHY",
//  then skips it (cmocka lists it as SKIPPED). With CI=true in the
//  environment, tu_skip fails the test instead: it is for conditions a CI
//  machine should never have (a package scripts/deps.sh installs missing,
//  not root), so CI reports the lost coverage rather than passing without
//  it. tu_skip_expected declares the condition one that CI may have (no
//  guest image given to a unit run, a sanitized build, a container's
//  filesystem): it skips under CI too. why is printf-style.
#define tu_skip(...) tu_skip_at (__func__, false, __FILE__, __LINE__, __VA_ARGS__)
#define tu_skip_expected(...) tu_skip_at (__func__, true, __FILE__, __LINE__, __VA_ARGS__)
void tu_skip_at (const char *test, bool expected, const char *file, int line,
                 const char *why, ...)
    __attribute__ ((noreturn, format (printf, 5, 6)));

//  Whether this run is CI's: CI=true in the environment.
bool tu_in_ci (void);

#endif
