/*  gw_worker - a thread for the file I/O the reactor must not do itself.

    Writing hundreds of MiB to a host disk can stall in write() for a long
    time (dirty-page throttling, a slow disk). The reactor hands such work
    to a worker: a job runs on the worker's thread, then its done callback
    runs on the reactor thread when the reactor drains the worker's eventfd.
    Jobs run one at a time, in the order they were submitted.
*/
#ifndef GW_WORKER_H
#define GW_WORKER_H

typedef struct _gw_worker_t gw_worker_t;

//  Runs on the worker thread: the blocking part. Must not touch reactor state.
typedef void (gw_work_fn) (void *arg);
//  Runs on the reactor thread afterwards, from gw_worker_drain.
typedef void (gw_work_done_fn) (void *arg);

gw_worker_t *gw_worker_new (void);

//  Wait for the job that runs, drop those queued (their done never runs, and
//  arg is freed with free()), stop the thread; nulls *self_p.
void gw_worker_destroy (gw_worker_t **self_p);

//  Readable when finished jobs wait for gw_worker_drain.
int gw_worker_fd (const gw_worker_t *self);

//  Queue work (arg stays the caller's, but see destroy and cancel).
void gw_worker_submit (gw_worker_t *self, gw_work_fn *work, gw_work_done_fn *done, void *arg);

//  Run the done callback of every finished job.
void gw_worker_drain (gw_worker_t *self);

//  Forget every job of work (NULL: of any work) whose arg is arg (NULL: any
//  arg): queued ones never run, a running one finishes but its done never
//  runs. Each forgotten arg is released with release (NULL: left alone).
//  Modules that share a worker name their own work, so that one never
//  releases another's arg its own way.
void gw_worker_cancel (gw_worker_t *self, gw_work_fn *work, void *arg,
                       void (*release) (void *arg));

#endif
