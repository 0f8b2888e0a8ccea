/*  kn_jobq - one thread that runs jobs in order. */
#include "kn_jobq.h"

#include <assert.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>

typedef struct s_job_t {
    ch_msg_t *msg;
    struct s_job_t *next;
} s_job_t;

struct _kn_jobq_t {
    kn_jobq_fn *fn;
    void *arg;
    pthread_t thread;
    pthread_mutex_t lock;       //  guards what follows
    pthread_cond_t cond;
    s_job_t *head, *tail;
    bool stop;
};

static void *
s_run (void *arg)
{
    kn_jobq_t *self = arg;
    pthread_mutex_lock (&self->lock);
    while (!self->stop) {
        s_job_t *job = self->head;
        if (!job) {
            pthread_cond_wait (&self->cond, &self->lock);
            continue;
        }
        if (!(self->head = job->next))
            self->tail = NULL;
        pthread_mutex_unlock (&self->lock);
        self->fn (self->arg, &job->msg);
        ch_msg_destroy (&job->msg);
        free (job);
        pthread_mutex_lock (&self->lock);
    }
    pthread_mutex_unlock (&self->lock);
    return NULL;
}

kn_jobq_t *
kn_jobq_new (kn_jobq_fn *fn, void *arg)
{
    assert (fn);
    kn_jobq_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->fn = fn;
    self->arg = arg;
    pthread_mutex_init (&self->lock, NULL);
    pthread_cond_init (&self->cond, NULL);
    sigset_t all, old;
    sigfillset (&all);
    pthread_sigmask (SIG_SETMASK, &all, &old);
    int rc = pthread_create (&self->thread, NULL, s_run, self);
    pthread_sigmask (SIG_SETMASK, &old, NULL);
    if (rc != 0)
        goto fail;
    return self;
fail:
    pthread_mutex_destroy (&self->lock);
    pthread_cond_destroy (&self->cond);
    free (self);
    return NULL;
}

void
kn_jobq_destroy (kn_jobq_t **self_p)
{
    assert (self_p);
    kn_jobq_t *self = *self_p;
    if (!self)
        return;
    pthread_mutex_lock (&self->lock);
    self->stop = true;
    pthread_cond_broadcast (&self->cond);
    pthread_mutex_unlock (&self->lock);
    pthread_join (self->thread, NULL);
    while (self->head) {
        s_job_t *job = self->head;
        self->head = job->next;
        ch_msg_destroy (&job->msg);
        free (job);
    }
    pthread_mutex_destroy (&self->lock);
    pthread_cond_destroy (&self->cond);
    free (self);
    *self_p = NULL;
}

void
kn_jobq_push (kn_jobq_t *self, ch_msg_t **msg_p)
{
    assert (self && msg_p && *msg_p);
    s_job_t *job = calloc (1, sizeof *job);
    if (!job)
        abort ();
    job->msg = *msg_p;
    *msg_p = NULL;
    pthread_mutex_lock (&self->lock);
    if (self->tail)
        self->tail->next = job;
    else
        self->head = job;
    self->tail = job;
    pthread_cond_signal (&self->cond);
    pthread_mutex_unlock (&self->lock);
}
