/*  ch_sig - signals through a signalfd, and a child's signal state reset
    before exec.

    Every cellvm program with a loop reads its signals from a signalfd, so
    no handler ever interrupts it. Dispositions (other than caught ones) and
    the blocked mask survive exec: whatever a launcher ignored (nohup's
    SIGHUP, a background job's SIGINT) or a parent blocked for its signalfd
    would reach the program it starts, hence ch_sig_defaults.
*/
#ifndef CH_SIG_H
#define CH_SIG_H

#include <stdbool.h>

//  sigs (0-terminated) blocked and delivered through a new signalfd
//  (non-blocking, close-on-exec), and SIGPIPE ignored: a peer gone is a
//  write error, never a death. only: the blocked mask becomes exactly sigs
//  (threads started later inherit it), else sigs are added to it. The fd,
//  or -errno.
int ch_sig_fd (const int *sigs, bool only);

//  Every signal to its default disposition and an empty mask. Only
//  async-signal-safe calls: safe between fork and exec in a threaded parent.
void ch_sig_defaults (void);

#endif
