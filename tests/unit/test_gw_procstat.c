/*  test_gw_procstat - a process's start time from /proc/PID/stat, its threads' schedstat. */
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

static void
test_gw_procstat_parses_schedstat (void **state)
{
    (void) state;
    int64_t run = 0, wait = 0;
    assert_int_equal (gw_procstat_parse_schedstat ("7000000 42000000 19\n", &run, &wait), 0);
    assert_int_equal (run, 7000000);
    assert_int_equal (wait, 42000000);
    assert_int_equal (gw_procstat_parse_schedstat ("7000000 42000000\n", &run, &wait), -EINVAL);
    assert_int_equal (gw_procstat_parse_schedstat ("7000000 x 19\n", &run, &wait), -EINVAL);
    assert_int_equal (gw_procstat_parse_schedstat ("", &run, &wait), -EINVAL);
}

//  This process has been on a CPU by now; a pid that cannot exist has no threads.
static void
test_gw_procstat_reads_a_live_process (void **state)
{
    (void) state;
    int64_t run = -1, wait = -1;
    volatile unsigned long spin = 0;
    for (unsigned long i = 0; i < 200000000ul; i++)
        spin += i;
    assert_int_equal (gw_procstat_sched (getpid (), &run, &wait), 0);
    assert_true (run >= 10 && wait >= 0);
    assert_int_equal (gw_procstat_sched (0x7ffffffe, &run, &wait), -ENOENT);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_gw_procstat_parses_start_time),
        cmocka_unit_test (test_gw_procstat_parses_schedstat),
        cmocka_unit_test (test_gw_procstat_reads_a_live_process),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
