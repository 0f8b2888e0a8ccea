/*  gw_microvm_life - the microvm backend's sessions that outlive a VM:
    a new VM over the old one's /workspace (a kernel death, a restart), the
    hand-over of /workspace to the next gateway, snapshots and idle pauses
    (docs/sessions.md). The blocking parts run on gw_vmstart's thread.
*/
#include "backend/gw_microvm_int.h"
#include "ch_util.h"
#include "disk/gw_chain.h"
#include "base/gw_log.h"
#include "vm/gw_rundir.h"
#include "base/gw_fs.h"
#include "snap/gw_snapstore.h"
#include "vm/gw_vmargv.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#define S_DETACH_MS 3000            //  init stops the kernel and unmounts /workspace

//  ---------------------------------------------------------------------------
//  A new VM over this one's disk

//  Link the VM's disk chain into a fresh run dir of ours (swept like any
//  other when the gateway dies): self->chain_dir.
static int
s_export_disk (s_self_t *self, char *err, size_t errlen)
{
    gw_rundir_t *rd = gw_rundir_new (self->cfg.run_base, err, errlen);
    int rc = rd ? gw_chain_export (gw_vmh_run_dir (self->vm), self->disk_top, gw_rundir_path (rd),
                                   err, errlen) : -EIO;
    if (rc == 0) {
        snprintf (self->chain_dir, sizeof self->chain_dir, "%s", gw_rundir_path (rd));
        self->chain_rd = rd;
    }
    else
        gw_rundir_destroy (&rd);
    return rc;
}

int
gw_microvm__rebirth (s_self_t *self)
{
    if (!self->init || !self->init_ready || !self->opts.template_dir || self->seam.fast_start)
        return 0;
    json_t *c = json_pack ("{s:b}", "kill_kernel", 1);
    if (gw_init_send (self->init, "workspace_detach_request", &c, NULL, 0, self->detach_id) < 0) {
        json_decref (c);
        self->detach_id [0] = '\0';
        return 0;
    }
    gw_microvm__watch_init (self);
    gw_log (GW_LOG_INFO, "vm.rebirth", "pid=%d reason=\"a fresh kernel over this /workspace\"",
            gw_vmh_pid (self->vm));
    self->starting = true;                      //  connect waits for the starter
    return 1;
}

//  Init detached /workspace (or could not): on to the new VM, or back to a
//  restart inside this one.
static void
s_detached (s_self_t *self, bool ok, const char *why)
{
    char err [600] = "";
    self->detach_id [0] = '\0';
    if (ok && s_export_disk (self, err, sizeof err) == 0) {
        gw_microvm__drop_vm (self);
        gw_vmstart_source_t src = { .chain_dir = self->chain_dir };
        gw_vmstart_set_source (self->starter, &src);
        if (gw_vmstart_begin (self->starter) == 0)
            return;
        snprintf (err, sizeof err, "a VM start is already under way");
    }
    gw_log (GW_LOG_WARN, "vm.rebirth_failed", "reason=\"%s\"", ok ? err : why);
    self->starting = false;
    if (!self->vm)                              //  nothing to restart in: connect cold-boots
        return;
    json_t *c = json_object ();
    char id [37];
    if (self->init && gw_init_send (self->init, "restart_request", &c, NULL, 0, id) == 0) {
        gw_watch_sent (self->watch, id);
        gw_microvm__watch_init (self);
    }
    json_decref (c);
}

bool
gw_microvm__on_init_reply (s_self_t *self, const ch_msg_t *msg)
{
    if (!self->detach_id [0] || strcmp (ch_msg_parent_id (msg), self->detach_id) != 0)
        return false;
    if (self->stop_start) {                     //  stopped meanwhile: no new VM
        self->detach_id [0] = '\0';
        self->starting = self->stop_start = false;
        return true;
    }
    json_t *c = ch_msg_content (msg);
    bool ok = strcmp (json_string_value (json_object_get (c, "status")) ?: "", "ok") == 0;
    char why [400];
    snprintf (why, sizeof why, "%s: %s", json_string_value (json_object_get (c, "ename")) ?: "?",
              json_string_value (json_object_get (c, "evalue")) ?: "?");
    s_detached (self, ok, why);
    return true;
}

//  ---------------------------------------------------------------------------
//  Starts

void
gw_microvm__prepare_start (s_self_t *self)
{
    gw_vmstart_source_t src = { 0 };
    gw_snapref_destroy (&self->paused_ref);     //  the resume removes it once it runs
    if (self->paused [0]) {
        src.store_dir = self->paused_store;
        src.snapshot = self->paused;
        src.keep_seeds = src.consume = true;
    }
    else if (!self->first_start_done && self->opts.from_snapshot) {
        src.store_dir = self->opts.snapshot_dir;
        src.snapshot = self->opts.from_snapshot;
        src.keep_seeds = src.consume = self->opts.resume;
    }
    else if (!self->first_start_done && self->opts.adopt_chain_dir)
        src.chain_dir = self->opts.adopt_chain_dir;
    else if (self->chain_dir [0])
        src.chain_dir = self->chain_dir;
    if (src.chain_dir || src.snapshot)
        gw_vmstart_set_source (self->starter, &src);
}

void
gw_microvm__started (s_self_t *self, int rc, const char *how)
{
    char top [NAME_MAX + 1] = GW_VMARGV_DISK;
    const char *chain = self->chain_dir [0] ? self->chain_dir : self->opts.adopt_chain_dir;
    if (rc == 0 && how && strcmp (how, "restore") == 0 && chain)
        gw_chain_top (chain, top, sizeof top);
    snprintf (self->disk_top, sizeof self->disk_top, "%s", top);
    if (rc == -EIO && self->paused [0]) {
        self->paused_unresumable = true;        //  the only copy of that session: keep it
        gw_log (GW_LOG_ERROR, "vm.paused_kept", "snapshot=%s store=%s reason=\"its resume "
                "failed; start it with --from-snapshot once the cause is fixed\"",
                self->paused, self->paused_store);
    }
    if (rc == 0 || rc == -EIO) {                //  adopted (links), or a resume's own failure
        gw_rundir_destroy (&self->chain_rd);
        self->chain_dir [0] = '\0';
    }
    if (rc == 0) {
        self->paused [0] = '\0';
        self->first_start_done = true;          //  a failed resume is retried, never replaced
    }
}

//  ---------------------------------------------------------------------------
//  Keeping /workspace for the next gateway

//  Ask init to freeze the kernel and /workspace (the VM ends next), and wait.
static int
s_detach_now (s_self_t *self, char *err, size_t errlen)
{
    ch_msg_t *reply = NULL;
    json_t *c = json_pack ("{s:b}", "freeze", 1);
    int rc = gw_init_call (self->init, "workspace_detach_request", &c, NULL, 0, S_DETACH_MS,
                           &reply);
    json_decref (c);
    json_t *rc_c = reply ? ch_msg_content (reply) : NULL;
    if (rc == 0 && strcmp (json_string_value (json_object_get (rc_c, "status")) ?: "", "ok")) {
        snprintf (err, errlen, "the VM could not release /workspace (%s: %s)",
                  json_string_value (json_object_get (rc_c, "ename")) ?: "?",
                  json_string_value (json_object_get (rc_c, "evalue")) ?: "?");
        rc = -EBUSY;
    }
    else if (rc < 0)
        snprintf (err, errlen, "the VM's init did not answer (%s)", strerror (-rc));
    ch_msg_destroy (&reply);
    return rc;
}

//  A paused session's disk is its snapshot's (a point-in-time copy: the
//  next mount replays ext4's journal); the snapshot goes after.
static int
s_keep_paused (s_self_t *self, const char *dir, char *err, size_t errlen)
{
    char dst [PATH_MAX + 32];
    snprintf (dst, sizeof dst, "%s/" GW_SNAP_DISK, dir);
    int rc = link (gw_snapref_disk (self->paused_ref), dst) == 0 ? 0
           : gw_fs_copy (gw_snapref_disk (self->paused_ref), dst, true);
    if (rc == 0)
        rc = gw_chain_write_top (dir, GW_SNAP_DISK);
    if (rc < 0)
        snprintf (err, errlen, "keeping the paused disk: %s", strerror (-rc));
    return rc;
}

int
gw_microvm__keep_workspace (void *ctx, const char *dir, char *err, size_t errlen)
{
    s_self_t *self = ctx;
    if (self->paused [0] && self->paused_ref)   //  its disk is the snapshot's
        return s_keep_paused (self, dir, err, errlen);
    if (!self->vm || !self->init || !self->init_ready) {
        snprintf (err, errlen, "the session has no running VM");
        return -ENOTCONN;
    }
    int rc = s_detach_now (self, err, errlen);
    if (rc == 0)
        rc = gw_chain_export (gw_vmh_run_dir (self->vm), self->disk_top, dir, err, errlen);
    gw_log (rc < 0 ? GW_LOG_WARN : GW_LOG_INFO, "vm.workspace_kept", "dir=%s rc=%d reason=\"%s\"",
            dir, rc, rc < 0 ? err : "a restart");
    return rc;
}

//  ---------------------------------------------------------------------------
//  Snapshots and pauses

static int
s_save (s_self_t *self, const char *store_dir, const char *name, bool pause,
        const json_t *more, gw_chunk_fn *done, void *arg, char *err, size_t errlen)
{
    if (!self->vm || !self->init_ready || self->starting || self->detach_id [0]) {
        snprintf (err, errlen, "the session's VM is not running right now");
        return -ENOTCONN;
    }
    if (self->save_done || self->ops) {
        snprintf (err, errlen, "a snapshot or a file transfer is under way; try again after it");
        return -EBUSY;
    }
    json_t *extra = json_pack ("{s:s}", "reason", pause ? "idle-pause" : "request");
    char policy [GW_EGRESS_LIST_MAX * 3 + 64];
    if (self->opts.egress && gw_egress_format (self->opts.egress, policy, sizeof policy)
                             < (int) sizeof policy)   //  a resume keeps its client list
        json_object_set_new (extra, "egress", json_loads (policy, 0, NULL));
    if (more)
        json_object_update_missing (extra, (json_t *) more);
    gw_vmsave_req_t req = { .run_dir = gw_vmh_run_dir (self->vm), .disk_top = self->disk_top,
                            .cfg = &self->cfg, .live = !pause, .pid = gw_vmh_pid (self->vm),
                            .extra = extra };
    int rc = gw_vmstart_save (self->starter, &req, store_dir, name);
    json_decref (extra);                        //  the save keeps its own copy
    if (rc < 0) {
        snprintf (err, errlen, "a snapshot is already under way");
        return rc;
    }
    self->save_done = done;
    self->save_arg = arg;
    self->save_pause = pause;
    snprintf (self->save_name, sizeof self->save_name, "%s", name);
    snprintf (self->paused_store, sizeof self->paused_store, "%s", store_dir);
    return 0;
}

int
gw_microvm__snapshot (void *ctx, const char *store_dir, const char *name, const json_t *extra,
                      gw_chunk_fn *done, void *arg, char *err, size_t errlen)
{
    return s_save ((s_self_t *) ctx, store_dir, name, false, extra, done, arg, err, errlen);
}

int
gw_microvm__pause (void *ctx, const char *store_dir, const char *name, gw_chunk_fn *done,
                   void *arg, char *err, size_t errlen)
{
    return s_save ((s_self_t *) ctx, store_dir, name, true, NULL, done, arg, err, errlen);
}

//  Hold the paused snapshot open (LOCK_SH), so a gc does not take it.
static void
s_hold_paused (s_self_t *self)
{
    char err [400] = "";
    int rc = 0;
    gw_snapstore_t *store = gw_snapstore_new (self->paused_store, err, sizeof err);
    self->paused_ref = store ? gw_snapstore_open (store, self->paused, &rc, err, sizeof err)
                             : NULL;
    gw_snapstore_destroy (&store);
    if (!self->paused_ref)
        gw_log (GW_LOG_WARN, "vm.paused_unheld", "name=%s reason=\"%s\"", self->paused, err);
}

void
gw_microvm__keep_paused (void *ctx)
{
    ((s_self_t *) ctx)->paused_kept = true;
}

void
gw_microvm__end (s_self_t *self)
{
    gw_snapref_destroy (&self->paused_ref);
    if (!self->paused [0] || self->paused_unresumable || self->paused_kept)
        return;
    char err [400] = "";
    gw_snapstore_t *store = gw_snapstore_new (self->paused_store, err, sizeof err);
    if (store)                                  //  the session ends: its pause goes too
        gw_snapstore_remove (store, self->paused, 2000, err, sizeof err);
    gw_snapstore_destroy (&store);
}

void
gw_microvm__on_save (s_self_t *self)
{
    char err [600] = "";
    gw_vmsave_out_t out;
    int rc = self->save_done ? gw_vmstart_save_take (self->starter, &out, err, sizeof err)
                             : -ECHILD;
    if (rc == -EAGAIN || rc == -ECHILD)
        return;
    gw_chunk_fn *done = self->save_done;
    self->save_done = NULL;
    json_t *reply = NULL;
    if (rc == 0 && !self->save_pause)
        snprintf (self->disk_top, sizeof self->disk_top, "%s", out.new_top);
    if (rc == 0 && self->save_pause) {          //  the VM is saved and stopped: let it go
        snprintf (self->paused, sizeof self->paused, "%s", self->save_name);
        self->kernel_alive = false;
        gw_microvm__drop_vm (self);
        s_hold_paused (self);
    }
    if (rc == 0)
        reply = json_pack ("{s:s, s:s, s:I, s:I, s:I, s:I}", "status", "ok", "name",
                           self->save_name, "bytes", (json_int_t) out.bytes, "ms",
                           (json_int_t) out.ms, "pause_ms", (json_int_t) out.pause_ms,
                           "split_ms", (json_int_t) out.split_ms);
    done (self->save_arg, rc, reply, NULL, 0, err);
    json_decref (reply);
}

const char *
gw_microvm__workspace (void *ctx)
{
    s_self_t *self = ctx;
    int n = -1;
    if (self->paused [0])
        n = snprintf (self->workspace, sizeof self->workspace, "%s/%s/" GW_SNAP_DISK,
                      self->paused_store, self->paused);
    else if (self->vm)
        n = snprintf (self->workspace, sizeof self->workspace, "%s/%s",
                      gw_vmh_run_dir (self->vm), self->disk_top);
    return n < 0 || (size_t) n >= sizeof self->workspace ? NULL : self->workspace;
}
