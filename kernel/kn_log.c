/*  kn_log - the kernel's log lines. */
#include "kn_log.h"
#include "ch_msg.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int s_fd = 2;
static kn_log_level_t s_level = KN_LOG_INFO;
static const char *s_names [] = { "error", "warn", "info", "debug" };

void
kn_log_init (int fd, kn_log_level_t level)
{
    s_fd = fd;
    s_level = level;
}

int
kn_log_level_parse (const char *name)
{
    for (int i = 0; name && i < 4; i++)
        if (strcmp (name, s_names [i]) == 0)
            return i;
    return -1;
}

void
kn_log (kn_log_level_t level, const char *event, const char *fmt, ...)
{
    if (level > s_level)
        return;
    char line [2048], now [32];
    ch_utc_now (now);
    int n = snprintf (line, sizeof line, "%s level=%s component=kernel pid=%d event=%s ",
                      now, s_names [level], (int) getpid (), event);
    va_list ap;
    va_start (ap, fmt);
    if (n > 0 && (size_t) n < sizeof line)
        n += vsnprintf (line + n, sizeof line - (size_t) n, fmt, ap);
    va_end (ap);
    if (n < 0)
        return;
    if ((size_t) n >= sizeof line - 1)
        n = (int) sizeof line - 2;
    line [n++] = '\n';
    //  One write per line so lines from threads never interleave.
    ssize_t w = write (s_fd, line, (size_t) n);
    (void) w;
}
