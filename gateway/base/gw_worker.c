/*  gw_worker - a thread for the file I/O the reactor must not do itself. */
#include "base/gw_worker.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

typedef struct s_job_t {
    struct s_job_t *next;
    gw_work_fn *work;
    gw_work_done_fn *done;
    void *arg;
    bool cancelled;                             //  done must not run
    void (*release) (void *arg);                //  ... and arg goes this way
} s_job_t;

typedef struct {
    s_job_t *head, *tail;
} s_queue_t;

struct _gw_worker_t {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    s_queue_t todo, finished;                   //  guarded by lock
    s_job_t *running;                           //  guarded by lock
    bool quit;
    int events;
};

static void
s_push (s_queue_t *q, s_job_t *job)
{
    job->next = NULL;
    if (q->tail)
        q->tail->next = job;
    else
        q->head = job;
    q->tail = job;
}

static s_job_t *
s_pop (s_queue_t *q)
{
    s_job_t *job = q->head;
    if (job && !(q->head = job->next))
        q->tail = NULL;
    return job;
}

static void *
s_thread (void *arg)
{
    gw_worker_t *self = arg;
    pthread_mutex_lock (&self->lock);
    while (!self->quit) {
        s_job_t *job = s_pop (&self->todo);
        if (!job) {
            pthread_cond_wait (&self->wake, &self->lock);
            continue;
        }
        self->running = job;
        pthread_mutex_unlock (&self->lock);
        job->work (job->arg);
        pthread_mutex_lock (&self->lock);
        self->running = NULL;
        s_push (&self->finished, job);
        uint64_t one = 1;
        if (write (self->events, &one, sizeof one) < 0)
            abort ();                           //  an eventfd write cannot fail here
    }
    pthread_mutex_unlock (&self->lock);
    return NULL;
}

gw_worker_t *
gw_worker_new (void)
{
    gw_worker_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->events = eventfd (0, EFD_NONBLOCK | EFD_CLOEXEC);
    pthread_mutex_init (&self->lock, NULL);
    pthread_cond_init (&self->wake, NULL);
    if (self->events < 0 || pthread_create (&self->thread, NULL, s_thread, self) != 0)
        abort ();                               //  no worker: nothing can move files
    return self;
}

static void
s_forget (s_job_t *job)
{
    if (job->release)
        job->release (job->arg);
    free (job);
}

void
gw_worker_destroy (gw_worker_t **self_p)
{
    assert (self_p);
    gw_worker_t *self = *self_p;
    if (!self)
        return;
    pthread_mutex_lock (&self->lock);
    self->quit = true;
    pthread_cond_signal (&self->wake);
    pthread_mutex_unlock (&self->lock);
    pthread_join (self->thread, NULL);
    s_job_t *job;
    while ((job = s_pop (&self->todo)) || (job = s_pop (&self->finished))) {
        if (!job->cancelled)
            job->release = free;
        s_forget (job);
    }
    close (self->events);
    pthread_mutex_destroy (&self->lock);
    pthread_cond_destroy (&self->wake);
    free (self);
    *self_p = NULL;
}

int
gw_worker_fd (const gw_worker_t *self)
{
    assert (self);
    return self->events;
}

void
gw_worker_submit (gw_worker_t *self, gw_work_fn *work, gw_work_done_fn *done, void *arg)
{
    assert (self && work && done);
    s_job_t *job = calloc (1, sizeof *job);
    if (!job)
        abort ();
    *job = (s_job_t) { .work = work, .done = done, .arg = arg };
    pthread_mutex_lock (&self->lock);
    s_push (&self->todo, job);
    pthread_cond_signal (&self->wake);
    pthread_mutex_unlock (&self->lock);
}

void
gw_worker_drain (gw_worker_t *self)
{
    assert (self);
    uint64_t n;
    if (read (self->events, &n, sizeof n) < 0 && errno != EAGAIN)
        abort ();
    while (true) {
        pthread_mutex_lock (&self->lock);
        s_job_t *job = s_pop (&self->finished);
        pthread_mutex_unlock (&self->lock);
        if (!job)
            break;
        if (job->cancelled)
            s_forget (job);
        else {
            job->done (job->arg);
            free (job);
        }
    }
}

static bool
s_matches (const s_job_t *job, gw_work_fn *work, void *arg)
{
    return (!work || job->work == work) && (!arg || job->arg == arg);
}

//  Mark the jobs of q for work and arg; queued ones (todo) go at once.
static void
s_cancel_in (s_queue_t *q, gw_work_fn *work, void *arg, void (*release) (void *), bool drop)
{
    s_job_t **pp = &q->head, *last = NULL;
    while (*pp) {
        s_job_t *job = *pp;
        if (!s_matches (job, work, arg) || job->cancelled) {
            last = job;
            pp = &job->next;
            continue;
        }
        job->cancelled = true;
        job->release = release;
        if (!drop) {
            last = job;
            pp = &job->next;
            continue;
        }
        *pp = job->next;
        s_forget (job);
    }
    q->tail = last;
}

void
gw_worker_cancel (gw_worker_t *self, gw_work_fn *work, void *arg, void (*release) (void *arg))
{
    assert (self);
    pthread_mutex_lock (&self->lock);
    s_cancel_in (&self->todo, work, arg, release, true);
    s_cancel_in (&self->finished, work, arg, release, false);
    if (self->running && s_matches (self->running, work, arg) && !self->running->cancelled) {
        self->running->cancelled = true;
        self->running->release = release;
    }
    pthread_mutex_unlock (&self->lock);
}
