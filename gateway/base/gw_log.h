/*  gw_log - structured, leveled, one-line-per-event logging.

    Every line is written with a single write() so lines from several
    threads never interleave:

        2026-11-29T12:00:00.123Z level=info event=wire.drop channel=shell reason="bad signature"

    The format argument should produce key=value pairs. Never log keys, and
    never log message contents above debug. Control characters in a line are
    replaced by spaces so one event is always one line (the line is ch_log's,
    the same in every cellvm program).
*/
#ifndef GW_LOG_H
#define GW_LOG_H

#include <stdbool.h>
#include <stdio.h>

#include "ch_log.h"

typedef enum {
    GW_LOG_ERROR = CH_LOG_ERROR, GW_LOG_WARN = CH_LOG_WARN, GW_LOG_INFO = CH_LOG_INFO,
    GW_LOG_DEBUG = CH_LOG_DEBUG
} gw_log_level_t;

//  Set the level and the destination (NULL means stderr). The default before
//  any call is info to stderr. The FILE is not closed by this module.
void gw_log_init (gw_log_level_t level, FILE *out);

//  "error", "warn" (or "warning"), "info", "debug", any case -> level;
//  -EINVAL otherwise.
int gw_log_level_parse (const char *name);

//  True when a line at this level would be written (skip costly formatting).
bool gw_log_enabled (gw_log_level_t level);

//  Write one line: timestamp, level, event, the prefix (if any), fmt output.
void gw_log (gw_log_level_t level, const char *event, const char *fmt, ...)
    __attribute__ ((format (printf, 3, 4)));

//  Key=value pairs added to every line after the event, e.g.
//  "pid=123 session=abc". The string is copied; NULL or "" clears it.
void gw_log_set_prefix (const char *kv);

#endif
