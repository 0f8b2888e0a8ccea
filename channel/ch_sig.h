/*  ch_sig - a child's signal state, reset before exec.

    Dispositions (other than caught ones) and the blocked mask survive exec:
    whatever a launcher ignored (nohup's SIGHUP, a background job's SIGINT) or
    a parent blocked for its signalfd would reach the program it starts.
*/
#ifndef CH_SIG_H
#define CH_SIG_H

//  Every signal to its default disposition and an empty mask. Only
//  async-signal-safe calls: safe between fork and exec in a threaded parent.
void ch_sig_defaults (void);

#endif
