/*  test_gw_memtrim - a paused gateway drops its mappings of file pages, and
    never a page that is no longer the file's (RELRO-like copied-on-write ones). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "session/gw_memtrim.h"
#include "tu.h"

#define S_PAGES 64

//  Rss (KiB) of the mapping that starts at addr, from /proc/self/smaps.
static long
s_rss_kib (const void *addr)
{
    FILE *f = fopen ("/proc/self/smaps", "re");
    assert_non_null (f);
    char line [512];
    bool here = false;
    long rss = -1;
    while (rss < 0 && fgets (line, sizeof line, f)) {
        uintptr_t lo, hi;
        long kib;
        if (sscanf (line, "%" SCNxPTR "-%" SCNxPTR " ", &lo, &hi) == 2 && strchr (line, ' '))
            here = lo == (uintptr_t) addr;
        else
        if (here && sscanf (line, "Rss: %ld", &kib) == 1)
            rss = kib;
    }
    fclose (f);
    return rss;
}

//  A file of S_PAGES pages, page i filled with 'a' + i % 26.
static int
s_file (char *path, size_t len)
{
    snprintf (path, len, "/tmp/test_gw_memtrim.XXXXXX");
    int fd = mkstemp (path);
    assert_true (fd >= 0);
    long page = sysconf (_SC_PAGESIZE);
    char *buf = malloc ((size_t) page);
    assert_non_null (buf);
    for (int i = 0; i < S_PAGES; i++) {
        memset (buf, 'a' + i % 26, (size_t) page);
        assert_int_equal (write (fd, buf, (size_t) page), page);
    }
    free (buf);
    return fd;
}

//  Another process maps and touches the file too, as other gateways and clients
//  share our libraries: the kernel will not page out pages mapped twice.
static pid_t
s_sharer (int fd, size_t len)
{
    int ready [2];
    assert_int_equal (pipe (ready), 0);
    pid_t pid = fork ();
    assert_true (pid >= 0);
    if (pid == 0) {
        prctl (PR_SET_PDEATHSIG, SIGKILL);      //  gone with the test, even when it fails
        const volatile char *p = mmap (NULL, len, PROT_READ, MAP_SHARED, fd, 0);
        unsigned sum = 0;
        for (size_t i = 0; p != MAP_FAILED && i < len; i += 4096)
            sum += (unsigned) p [i];
        (void) !write (ready [1], &sum, 1);
        pause ();
        _exit (0);
    }
    char c;
    assert_int_equal (read (ready [0], &c, 1), 1);
    close (ready [0]);
    close (ready [1]);
    return pid;
}

static void
test_gw_memtrim_drops_file_pages_and_keeps_copied_ones (void **state)
{
    (void) state;
    char path [64];
    int fd = s_file (path, sizeof path);
    size_t page = (size_t) sysconf (_SC_PAGESIZE), len = S_PAGES * page;
    //  Text-like: read-only, every page touched.
    const char *text = mmap (NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    //  RELRO-like: written once, then made read-only.
    char *relro = mmap (NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    assert_true (text != MAP_FAILED && relro != MAP_FAILED);
    unsigned sum = 0;
    for (size_t i = 0; i < len; i += page)
        sum += (unsigned char) text [i];
    relro [0] = 'X';
    relro [page] = 'Y';
    assert_int_equal (mprotect (relro, len, PROT_READ), 0);
    assert_int_equal (s_rss_kib (text), (long) (len / 1024));
    pid_t sharer = s_sharer (fd, len);

    size_t released = gw_memtrim_release ();
    assert_true (released >= len);
    assert_int_equal (s_rss_kib (text), 0);     //  no longer mapped in
    assert_true (s_rss_kib (relro) >= (long) (2 * page / 1024));
    assert_int_equal (relro [0], 'X');          //  the copies were kept
    assert_int_equal (relro [page], 'Y');
    assert_int_equal (relro [2 * page], 'c');   //  the file's own page
    unsigned again = 0;
    for (size_t i = 0; i < len; i += page)
        again += (unsigned char) text [i];
    assert_int_equal (again, sum);              //  refaulted, identical
    kill (sharer, SIGKILL);
    waitpid (sharer, NULL, 0);
    munmap ((void *) text, len);
    munmap (relro, len);
    close (fd);
    unlink (path);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_gw_memtrim_drops_file_pages_and_keeps_copied_ones),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
