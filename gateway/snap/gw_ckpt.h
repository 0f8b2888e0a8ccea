/*  gw_ckpt - a named session's checkpoints in the snapshot store.

    With --checkpoint-every S, a named session (gw_lease.h) is snapshotted
    live, between cells, every S seconds: a host that dies without a
    SIGTERM then loses at most what happened since. Each checkpoint is an
    ordinary snapshot named ckpt-<name>-<unix seconds>, published whole or
    not at all, so a host dying mid-write leaves the previous one; once a
    new one is published the older ones go. The next launch of the name
    resumes the newest, unless the session was suspended (session-<name>),
    which is newer than any checkpoint.
*/
#ifndef GW_CKPT_H
#define GW_CKPT_H

#include <stddef.h>

//  "ckpt-<name>-<seconds>" for a checkpoint taken at wall_s. -ENAMETOOLONG
//  when it does not fit cap.
int gw_ckpt_name (const char *name, double wall_s, char *out, size_t cap);

//  The newest checkpoint of name in store_dir, into out. 0, -ENOENT when
//  there is none, or the store's -errno.
int gw_ckpt_newest (const char *store_dir, const char *name, char *out, size_t cap);

//  Remove every checkpoint of name but keep (NULL: all). The count removed.
int gw_ckpt_prune (const char *store_dir, const char *name, const char *keep);

#endif
