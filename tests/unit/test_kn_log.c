/*  test_kn_log - the kernel's lines: ch_log's format, its pid, one line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>
#include <cmocka.h>

#include "kn_log.h"
#include "tu.h"

//  A control character in a value (a cell's text) is scrubbed to a space.
static void
test_kn_log_scrubs_a_control_character (void **state)
{
    (void) state;
    char want [96];
    snprintf (want, sizeof want, " level=warn event=kn.test component=kernel pid=%d "
              "text=\"a b c\"\n", (int) getpid ());
    tu_capture_begin (STDERR_FILENO);
    kn_log_init (STDERR_FILENO, CH_LOG_INFO);
    kn_log (CH_LOG_WARN, "kn.test", "text=\"%s\"", "a\nb\x1b" "c");
    kn_log (CH_LOG_DEBUG, "kn.hidden", "x=1");  //  above the level: dropped
    const char *text = tu_capture_end ();
    tu_assert_one_log_line (text, want);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_kn_log_scrubs_a_control_character),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
