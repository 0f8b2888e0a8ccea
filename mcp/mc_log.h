/*  mc_log - one line per event on stderr, in ch_log's one format, as the
    gateway logs. stdout is the MCP stream: nothing else may ever be written
    there. */
#ifndef MC_LOG_H
#define MC_LOG_H

#include "ch_log.h"  //  the levels: CH_LOG_ERROR .. CH_LOG_DEBUG

//  Lines above level are dropped (default CH_LOG_INFO).
void mc_log_set_level (int level);

//  "2026-01-01T00:00:00.000Z level=info event=EVENT <fmt...>"
void mc_log (int level, const char *event, const char *fmt, ...)
    __attribute__ ((format (printf, 3, 4)));

#endif
