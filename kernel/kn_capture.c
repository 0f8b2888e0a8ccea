/*  kn_capture - stdout and stderr: buffered Python text, fd-level pipes. */
#include "kn_capture.h"
#include "ch_text.h"
#include "ch_clock.h"
#include "kn_log.h"
#include "ch_io.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define S_PIPE_SIZE (1 << 20)       //  asked of each pipe: fewer wake-ups for fd writers
#define S_READ_ROOM (256u << 10)    //  free queue space before each read of a pipe
#define S_BULK (256u << 10)         //  read this much in one go: do not pause
#define S_COALESCE_MS 2             //  after reading a pipe, let more small writes pile up
#define S_STEP (6u << 20)           //  escaped bytes produced per step (bounds the headroom)
#define S_KEEP_CAP (4u << 20)       //  buffers above this are freed once sent
#define S_DEFAULT_TEXT (1u << 20)

enum { S_PY = 0, S_FD = 1 };

static const char *s_names [2] = { "stdout", "stderr" };

typedef struct {
    uint8_t stream, src;
    size_t len;
} s_run_t;

//  Bytes in the order written, cut into runs of one stream and source.
typedef struct {
    unsigned char *buf;
    size_t len, cap;
    s_run_t *runs;
    size_t nruns, rcap;
} s_queue_t;

//  An incomplete UTF-8 sequence at the end of what a source sent so far.
typedef struct {
    unsigned char b [4];
    size_t len;
} s_hold_t;

struct _kn_capture_t {
    kn_capture_emit_fn *emit;
    kn_capture_raw_fn *raw;     //  large writes as bytes, or NULL
    void *arg;
    int target [2];             //  the fds taken over
    int saved [2];              //  their originals, put back on destroy
    int rfd [2];                //  read ends of the pipes now at target
    int wake [2];               //  wakes the thread: a deadline to keep, or stop
    int window_ms;
    size_t max_text;            //  the text cap for one large write (from the frame cap)
    bool child;                 //  a fork's child: Python writes go to the fds
    pthread_t thread;
    bool started;

    pthread_mutex_t lock;       //  guards the queue and the fields up to send
    s_queue_t q;                //  written, not yet taken for sending
    int64_t first_ms;           //  when q's oldest byte came; 0: q is empty
    bool fenced;                //  the next Python write opens a run of its own
    bool idle;                  //  the thread waits without a deadline
    bool stop;

    pthread_mutex_t send;       //  one sender at a time; guards what follows
    s_queue_t taken;            //  the queue being sent (then empty, for the next swap)
    s_hold_t hold [2][2];       //  [stream][source]
    char *out;                  //  the text being built
    size_t out_len, out_cap;
    int out_stream;
    size_t cap;                 //  the cap in force: max_text, or the queue's
};

//  The process's capture, for the fork handler.
static kn_capture_t *s_live;
static pthread_once_t s_atfork_once = PTHREAD_ONCE_INIT;

//  ---------------------------------------------------------------------------
//  The queue

static void
s_grow (void **p, size_t *cap, size_t need, size_t unit, size_t first)
{
    if (need <= *cap)
        return;
    size_t c = *cap ? *cap : first;
    while (c < need)
        c *= 2;
    void *n = realloc (*p, c * unit);
    if (!n)
        abort ();
    *p = n;
    *cap = c;
}

//  Make the last run (stream, src).
static void
s_run_for (s_queue_t *q, int stream, int src)
{
    if (q->nruns) {
        s_run_t *last = &q->runs [q->nruns - 1];
        if (last->stream == stream && last->src == src)
            return;
    }
    s_grow ((void **) &q->runs, &q->rcap, q->nruns + 1, sizeof (s_run_t), 16);
    q->runs [q->nruns++] = (s_run_t) { (uint8_t) stream, (uint8_t) src, 0 };
}

static void
s_queue_free (s_queue_t *q)
{
    free (q->buf);
    free (q->runs);
    memset (q, 0, sizeof *q);
}

//  Lock held: the queue has bytes; start the window if it just got them.
static void
s_arm (kn_capture_t *self, bool from_thread)
{
    if (self->first_ms)
        return;
    self->first_ms = ch_clock_mono_ms ();
    if (self->idle && !from_thread) {
        self->idle = false;
        ssize_t w = write (self->wake [1], "w", 1);
        (void) w;
    }
}

//  Lock held: read what pipe i holds into the queue. Returns bytes read.
static size_t
s_read_pipe (kn_capture_t *self, int i, bool from_thread)
{
    s_queue_t *q = &self->q;
    size_t total = 0;
    while (1) {
        s_grow ((void **) &q->buf, &q->cap, q->len + S_READ_ROOM, 1, 2 * S_READ_ROOM);
        size_t room = q->cap - q->len;
        ssize_t n = read (self->rfd [i], q->buf + q->len, room);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        s_run_for (q, i, S_FD);
        q->runs [q->nruns - 1].len += (size_t) n;
        q->len += (size_t) n;
        total += (size_t) n;
        if ((size_t) n < room)
            break;              //  the pipe is empty now
    }
    if (total)
        s_arm (self, from_thread);
    return total;
}

//  Lock held: whatever the pipes hold goes into the queue now.
static void
s_drain (kn_capture_t *self)
{
    struct pollfd p [2] = { { self->rfd [0], POLLIN, 0 }, { self->rfd [1], POLLIN, 0 } };
    if (poll (p, 2, 0) <= 0)
        return;
    for (int i = 0; i < 2; i++)
        if (p [i].revents & POLLIN)
            s_read_pipe (self, i, false);
}

//  ---------------------------------------------------------------------------
//  Sending (the send lock held)

static void
s_out_flush (kn_capture_t *self)
{
    if (self->out_len == 0)
        return;
    self->emit (self->arg, s_names [self->out_stream], self->out, self->out_len);
    self->out_len = 0;
}

//  Room for need more bytes in out, within this text's cap: sends the text
//  first if it cannot hold them.
static void
s_out_room (kn_capture_t *self, size_t need)
{
    if (self->out_len + need > self->cap)
        s_out_flush (self);
    s_grow ((void **) &self->out, &self->out_cap, self->out_len + need, 1, 65536);
}

//  Finish the held character h with the first bytes of data (moved past
//  them). False when it is still incomplete: this write was that short.
static bool
s_finish_held (kn_capture_t *self, s_hold_t *h, const unsigned char **data, size_t *len)
{
    unsigned char tmp [8];
    size_t used, take = *len < 4 ? *len : 4, n = h->len + take;
    memcpy (tmp, h->b, h->len);
    memcpy (tmp + h->len, *data, take);
    s_out_room (self, 6 * n);
    self->out_len += ch_json_escape (tmp, n, self->out + self->out_len, 6 * n, &used);
    if (used < h->len) {
        memmove (h->b, tmp + used, n - used);
        h->len = n - used;
        return false;
    }
    *data += used - h->len;
    *len -= used - h->len;
    h->len = 0;
    return true;
}

//  Escape data[0..len) of one source into texts; an incomplete tail is held.
static void
s_send_bytes (kn_capture_t *self, int stream, int src, const unsigned char *data, size_t len)
{
    s_hold_t *h = &self->hold [stream][src];
    if (self->out_len && self->out_stream != stream)
        s_out_flush (self);
    self->out_stream = stream;
    size_t used;
    if (h->len && len && !s_finish_held (self, h, &data, &len))
        return;
    while (len) {
        if (self->out_len + 6 > self->cap)
            s_out_flush (self);
        size_t left = self->cap - self->out_len;
        size_t room = left < S_STEP ? left : S_STEP;
        s_out_room (self, room);
        size_t n = ch_json_escape (data, len, self->out + self->out_len, room, &used);
        self->out_len += n;
        data += used;
        len -= used;
        if (len && room - n >= 6) {
            //  Not for want of room: an incomplete character at the end.
            assert (len < 4);
            memcpy (h->b, data, len);
            h->len = len;
            return;
        }
        if (len && room == left)
            s_out_flush (self);
    }
}

//  Send a taken queue, then leave it empty.
static void
s_send_queue (kn_capture_t *self, s_queue_t *q)
{
    self->cap = self->max_text < KN_CAPTURE_QUEUE_TEXT ? self->max_text : KN_CAPTURE_QUEUE_TEXT;
    size_t off = 0;
    for (size_t r = 0; r < q->nruns; r++) {
        s_send_bytes (self, q->runs [r].stream, q->runs [r].src, q->buf + off, q->runs [r].len);
        off += q->runs [r].len;
    }
    q->len = q->nruns = 0;
    if (q->cap > S_KEEP_CAP)
        s_queue_free (q);
}

static void
s_out_done (kn_capture_t *self)
{
    s_out_flush (self);
    if (self->out_cap > S_KEEP_CAP) {
        free (self->out);
        self->out = NULL;
        self->out_cap = 0;
    }
}

//  Take everything written so far (the pipes too) and send it.
static void
s_take_and_send (kn_capture_t *self)
{
    pthread_mutex_lock (&self->lock);
    s_drain (self);
    s_queue_t t = self->q;
    self->q = self->taken;      //  empty, with its room
    self->taken = t;
    self->first_ms = 0;
    pthread_mutex_unlock (&self->lock);
    s_send_queue (self, &self->taken);
}

//  ---------------------------------------------------------------------------
//  The API

//  A fork's child: the parent sends what it had queued; the child's own
//  writes go straight to the fds (the pipes, which the parent reads).
static void
s_atfork_child (void)
{
    kn_capture_t *self = s_live;
    if (!self)
        return;
    pthread_mutex_init (&self->lock, NULL);
    pthread_mutex_init (&self->send, NULL);
    memset (&self->q, 0, sizeof self->q);       //  not ours to send (or to free)
    self->first_ms = 0;
    self->child = true;
}

static void
s_register_atfork (void)
{
    pthread_atfork (NULL, NULL, s_atfork_child);
}

bool
kn_capture_writev (kn_capture_t *self, int stream, const struct iovec *iov, int n)
{
    assert (self && (stream == KN_STDOUT || stream == KN_STDERR));
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += iov [i].iov_len;
    if (len == 0)
        return false;
    if (self->child) {
        for (int i = 0; i < n; i++)
            (void) ch_write_bytes (self->target [stream], iov [i].iov_base, iov [i].iov_len);
        return false;
    }
    pthread_mutex_lock (&self->lock);
    s_queue_t *q = &self->q;
    s_run_t *last = q->nruns ? &q->runs [q->nruns - 1] : NULL;
    if (!last || last->src != S_PY || last->stream != stream || self->fenced) {
        s_drain (self);         //  fd output already written goes first
        self->fenced = false;
        s_run_for (q, stream, S_PY);
    }
    s_grow ((void **) &q->buf, &q->cap, q->len + len, 1, 65536);
    for (int i = 0; i < n; i++) {
        memcpy (q->buf + q->len, iov [i].iov_base, iov [i].iov_len);
        q->len += iov [i].iov_len;
    }
    q->runs [q->nruns - 1].len += len;
    s_arm (self, false);
    bool over = q->len >= KN_CAPTURE_PENDING_MAX;
    pthread_mutex_unlock (&self->lock);
    return over;
}

bool
kn_capture_write (kn_capture_t *self, int stream, const void *data, size_t len)
{
    struct iovec v = { (void *) data, len };
    return kn_capture_writev (self, stream, &v, 1);
}

//  Send data as raw texts of at most the cap, cut between characters; an
//  incomplete character at the end is held, as the escaping path holds it.
static void
s_send_raw (kn_capture_t *self, int stream, const unsigned char *data, size_t len)
{
    s_hold_t *h = &self->hold [stream][S_PY];
    size_t tail = ch_utf8_tail (data, len);
    len -= tail;
    while (len) {
        size_t n = len > self->max_text ? ch_utf8_cut (data, len, self->max_text) : len;
        self->raw (self->arg, s_names [stream], data, n);
        data += n;
        len -= n;
    }
    memcpy (h->b, data, tail);
    h->len = tail;
}

void
kn_capture_write_now (kn_capture_t *self, int stream, const void *data, size_t len)
{
    assert (self && (stream == KN_STDOUT || stream == KN_STDERR));
    if (self->child) {
        (void) ch_write_bytes (self->target [stream], data, len);
        return;
    }
    pthread_mutex_lock (&self->send);
    s_take_and_send (self);
    if (self->raw && self->hold [stream][S_PY].len == 0) {
        s_out_done (self);      //  what came before goes first
        s_send_raw (self, stream, data, len);
    }
    else {
        self->cap = self->max_text;
        s_send_bytes (self, stream, S_PY, data, len);
        s_out_done (self);
    }
    pthread_mutex_unlock (&self->send);
}

void
kn_capture_fence (kn_capture_t *self)
{
    assert (self);
    if (self->child)
        return;
    pthread_mutex_lock (&self->lock);
    self->fenced = true;
    pthread_mutex_unlock (&self->lock);
}

void
kn_capture_flush (kn_capture_t *self)
{
    assert (self);
    if (self->child)
        return;                 //  the pipes are the parent's to read
    pthread_mutex_lock (&self->send);
    s_take_and_send (self);
    s_out_done (self);
    pthread_mutex_unlock (&self->send);
}

int
kn_capture_fd (const kn_capture_t *self, int stream)
{
    return self->target [stream];
}

void
kn_capture_set_raw (kn_capture_t *self, kn_capture_raw_fn *raw)
{
    pthread_mutex_lock (&self->send);
    self->raw = raw;
    pthread_mutex_unlock (&self->send);
}

void
kn_capture_set_max_text (kn_capture_t *self, size_t max_text)
{
    pthread_mutex_lock (&self->send);
    self->max_text = max_text < KN_CAPTURE_TEXT_MIN ? KN_CAPTURE_TEXT_MIN : max_text;
    pthread_mutex_unlock (&self->send);
}

//  Lock held, and held again on return: wait for the pipes or a wake-up,
//  until the window's deadline if bytes are queued. Returns poll's result.
static int
s_wait (kn_capture_t *self, struct pollfd *p)
{
    int timeout = -1;
    if (self->first_ms) {
        int64_t left = self->first_ms + self->window_ms - ch_clock_mono_ms ();
        timeout = left > 0 ? (int) left : 0;
    }
    self->idle = timeout < 0;
    pthread_mutex_unlock (&self->lock);
    int rc = poll (p, 3, timeout);
    if (rc > 0 && (p [2].revents & POLLIN)) {
        char junk [64];
        while (read (self->wake [0], junk, sizeof junk) > 0)
            ;
    }
    pthread_mutex_lock (&self->lock);
    self->idle = false;
    return rc;
}

//  Lock held: small fd writes (a C loop, a chatty child) came: let them pile
//  up in the pipe rather than wake up for each one.
static void
s_coalesce (kn_capture_t *self, int64_t now)
{
    int64_t left = self->first_ms + self->window_ms - now;
    int ms = left < S_COALESCE_MS ? (int) left : S_COALESCE_MS;
    pthread_mutex_unlock (&self->lock);
    if (ms > 0)
        poll (NULL, 0, ms);
    pthread_mutex_lock (&self->lock);
}

static void *
s_thread (void *arg)
{
    kn_capture_t *self = arg;
    struct pollfd p [3] = {
        { self->rfd [0], POLLIN, 0 }, { self->rfd [1], POLLIN, 0 },
        { self->wake [0], POLLIN, 0 }
    };
    pthread_mutex_lock (&self->lock);
    while (!self->stop) {
        int rc = s_wait (self, p);
        size_t got = 0;
        for (int i = 0; rc > 0 && i < 2; i++)
            if (p [i].revents & POLLIN)
                got += s_read_pipe (self, i, true);
        int64_t now = ch_clock_mono_ms ();
        bool due = self->first_ms && (now - self->first_ms >= self->window_ms
                                      || self->q.len >= KN_CAPTURE_PENDING_MAX);
        if (due && !self->stop) {
            pthread_mutex_unlock (&self->lock);
            kn_capture_flush (self);
            pthread_mutex_lock (&self->lock);
        }
        else if (got && got < S_BULK && !self->stop)
            s_coalesce (self, now);
    }
    pthread_mutex_unlock (&self->lock);
    return NULL;
}

//  Put a non-blocking pipe's write end at target; keep the old fd.
static int
s_take_fd (kn_capture_t *self, int i)
{
    int p [2];
    self->saved [i] = fcntl (self->target [i], F_DUPFD_CLOEXEC, 3);
    if (self->saved [i] < 0 || pipe2 (p, O_CLOEXEC) < 0)
        return -errno;
    fcntl (p [0], F_SETFL, O_NONBLOCK);
    fcntl (p [0], F_SETPIPE_SZ, S_PIPE_SIZE);      //  best effort
    if (dup2 (p [1], self->target [i]) < 0) {
        int e = errno;
        close (p [0]);
        close (p [1]);
        return -e;
    }
    close (p [1]);
    self->rfd [i] = p [0];
    return 0;
}

kn_capture_t *
kn_capture_new (const kn_capture_config_t *config, kn_capture_emit_fn *emit, void *arg)
{
    assert (emit);
    kn_capture_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->emit = emit;
    self->arg = arg;
    self->target [0] = config ? config->fds [0] : 1;
    self->target [1] = config ? config->fds [1] : 2;
    self->window_ms = config && config->window_ms > 0 ? config->window_ms : KN_CAPTURE_WINDOW_MS;
    self->max_text = config && config->max_text ? config->max_text : S_DEFAULT_TEXT;
    if (self->max_text < KN_CAPTURE_TEXT_MIN)
        self->max_text = KN_CAPTURE_TEXT_MIN;
    self->saved [0] = self->saved [1] = self->rfd [0] = self->rfd [1] = -1;
    self->wake [0] = self->wake [1] = -1;
    pthread_mutex_init (&self->lock, NULL);
    pthread_mutex_init (&self->send, NULL);
    if (s_take_fd (self, 0) < 0 || s_take_fd (self, 1) < 0
    ||  pipe2 (self->wake, O_CLOEXEC | O_NONBLOCK) < 0)
        goto fail;
    //  Signals are for the main thread (interrupts): block them here.
    sigset_t all, old;
    sigfillset (&all);
    pthread_sigmask (SIG_SETMASK, &all, &old);
    int rc = pthread_create (&self->thread, NULL, s_thread, self);
    pthread_sigmask (SIG_SETMASK, &old, NULL);
    if (rc != 0)
        goto fail;
    self->started = true;
    s_live = self;
    pthread_once (&s_atfork_once, s_register_atfork);
    return self;
fail:
    kn_log (CH_LOG_ERROR, "capture.fail", "reason=\"cannot capture fd %d/%d: %s\"",
            self->target [0], self->target [1], strerror (errno));
    kn_capture_destroy (&self);
    return NULL;
}

void
kn_capture_destroy (kn_capture_t **self_p)
{
    assert (self_p);
    kn_capture_t *self = *self_p;
    if (!self)
        return;
    if (self->started) {
        pthread_mutex_lock (&self->lock);
        self->stop = true;
        pthread_mutex_unlock (&self->lock);
        ssize_t w = write (self->wake [1], "x", 1);
        (void) w;
        pthread_join (self->thread, NULL);
        kn_capture_flush (self);
    }
    if (s_live == self)
        s_live = NULL;
    for (int i = 0; i < 2; i++) {
        if (self->saved [i] >= 0) {
            dup2 (self->saved [i], self->target [i]);
            close (self->saved [i]);
        }
        if (self->rfd [i] >= 0)
            close (self->rfd [i]);
    }
    if (self->wake [0] >= 0) {
        close (self->wake [0]);
        close (self->wake [1]);
    }
    s_queue_free (&self->q);
    s_queue_free (&self->taken);
    free (self->out);
    pthread_mutex_destroy (&self->lock);
    pthread_mutex_destroy (&self->send);
    free (self);
    *self_p = NULL;
}
