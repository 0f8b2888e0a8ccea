/*  test_gi_log - init's console lines: ch_log's format, one line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "gi_log.h"
#include "tu.h"

//  A control character in a value (a kernel's exit words) is scrubbed to a
//  space; the time since boot follows the component.
static void
test_gi_log_scrubs_a_control_character (void **state)
{
    (void) state;
    tu_capture_begin (STDERR_FILENO);
    gi_log (CH_LOG_INFO, "kernel.gone", "pid=%d how=\"%s\"", 42, "killed\n\x1b[0m");
    gi_log (CH_LOG_WARN, "init.not_pid1", NULL);
    const char *text = tu_capture_end ();
    const char *second = strchr (text, '\n') + 1;
    char first [512];
    memcpy (first, text, (size_t) (second - text));
    first [second - text] = 0;
    tu_assert_one_log_line (first, " pid=42 how=\"killed  [0m\"\n");
    assert_non_null (strstr (first, " level=info event=kernel.gone component=init up="));
    tu_assert_one_log_line (second, " level=warn event=init.not_pid1 component=init up=");
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_gi_log_scrubs_a_control_character),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
