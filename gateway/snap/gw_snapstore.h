/*  gw_snapstore - the store of session snapshots: names, durable writes,
    safe reads, removal and garbage collection. No QEMU, no sockets.

    A snapshot is a self-contained directory STORE/<name>/ (docs/sessions.md):
        meta.json        what it was taken from and what a resume must match
        state            QEMU's migration stream: device state AND guest RAM
        workspace.qcow2  the /workspace disk, flattened (no backing file)
    It is written into a staging directory STORE/.staging-<name>-<pid>-<rand>,
    every file and the directory fsynced, then renamed to its name with
    RENAME_NOREPLACE and the store directory fsynced: a snapshot is either
    whole under its name or not there. Removal renames it to
    STORE/.trash-<name>-<pid>-<rand> first, then deletes it.

    Readers and removers agree through flock on the snapshot directory:
    gw_snapstore_open holds LOCK_SH until gw_snapref_destroy; removal takes
    LOCK_EX (waiting up to a bound), so a start gets a whole snapshot or a
    clear error, never half of one.

    Names: [A-Za-z0-9_-]{1,64}. Nothing is ever written outside STORE.
*/
#ifndef GW_SNAPSTORE_H
#define GW_SNAPSTORE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "snap/gw_snapref.h"

#define GW_SNAP_NAME_MAX 64
//  meta.json "format": 2 keeps guest RAM in its own file (GW_SNAP_RAM, with
//  "ram_bytes" and "ram_digest"), 1 in the state stream; both are read.
#define GW_SNAP_FORMAT 2
#define GW_SNAP_FORMAT_STREAM 1
#define GW_SNAP_META "meta.json"
#define GW_SNAP_STATE "state"
#define GW_SNAP_RAM "ram"
#define GW_SNAP_DISK "workspace.qcow2"
//  meta.json "kind" of an entry holding only a /workspace disk, no VM
//  state (gw_wsstore): opened without a state file, never resumed.
#define GW_SNAP_KIND_WORKSPACE "workspace"

typedef struct _gw_snapstore_t gw_snapstore_t;

//  The store's directory: $CELLVM_SNAPSHOT_DIR when absolute, else
//  /var/lib/cellvm/snapshots as root, else $XDG_DATA_HOME/cellvm/snapshots
//  (absolute), else $HOME/.local/share/cellvm/snapshots. 0, -ENOENT when
//  none applies (no absolute $HOME), or -ENAMETOOLONG.
int gw_snapstore_default_dir (char *out, size_t cap);

//  True when name is [A-Za-z0-9_-]{1,64}.
bool gw_snapstore_name_ok (const char *name);

//  A fresh name: "snap-YYYYmmdd-HHMMSS-xxxx" (UTC, 4 random hex). cap >= 32.
void gw_snapstore_new_name (char *out, size_t cap);

//  Open (creating it and missing parents 0700) the store at dir (NULL: the
//  default; relative: against the cwd). It must be a real directory, not a
//  symlink, owned by our euid and not writable by group or others. NULL
//  with the reason in err.
gw_snapstore_t *gw_snapstore_new (const char *dir, char *err, size_t errlen);
void gw_snapstore_destroy (gw_snapstore_t **self_p);
const char *gw_snapstore_dir (const gw_snapstore_t *self);

//  ---------------------------------------------------------------------------
//  Writing

//  Make a staging directory for name: its path into out. -EINVAL bad name,
//  -EEXIST a snapshot by that name exists, -errno (reason in err).
int gw_snapstore_stage (gw_snapstore_t *self, const char *name, char *out, size_t cap,
                        char *err, size_t errlen);
//  Write staging/meta.json (0600) from meta (borrowed, modified: "format"
//  and "name" are set here, "created" when missing), fsync every regular
//  file in staging and staging itself, rename it to name without replacing
//  anything, fsync the store. On any failure staging is removed. -EINVAL
//  when staging is not a staging directory for name in this store (then it
//  is left alone), -EEXIST when name appeared meanwhile, -ENOSPC / -EIO /
//  -EFBIG etc. with the reason in err ("... nothing was kept").
int gw_snapstore_publish (gw_snapstore_t *self, const char *staging, const char *name,
                          json_t *meta, char *err, size_t errlen);
//  A write into staging that failed (err) on a nearly full store: err
//  rewritten to say so first, with the space left. Else err is left.
void gw_snapstore_explain_space (const char *staging, char *err, size_t errlen);
//  Remove a staging directory (a failed write). NULL and "" do nothing; a
//  path that is not a staging directory of this store is left (logged).
void gw_snapstore_abort (gw_snapstore_t *self, const char *staging);

//  ---------------------------------------------------------------------------
//  Reading

//  Open snapshot name for a resume, holding LOCK_SH until the ref is
//  destroyed. Checks: the name is valid; the directory exists; meta.json
//  parses, has this format and this name; the state (unless its "kind" is
//  GW_SNAP_KIND_WORKSPACE) and disk files exist with the sizes meta.json
//  records; the disk starts with the qcow2 magic.
//  Errors (one line in err, naming the snapshot and what is wrong):
//  -EINVAL bad name, -ENOENT unknown name (or removed while we waited),
//  -EBUSY being removed (still locked after ~2 s), -EBADMSG corrupt or
//  truncated (also: a symlink or file by that name, meta.json a symlink,
//  not a regular file, over 64 KiB, not a JSON object), -errno otherwise.
//  rc_p may be NULL. The state file's SHA-256 is not checked here (it is
//  hundreds of MB): see gw_snapref_verify_state (gw_snapref.h).
gw_snapref_t *gw_snapstore_open (gw_snapstore_t *self, const char *name, int *rc_p,
                                 char *err, size_t errlen);

//  ---------------------------------------------------------------------------
//  Listing, removal, collection

typedef struct {
    char name [GW_SNAP_NAME_MAX + 1];
    double created;                             //  unix time, from meta.json (else mtime)
    uint64_t bytes;                             //  allocated bytes of its files
    json_t *meta;                               //  owned; NULL when unreadable
} gw_snapinfo_t;

//  Every snapshot: each directory with a valid name (not staging, trash,
//  files or symlinks), oldest first (ties by name). *items_p is an array
//  (NULL when empty) the caller frees with gw_snapstore_list_free. Count or
//  -errno.
int gw_snapstore_list (gw_snapstore_t *self, gw_snapinfo_t **items_p);
void gw_snapstore_list_free (gw_snapinfo_t **items_p, int n);

//  Remove snapshot name: LOCK_EX (polling every 10 ms, up to wait_ms, for
//  starts that read it), rename to trash, delete. -ENOENT unknown, -EBUSY
//  still read after wait_ms, -EINVAL bad name; reason in err. Logged
//  (snapshot.removed name= bytes=). A file or symlink under a valid name is
//  unlinked (never followed).
int gw_snapstore_remove (gw_snapstore_t *self, const char *name, int wait_ms,
                         char *err, size_t errlen);

//  Delete snapshots older than max_age_s (0: no age limit), then the
//  oldest until the store holds at most max_bytes (0: no byte limit).
//  Snapshots being read are skipped (logged), not waited for. Leftover
//  staging and trash directories go too: those whose pid (in the name) is
//  dead, last changed over 60 s before now. Each deletion logs
//  snapshot.gc name= reason=age|bytes|leftover bytes=. now is the current
//  unix time. Returns the number of snapshots deleted (leftovers are not
//  counted), or -errno.
int gw_snapstore_gc (gw_snapstore_t *self, double max_age_s, uint64_t max_bytes, double now);

#endif
