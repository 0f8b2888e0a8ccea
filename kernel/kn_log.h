/*  kn_log - the kernel's log lines: one line an event, leveled, to the fd the
 *  kernel had as stderr before output capture took fd 2 over. The line is
 *  ch_log's, with "component=kernel pid=N" after the event.
 */
#ifndef KN_LOG_H
#define KN_LOG_H

#include "ch_log.h"

typedef enum {
    KN_LOG_ERROR = CH_LOG_ERROR, KN_LOG_WARN = CH_LOG_WARN, KN_LOG_INFO = CH_LOG_INFO,
    KN_LOG_DEBUG = CH_LOG_DEBUG
} kn_log_level_t;

//  Log to fd at or below level. Call before threads start.
void kn_log_init (int fd, kn_log_level_t level);
void kn_log (kn_log_level_t level, const char *event, const char *fmt, ...)
    __attribute__ ((format (printf, 3, 4)));

#endif
