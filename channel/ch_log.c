/*  ch_log - the one log line (see ch_log.h). */
#include "ch_log.h"
#include "ch_io.h"

#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static const char *s_names [] = { "error", "warn", "info", "debug" };

int
ch_log_level_parse (const char *name)
{
    for (int i = CH_LOG_ERROR; name && i <= CH_LOG_DEBUG; i++)
        if (strcasecmp (name, s_names [i]) == 0)
            return i;
    return name && strcasecmp (name, "warning") == 0 ? CH_LOG_WARN : -EINVAL;
}

//  The level's name ("error" .. "debug"); "-" when level is none of them.
static const char *
s_level_name (int level)
{
    return level >= CH_LOG_ERROR && level <= CH_LOG_DEBUG ? s_names [level] : "-";
}

//  The UTC time with milliseconds into out; the bytes written.
static size_t
s_stamp (char *out, size_t cap)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime (CLOCK_REALTIME, &ts);
    gmtime_r (&ts.tv_sec, &tm);
    size_t n = strftime (out, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    int m = snprintf (out + n, cap - n, ".%03ldZ", ts.tv_nsec / 1000000);
    return n + (m > 0 ? (size_t) m : 0);
}

//  The one scrub: no byte of an event may end its line early.
static void
s_flatten (char *text, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if ((unsigned char) text [i] < 0x20 || text [i] == 0x7f)
            text [i] = ' ';
}

size_t
ch_log_vformat (char *out, size_t cap, int level, const char *event, const char *prefix,
                const char *fmt, va_list ap)
{
    assert (out && cap >= 64);
    size_t n = s_stamp (out, cap);
    bool more = prefix && prefix [0];
    int m = snprintf (out + n, cap - n, " level=%s event=%s%s%s", s_level_name (level),
                      event ? event : "-", more ? " " : "", more ? prefix : "");
    n += m > 0 ? (size_t) m : 0;
    if (n < cap - 2 && fmt && fmt [0]) {
        out [n] = ' ';                          //  kept only if fmt wrote something
        m = vsnprintf (out + n + 1, cap - n - 1, fmt, ap);
        if (m > 0)
            n += 1 + (size_t) m;
    }
    if (n >= cap - 2) {                         //  cut: say so, keep the newline
        n = cap - 2;
        memcpy (out + n - 3, "...", 3);
    }
    s_flatten (out, n);
    out [n++] = '\n';
    out [n] = 0;
    return n;
}

void
ch_log_vwrite (int fd, int level, const char *event, const char *prefix, const char *fmt,
               va_list ap)
{
    int saved_errno = errno;
    char line [CH_LOG_LINE_MAX];
    size_t n = ch_log_vformat (line, sizeof line, level, event, prefix, fmt, ap);
    (void) ch_write_bytes (fd, line, n);        //  nowhere left to report a failure
    errno = saved_errno;
}
