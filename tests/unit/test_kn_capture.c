/*  test_kn_capture - stdout/stderr capture: Python text buffered in-process
 *  and fd-level output from pipes, sent as few texts, in the order written.
 *
 *  The capture takes over two spare descriptors (not 1 and 2: cmocka prints
 *  there); writing to them is what C code or a child process would do.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ch_text.h"
#include "kn_capture.h"

#define S_TEXTS 4096

typedef struct {
    pthread_mutex_t mu;
    char *name [S_TEXTS];
    char *text [S_TEXTS];
    size_t len [S_TEXTS];
    int n;
    size_t max_seen;
    int fds [2];
    kn_capture_t *cap;
} s_fixture_t;

static void
s_emit (void *arg, const char *name, const char *text, size_t len)
{
    s_fixture_t *f = arg;
    pthread_mutex_lock (&f->mu);
    assert_true (f->n < S_TEXTS);
    f->name [f->n] = strdup (name);
    f->text [f->n] = strndup (text, len);
    f->len [f->n] = len;
    if (len > f->max_seen)
        f->max_seen = len;
    f->n++;
    pthread_mutex_unlock (&f->mu);
}

static int
s_count (s_fixture_t *f)
{
    pthread_mutex_lock (&f->mu);
    int n = f->n;
    pthread_mutex_unlock (&f->mu);
    return n;
}

static s_fixture_t *
s_new (int window_ms, size_t max_text)
{
    s_fixture_t *f = calloc (1, sizeof *f);
    pthread_mutex_init (&f->mu, NULL);
    f->fds [0] = open ("/dev/null", O_WRONLY | O_CLOEXEC);
    f->fds [1] = open ("/dev/null", O_WRONLY | O_CLOEXEC);
    assert_true (f->fds [0] > 2 && f->fds [1] > 2);
    kn_capture_config_t cfg = { { f->fds [0], f->fds [1] }, window_ms, max_text };
    f->cap = kn_capture_new (&cfg, s_emit, f);
    assert_non_null (f->cap);
    return f;
}

static int
s_setup (void **state)
{
    *state = s_new (10000, 0);      //  the window never ends on its own here
    return 0;
}

static int
s_teardown (void **state)
{
    s_fixture_t *f = *state;
    kn_capture_destroy (&f->cap);
    close (f->fds [0]);
    close (f->fds [1]);
    for (int i = 0; i < f->n; i++) {
        free (f->name [i]);
        free (f->text [i]);
    }
    pthread_mutex_destroy (&f->mu);
    free (f);
    return 0;
}

static void
s_py (s_fixture_t *f, int stream, const char *text)
{
    kn_capture_write (f->cap, stream, text, strlen (text));
}

static void
s_fd (s_fixture_t *f, int stream, const char *text)
{
    assert_int_equal (write (f->fds [stream], text, strlen (text)), (ssize_t) strlen (text));
}

static void
s_expect (s_fixture_t *f, int i, const char *name, const char *text)
{
    assert_true (i < f->n);
    assert_string_equal (f->name [i], name);
    assert_string_equal (f->text [i], text);
}

static void
test_kn_capture_many_writes_make_one_text (void **state)
{
    s_fixture_t *f = *state;
    for (int i = 0; i < 1000; i++) {
        char line [16];
        snprintf (line, sizeof line, "%d\n", i);
        s_py (f, KN_STDOUT, line);
    }
    assert_int_equal (s_count (f), 0);     //  nothing sent before the flush
    kn_capture_flush (f->cap);
    assert_int_equal (f->n, 1);
    assert_string_equal (f->name [0], "stdout");
    assert_memory_equal (f->text [0], "0\\n1\\n2\\n", 9);
    assert_non_null (strstr (f->text [0], "998\\n999\\n"));
    kn_capture_flush (f->cap);
    assert_int_equal (f->n, 1);             //  nothing new: nothing sent
}

static void
test_kn_capture_keeps_stdout_stderr_interleaving (void **state)
{
    s_fixture_t *f = *state;
    s_py (f, KN_STDOUT, "a1 ");
    s_py (f, KN_STDOUT, "a2 ");
    s_py (f, KN_STDERR, "b ");
    s_py (f, KN_STDOUT, "c\n");
    kn_capture_flush (f->cap);
    assert_int_equal (f->n, 3);
    s_expect (f, 0, "stdout", "a1 a2 ");
    s_expect (f, 1, "stderr", "b ");
    s_expect (f, 2, "stdout", "c\\n");
}

//  fd-level output already in the pipe when Python writes goes first; a
//  fence (a child reaped) puts fd output between two Python writes.
static void
test_kn_capture_orders_fd_output_against_python_text (void **state)
{
    s_fixture_t *f = *state;
    s_fd (f, KN_STDOUT, "fd1 ");
    s_py (f, KN_STDOUT, "py1 ");
    s_fd (f, KN_STDOUT, "fd2 ");
    kn_capture_fence (f->cap);
    s_py (f, KN_STDOUT, "py2 ");
    s_fd (f, KN_STDERR, "err ");
    kn_capture_flush (f->cap);
    //  Texts of one stream next to each other are one text.
    assert_int_equal (f->n, 2);
    s_expect (f, 0, "stdout", "fd1 py1 fd2 py2 ");
    s_expect (f, 1, "stderr", "err ");
}

static void
test_kn_capture_sends_when_the_window_ends (void **state)
{
    (void) state;
    s_fixture_t *f = s_new (30, 0);
    s_py (f, KN_STDOUT, "soon\n");
    s_fd (f, KN_STDERR, "fd soon\n");
    for (int i = 0; i < 500 && s_count (f) < 2; i++)
        usleep (10 * 1000);
    assert_int_equal (s_count (f), 2);
    s_expect (f, 0, "stdout", "soon\\n");
    s_expect (f, 1, "stderr", "fd soon\\n");
    void *st = f;
    s_teardown (&st);
}

static void
test_kn_capture_holds_a_cut_character (void **state)
{
    s_fixture_t *f = *state;
    s_py (f, KN_STDOUT, "caf\xc3");         //  a binary write may cut a character
    kn_capture_flush (f->cap);
    s_py (f, KN_STDOUT, "\xa9 ok");
    s_fd (f, KN_STDOUT, "\xe2\x9c");
    kn_capture_flush (f->cap);
    s_fd (f, KN_STDOUT, "\x93 \xff!");
    kn_capture_flush (f->cap);
    assert_int_equal (f->n, 3);
    s_expect (f, 0, "stdout", "caf");
    s_expect (f, 1, "stdout", "\xc3\xa9 ok");
    s_expect (f, 2, "stdout", "\xe2\x9c\x93 \xef\xbf\xbd!");
}

//  Large text: sent uncopied after what was queued, cut at the text cap,
//  never inside an escape or a character.
static void
test_kn_capture_large_write_is_cut_at_the_cap_only (void **state)
{
    (void) state;
    s_fixture_t *f = s_new (10000, 300);
    size_t n = 100000;
    char *big = malloc (n + 1);
    for (size_t i = 0; i < n; i++)
        big [i] = "ab\"\n\xc3\xa9x\\"[i % 8];
    big [n] = 0;
    s_py (f, KN_STDOUT, "before ");
    kn_capture_write_now (f->cap, KN_STDOUT, big, n);
    s_py (f, KN_STDOUT, "after");
    kn_capture_flush (f->cap);
    assert_true (f->max_seen <= 300);
    //  Every text stands alone (no escape, no character cut in two), and
    //  together they are the escaped input, in order.
    size_t total = 0;
    for (int i = 0; i < f->n; i++) {
        assert_true (f->len [i] > 0);
        assert_true (f->text [i][f->len [i] - 1] != '\\'
                  || (f->len [i] >= 2 && f->text [i][f->len [i] - 2] == '\\'));
        assert_true (((unsigned char) f->text [i][0] & 0xc0) != 0x80);
        total += f->len [i];
    }
    char *all = malloc (total + 1), *p = all;
    for (int i = 0; i < f->n; i++) {
        memcpy (p, f->text [i], f->len [i]);
        p += f->len [i];
    }
    *p = 0;
    assert_memory_equal (all, "before ab\\\"\\n\xc3\xa9x\\\\ab", 20);
    assert_int_equal (total, strlen ("before ") + n / 8 * 11 + strlen ("after"));
    assert_string_equal (all + total - 5, "after");
    free (all);
    free (big);
    void *st = f;
    s_teardown (&st);
}

//  Queued output goes in texts of at most KN_CAPTURE_QUEUE_TEXT (the peer
//  handles each in one go); one large write goes whole, up to the frame cap.
static void
test_kn_capture_queued_texts_are_bounded_large_writes_are_not (void **state)
{
    (void) state;
    s_fixture_t *f = s_new (10000, 8u << 20);
    char line [100];
    memset (line, 'q', sizeof line - 1);
    line [sizeof line - 1] = 0;
    for (int i = 0; i < 6000; i++)
        s_py (f, KN_STDOUT, line);          //  594,000 bytes
    kn_capture_flush (f->cap);
    assert_int_equal (f->n, 3);
    for (int i = 0; i < f->n; i++)
        assert_true (f->len [i] <= KN_CAPTURE_QUEUE_TEXT);
    size_t n = 3u << 20;
    char *big = malloc (n);
    memset (big, 'B', n);
    kn_capture_write_now (f->cap, KN_STDERR, big, n);
    assert_int_equal (f->n, 4);
    assert_int_equal (f->len [3], n);
    free (big);
    void *st = f;
    s_teardown (&st);
}

//  The raw callback: the text as bytes, its name marked "raw:".
static void
s_raw (void *arg, const char *name, const void *text, size_t len)
{
    char raw [16];
    snprintf (raw, sizeof raw, "raw:%s", name);
    s_emit (arg, raw, text, len);
}

//  With a raw callback, a large write goes as bytes: after what was queued,
//  in texts of at most the cap, each cut between characters, all of it but
//  a cut character at its end, which waits for the next write.
static void
test_kn_capture_large_write_goes_raw (void **state)
{
    (void) state;
    s_fixture_t *f = s_new (10000, 300);
    kn_capture_set_raw (f->cap, s_raw);
    size_t n = 100000;
    char *big = malloc (n + 1);
    for (size_t i = 0; i < n; i++)
        big [i] = "ab\"\n\xe2\x9c\x93x"[i % 8];
    big [n - 4] = 'y';
    big [n - 3] = 'z';
    big [n - 2] = (char) 0xe2;                  //  cut: finished by the next write
    big [n - 1] = (char) 0x9c;
    s_py (f, KN_STDOUT, "before\n");
    kn_capture_write_now (f->cap, KN_STDOUT, big, n);
    s_py (f, KN_STDOUT, "\x93 after");
    kn_capture_flush (f->cap);
    assert_true (f->n >= 3);
    s_expect (f, 0, "stdout", "before\\n");
    size_t off = 0;
    for (int i = 1; i < f->n - 1; i++) {
        assert_string_equal (f->name [i], "raw:stdout");
        assert_true (f->len [i] > 0 && f->len [i] <= 300);
        assert_true (((unsigned char) f->text [i][0] & 0xc0) != 0x80);
        assert_int_equal (ch_utf8_tail ((const uint8_t *) f->text [i], f->len [i]), 0);
        assert_memory_equal (f->text [i], big + off, f->len [i]);
        off += f->len [i];
    }
    assert_int_equal (off, n - 2);
    s_expect (f, f->n - 1, "stdout", "\xe2\x9c\x93 after");
    free (big);
    void *st = f;
    s_teardown (&st);
}

static void
test_kn_capture_says_when_the_queue_is_too_full (void **state)
{
    s_fixture_t *f = *state;
    size_t n = 1 << 20;
    char *chunk = malloc (n);
    memset (chunk, 'y', n);
    bool over = false;
    size_t written = 0;
    while (!over && written <= KN_CAPTURE_PENDING_MAX) {
        over = kn_capture_write (f->cap, KN_STDOUT, chunk, n);
        written += n;
    }
    assert_true (over);
    assert_int_equal (written, KN_CAPTURE_PENDING_MAX);
    kn_capture_flush (f->cap);
    size_t got = 0;
    for (int i = 0; i < f->n; i++)
        got += f->len [i];
    assert_int_equal (got, written);
    free (chunk);
}

//  A fork's child writes through the fd (the parent's pipe): nothing of the
//  parent's queue is sent twice, and the child's text lands in order.
static void
test_kn_capture_fork_child_writes_to_the_pipe (void **state)
{
    s_fixture_t *f = *state;
    s_py (f, KN_STDOUT, "parent before\n");
    pid_t pid = fork ();
    assert_true (pid >= 0);
    if (pid == 0) {
        s_py (f, KN_STDOUT, "child\n");
        kn_capture_flush (f->cap);         //  a no-op in the child
        _exit (0);
    }
    int status;
    assert_int_equal (waitpid (pid, &status, 0), pid);
    kn_capture_fence (f->cap);
    s_py (f, KN_STDOUT, "parent after\n");
    kn_capture_flush (f->cap);
    assert_int_equal (f->n, 1);
    s_expect (f, 0, "stdout", "parent before\\nchild\\nparent after\\n");
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_setup_teardown (test_kn_capture_many_writes_make_one_text, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_kn_capture_keeps_stdout_stderr_interleaving, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_kn_capture_orders_fd_output_against_python_text, s_setup, s_teardown),
        cmocka_unit_test (test_kn_capture_sends_when_the_window_ends),
        cmocka_unit_test_setup_teardown (test_kn_capture_holds_a_cut_character, s_setup, s_teardown),
        cmocka_unit_test (test_kn_capture_large_write_is_cut_at_the_cap_only),
        cmocka_unit_test (test_kn_capture_queued_texts_are_bounded_large_writes_are_not),
        cmocka_unit_test (test_kn_capture_large_write_goes_raw),
        cmocka_unit_test_setup_teardown (test_kn_capture_says_when_the_queue_is_too_full, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_kn_capture_fork_child_writes_to_the_pipe, s_setup, s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
