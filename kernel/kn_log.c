/*  kn_log - the kernel's log lines, in ch_log's one format. */
#include "kn_log.h"
#include "ch_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

static int s_fd = 2;
static ch_log_level_t s_level = CH_LOG_INFO;

void
kn_log_init (int fd, ch_log_level_t level)
{
    s_fd = fd;
    s_level = level;
}

void
kn_log (ch_log_level_t level, const char *event, const char *fmt, ...)
{
    if (level > s_level)
        return;
    //  The pid on every line: a cell's fork logs too, from another process.
    char prefix [48];
    snprintf (prefix, sizeof prefix, "component=kernel pid=%d", (int) getpid ());
    va_list ap;
    va_start (ap, fmt);
    ch_log_vwrite (s_fd, (int) level, event, prefix, fmt, ap);
    va_end (ap);
}
