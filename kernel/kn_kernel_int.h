/*  kn_kernel_int - the kernel core's state, shared by its two files:
 *  kn_kernel.c (dispatch, queue, control, stdin) and kn_kernel_pub.c
 *  (everything published on iopub). Not for other modules.
 */
#ifndef KN_KERNEL_INT_H
#define KN_KERNEL_INT_H

#include "kn_kernel.h"
#include "kn_jobq.h"
#include "kn_outfiles.h"

#include <pthread.h>
#include <sys/types.h>

typedef struct s_item_t {
    ch_msg_t *msg;
    struct s_item_t *next;
} s_item_t;

struct _kn_kernel_t {
    kn_chan_t *chan;                //  borrowed
    kn_interp_t interp;
    char session [37];
    pid_t pid;                      //  the kernel process (not a cell's fork)
    char *outdir;
    bool in_workspace;              //  outdir is under KN_WORKSPACE: the guest's layout
    kn_outfiles_t *outfiles;
    json_t *info;                   //  kernel_info_reply content, cached
    void (*flush) (void *);         //  capture flush
    void *flush_arg;
    pthread_t main_thread, reader;
    kn_jobq_t *debugq;              //  debug_requests, off the reader thread
    pthread_mutex_t lock;           //  guards everything below
    pthread_cond_t cond;            //  queue, input and closing; CLOCK_MONOTONIC
    s_item_t *head, *tail;          //  shell requests waiting to run
    int closed;                     //  the channel is gone
    json_t *parent;                 //  header of the shell request running
    char *parent_json;              //  ... as compact JSON, for spliced messages ("{}": none)
    bool silent;                    //  that request is silent
    bool executing;                 //  an interrupt may be delivered
    bool ipython;                   //  for hello: IPython backs the shell
    bool input_waiting;
    char *input_value;
    json_int_t last_count;          //  last execute_reply execution_count
    ch_msg_t *reseed;               //  main thread only: entropy hello not yet applied
};

#endif
