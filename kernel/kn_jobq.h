/*  kn_jobq - one thread that runs jobs (messages) in the order they came.
 *
 *  The kernel's debug_requests run here: each needs the GIL and may wait
 *  for the debugger, and the reader thread must stay free meanwhile for
 *  interrupts, input replies and other control requests.
 */
#ifndef KN_JOBQ_H
#define KN_JOBQ_H

#include "ch_msg.h"

typedef struct _kn_jobq_t kn_jobq_t;

//  Called on the queue's thread with each message, which it then owns.
typedef void (kn_jobq_fn) (void *arg, ch_msg_t **msg_p);

//  Start the thread (all signals blocked on it). NULL when it cannot start.
kn_jobq_t *kn_jobq_new (kn_jobq_fn *fn, void *arg);

//  Stop the thread after the job it is running (queued jobs are dropped)
//  and join it.
void kn_jobq_destroy (kn_jobq_t **self_p);

//  Queue a message; takes *msg_p.
void kn_jobq_push (kn_jobq_t *self, ch_msg_t **msg_p);

#endif
