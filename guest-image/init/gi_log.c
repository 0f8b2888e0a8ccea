/*  gi_log - console log lines for cellvm-init (see gi_log.h). */
#include "gi_log.h"
#include "ch_clock.h"

#include <stdarg.h>
#include <stdio.h>

void
gi_log (ch_log_level_t level, const char *event, const char *fmt, ...)
{
    char prefix [48];
    int64_t up = ch_clock_mono_ms ();
    snprintf (prefix, sizeof prefix, "component=init up=%lld.%03d", (long long) (up / 1000),
              (int) (up % 1000));
    va_list ap;
    va_start (ap, fmt);
    //  One write per line, so lines from init and the kernel do not interleave.
    ch_log_vwrite (2, level, event, prefix, fmt, ap);
    va_end (ap);
}
