/*  test_mc_log - cellvm-mcp's lines on stderr: ch_log's format, one line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>
#include <cmocka.h>

#include "mc_log.h"
#include "tu.h"

//  A control character in a value (a gateway's words) is scrubbed to a space.
static void
test_mc_log_scrubs_a_control_character (void **state)
{
    (void) state;
    tu_capture_begin (STDERR_FILENO);
    mc_log_set_level (CH_LOG_INFO);
    mc_log (CH_LOG_INFO, "client.gone", "why=\"%s\"", "stdout:\r\nbroken\x7fpipe");
    mc_log (CH_LOG_DEBUG, "mc.hidden", "x=1");  //  above the level: dropped
    const char *text = tu_capture_end ();
    tu_assert_one_log_line (text, " level=info event=client.gone why=\"stdout:  broken pipe\"\n");
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_mc_log_scrubs_a_control_character),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
