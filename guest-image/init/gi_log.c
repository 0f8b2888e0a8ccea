/*  gi_log - console log lines for cellvm-init. */
#include "gi_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

void
gi_log (const char *fmt, ...)
{
    char line [1024];
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    int n = snprintf (line, sizeof line, "cellvm-init[%ld.%03ld]: ",
                      (long) ts.tv_sec, ts.tv_nsec / 1000000);
    va_list ap;
    va_start (ap, fmt);
    int m = vsnprintf (line + n, sizeof line - (size_t) n - 1, fmt, ap);
    va_end (ap);
    size_t len = (size_t) n + (m < 0 ? 0 : (size_t) m);
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    line [len++] = '\n';
    //  One write per line so lines from init and the kernel do not interleave.
    ssize_t rc = write (2, line, len);
    (void) rc;
}
