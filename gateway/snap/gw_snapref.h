/*  gw_snapref - one snapshot of the store held open for a resume.

    gw_snapstore_open makes it once the snapshot's directory is locked
    (LOCK_SH) and its meta.json and files are checked. The ref keeps the
    lock until it is destroyed, so a removal (LOCK_EX) waits for the start
    that reads it: the start sees a whole snapshot or a clear error.
*/
#ifndef GW_SNAPREF_H
#define GW_SNAPREF_H

#include <jansson.h>
#include <stddef.h>

typedef struct _gw_snapref_t gw_snapref_t;

//  The snapshot name of the store at store_dir, taking *fd_p (its
//  directory, locked LOCK_SH; set to -1) and *meta_p (its checked
//  meta.json object; nulled). Only gw_snapstore_open checks what it gives.
gw_snapref_t *gw_snapref_new (int *fd_p, json_t **meta_p, const char *store_dir,
                              const char *name);
//  Drops the lock. Nulls *self_p.
void gw_snapref_destroy (gw_snapref_t **self_p);
const char *gw_snapref_name (const gw_snapref_t *self);
const char *gw_snapref_dir (const gw_snapref_t *self);
json_t *gw_snapref_meta (const gw_snapref_t *self);       //  borrowed
//  Paths of its files (borrowed, absolute).
const char *gw_snapref_state (const gw_snapref_t *self);
const char *gw_snapref_disk (const gw_snapref_t *self);
//  Its guest RAM file (format 2), or NULL: the RAM is in the state stream.
const char *gw_snapref_ram (const gw_snapref_t *self);
//  Why meta does not match what this gateway would resume it with
//  (expected: the same keys as meta, those present are compared:
//  image_hash, mem_mib, vcpus, cpu, accel, disk_bytes, append, qemu_version),
//  as one sentence naming the field and both values (JSON-quoted strings,
//  numbers with their unit; "(not recorded)" when meta lacks the key), e.g.
//  'snapshot "x" was taken with memory 512 MiB; this gateway runs 384 MiB'.
//  Values compare with json_equal. Writes into why (cap bytes) and returns
//  it, or NULL when it matches (or expected is NULL).
const char *gw_snapref_mismatch (const gw_snapref_t *self, const json_t *expected,
                                 char *why, size_t cap);
//  Hash the state file and compare with meta's state_sha256, and the RAM
//  file with ram_digest when there is one, each unless its stamp
//  (gw_snapstamp) says it was hashed before and is unchanged since.
//  0, -EBADMSG with the reason in err, or -errno when it cannot be read.
//  Blocks (~0.15 s per 300 MB).
int gw_snapref_verify_state (const gw_snapref_t *self, char *err, size_t errlen);

//  The RAM file alone, the same way (a resume checks it again once it holds
//  the file's lease). Only for a snapshot that has one.
int gw_snapref_verify_ram (const gw_snapref_t *self, char *err, size_t errlen);

#endif
