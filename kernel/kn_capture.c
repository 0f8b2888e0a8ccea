/*  kn_capture - fd-level capture of stdout and stderr. */
#include "kn_capture.h"
#include "ch_util.h"
#include "kn_log.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    const char *name;
    int target;             //  1 or 2
    int saved;              //  the original fd, restored on destroy
    int rfd;                //  read end of the pipe now at target
    unsigned char *buf;     //  bytes read, not yet emitted
    size_t len, cap;
} s_stream_t;

struct _kn_capture_t {
    kn_capture_emit_fn *emit;
    void *arg;
    s_stream_t s [2];
    int wake [2];           //  wakes the thread to stop
    pthread_mutex_t lock;
    pthread_t thread;
    int stop;
    int64_t first_ms;       //  when the oldest pending byte arrived, or 0
};


//  Length of the UTF-8 sequence led by c, or 0 if c cannot lead one.
static size_t
s_seq_len (unsigned char c)
{
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) return 2;
    if (c >= 0xe0 && c <= 0xef) return 3;
    if (c >= 0xf0 && c <= 0xf4) return 4;
    return 0;
}

//  Is in[0..n) a well-formed sequence (no overlongs, surrogates, > U+10FFFF)?
static int
s_seq_ok (const unsigned char *in, size_t n)
{
    for (size_t i = 1; i < n; i++)
        if ((in [i] & 0xc0) != 0x80)
            return 0;
    if (n == 3 && in [0] == 0xe0 && in [1] < 0xa0) return 0;
    if (n == 3 && in [0] == 0xed && in [1] > 0x9f) return 0;
    if (n == 4 && in [0] == 0xf0 && in [1] < 0x90) return 0;
    if (n == 4 && in [0] == 0xf4 && in [1] > 0x8f) return 0;
    return 1;
}

size_t
kn_utf8_sanitize (const unsigned char *in, size_t len, char *out, size_t *keep)
{
    size_t i = 0, o = 0;
    *keep = 0;
    while (i < len) {
        size_t n = s_seq_len (in [i]);
        if (n > 1 && i + n > len) {
            //  Possibly cut mid-character: hold back if what we have is a prefix.
            size_t have = len - i, j = 1;
            while (j < have && (in [i + j] & 0xc0) == 0x80)
                j++;
            if (j == have) {
                *keep = have;
                break;
            }
        }
        if (n == 0 || i + n > len || !s_seq_ok (in + i, n) || in [i] == 0) {
            memcpy (out + o, "\xef\xbf\xbd", 3);    //  U+FFFD; NUL too, for JSON
            o += 3;
            i++;
            continue;
        }
        memcpy (out + o, in + i, n);
        o += n;
        i += n;
    }
    return o;
}

//  Emit one stream's pending bytes. Lock held.
static void
s_emit (kn_capture_t *self, s_stream_t *st)
{
    if (st->len == 0)
        return;
    char *text = malloc (st->len * 3 + 1);
    if (!text)
        abort ();
    size_t keep;
    size_t n = kn_utf8_sanitize (st->buf, st->len, text, &keep);
    if (n > 0)
        self->emit (self->arg, st->name, text, n);
    memmove (st->buf, st->buf + st->len - keep, keep);
    st->len = keep;
    free (text);
}

//  Read what the pipe has without blocking. Lock held. Returns bytes read.
static size_t
s_drain (kn_capture_t *self, s_stream_t *st)
{
    size_t total = 0;
    while (1) {
        if (st->cap - st->len < 4096) {
            st->cap = st->cap ? st->cap * 2 : KN_CAPTURE_CHUNK;
            st->buf = realloc (st->buf, st->cap);
            if (!st->buf)
                abort ();
        }
        ssize_t n = read (st->rfd, st->buf + st->len, st->cap - st->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        st->len += (size_t) n;
        total += (size_t) n;
        if (st->len >= KN_CAPTURE_CHUNK)
            s_emit (self, st);
    }
    return total;
}

void
kn_capture_flush (kn_capture_t *self)
{
    assert (self);
    pthread_mutex_lock (&self->lock);
    for (int i = 0; i < 2; i++) {
        s_drain (self, &self->s [i]);
        s_emit (self, &self->s [i]);
    }
    self->first_ms = 0;
    pthread_mutex_unlock (&self->lock);
}

static void *
s_thread (void *arg)
{
    kn_capture_t *self = arg;
    struct pollfd p [3] = {
        { self->s [0].rfd, POLLIN, 0 }, { self->s [1].rfd, POLLIN, 0 },
        { self->wake [0], POLLIN, 0 }
    };
    while (!self->stop) {
        int timeout = -1;
        if (self->first_ms) {
            int64_t left = self->first_ms + KN_CAPTURE_WINDOW_MS - ch_now_ms ();
            timeout = left > 0 ? (int) left : 0;
        }
        if (poll (p, 3, timeout) < 0 && errno != EINTR)
            break;
        pthread_mutex_lock (&self->lock);
        size_t got = s_drain (self, &self->s [0]) + s_drain (self, &self->s [1]);
        if (got && !self->first_ms)
            self->first_ms = ch_now_ms ();
        if (self->first_ms && ch_now_ms () - self->first_ms >= KN_CAPTURE_WINDOW_MS) {
            s_emit (self, &self->s [0]);
            s_emit (self, &self->s [1]);
            self->first_ms = 0;
        }
        pthread_mutex_unlock (&self->lock);
    }
    return NULL;
}

//  Put a non-blocking pipe's write end at target; keep the old fd.
static int
s_take_fd (s_stream_t *st, const char *name, int target)
{
    int p [2];
    st->name = name;
    st->target = target;
    st->saved = fcntl (target, F_DUPFD_CLOEXEC, 3);
    if (st->saved < 0 || pipe2 (p, O_CLOEXEC) < 0)
        return -errno;
    fcntl (p [0], F_SETFL, O_NONBLOCK);
    if (dup2 (p [1], target) < 0)
        return -errno;
    close (p [1]);
    st->rfd = p [0];
    return 0;
}

kn_capture_t *
kn_capture_new (kn_capture_emit_fn *emit, void *arg)
{
    kn_capture_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->emit = emit;
    self->arg = arg;
    self->s [0].rfd = self->s [1].rfd = self->wake [0] = self->wake [1] = -1;
    pthread_mutex_init (&self->lock, NULL);
    if (s_take_fd (&self->s [0], "stdout", 1) < 0
    ||  s_take_fd (&self->s [1], "stderr", 2) < 0
    ||  pipe2 (self->wake, O_CLOEXEC) < 0)
        goto fail;
    //  Signals are for the main thread (interrupts): block them here.
    sigset_t all, old;
    sigfillset (&all);
    pthread_sigmask (SIG_SETMASK, &all, &old);
    int rc = pthread_create (&self->thread, NULL, s_thread, self);
    pthread_sigmask (SIG_SETMASK, &old, NULL);
    if (rc != 0)
        goto fail;
    return self;
fail:
    kn_log (KN_LOG_ERROR, "capture.fail", "reason=\"cannot capture fd 1/2: %s\"", strerror (errno));
    self->thread = 0;
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
    if (self->thread) {
        self->stop = 1;
        ssize_t w = write (self->wake [1], "x", 1);
        (void) w;
        pthread_join (self->thread, NULL);
        kn_capture_flush (self);
    }
    for (int i = 0; i < 2; i++) {
        s_stream_t *st = &self->s [i];
        if (st->saved >= 0 && st->target) {
            dup2 (st->saved, st->target);
            close (st->saved);
        }
        if (st->rfd >= 0)
            close (st->rfd);
        free (st->buf);
    }
    if (self->wake [0] >= 0) {
        close (self->wake [0]);
        close (self->wake [1]);
    }
    pthread_mutex_destroy (&self->lock);
    free (self);
    *self_p = NULL;
}
