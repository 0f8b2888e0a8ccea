/*  mc_log - one line per event on stderr, key=value. */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "mc_log.h"

static int s_level = MC_LOG_INFO;

void
mc_log_set_level (int level)
{
    s_level = level;
}

void
mc_log (int level, const char *event, const char *fmt, ...)
{
    static const char *const names [] = { "error", "warn", "info", "debug" };
    if (level > s_level || level < 0)
        return;
    struct timespec ts;
    clock_gettime (CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r (&ts.tv_sec, &tm);
    char when [32];
    strftime (when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    char line [1024];
    va_list ap;
    va_start (ap, fmt);
    vsnprintf (line, sizeof line, fmt, ap);
    va_end (ap);
    fprintf (stderr, "%s.%03ldZ level=%s event=%s %s\n", when, ts.tv_nsec / 1000000,
             names [level], event, line);
}
