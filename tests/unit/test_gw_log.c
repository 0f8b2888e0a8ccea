/*  test_gw_log - one structured line per event. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "base/gw_log.h"

static FILE *s_out;

static int
s_setup (void **state)
{
    (void) state;
    s_out = tmpfile ();
    gw_log_init (GW_LOG_INFO, s_out);
    gw_log_set_prefix (NULL);
    return s_out ? 0 : -1;
}

static int
s_teardown (void **state)
{
    (void) state;
    gw_log_init (GW_LOG_INFO, NULL);
    gw_log_set_prefix (NULL);
    fclose (s_out);
    return 0;
}

//  Everything logged so far.
static const char *
s_read_all (void)
{
    static char text [8192];
    rewind (s_out);
    size_t n = fread (text, 1, sizeof text - 1, s_out);
    text [n] = 0;
    return text;
}

static void
test_gw_log_writes_one_structured_line (void **state)
{
    (void) state;
    gw_log (GW_LOG_WARN, "wire.drop", "channel=%s reason=\"%s\"", "shell", "bad signature");
    const char *text = s_read_all ();
    //  2026-11-29T12:00:00.123Z level=warn event=wire.drop channel=shell ...
    assert_int_equal (text [4], '-');
    assert_int_equal (text [10], 'T');
    assert_int_equal (text [19], '.');
    assert_int_equal (text [23], 'Z');
    assert_string_equal (text + 24, " level=warn event=wire.drop channel=shell "
                         "reason=\"bad signature\"\n");
}

static void
test_gw_log_filters_by_level (void **state)
{
    (void) state;
    assert_true (gw_log_enabled (GW_LOG_INFO));
    assert_false (gw_log_enabled (GW_LOG_DEBUG));
    gw_log (GW_LOG_DEBUG, "hidden", "x=1");
    gw_log (GW_LOG_ERROR, "shown", "x=2");
    const char *text = s_read_all ();
    assert_null (strstr (text, "hidden"));
    assert_non_null (strstr (text, "level=error event=shown x=2"));
}

static void
test_gw_log_adds_prefix_to_every_line (void **state)
{
    (void) state;
    gw_log_set_prefix ("pid=123 session=abc");
    gw_log (GW_LOG_INFO, "a", "n=1");
    gw_log (GW_LOG_INFO, "b", "%s", "");
    const char *text = s_read_all ();
    assert_non_null (strstr (text, "event=a pid=123 session=abc n=1\n"));
    assert_non_null (strstr (text, "event=b pid=123 session=abc\n"));
}

static void
test_gw_log_keeps_each_event_on_one_line (void **state)
{
    (void) state;
    gw_log (GW_LOG_INFO, "multi", "text=\"%s\"", "line1\nline2\r\x1b[31m");
    char big [6000];
    memset (big, 'z', sizeof big - 1);
    big [sizeof big - 1] = 0;
    gw_log (GW_LOG_INFO, "big", "v=%s", big);
    const char *text = s_read_all ();
    const char *nl = strchr (text, '\n');
    assert_non_null (nl);
    assert_non_null (strstr (text, "line1 line2  [31m"));
    assert_true (strstr (text, "line2") < nl);  //  still the first line
    const char *second = nl + 1;
    nl = strchr (second, '\n');
    assert_non_null (nl);
    assert_true (nl - second < 4096);           //  cut, and says so
    assert_memory_equal (nl - 3, "...", 3);
    assert_int_equal (nl [1], 0);
}

static void
test_gw_log_level_parse_names (void **state)
{
    (void) state;
    assert_int_equal (gw_log_level_parse ("error"), GW_LOG_ERROR);
    assert_int_equal (gw_log_level_parse ("warn"), GW_LOG_WARN);
    assert_int_equal (gw_log_level_parse ("WARNING"), GW_LOG_WARN);
    assert_int_equal (gw_log_level_parse ("info"), GW_LOG_INFO);
    assert_int_equal (gw_log_level_parse ("Debug"), GW_LOG_DEBUG);
    assert_int_equal (gw_log_level_parse ("verbose"), -EINVAL);
    assert_int_equal (gw_log_level_parse (""), -EINVAL);
    assert_int_equal (gw_log_level_parse (NULL), -EINVAL);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_setup_teardown (test_gw_log_writes_one_structured_line, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_log_filters_by_level, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_log_adds_prefix_to_every_line, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_log_keeps_each_event_on_one_line, s_setup, s_teardown),
        cmocka_unit_test (test_gw_log_level_parse_names),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
