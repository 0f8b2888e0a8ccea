/*  gw_admit - a host's admission queue for VM starts (see gw_admit.h). */
#include "base/gw_admit.h"
#include "ch_clock.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define S_NEXT_MS 20                //  a waiter that may go in looks this often
#define S_LINE_MS 500               //  one further back, at most this seldom
#define S_MAX_SLOTS 4096

struct _gw_admit_t {
    char *dir;
    int slots;
    int slot;                       //  the slot held, -1
    int slot_fd;
    int wait_fd;                    //  our place in line, -1 when not waiting
    char wait_name [80];
};

gw_admit_t *
gw_admit_new (const char *dir, int slots, char *err, size_t errlen)
{
    assert (dir);
    struct stat st;
    if (slots < 1 || slots > S_MAX_SLOTS) {
        snprintf (err, errlen, "admission needs 1 to %d slots, not %d", S_MAX_SLOTS, slots);
        return NULL;
    }
    if ((mkdir (dir, 0700) < 0 && errno != EEXIST) || stat (dir, &st) < 0
    ||  !S_ISDIR (st.st_mode)) {
        snprintf (err, errlen, "admission directory %s: %s", dir,
                  errno ? strerror (errno) : "not a directory");
        return NULL;
    }
    gw_admit_t *self = calloc (1, sizeof *self);
    if (!self || !(self->dir = strdup (dir)))
        abort ();
    self->slots = slots;
    self->slot = self->slot_fd = self->wait_fd = -1;
    return self;
}

static void
s_unqueue (gw_admit_t *self)
{
    if (self->wait_fd < 0)
        return;
    char path [PATH_MAX];
    snprintf (path, sizeof path, "%s/%s", self->dir, self->wait_name);
    unlink (path);
    close (self->wait_fd);
    self->wait_fd = -1;
}

void
gw_admit_destroy (gw_admit_t **self_p)
{
    assert (self_p);
    gw_admit_t *self = *self_p;
    if (!self)
        return;
    gw_admit_leave (self);
    s_unqueue (self);
    free (self->dir);
    free (self);
    *self_p = NULL;
}

//  Take a place in line: a file locked before it is renamed into view, so
//  no other waiter ever sees it unlocked while we live. 0 or -errno.
static int
s_queue (gw_admit_t *self)
{
    static atomic_uint serial;
    char tmp [PATH_MAX], path [PATH_MAX];
    struct timespec now;
    clock_gettime (CLOCK_MONOTONIC, &now);
    unsigned n = atomic_fetch_add (&serial, 1);
    snprintf (self->wait_name, sizeof self->wait_name, "w-%012lld.%09ld-%d-%u",
              (long long) now.tv_sec, now.tv_nsec, (int) getpid (), n);
    snprintf (tmp, sizeof tmp, "%s/.%s", self->dir, self->wait_name);
    snprintf (path, sizeof path, "%s/%s", self->dir, self->wait_name);
    int fd = open (tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    if (flock (fd, LOCK_EX) < 0 || rename (tmp, path) < 0) {
        int rc = -errno;
        unlink (tmp);
        close (fd);
        return rc;
    }
    self->wait_fd = fd;
    return 0;
}

//  True when the waiter's file `name` is held; a free one (its waiter
//  died) is removed.
static bool
s_alive (int dir_fd, const char *name)
{
    int fd = openat (dir_fd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;                           //  it just went in, or left
    bool held = flock (fd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK;
    if (!held)
        unlinkat (dir_fd, name, 0);
    close (fd);
    return held;
}

//  Our place in line: 1 + the live waiters who came before us.
static int
s_place (gw_admit_t *self)
{
    DIR *d = opendir (self->dir);
    if (!d)
        return 1;
    int ahead = 0;
    for (struct dirent *e; (e = readdir (d)); )
        if (strncmp (e->d_name, "w-", 2) == 0 && strcmp (e->d_name, self->wait_name) < 0
        &&  s_alive (dirfd (d), e->d_name))
            ahead++;
    closedir (d);
    return ahead + 1;
}

//  Any free slot, taken. 0, or -EAGAIN when all are held.
static int
s_try_slots (gw_admit_t *self)
{
    for (int k = 0; k < self->slots; k++) {
        char path [PATH_MAX];
        snprintf (path, sizeof path, "%s/slot-%d", self->dir, k);
        int fd = open (path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0)
            return -errno;
        if (flock (fd, LOCK_EX | LOCK_NB) == 0) {
            self->slot = k;
            self->slot_fd = fd;
            return 0;
        }
        close (fd);
    }
    return -EAGAIN;
}

int
gw_admit_enter (gw_admit_t *self, int timeout_ms, gw_admit_wait_fn *on_wait, void *arg)
{
    assert (self && self->slot < 0);
    int64_t deadline = ch_clock_mono_ms () + timeout_ms;
    int rc = s_queue (self);
    while (rc == 0) {
        int place = s_place (self);
        //  The first `slots` in line may go in; whoever finds a slot first.
        if (place <= self->slots && (rc = s_try_slots (self)) != -EAGAIN)
            break;
        rc = 0;
        if (on_wait && !on_wait (arg, place, self->slots))
            rc = -ECANCELED;
        else if (timeout_ms >= 0 && ch_clock_mono_ms () >= deadline)
            rc = -ETIMEDOUT;
        if (rc < 0)
            break;
        int ms = place <= self->slots ? S_NEXT_MS : S_NEXT_MS * (place - self->slots);
        struct timespec ts = { 0, (long) (ms < S_LINE_MS ? ms : S_LINE_MS) * 1000000L };
        nanosleep (&ts, NULL);
    }
    s_unqueue (self);
    return rc;
}

void
gw_admit_leave (gw_admit_t *self)
{
    if (!self || self->slot_fd < 0)
        return;
    close (self->slot_fd);                      //  the lock goes with it
    self->slot_fd = self->slot = -1;
}

int
gw_admit_slot (const gw_admit_t *self)
{
    assert (self);
    return self->slot;
}

int
gw_admit_default_slots (void)
{
    cpu_set_t set;
    if (sched_getaffinity (0, sizeof set, &set) == 0 && CPU_COUNT (&set) > 0)
        return CPU_COUNT (&set);
    long n = sysconf (_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int) n : 1;
}
