/*  mc_log - one line per event on stderr (see mc_log.h). */
#include <stdarg.h>
#include <unistd.h>

#include "mc_log.h"

static int s_level = CH_LOG_INFO;

void
mc_log_set_level (int level)
{
    s_level = level;
}

void
mc_log (int level, const char *event, const char *fmt, ...)
{
    if (level > s_level || level < 0)
        return;
    va_list ap;
    va_start (ap, fmt);
    ch_log_vwrite (STDERR_FILENO, level, event, NULL, fmt, ap);
    va_end (ap);
}
