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

static double
s_realtime (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_REALTIME, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

//  Wall: the epoch's seconds, with the fraction. Bracketed by CLOCK_REALTIME
//  itself: time(2) reads the coarse clock, which lags it by up to a tick, so
//  a read just past a second's turn is not yet in that second by time(2).
static void
test_ch_clock_wall_is_the_epoch_time (void **state)
{
    (void) state;
    double before = s_realtime ();
    double s = ch_clock_wall_s ();
    double after = s_realtime ();
    assert_true (s >= before && s <= after);
    assert_true (s - (double) time (NULL) > -1 && s - (double) time (NULL) < 2);
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
