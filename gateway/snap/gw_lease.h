/*  gw_lease - "this named session runs here, and nowhere else": a lease in
    the snapshot store that hosts sharing the store (NFS, CephFS, EFS, an
    RWX volume) respect.

    A session that moves between hosts must never run in two places: two
    resumes of one snapshot would be two copies of its variables, its files
    and its random generators. flock() and fcntl() locks do not hold on
    every network file system, and a lock held by a host that died has no
    owner to let it go. So the lease is plain files, using only what NFS
    makes atomic: link(2) to create a name that must not exist, rename(2)
    to replace one's own file.

        STORE/.leases/<name>.<epoch>   {"host", "pid", "token", "epoch",
                                        "renewed", "expires", "released"}

    The holder is the highest epoch. To take a lease, a host reads it: when
    it is released, or expired (its "expires", by the holder's clock, more
    than GW_LEASE_SKEW_S in the past by ours), the host creates the next
    epoch by link(); of two hosts racing, one link succeeds and the other
    sees the new, live lease. The holder renews its own file (a temporary
    file renamed over it) every third of its lifetime, and first looks for
    a higher epoch: one there means another host judged it dead and took
    over, and the lease is lost. A holder that cannot renew (the store is
    unreachable) must stop its session before its lease expires, since
    others may take over after that: gw_lease_lapsed says when. Releasing
    marks the file released rather than removing it, so an epoch is never
    used twice. Older epochs are removed by the next taker.

    Hosts' clocks must agree within GW_LEASE_SKEW_S (NTP does far better).
*/
#ifndef GW_LEASE_H
#define GW_LEASE_H

#include <stdbool.h>
#include <stddef.h>

typedef struct _gw_lease_t gw_lease_t;

#define GW_LEASE_DIR ".leases"
#define GW_LEASE_SKEW_S 5.0
#define GW_LEASE_NAME_MAX 48

//  A lease name: [A-Za-z0-9_-]{1,GW_LEASE_NAME_MAX}.
bool gw_lease_name_ok (const char *name);

//  Take the lease on name in the store dir, for ttl_s seconds from now
//  (the wall clock), with host naming this host in the words others read.
//  NULL with *rc_p and one line in err: -EBUSY when another holds it live
//  (who, since when, until when), -EINVAL for a bad name or ttl, or the
//  file system's errno.
gw_lease_t *gw_lease_take (const char *store, const char *name, const char *host,
                           double ttl_s, double now, int *rc_p, char *err, size_t errlen);

//  Renew when a third of the lifetime has passed since the last renewal
//  (cheap otherwise: call it every tick). 0 while held; -ESTALE when
//  another host took the lease over (stop the session now); another
//  -errno when this renewal failed (try again next tick; stop the session
//  once gw_lease_lapsed).
int gw_lease_renew (gw_lease_t *self, double now, char *err, size_t errlen);

//  True when the lease can no longer be counted on: its expiry, less the
//  skew others allow, has passed without a renewal.
bool gw_lease_lapsed (const gw_lease_t *self, double now);

int gw_lease_epoch (const gw_lease_t *self);

//  Release the lease (mark it released, so the next taker needs not wait)
//  and free it. A lease that was lost is left as the new holder wrote it.
void gw_lease_destroy (gw_lease_t **self_p);

#endif
