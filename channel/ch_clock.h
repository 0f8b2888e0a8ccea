/*  ch_clock - the two clocks every program reads: the monotonic one for
    intervals and deadlines (it never jumps), the wall clock for times that
    others read (ages, a file's "created", the guest's clock). What czmq's
    zclock_mono and zclock_time gave, without linking czmq for it.
    Part of the channel library.
*/
#ifndef CH_CLOCK_H
#define CH_CLOCK_H

#include <stdint.h>

//  CLOCK_MONOTONIC in milliseconds.
int64_t ch_clock_mono_ms (void);

//  CLOCK_REALTIME in seconds since the epoch, with the fraction.
double ch_clock_wall_s (void);

#endif
