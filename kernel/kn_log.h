/*  kn_log - the kernel's log lines: one line an event, leveled, to the fd the
 *  kernel had as stderr before output capture took fd 2 over.
 */
#ifndef KN_LOG_H
#define KN_LOG_H

typedef enum { KN_LOG_ERROR = 0, KN_LOG_WARN, KN_LOG_INFO, KN_LOG_DEBUG } kn_log_level_t;

//  Log to fd at or below level. Call before threads start.
void kn_log_init (int fd, kn_log_level_t level);
//  "error|warn|info|debug" -> level, or -1.
int kn_log_level_parse (const char *name);
void kn_log (kn_log_level_t level, const char *event, const char *fmt, ...)
    __attribute__ ((format (printf, 3, 4)));

#endif
