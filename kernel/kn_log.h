/*  kn_log - the kernel's log lines: one line an event, leveled, to the fd the
 *  kernel had as stderr before output capture took fd 2 over. The line is
 *  ch_log's, with "component=kernel pid=N" after the event.
 */
#ifndef KN_LOG_H
#define KN_LOG_H

#include "ch_log.h"  //  the levels: CH_LOG_ERROR .. CH_LOG_DEBUG

//  Log to fd at or below level. Call before threads start.
void kn_log_init (int fd, ch_log_level_t level);
void kn_log (ch_log_level_t level, const char *event, const char *fmt, ...)
    __attribute__ ((format (printf, 3, 4)));

#endif
