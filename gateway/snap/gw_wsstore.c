/*  gw_wsstore - a restart's /workspace in the snapshot store (see gw_wsstore.h). */
#include "snap/gw_wsstore.h"
#include "snap/gw_snapstore.h"
#include "snap/gw_lease.h"
#include "disk/gw_chain.h"
#include "disk/gw_qcow2.h"
#include "vm/gw_vm.h"
#include "vm/gw_vmargv.h"
#include "base/gw_fs.h"
#include "ch_clock.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_BASE "base.qcow2"                     //  the kept disk, under a fresh top
#define S_REMOVE_WAIT_MS 2000                   //  for a start still reading it

int
gw_wsstore_name (const char *session, char *out, size_t cap)
{
    assert (out);
    if (!gw_lease_name_ok (session))
        return -EINVAL;
    int n = snprintf (out, cap, GW_WSSTORE_PREFIX "%s", session);
    return n > 0 && (size_t) n < cap ? 0 : -ENAMETOOLONG;
}

//  gw_wsstore_name into name (GW_SNAP_NAME_MAX + 1), or -errno + err.
static int
s_name (const char *session, char *name, char *err, size_t errlen)
{
    int rc = gw_wsstore_name (session, name, GW_SNAP_NAME_MAX + 1);
    if (rc < 0)
        snprintf (err, errlen, "session name \"%.64s\" is not valid", session ? session : "");
    return rc;
}

json_t *
gw_wsstore_meta (const char *session, uint64_t disk_bytes, uint64_t file_bytes, double wall_s)
{
    assert (session);
    return json_pack ("{s:s, s:s, s:s, s:f, s:I, s:I}", "kind", GW_SNAP_KIND_WORKSPACE,
                      "reason", "restart", "session", session, "created", wall_s,
                      "disk_bytes", (json_int_t) disk_bytes,
                      "disk_file_bytes", (json_int_t) file_bytes);
}

bool
gw_wsstore_is_kept (const json_t *meta)
{
    const char *kind = json_string_value (json_object_get (meta, "kind"));
    return kind && strcmp (kind, GW_SNAP_KIND_WORKSPACE) == 0;
}

const char *
gw_wsstore_unfit (const json_t *meta, uint64_t disk_bytes, char *why, size_t cap)
{
    assert (why);
    const char *name = json_string_value (json_object_get (meta, "name")) ?: "?";
    const char *kind = json_string_value (json_object_get (meta, "kind"));
    json_t *size = json_object_get (meta, "disk_bytes");
    if (!gw_wsstore_is_kept (meta))
        snprintf (why, cap, "\"%.64s\" in the store is not a kept /workspace (its kind is "
                  "\"%.32s\")", name, kind ? kind : "a snapshot");
    else if (!json_is_integer (size) || json_integer_value (size) <= 0)
        snprintf (why, cap, "the kept /workspace \"%.64s\" does not record its disk size", name);
    else if ((uint64_t) json_integer_value (size) != disk_bytes)
        snprintf (why, cap, "the kept /workspace \"%.64s\" is a disk of %lld bytes; this "
                  "gateway's is %llu (--disk): start it with the same size", name,
                  (long long) json_integer_value (size), (unsigned long long) disk_bytes);
    else
        return NULL;
    return why;
}

bool
gw_wsstore_newer (double ws_created, double other_created)
{
    //  A tie goes to the snapshot: it holds the variables as well.
    return ws_created >= 0 && ws_created > other_created;
}

//  ---------------------------------------------------------------------------
//  Saving

//  chain_dir's chain as one standalone disk in staging.
static int
s_flatten (const gw_vm_config_t *cfg, const char *chain_dir, const char *staging,
           char *err, size_t errlen)
{
    char top [NAME_MAX + 1], src [PATH_MAX + NAME_MAX + 2], dst [PATH_MAX + 32];
    int rc = gw_chain_top (chain_dir, top, sizeof top);
    if (rc < 0) {
        snprintf (err, errlen, "the kept disk in %s names no top layer: %s", chain_dir,
                  strerror (-rc));
        return rc;
    }
    snprintf (src, sizeof src, "%s/%s", chain_dir, top);
    snprintf (dst, sizeof dst, "%s/" GW_SNAP_DISK, staging);
    const char *args [] = { "convert", "-U", "-O", "qcow2", src, dst, NULL };
    return gw_vm_run_qemu_img (cfg->qemu_img, &cfg->jail, chain_dir, top, staging, args, err,
                               errlen);
}

//  An older entry of the name goes first: this restart's /workspace is newer.
static int
s_replace (gw_snapstore_t *store, const char *name, char *err, size_t errlen)
{
    int rc = gw_snapstore_remove (store, name, S_REMOVE_WAIT_MS, err, errlen);
    return rc == -ENOENT ? 0 : rc;
}

//  Stage, flatten and publish name. 0 or -errno + err.
static int
s_write (gw_snapstore_t *store, const char *name, const char *session, const char *chain_dir,
         const gw_vm_config_t *cfg, char *err, size_t errlen)
{
    char staging [PATH_MAX], disk [PATH_MAX + 32];
    struct stat st;
    int rc = gw_snapstore_stage (store, name, staging, sizeof staging, err, errlen);
    if (rc < 0)
        return rc;
    snprintf (disk, sizeof disk, "%s/" GW_SNAP_DISK, staging);
    if ((rc = s_flatten (cfg, chain_dir, staging, err, errlen)) == 0 && stat (disk, &st) < 0) {
        rc = -errno;
        snprintf (err, errlen, "reading back %s: %s", disk, strerror (-rc));
    }
    if (rc < 0) {
        gw_snapstore_explain_space (staging, err, errlen);
        gw_snapstore_abort (store, staging);
        return rc;
    }
    json_t *meta = gw_wsstore_meta (session, cfg->disk_bytes, (uint64_t) st.st_size,
                                    ch_clock_wall_s ());
    rc = gw_snapstore_publish (store, staging, name, meta, err, errlen);
    json_decref (meta);
    return rc;
}

int
gw_wsstore_save (const char *store_dir, const char *session, const char *chain_dir,
                 const gw_vm_config_t *cfg, char *err, size_t errlen)
{
    assert (store_dir && chain_dir && cfg && err);
    char name [GW_SNAP_NAME_MAX + 1];
    int rc = s_name (session, name, err, errlen);
    if (rc < 0)
        return rc;
    gw_snapstore_t *store = gw_snapstore_new (store_dir, err, errlen);
    if (!store)
        return -EACCES;
    if ((rc = s_replace (store, name, err, errlen)) == 0)
        rc = s_write (store, name, session, chain_dir, cfg, err, errlen);
    gw_snapstore_destroy (&store);
    return rc;
}

//  ---------------------------------------------------------------------------
//  Reading, taking, removing

double
gw_wsstore_created (const char *store_dir, const char *name)
{
    assert (store_dir && name);
    char err [400];
    gw_snapinfo_t *items = NULL;
    gw_snapstore_t *store = gw_snapstore_new (store_dir, err, sizeof err);
    int n = store ? gw_snapstore_list (store, &items) : 0;
    double created = -1;
    for (int i = 0; i < n; i++)
        if (strcmp (items [i].name, name) == 0)
            created = items [i].created;
    gw_snapstore_list_free (&items, n);
    gw_snapstore_destroy (&store);
    return created;
}

//  The kept disk (ref's) linked, or copied across file systems, into dst_dir
//  under a fresh top layer: the chain a VM adopts (gw_chain_import).
static int
s_chain_over (const char *disk, uint64_t disk_bytes, const char *dst_dir, char *err,
              size_t errlen)
{
    char base [PATH_MAX + 16], top [PATH_MAX + 32];
    snprintf (base, sizeof base, "%s/" S_BASE, dst_dir);
    snprintf (top, sizeof top, "%s/" GW_VMARGV_DISK, dst_dir);
    const char *what = "linking or copying it";
    int rc = link (disk, base) == 0 ? 0 : gw_fs_copy (disk, base, false);
    if (rc == 0) {
        what = "making a layer over it";
        rc = gw_qcow2_create (top, disk_bytes, S_BASE, "qcow2");
    }
    if (rc == 0) {
        what = "naming its top";
        rc = gw_chain_write_top (dst_dir, GW_VMARGV_DISK);
    }
    if (rc < 0)
        snprintf (err, errlen, "taking the kept /workspace %s into %s failed while %s: %s",
                  disk, dst_dir, what, strerror (-rc));
    return rc;
}

int
gw_wsstore_take (const char *store_dir, const char *session, uint64_t disk_bytes,
                 const char *dst_dir, char *err, size_t errlen)
{
    assert (store_dir && dst_dir && err);
    char name [GW_SNAP_NAME_MAX + 1], why [400];
    int rc = s_name (session, name, err, errlen);
    if (rc < 0)
        return rc;
    gw_snapstore_t *store = gw_snapstore_new (store_dir, err, errlen);
    //  Held open (LOCK_SH) while linked: a removal waits for it.
    gw_snapref_t *ref = store ? gw_snapstore_open (store, name, &rc, err, errlen) : NULL;
    if (!store)
        rc = -EACCES;
    else if (ref && gw_wsstore_unfit (gw_snapref_meta (ref), disk_bytes, why, sizeof why)) {
        snprintf (err, errlen, "%s", why);
        rc = -EPROTO;
    }
    else if (ref)
        rc = s_chain_over (gw_snapref_disk (ref), disk_bytes, dst_dir, err, errlen);
    gw_snapref_destroy (&ref);
    gw_snapstore_destroy (&store);
    return rc;
}

int
gw_wsstore_remove (const char *store_dir, const char *session, char *err, size_t errlen)
{
    assert (store_dir && err);
    char name [GW_SNAP_NAME_MAX + 1];
    int rc = s_name (session, name, err, errlen);
    if (rc < 0)
        return rc;
    gw_snapstore_t *store = gw_snapstore_new (store_dir, err, errlen);
    rc = store ? gw_snapstore_remove (store, name, S_REMOVE_WAIT_MS, err, errlen) : -EACCES;
    gw_snapstore_destroy (&store);
    return rc;
}
