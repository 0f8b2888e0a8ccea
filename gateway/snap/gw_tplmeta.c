/*  gw_tplmeta - a template's key and meta.json (see gw_tplmeta.h). */
#include "snap/gw_tplmeta.h"
#include "vm/gw_vmargv.h"
#include "ch_util.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct _gw_tplmeta_t {
    json_t *json;                   //  an object
};

//  ==========================================================================
//  The key.

//  Full path of an executable on PATH (for QEMU's stat).
static int
s_which (const char *name, char *out, size_t cap)
{
    if (strchr (name, '/'))
        return snprintf (out, cap, "%s", name) < (int) cap ? 0 : -ENAMETOOLONG;
    const char *path = getenv ("PATH");
    char dirs [4096];
    snprintf (dirs, sizeof dirs, "%s", path && *path ? path : "/usr/bin:/bin");
    char *save = NULL;
    for (char *dir = strtok_r (dirs, ":", &save); dir; dir = strtok_r (NULL, ":", &save)) {
        snprintf (out, cap, "%s/%s", dir, name);
        if (access (out, X_OK) == 0)
            return 0;
    }
    return -ENOENT;
}

void
gw_tplmeta_describe_file (const char *path, char *out, size_t cap)
{
    assert (path && out);
    struct stat st;
    if (stat (path, &st) == 0)
        snprintf (out, cap, "%s size=%lld mtime=%lld.%09ld", path, (long long) st.st_size,
                  (long long) st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    else
        snprintf (out, cap, "%s missing", path);
}

static void
s_add_stat (json_t *inputs, const char *what, const char *path)
{
    char text [PATH_MAX + 96];
    gw_tplmeta_describe_file (path, text, sizeof text);
    json_object_set_new (inputs, what, json_string (text));
}

//  The image: its hash, and each file's path, size and mtime.
static void
s_add_image (json_t *in, const gw_vm_config_t *cfg)
{
    char path [PATH_MAX];
    snprintf (path, sizeof path, "%s/image.json", cfg->image_dir);
    json_t *image = json_load_file (path, 0, NULL);
    const char *hash = json_string_value (json_object_get (image, "image_hash"));
    json_object_set_new (in, "image_hash", json_string (hash ? hash : "none"));
    json_decref (image);
    const char *files [3] = { cfg->kernel, cfg->initrd, cfg->rootfs };
    const char *names [3] = { "vmlinux", "initrd.img", "rootfs.ext4" };
    for (int i = 0; i < 3; i++) {
        if (!files [i])
            snprintf (path, sizeof path, "%s/%s", cfg->image_dir, names [i]);
        s_add_stat (in, names [i], files [i] ? files [i] : path);
    }
}

json_t *
gw_tplmeta_inputs (const gw_vm_config_t *cfg)
{
    assert (cfg && cfg->image_dir);
    char qemu [PATH_MAX];
    json_t *in = json_pack ("{s:i, s:i, s:i, s:s, s:s, s:s, s:I}", "format", GW_TPLMETA_FORMAT,
                            "mem_mib", (int) cfg->mem_mib, "vcpus", (int) cfg->vcpus,
                            "accel", gw_accel_name (cfg->accel), "cpu", gw_vmargv_cpu (cfg),
                            "append", cfg->append ? cfg->append : "",
                            "disk_bytes", (json_int_t) cfg->disk_bytes);
    if (!in)
        abort ();
    json_object_set_new (in, "page_reporting", json_boolean (cfg->page_reporting));
    s_add_image (in, cfg);
    if (s_which (cfg->qemu ? cfg->qemu : "qemu-system-x86_64", qemu, sizeof qemu) == 0)
        s_add_stat (in, "qemu", qemu);
    return in;
}

int
gw_tplmeta_key (const gw_vm_config_t *cfg, char *key, size_t cap, char *err, size_t errlen)
{
    assert (cfg && key);
    if (!cfg->image_dir || cap < GW_TPLMETA_KEY_LEN + 1) {
        snprintf (err, errlen, "template: no image dir");
        return -EINVAL;
    }
    json_t *in = gw_tplmeta_inputs (cfg);
    char *text = json_dumps (in, JSON_SORT_KEYS | JSON_COMPACT);
    char hex [65];
    ch_sha256_hex ((const uint8_t *) text, strlen (text), hex);
    snprintf (key, cap, "%.*s", GW_TPLMETA_KEY_LEN, hex);
    free (text);
    json_decref (in);
    return 0;
}

//  ==========================================================================
//  meta.json.

int
gw_tplmeta_write (const char *dir, const char *key, const gw_vm_config_t *cfg,
                  unsigned tsc_khz, int64_t build_ms)
{
    assert (dir && key && cfg);
    char path [PATH_MAX + 32], sha [65];
    off_t bytes = 0;
    snprintf (path, sizeof path, "%s/" GW_TPL_STATE, dir);
    if (ch_sha256_file (path, 0, sha, &bytes) < 0)
        return -EIO;
    json_t *meta = json_pack ("{s:s, s:o, s:I, s:s, s:I, s:I, s:I}", "key", key,
                              "inputs", gw_tplmeta_inputs (cfg), "state_bytes",
                              (json_int_t) bytes, "state_sha256", sha,
                              "tsc_khz", (json_int_t) tsc_khz, "build_ms", (json_int_t) build_ms,
                              "built_at", (json_int_t) time (NULL));
    snprintf (path, sizeof path, "%s/" GW_TPL_META, dir);
    int rc = json_dump_file (meta, path, JSON_INDENT (1) | JSON_SORT_KEYS) < 0 ? -EIO : 0;
    json_decref (meta);
    return rc;
}

gw_tplmeta_t *
gw_tplmeta_load (const char *dir)
{
    assert (dir);
    char path [PATH_MAX + 16];
    snprintf (path, sizeof path, "%s/" GW_TPL_META, dir);
    json_t *json = json_load_file (path, 0, NULL);
    if (!json_is_object (json)) {
        json_decref (json);
        return NULL;
    }
    gw_tplmeta_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->json = json;
    return self;
}

void
gw_tplmeta_destroy (gw_tplmeta_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        json_decref ((*self_p)->json);
        free (*self_p);
        *self_p = NULL;
    }
}

//  Does dir/name exist with exactly bytes (any size when bytes < 0)?
static bool
s_file_is (const char *dir, const char *name, long long bytes)
{
    char path [PATH_MAX + 32];
    struct stat st;
    snprintf (path, sizeof path, "%s/%s", dir, name);
    return stat (path, &st) == 0 && (bytes < 0 || (long long) st.st_size == bytes);
}

//  Does the state file hash to want?
static bool
s_state_sha_is (const char *dir, const char *want)
{
    char path [PATH_MAX + 16], sha [65];
    snprintf (path, sizeof path, "%s/" GW_TPL_STATE, dir);
    return want && ch_sha256_file (path, 0, sha, NULL) == 0 && strcmp (sha, want) == 0;
}

const char *
gw_tplmeta_check (const gw_tplmeta_t *self, const char *dir, const gw_vm_config_t *cfg,
                  const char *key)
{
    assert (dir && cfg && key);
    if (!self)
        return "meta.json missing or not JSON";
    json_int_t state_bytes = json_integer_value (json_object_get (self->json, "state_bytes"));
    const char *sha = json_string_value (json_object_get (self->json, "state_sha256"));
    if (strcmp (json_string_value (json_object_get (self->json, "key")) ?: "", key))
        return "meta.json names another key";
    if (!s_file_is (dir, GW_TPL_RAM, (long long) cfg->mem_mib << 20))
        return "RAM file missing or of the wrong size";
    char path [PATH_MAX + 24];
    snprintf (path, sizeof path, "%s/" GW_TPL_DISK, dir);
    if (access (path, R_OK) < 0)
        return "workspace disk missing";
    if (state_bytes <= 0 || !s_file_is (dir, GW_TPL_STATE, state_bytes))
        return "state file missing or truncated";
    if (!s_state_sha_is (dir, sha))
        return "state file checksum mismatch";
    return NULL;
}

unsigned
gw_tplmeta_tsc_khz (const gw_tplmeta_t *self)
{
    json_int_t tsc = self ? json_integer_value (json_object_get (self->json, "tsc_khz")) : 0;
    return tsc > 0 && tsc < 20000000 ? (unsigned) tsc : 0;
}

json_t *
gw_tplmeta_recorded (const gw_tplmeta_t *self)
{
    json_t *in = self ? json_object_get (self->json, "inputs") : NULL;
    return json_is_object (in) ? in : NULL;
}
