/*  gi_log - cellvm-init's log lines to the console (ttyS0, the per-session
 *  console log on the host), in ch_log's one format, with "component=init
 *  up=SECONDS" after the event: the time since boot, for the guest's wall
 *  clock is the host's only once the host has set it.
 */
#ifndef GI_LOG_H
#define GI_LOG_H

#include "ch_log.h"  //  the levels: CH_LOG_ERROR .. CH_LOG_DEBUG

//  One line on fd 2, whatever the level (the console keeps them all); fmt
//  gives key=value pairs, or is NULL. Never fails.
void gi_log (ch_log_level_t level, const char *event, const char *fmt, ...)
    __attribute__ ((format (printf, 3, 4)));

#endif
