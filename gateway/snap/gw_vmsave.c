/*  gw_vmsave - session snapshots: save and resume (see gw_vmsave.h). */
#include "snap/gw_snapram.h"
#include "snap/gw_snapstamp.h"
#include "snap/gw_vmsave.h"
#include "ch_util.h"
#include "base/gw_log.h"
#include "vm/gw_qmp.h"
#include "vm/gw_accel.h"
#include "snap/gw_tplmeta.h"
#include "snap/gw_snapshot.h"
#include "ch_clock.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define S_QMP_MS 5000               //  one QMP command
#define S_SAVE_MS 120000            //  RAM and devices into the state file
#define S_BANDWIDTH (64LL << 30)    //  bytes/s: a local file, no throttling

//  ---------------------------------------------------------------------------
//  QMP

static int
s_qmp (gw_qmp_t *qmp, const char *cmd, json_t *args, char *err, size_t errlen)
{
    int rc = gw_qmp_execute (qmp, cmd, args, NULL, S_QMP_MS, err, errlen);
    json_decref (args);
    return rc;
}

//  RAM goes into the stream (not x-ignore-shared: a clone's RAM is private);
//  a live save stops before the switchover so the disk can be frozen.
static int
s_set_caps (gw_qmp_t *qmp, bool pause_before, char *err, size_t errlen)
{
    json_t *args = json_pack ("{s:[{s:s, s:b}, {s:s, s:b}]}", "capabilities",
                              "capability", "x-ignore-shared", "state", 0,
                              "capability", "pause-before-switchover", "state", pause_before);
    int rc = s_qmp (qmp, "migrate-set-capabilities", args, err, errlen);
    if (rc == 0)
        rc = s_qmp (qmp, "migrate-set-parameters",
                    json_pack ("{s:I}", "max-bandwidth", (json_int_t) S_BANDWIDTH), err, errlen);
    return rc;
}

//  QEMU's version as "major.minor.micro package".
static int
s_qemu_version (gw_qmp_t *qmp, char *out, size_t cap, char *err, size_t errlen)
{
    json_t *ret = NULL;
    int rc = gw_qmp_execute (qmp, "query-version", NULL, &ret, S_QMP_MS, err, errlen);
    json_t *q = json_object_get (ret, "qemu");
    snprintf (out, cap, "%lld.%lld.%lld %s",
              (long long) json_integer_value (json_object_get (q, "major")),
              (long long) json_integer_value (json_object_get (q, "minor")),
              (long long) json_integer_value (json_object_get (q, "micro")),
              json_string_value (json_object_get (ret, "package")) ?: "");
    json_decref (ret);
    return rc;
}

//  ---------------------------------------------------------------------------
//  Saving

//  A new top layer over the current one, its backing name relative.
static int
s_new_layer (const gw_vmsave_req_t *req, char *name, size_t cap, char *err, size_t errlen)
{
    uint32_t r = 0;
    if (getrandom (&r, sizeof r, 0) != sizeof r)
        r = (uint32_t) ch_clock_mono_ms ();
    snprintf (name, cap, "ws-%08x.qcow2", r);
    return gw_vm_new_layer (req->cfg, req->run_dir, name, req->disk_top, err, errlen);
}

//  In the pause before the switchover: freeze the disk under a new top.
static int
s_freeze_disk (gw_qmp_t *qmp, const gw_vmsave_req_t *req, gw_vmsave_out_t *out, char *err,
               size_t errlen)
{
    int rc = s_new_layer (req, out->new_top, sizeof out->new_top, err, errlen);
    char path [PATH_MAX];
    snprintf (path, sizeof path, "%s/%s", req->run_dir, out->new_top);
    if (rc == 0)
        rc = s_qmp (qmp, "blockdev-snapshot-sync",
                    json_pack ("{s:s, s:s, s:s, s:s}", "device", "ws", "snapshot-file", path,
                               "format", "qcow2", "mode", "existing"), err, errlen);
    if (rc < 0)
        unlink (path);
    return rc;
}

//  RAM and devices into state; the disk frozen at the same instant. The
//  guest runs on afterwards when live, else stays stopped.
static int
s_save_vm (gw_qmp_t *qmp, const gw_vmsave_req_t *req, const char *state, gw_vmsave_out_t *out,
           char *err, size_t errlen)
{
    int64_t stopped = 0;
    gw_patience_t *patience = gw_patience_new (0, S_SAVE_MS);      //  the wall: a pause is short
    int rc = s_set_caps (qmp, true, err, errlen);
    if (rc == 0 && !req->live && (rc = s_qmp (qmp, "stop", NULL, err, errlen)) == 0)
        stopped = ch_clock_mono_ms ();
    if (rc == 0)
        rc = gw_snapshot_migrate_fd (qmp, "migrate", state, O_WRONLY | O_CREAT | O_TRUNC, err,
                                     errlen);
    if (rc == 0)
        rc = gw_snapshot_wait (qmp, "pre-switchover", patience, err, errlen);
    if (rc == 0 && !stopped)
        stopped = ch_clock_mono_ms ();
    bool frozen = rc == 0 && s_freeze_disk (qmp, req, out, err, errlen) == 0;
    if (rc == 0 && !frozen)
        rc = -EIO;
    if (rc == 0)
        rc = s_qmp (qmp, "migrate-continue", json_pack ("{s:s}", "state", "pre-switchover"),
                    err, errlen);
    if (rc == 0)
        rc = gw_snapshot_wait (qmp, "completed", patience, err, errlen);
    char ignored [256];
    if (rc < 0)                                 //  whatever happened, never leave it stopped
        gw_qmp_execute (qmp, "migrate_cancel", NULL, NULL, S_QMP_MS, ignored, sizeof ignored);
    if (req->live || rc < 0)
        gw_qmp_execute (qmp, "cont", NULL, NULL, S_QMP_MS, ignored, sizeof ignored);
    out->pause_ms = stopped ? ch_clock_mono_ms () - stopped : 0;
    gw_patience_destroy (&patience);
    return rc;
}

//  The frozen chain as one standalone disk in the staging dir.
static int
s_flatten (const gw_vmsave_req_t *req, const char *staging, char *err, size_t errlen)
{
    char src [PATH_MAX * 2], dst [PATH_MAX + 32];
    snprintf (src, sizeof src, "%s/%s", req->run_dir, req->disk_top);
    snprintf (dst, sizeof dst, "%s/" GW_SNAP_DISK, staging);
    const char *args [] = { "convert", "-U", "-O", "qcow2", src, dst, NULL };
    return gw_vm_run_qemu_img (req->cfg->qemu_img, &req->cfg->jail, req->run_dir,
                               req->disk_top, staging, args, err, errlen);
}

//  What QEMU's command line says: the TSC rate on -append (a clone runs
//  with its template's) and whether RAM is a backend named "mem".
static void
s_cmdline_facts (int pid, unsigned *tsc_p, bool *named_p, bool *reporting_p)
{
    char path [64], buf [8192];
    snprintf (path, sizeof path, "/proc/%d/cmdline", pid);
    int fd = open (path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read (fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0)
        close (fd);
    buf [n > 0 ? n : 0] = '\0';
    for (ssize_t i = 0; i < n; i++)
        if (buf [i] == '\0')
            buf [i] = ' ';
    const char *t = strstr (buf, "tsc_early_khz=");
    *tsc_p = t ? (unsigned) strtoul (t + 14, NULL, 10) : 0;
    *named_p = strstr (buf, "memory-backend=mem") != NULL;
    *reporting_p = strstr (buf, "free-page-reporting=on") != NULL;
}

static json_t *
s_meta (const gw_vmsave_req_t *req, const char *staging, const char *qemu_version,
        const char *ram_sha, char *err, size_t errlen)
{
    char path [PATH_MAX + 32], hex [65];
    off_t state_bytes = 0, disk_bytes = 0;
    snprintf (path, sizeof path, "%s/" GW_SNAP_STATE, staging);
    int rc = ch_sha256_file (path, 0, hex, &state_bytes);
    snprintf (path, sizeof path, "%s/" GW_SNAP_DISK, staging);
    struct stat st;
    if (rc < 0 || stat (path, &st) < 0) {
        snprintf (err, errlen, "reading back %s: %s", staging, strerror (rc < 0 ? -rc : errno));
        return NULL;
    }
    disk_bytes = st.st_size;
    unsigned tsc;
    bool named, reporting;
    s_cmdline_facts (req->pid, &tsc, &named, &reporting);
    json_t *meta = gw_vmsave_expected (req->cfg);
    if (ram_sha) {
        json_object_set_new (meta, "ram_bytes", json_integer ((json_int_t) req->cfg->mem_mib << 20));
        json_object_set_new (meta, "ram_digest", json_string (ram_sha));
        snprintf (path, sizeof path, "%s/" GW_SNAP_RAM, staging);
        gw_snapstamp_write (staging, path, ram_sha);
    }
    json_object_update_new (meta, json_pack ("{s:f, s:s, s:i, s:b, s:b, s:I, s:s, s:I}",
        "created", ch_clock_wall_s (), "qemu_version", qemu_version,
        "tsc_khz", (int) tsc, "mem_named", named, "page_reporting", reporting,
        "state_bytes", (json_int_t) state_bytes, "state_sha256", hex,
        "disk_file_bytes", (json_int_t) disk_bytes));
    snprintf (path, sizeof path, "%s/" GW_SNAP_STATE, staging);
    gw_snapstamp_write (staging, path, hex);    //  its resumes need not hash it again
    if (req->extra)
        json_object_update (meta, req->extra);
    return meta;
}

//  The blocks file holds on disk (a RAM file is sparse), 0 if none.
static json_int_t
s_allocated (const char *dir, const char *file)
{
    char path [PATH_MAX + 16];
    struct stat st;
    snprintf (path, sizeof path, "%s/%s", dir, file);
    return stat (path, &st) == 0 ? (json_int_t) st.st_blocks * 512 : 0;
}

//  The guest RAM out of the stream into its own file, when the VM's RAM is
//  the named backend a resume can map (gw_snapram); else the stream stays
//  whole and sha stays empty.
static int
s_split_ram (const gw_vmsave_req_t *req, const char *staging, char sha [65],
             gw_vmsave_out_t *out, char *err, size_t errlen)
{
    unsigned tsc;
    bool named, reporting;
    s_cmdline_facts (req->pid, &tsc, &named, &reporting);
    //  CELLVM_SNAPSHOT_RAM=stream keeps the old layout: make bench's anchor.
    const char *mode = getenv ("CELLVM_SNAPSHOT_RAM");
    if (mode && strcmp (mode, "stream") && strcmp (mode, "file"))
        gw_log (GW_LOG_WARN, "snapshot.bad_env", "CELLVM_SNAPSHOT_RAM=\"%.40s\" reason=\"not "
                "stream or file: file it is\"", mode);
    if (!named || (mode && strcmp (mode, "stream") == 0))
        return 0;
    int64_t t0 = ch_clock_mono_ms ();
    gw_migsplit_stats_t stats;
    int rc = gw_snapram_split (staging, (uint64_t) req->cfg->mem_mib << 20, sha, &stats, err,
                               errlen);
    out->split_ms = ch_clock_mono_ms () - t0;
    if (rc < 0)
        sha [0] = '\0';
    else
        gw_log (GW_LOG_INFO, "snapshot.ram_split", "pages=%llu zero_pages=%llu kept_bytes=%llu "
                "ms=%lld", (unsigned long long) stats.pages, (unsigned long long) stats.zero_pages,
                (unsigned long long) stats.kept_bytes, (long long) out->split_ms);
    return rc;
}

int
gw_vmsave_snapshot (gw_snapstore_t *store, const char *name, const gw_vmsave_req_t *req,
                    gw_vmsave_out_t *out, char *err, size_t errlen)
{
    assert (store && name && req && out);
    memset (out, 0, sizeof *out);
    int64_t t0 = ch_clock_mono_ms ();
    char staging [PATH_MAX], state [PATH_MAX + 8], version [128] = "", ram_sha [65] = "";
    json_t *meta = NULL;
    gw_qmp_t *qmp = NULL;
    int rc = gw_snapstore_stage (store, name, staging, sizeof staging, err, errlen);
    if (rc < 0)
        return rc;
    snprintf (state, sizeof state, "%s/" GW_SNAP_STATE, staging);
    if (!(qmp = gw_snapshot_qmp_at (req->run_dir, err, errlen))) {
        rc = -EIO;
        goto fail;
    }
    if ((rc = s_qemu_version (qmp, version, sizeof version, err, errlen)) < 0
    ||  (rc = s_save_vm (qmp, req, state, out, err, errlen)) < 0)
        goto fail;
    gw_qmp_destroy (&qmp);
    if ((rc = s_flatten (req, staging, err, errlen)) < 0
    ||  (rc = s_split_ram (req, staging, ram_sha, out, err, errlen)) < 0)
        goto fail;
    if (!(meta = s_meta (req, staging, version, ram_sha [0] ? ram_sha : NULL, err, errlen))) {
        rc = -EIO;
        goto fail;
    }
    json_int_t b = json_integer_value (json_object_get (meta, "state_bytes"))
                 + json_integer_value (json_object_get (meta, "disk_file_bytes"))
                 + s_allocated (staging, GW_SNAP_RAM);
    rc = gw_snapstore_publish (store, staging, name, meta, err, errlen);
    json_decref (meta);
    out->bytes = (uint64_t) b;
    out->ms = ch_clock_mono_ms () - t0;
    return rc;
fail:
    gw_qmp_destroy (&qmp);
    gw_snapstore_explain_space (staging, err, errlen);
    gw_snapstore_abort (store, staging);
    return rc;
}

//  ---------------------------------------------------------------------------
//  Resuming

json_t *
gw_vmsave_expected (const gw_vm_config_t *cfg)
{
    json_t *in = gw_tplmeta_inputs (cfg), *out = json_object ();
    const char *keys [] = { "image_hash", "mem_mib", "vcpus", "cpu", "accel", "disk_bytes",
                            "append" };
    for (size_t i = 0; i < sizeof keys / sizeof keys [0]; i++)
        json_object_set (out, keys [i], json_object_get (in, keys [i]));
    json_decref (in);
    json_object_set_new (out, "machine", json_string (GW_VMSAVE_MACHINE));
    if (cfg->accel == GW_ACCEL_KVM) {
        char model [256];
        gw_accel_cpu_model (model, sizeof model);
        json_object_set_new (out, "host_cpu", json_string (model));
        json_object_set_new (out, "host_tsc_khz", json_integer (gw_accel_tsc_khz ()));
    }
    return out;
}

//  Feed the state to a VM started with -incoming defer, then run it.
static int
s_load (gw_vm_t *vm, const gw_snapref_t *ref, int timeout_ms, char *err, size_t errlen)
{
    //  QEMU's progress, not the wall: a resume in a burst is not a broken one.
    gw_patience_t *patience = gw_patience_new (gw_vm_pid (vm), timeout_ms);
    gw_qmp_t *qmp = gw_snapshot_qmp (vm, timeout_ms, err, errlen);
    char version [128] = "", why [600];
    int rc = qmp ? s_qemu_version (qmp, version, sizeof version, err, errlen) : -EIO;
    json_t *want = json_pack ("{s:s}", "qemu_version", version);
    if (rc == 0 && gw_snapref_mismatch (ref, want, why, sizeof why)) {
        snprintf (err, errlen, "%s", why);
        rc = -EPROTO;
    }
    json_decref (want);
    if (rc == 0)
        rc = s_set_caps (qmp, false, err, errlen);
    if (rc == 0)
        rc = gw_snapshot_migrate_fd (qmp, "migrate-incoming", gw_snapref_state (ref), O_RDONLY,
                                     err, errlen);
    if (rc == 0)
        rc = gw_snapshot_wait (qmp, "completed", patience, err, errlen);
    if (rc == 0)
        rc = s_qmp (qmp, "cont", NULL, err, errlen);
    gw_qmp_destroy (&qmp);
    gw_patience_destroy (&patience);
    return rc;
}

//  A read lease on the snapshot's RAM file, taken before QEMU maps it, and
//  the file checked again under it (its stamp, else its digest): nothing
//  can change it unseen from here on (gw_readlease). 0, or -errno with
//  err; *lease_p stays NULL when the file system has no leases.
static int
s_guard_ram (const gw_snapref_t *ref, gw_readlease_t **lease_p, char *err, size_t errlen)
{
    const char *ram = gw_snapref_ram (ref);
    int rc = 0;
    char why [400];
    *lease_p = gw_readlease_new (ram, &rc, why, sizeof why);
    if (rc == -ENOTSUP || rc == -EINVAL) {
        gw_log (GW_LOG_WARN, "vm.ram_unguarded", "path=%s reason=\"%s\"", ram, why);
        rc = 0;
    }
    else if (rc < 0)
        snprintf (err, errlen, "its RAM file cannot be mapped safely: %s", why);
    if (rc == 0)
        rc = gw_snapref_verify_ram (ref, err, errlen);
    if (rc < 0)
        gw_readlease_destroy (lease_p);
    return rc;
}

gw_vm_t *
gw_vmsave_resume (const gw_snapref_t *ref, const gw_vm_config_t *cfg, int timeout_ms,
                  char *err, size_t errlen)
{
    assert (ref && cfg);
    char why [600];
    json_t *meta = gw_snapref_meta (ref), *want = gw_vmsave_expected (cfg);
    const char *bad = gw_snapref_mismatch (ref, want, why, sizeof why);
    json_decref (want);
    if (bad) {
        snprintf (err, errlen, "%s", bad);
        return NULL;
    }
    gw_readlease_t *lease = NULL;
    gw_vm_config_t c = *cfg;
    c.mem_path = gw_snapref_ram (ref);          //  mapped, copy-on-write; NULL: streamed
    c.mem_share = false;
    c.mem_named = json_is_true (json_object_get (meta, "mem_named"));
    //  The saved device model, exactly: a snapshot from before free page reporting has no
    //  balloon to restore.
    c.page_reporting = json_is_true (json_object_get (meta, "page_reporting"));
    c.incoming_defer = true;
    c.disk_backing = c.disk_seed = c.disk_chain_dir = c.disk_name = NULL;
    c.disk_base = gw_snapref_disk (ref);
    json_int_t tsc = json_integer_value (json_object_get (meta, "tsc_khz"));
    if (tsc > 0 && tsc < 100000000)
        c.tsc_khz = (unsigned) tsc;             //  the source's -append, exactly
    int rc = c.mem_path ? s_guard_ram (ref, &lease, why, sizeof why) : 0;
    gw_vm_t *vm = rc == 0 ? gw_vm_new (&c, why, sizeof why) : NULL;
    if (vm && lease)
        gw_vm_hold_lease (vm, &lease);
    rc = vm ? gw_vm_start (vm, why, sizeof why) : -EIO;
    if (rc == 0)
        rc = s_load (vm, ref, timeout_ms, why, sizeof why);
    if (rc < 0) {
        snprintf (err, errlen, "snapshot \"%s\" could not be resumed: %s",
                  gw_snapref_name (ref), why);
        gw_vm_destroy (&vm);
    }
    gw_readlease_destroy (&lease);
    return vm;
}
