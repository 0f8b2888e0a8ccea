/*  gi_log - one-line log records from cellvm-init to the console (ttyS0, the
 *  per-session console log on the host).
 */
#ifndef GI_LOG_H
#define GI_LOG_H

//  printf-style; adds "cellvm-init: " and a newline. Never fails.
void gi_log (const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));

#endif
