/*  gw_wsstore - a named session's /workspace kept in the snapshot store
    across a client restart (docs/cluster.md, "Sessions that move").

    A restart (shutdown_request with restart: true) gives a fresh
    interpreter over the same /workspace, and the next launch of a named
    session may run on another host. So the gateway that holds the lease
    flattens the session's disk chain into the store, as an entry of its own
    published whole or not at all (gw_snapstore), before it lets go:
        STORE/workspace-<name>/meta.json        "kind": "workspace" (no state)
                              workspace.qcow2   the /workspace disk, flattened
    The next launch of the name takes it into a local directory in
    gw_chain's form (the disk linked or copied as base.qcow2, a fresh top
    layer over it, so the store's file is never written) and removes it
    once its VM runs.
*/
#ifndef GW_WSSTORE_H
#define GW_WSSTORE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vm/gw_vm_config.h"

#define GW_WSSTORE_PREFIX "workspace-"

//  "workspace-<session>" into out. -EINVAL when session is not a lease
//  name (gw_lease_name_ok), -ENAMETOOLONG when out is too small.
int gw_wsstore_name (const char *session, char *out, size_t cap);

//  The entry's meta.json (new reference): kind, reason "restart", the
//  session, created (wall_s), the disk's virtual size and its file's size.
json_t *gw_wsstore_meta (const char *session, uint64_t disk_bytes, uint64_t file_bytes,
                         double wall_s);

//  True when meta is a kept workspace's ("kind": "workspace").
bool gw_wsstore_is_kept (const json_t *meta);

//  Why meta is no kept workspace a VM with a disk of disk_bytes can take,
//  as one sentence in why naming the entry; NULL when it can.
const char *gw_wsstore_unfit (const json_t *meta, uint64_t disk_bytes, char *why,
                              size_t cap);

//  A kept workspace created at ws_created against the snapshot a launch
//  would otherwise start from, created at other_created (< 0: none): true
//  when the kept workspace is strictly newer, so the launch takes it.
bool gw_wsstore_newer (double ws_created, double other_created);

//  Flatten the disk chain in chain_dir (gw_chain: its top; qemu-img from
//  cfg, in a tool jail) into the store at store_dir as session's entry,
//  replacing an older one. Blocks. 0 or -errno with the reason in err
//  (nothing is left under the name then).
int gw_wsstore_save (const char *store_dir, const char *session, const char *chain_dir,
                     const gw_vm_config_t *cfg, char *err, size_t errlen);

//  The created time of the store's entry name (any entry: meta.json, else
//  its mtime), or -1 when there is none.
double gw_wsstore_created (const char *store_dir, const char *name);

//  Take session's entry into dst_dir (an existing, empty directory) as a
//  disk chain for a VM whose disk is disk_bytes. The entry stays in the
//  store. 0; -ENOENT none; -EPROTO it does not fit (err says why); -EBADMSG
//  corrupt; other -errno. err says which.
int gw_wsstore_take (const char *store_dir, const char *session, uint64_t disk_bytes,
                     const char *dst_dir, char *err, size_t errlen);

//  Remove session's entry (consumed or discarded). 0, -ENOENT none, -errno
//  with the reason in err.
int gw_wsstore_remove (const char *store_dir, const char *session, char *err, size_t errlen);

#endif
