/*  gw_snapref - one snapshot held open for a resume (see gw_snapref.h). */
#include "snap/gw_snapref.h"
#include "snap/gw_snapram.h"
#include "snap/gw_snapstamp.h"
#include "snap/gw_snapstore.h"
#include "ch_util.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct _gw_snapref_t {
    char name [GW_SNAP_NAME_MAX + 1];
    char dir [PATH_MAX + 80], state [PATH_MAX + 96], disk [PATH_MAX + 96], ram [PATH_MAX + 96];
    int fd;                                     //  the snapshot directory, holding LOCK_SH
    json_t *meta;                               //  an object
};

gw_snapref_t *
gw_snapref_new (int *fd_p, json_t **meta_p, const char *store_dir, const char *name)
{
    assert (fd_p && *fd_p >= 0 && meta_p && json_is_object (*meta_p) && store_dir && name);
    gw_snapref_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->fd = *fd_p;
    self->meta = *meta_p;
    *fd_p = -1;
    *meta_p = NULL;
    snprintf (self->name, sizeof self->name, "%s", name);
    snprintf (self->dir, sizeof self->dir, "%s/%s", store_dir, name);
    snprintf (self->state, sizeof self->state, "%s/" GW_SNAP_STATE, self->dir);
    snprintf (self->disk, sizeof self->disk, "%s/" GW_SNAP_DISK, self->dir);
    snprintf (self->ram, sizeof self->ram, "%s/" GW_SNAP_RAM, self->dir);
    return self;
}

void
gw_snapref_destroy (gw_snapref_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        close ((*self_p)->fd);                  //  drops LOCK_SH
        json_decref ((*self_p)->meta);
        free (*self_p);
        *self_p = NULL;
    }
}

const char *gw_snapref_name (const gw_snapref_t *self) { return self->name; }
const char *gw_snapref_dir (const gw_snapref_t *self) { return self->dir; }
json_t *gw_snapref_meta (const gw_snapref_t *self) { return self->meta; }
const char *gw_snapref_state (const gw_snapref_t *self) { return self->state; }
const char *gw_snapref_disk (const gw_snapref_t *self) { return self->disk; }

const char *
gw_snapref_ram (const gw_snapref_t *self)
{
    return json_object_get (self->meta, "ram_digest") ? self->ram : NULL;
}

//  What a resume must match, as a sentence names it; the unit follows numbers.
//  old: what a snapshot that predates the field was taken with (NULL: none).
static const struct { const char *key, *label, *unit, *old; } s_fields [] = {
    { "image_hash", "guest image", "", NULL }, { "mem_mib", "memory", " MiB", NULL },
    { "vcpus", "vCPUs", "", NULL }, { "cpu", "CPU model", "", NULL },
    { "accel", "accelerator", "", NULL }, { "disk_bytes", "a disk of", " bytes", NULL },
    { "append", "kernel command line", "", NULL }, { "qemu_version", "QEMU", "", NULL },
    { "machine", "machine type", "", "microvm" }, { "host_cpu", "host CPU (KVM)", "", NULL },
    { "host_tsc_khz", "host TSC rate (KVM)", " kHz", NULL },
};

static void
s_value_text (const json_t *v, const char *unit, char *out, size_t cap)
{
    char *text = v ? json_dumps (v, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    snprintf (out, cap, "%.160s%s", text ? text : "(not recorded)", json_is_number (v) ? unit : "");
    free (text);
}

const char *
gw_snapref_mismatch (const gw_snapref_t *self, const json_t *expected, char *why, size_t cap)
{
    assert (self && why);
    for (size_t i = 0; i < sizeof s_fields / sizeof s_fields [0]; i++) {
        json_t *want = json_object_get (expected, s_fields [i].key);
        json_t *have = json_object_get (self->meta, s_fields [i].key);
        const char *old = s_fields [i].old;
        if (!want || json_equal (want, have)
        ||  (!have && old && json_is_string (want) && strcmp (json_string_value (want), old) == 0))
            continue;
        char a [192], b [192];
        s_value_text (have, s_fields [i].unit, a, sizeof a);
        s_value_text (want, s_fields [i].unit, b, sizeof b);
        snprintf (why, cap, "snapshot \"%s\" was taken with %s %s; this gateway runs %s",
                  self->name, s_fields [i].label, a, b);
        return why;
    }
    return NULL;
}

//  file (the state or the RAM) against meta.json's key; each failure says
//  which snapshot and what is wrong, in err. *hashed: it was hashed now
//  (its stamp is to be written once every file has passed).
static int
s_verify (const gw_snapref_t *self, const char *file, const char *key, const char *what,
          bool *hashed, char *err, size_t errlen)
{
    bool ram = file == self->ram;
    const char *name = gw_snapref_name (self);
    const char *want = json_string_value (json_object_get (gw_snapref_meta (self), key));
    char hex [65];
    int rc = -EBADMSG;
    if (!want || strlen (want) != 64) {
        snprintf (err, errlen, "snapshot \"%s\" is corrupt: meta.json has no %s", name, key);
        return rc;
    }
    if (gw_snapstamp_matches (gw_snapref_dir (self), file, want))
        return 0;                               //  hashed before, and unchanged since
    //  O_NONBLOCK: a FIFO swapped in since open hashes as empty, not forever.
    rc = ram ? gw_snapram_digest (file, O_NOFOLLOW | O_NONBLOCK, hex)
             : ch_sha256_file (file, O_NOFOLLOW | O_NONBLOCK, hex, NULL);
    if (rc < 0) {
        snprintf (err, errlen, "snapshot \"%s\": its %s file cannot be read: %s", name, what,
                  strerror (-rc));
        return rc;
    }
    if (strcmp (hex, want)) {
        snprintf (err, errlen, "snapshot \"%s\" is corrupt: its %s file's %s is "
                  "%.12s..., meta.json says %.12s...", name, what, ram ? "digest" : "SHA-256",
                  hex, want);
        return -EBADMSG;
    }
    *hashed = true;
    return 0;
}

int
gw_snapref_verify_state (const gw_snapref_t *self, char *err, size_t errlen)
{
    assert (self);
    const json_t *meta = gw_snapref_meta (self);
    bool state_hashed = false, ram_hashed = false;
    int rc = s_verify (self, self->state, "state_sha256", "state", &state_hashed, err, errlen);
    if (rc == 0 && gw_snapref_ram (self))
        rc = s_verify (self, self->ram, "ram_digest", "RAM", &ram_hashed, err, errlen);
    //  Stamps only for a snapshot found whole (a read-only store: next time).
    if (rc == 0 && state_hashed)
        gw_snapstamp_write (self->dir, self->state,
                            json_string_value (json_object_get (meta, "state_sha256")));
    if (rc == 0 && ram_hashed)
        gw_snapstamp_write (self->dir, self->ram,
                            json_string_value (json_object_get (meta, "ram_digest")));
    return rc;
}

int
gw_snapref_verify_ram (const gw_snapref_t *self, char *err, size_t errlen)
{
    assert (self && gw_snapref_ram (self));
    bool hashed = false;
    int rc = s_verify (self, self->ram, "ram_digest", "RAM", &hashed, err, errlen);
    if (rc == 0 && hashed)
        gw_snapstamp_write (self->dir, self->ram,
                            json_string_value (json_object_get (self->meta, "ram_digest")));
    return rc;
}
