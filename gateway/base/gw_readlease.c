/*  gw_readlease - a read lease on a file that a VM maps (see gw_readlease.h). */
#include "base/gw_readlease.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

struct _gw_readlease_t {
    struct _gw_readlease_t *next;                   //  in s_all
    int fd;
    bool broken;
    gw_readlease_fn *fn;
    void *arg;
};

//  Every lease of the process, for the dispatch: the signal names an fd.
static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static gw_readlease_t *s_all;
static int s_sigfd = -1;

static int
s_signal (void)
{
    return SIGRTMIN + 3;                        //  glibc keeps the first ones for itself
}

//  The lease signal, and SIGIO: what the kernel sends instead when it cannot
//  queue the first (its default action would end the gateway).
static void
s_set (sigset_t *set)
{
    sigemptyset (set);
    sigaddset (set, s_signal ());
    sigaddset (set, SIGIO);
}

void
gw_readlease_block_signal (void)
{
    sigset_t set;
    s_set (&set);
    pthread_sigmask (SIG_BLOCK, &set, NULL);
}

//  The signalfd, made once; -1 if it cannot be.
static int
s_sigfd_locked (void)
{
    if (s_sigfd < 0) {
        sigset_t set;
        s_set (&set);
        s_sigfd = signalfd (-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    }
    return s_sigfd;
}

int
gw_readlease_signal_fd (void)
{
    pthread_mutex_lock (&s_lock);
    int fd = s_sigfd_locked ();
    pthread_mutex_unlock (&s_lock);
    return fd;
}

static bool
s_blocked (void)
{
    sigset_t cur;
    return pthread_sigmask (SIG_BLOCK, NULL, &cur) == 0 && sigismember (&cur, s_signal ()) == 1;
}

//  The lease on fd: the signal names it, to this process.
static int
s_take (int fd)
{
    if (fcntl (fd, F_SETSIG, s_signal ()) < 0 || fcntl (fd, F_SETOWN, getpid ()) < 0
    ||  fcntl (fd, F_SETLEASE, F_RDLCK) < 0)
        return -errno;
    return 0;
}

gw_readlease_t *
gw_readlease_new (const char *path, int *rc_p, char *err, size_t errlen)
{
    assert (path && rc_p && err);
    int rc = 0, fd = -1;
    const char *why = NULL;
    pthread_mutex_lock (&s_lock);
    if (!s_blocked () || s_sigfd_locked () < 0) {
        rc = -ENOTSUP;
        why = "this process cannot hear of lease breaks (the signal is not blocked)";
    }
    else if ((fd = open (path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0 || (rc = s_take (fd)) < 0) {
        rc = fd < 0 ? -errno : rc;
        why = rc == -EAGAIN ? "it is open for writing by another process (or this one)"
                            : strerror (-rc);
    }
    gw_readlease_t *self = NULL;
    if (rc == 0) {
        if (!(self = calloc (1, sizeof *self)))
            abort ();
        *self = (gw_readlease_t) { .next = s_all, .fd = fd };
        s_all = self;
    }
    pthread_mutex_unlock (&s_lock);
    if (rc < 0) {
        snprintf (err, errlen, "cannot hold a lease on %.300s: %s", path, why);
        if (fd >= 0)
            close (fd);
    }
    *rc_p = rc;
    return self;
}

void
gw_readlease_destroy (gw_readlease_t **self_p)
{
    assert (self_p);
    gw_readlease_t *self = *self_p;
    if (!self)
        return;
    pthread_mutex_lock (&s_lock);
    for (gw_readlease_t **pp = &s_all; *pp; pp = &(*pp)->next)
        if (*pp == self) {
            *pp = self->next;
            break;
        }
    pthread_mutex_unlock (&s_lock);
    fcntl (self->fd, F_SETLEASE, F_UNLCK);
    close (self->fd);
    free (self);
    *self_p = NULL;
}

int gw_readlease_fd (const gw_readlease_t *self) { return self->fd; }
bool gw_readlease_broken (const gw_readlease_t *self) { return self->broken; }

void
gw_readlease_on_break (gw_readlease_t *self, gw_readlease_fn *fn, void *arg)
{
    assert (self);
    pthread_mutex_lock (&s_lock);
    self->fn = fn;
    self->arg = arg;
    if (fn && self->broken)
        fn (arg);
    pthread_mutex_unlock (&s_lock);
}

//  A writer waits for l: the kernel has set its lease to go (a signal's fd
//  alone could name a lease since closed and its number reused).
static bool
s_breaking (const gw_readlease_t *l)
{
    return fcntl (l->fd, F_GETLEASE) != F_RDLCK;
}

//  Under the lock, so that a lease destroyed on another thread (a VM
//  disposed of off the reactor) is either gone or waits for its callback.
//  A callback must not call back into this module.
static void
s_check_all (void)
{
    pthread_mutex_lock (&s_lock);
    for (gw_readlease_t *l = s_all; l; l = l->next)
        if (!l->broken && s_breaking (l)) {
            l->broken = true;
            if (l->fn)
                l->fn (l->arg);
        }
    pthread_mutex_unlock (&s_lock);
}

void
gw_readlease_dispatch (void)
{
    int sigfd = gw_readlease_signal_fd ();
    struct signalfd_siginfo si;
    bool any = false;
    while (sigfd >= 0 && read (sigfd, &si, sizeof si) == (ssize_t) sizeof si)
        any = true;
    if (any)
        s_check_all ();                         //  a few leases at most: each asked
}
