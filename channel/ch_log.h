/*  ch_log - the one log line of every cellvm program: the gateway's gw_log,
    the kernel's kn_log, cellvm-mcp's mc_log and init's gi_log all write

        2026-11-29T12:00:00.123Z level=warn event=wire.drop channel=shell reason="bad signature"

    the UTC time with milliseconds, the level, the event, the program's own
    key=value prefix (if any), then the caller's key=value pairs. A control
    character anywhere in the line becomes a space, so one event is always
    one line whatever a value quotes; a line over CH_LOG_LINE_MAX is cut and
    ends in "...". Each logger keeps its own level and destination; the line
    leaves in one write(), so lines from threads never interleave.
    Part of the channel library.
*/
#ifndef CH_LOG_H
#define CH_LOG_H

#include <stdarg.h>
#include <stddef.h>

typedef enum { CH_LOG_ERROR = 0, CH_LOG_WARN, CH_LOG_INFO, CH_LOG_DEBUG } ch_log_level_t;

#define CH_LOG_LINE_MAX 4096                    //  the buffer a line is made in, NUL included

//  "error", "warn" (or "warning"), "info", "debug", any case -> the level;
//  -EINVAL for anything else (NULL too).
int ch_log_level_parse (const char *name);

//  One line into out (cap bytes, at least 64; NUL-terminated), its newline
//  included, every control character a space; prefix and fmt may be NULL or
//  "". The length, the NUL not counted.
size_t ch_log_vformat (char *out, size_t cap, int level, const char *event, const char *prefix,
                       const char *fmt, va_list ap);

//  ch_log_vformat's line written to fd in one write. errno is kept: callers
//  log a failure, then look at errno.
void ch_log_vwrite (int fd, int level, const char *event, const char *prefix, const char *fmt,
                    va_list ap);

#endif
