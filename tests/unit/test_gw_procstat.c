/*  test_gw_procstat - a process's start time from /proc/PID/stat. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/gw_procstat.h"

static void
test_gw_procstat_parses_start_time (void **state)
{
    (void) state;
    unsigned long long start = 0;
    //  comm "a) (b" holds both parentheses and spaces.
    const char *stat = "4242 (a) (b) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 "
                       "987654 1000 10 18446744073709551615\n";
    assert_int_equal (gw_procstat_parse_starttime (stat, &start), 0);
    assert_int_equal (start, 987654);
    assert_int_equal (gw_procstat_parse_starttime ("4242 (x) S 1 2 3\n", &start), -EINVAL);
    assert_int_equal (gw_procstat_parse_starttime ("no parenthesis", &start), -EINVAL);
    assert_int_equal (gw_procstat_parse_starttime ("1 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 "
                                                   "12x 0\n", &start), -EINVAL);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_gw_procstat_parses_start_time),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
