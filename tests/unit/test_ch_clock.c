/*  test_ch_clock - the monotonic and the wall clock. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <cmocka.h>

#include "ch_clock.h"

//  Monotonic: never backwards, and a 20 ms sleep shows as about 20 ms.
static void
test_ch_clock_mono_counts_milliseconds (void **state)
{
    (void) state;
    int64_t a = ch_clock_mono_ms ();
    struct timespec nap = { 0, 20 * 1000 * 1000 };
    nanosleep (&nap, NULL);
    int64_t b = ch_clock_mono_ms ();
    assert_true (b - a >= 20);
    assert_true (b - a < 2000);
    assert_true (ch_clock_mono_ms () >= b);
}

//  Wall: the epoch's seconds, with the fraction.
static void
test_ch_clock_wall_is_the_epoch_time (void **state)
{
    (void) state;
    time_t before = time (NULL);
    double s = ch_clock_wall_s ();
    time_t after = time (NULL);
    assert_true (s >= (double) before && s < (double) after + 1);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_ch_clock_mono_counts_milliseconds),
        cmocka_unit_test (test_ch_clock_wall_is_the_epoch_time),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
