/*  test_ch_log - the one log line of every cellvm program. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "ch_log.h"
#include "tu.h"

static size_t
s_format (char *out, size_t cap, int level, const char *prefix, const char *fmt, ...)
{
    va_list ap;
    va_start (ap, fmt);
    size_t n = ch_log_vformat (out, cap, level, "test.event", prefix, fmt, ap);
    va_end (ap);
    return n;
}

static void
s_write (int fd, const char *prefix, const char *fmt, ...)
{
    va_list ap;
    va_start (ap, fmt);
    ch_log_vwrite (fd, CH_LOG_WARN, "test.write", prefix, fmt, ap);
    va_end (ap);
}

//  Stamp, level, event, prefix, pairs; no prefix and no pairs leave no
//  stray spaces.
static void
test_ch_log_formats_the_line (void **state)
{
    (void) state;
    char line [CH_LOG_LINE_MAX];
    size_t n = s_format (line, sizeof line, CH_LOG_INFO, "pid=7", "a=%d b=\"%s\"", 1, "x y");
    assert_int_equal (n, strlen (line));
    tu_assert_one_log_line (line, " level=info event=test.event pid=7 a=1 b=\"x y\"\n");
    s_format (line, sizeof line, CH_LOG_ERROR, NULL, NULL);
    assert_string_equal (line + 24, " level=error event=test.event\n");
    s_format (line, sizeof line, CH_LOG_DEBUG, "", "%s", "");
    assert_string_equal (line + 24, " level=debug event=test.event\n");
}

//  A control character in a value or the prefix is a space: still one line.
static void
test_ch_log_scrubs_control_characters (void **state)
{
    (void) state;
    char line [CH_LOG_LINE_MAX];
    s_format (line, sizeof line, CH_LOG_WARN, "p=\t1", "text=\"%s\"", "a\nb\r\x1b[31m\x7f\xc3\xa9");
    tu_assert_one_log_line (line, "p= 1 text=\"a b  [31m \xc3\xa9\"\n");
}

//  A line over the buffer is cut, ends in "..." and keeps its newline.
static void
test_ch_log_cuts_a_long_line (void **state)
{
    (void) state;
    char big [6000], line [256];
    memset (big, 'z', sizeof big - 1);
    big [sizeof big - 1] = 0;
    size_t n = s_format (line, sizeof line, CH_LOG_INFO, NULL, "v=%s", big);
    assert_int_equal (n, sizeof line - 1);
    assert_memory_equal (line + n - 4, "...\n", 4);
    char whole [CH_LOG_LINE_MAX];
    n = s_format (whole, sizeof whole, CH_LOG_INFO, NULL, "v=%s", big);
    assert_int_equal (n, sizeof whole - 1);
    tu_assert_one_log_line (whole, "zzz...\n");
}

//  The write is one line on fd, and errno is what it was before.
static void
test_ch_log_write_keeps_errno (void **state)
{
    (void) state;
    tu_capture_begin (STDERR_FILENO);
    errno = ENOENT;
    s_write (STDERR_FILENO, "component=t", "k=%s", "v\n");
    int e = errno;
    const char *text = tu_capture_end ();
    assert_int_equal (e, ENOENT);
    tu_assert_one_log_line (text, " level=warn event=test.write component=t k=v \n");
}

static void
test_ch_log_level_names (void **state)
{
    (void) state;
    const char *names [] = { "error", "warn", "info", "debug" };
    char line [CH_LOG_LINE_MAX], want [32];
    for (int i = 0; i < 4; i++) {
        assert_int_equal (ch_log_level_parse (names [i]), i);
        s_format (line, sizeof line, i, NULL, NULL);
        snprintf (want, sizeof want, " level=%s event=", names [i]);
        assert_non_null (strstr (line, want));
    }
    assert_int_equal (ch_log_level_parse ("WARNING"), CH_LOG_WARN);
    assert_int_equal (ch_log_level_parse ("Debug"), CH_LOG_DEBUG);
    assert_int_equal (ch_log_level_parse ("verbose"), -EINVAL);
    assert_int_equal (ch_log_level_parse (""), -EINVAL);
    assert_int_equal (ch_log_level_parse (NULL), -EINVAL);
    s_format (line, sizeof line, 9, NULL, NULL);
    assert_non_null (strstr (line, " level=- event="));
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_ch_log_formats_the_line),
        cmocka_unit_test (test_ch_log_scrubs_control_characters),
        cmocka_unit_test (test_ch_log_cuts_a_long_line),
        cmocka_unit_test (test_ch_log_write_keeps_errno),
        cmocka_unit_test (test_ch_log_level_names),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
