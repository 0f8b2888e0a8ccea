/*  gw_admit - a host's admission queue for VM starts.

    Every gateway on a host is its own process, and a burst of them
    restoring at once on a few CPUs makes every restore slow, each
    waiting for a CPU the others hold. So a start first takes one of the
    host's slots (the gateway gives four per CPU unless told), and the rest wait in
    line, first come first served, each told its place.

    It is files in one directory, so it needs no daemon and survives any
    of its users dying: a slot is slot-K held with flock, a place in line
    is a file named by the time its waiter came (CLOCK_MONOTONIC, which all
    processes of a host share), held with flock while it waits. A lock
    dies with its process, so a waiter or holder that was killed frees its
    place at once; its file is removed by the next waiter to find it free.
*/
#ifndef GW_ADMIT_H
#define GW_ADMIT_H

#include <stdbool.h>
#include <stddef.h>

typedef struct _gw_admit_t gw_admit_t;

//  Called while a start waits, each time it looks (every 20 to 500 ms):
//  place 1 is the next to go in; slots, how many starts run at once.
//  False ends the wait (-ECANCELED): the session ended meanwhile.
typedef bool (gw_admit_wait_fn) (void *arg, int place, int slots);

//  A queue in dir (made 0700 when missing) with `slots` slots (1 or more).
//  NULL and err when dir cannot be used.
gw_admit_t *gw_admit_new (const char *dir, int slots, char *err, size_t errlen);

//  Leave the queue or the slot; nulls *self_p. NULL-safe.
void gw_admit_destroy (gw_admit_t **self_p);

//  Wait for a slot, up to timeout_ms (-1: no limit). 0 and the slot held,
//  -ETIMEDOUT, -ECANCELED, or -errno. on_wait (may be NULL) hears the
//  places; the first is heard before any wait.
int gw_admit_enter (gw_admit_t *self, int timeout_ms, gw_admit_wait_fn *on_wait, void *arg);

//  Give the slot back (for the next start). NULL-safe; without one, nothing.
void gw_admit_leave (gw_admit_t *self);

//  The slot held (0-based), or -1.
int gw_admit_slot (const gw_admit_t *self);

//  The default number of slots: the CPUs this process may run on.
int gw_admit_default_slots (void);

#endif
