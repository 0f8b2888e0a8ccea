/*  gw_persist - a session that outlives its gateway (see gw_persist.h). */
#include "cli/gw_persist.h"
#include "disk/gw_keep.h"
#include "base/gw_log.h"
#include "base/gw_fs.h"
#include "base/gw_runbase.h"
#include "snap/gw_snapstore.h"
#include "cli/gw_status.h"
#include "snap/gw_vmsave.h"
#include "snap/gw_lease.h"
#include "snap/gw_ckpt.h"
#include "snap/gw_wsstore.h"
#include "vm/gw_qemuver.h"
#include "ch_clock.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_QEMUVER_MS 5000

struct _gw_persist_t {
    char identity [GW_KEEP_ID_LEN + 8];
    char base [PATH_MAX];                       //  run base: kept/, sessions/
    char adopt [PATH_MAX];                      //  a claimed kept workspace, "" none
    char store [PATH_MAX];                      //  the snapshot store
    char pause_name [GW_SNAP_NAME_MAX + 1];
    char from [GW_SNAP_NAME_MAX + 1];           //  the snapshot to start from, "" none
    char kernel_name [128];                     //  from the connection file, "" unknown
    bool microvm;
    //  A named session (--session-name): it moves between hosts through the store.
    gw_lease_t *lease;                          //  held while it runs here, NULL: unnamed
    bool lease_lost;                            //  another host took it: touch nothing
    bool resume;                                //  from is its own suspended self
    char session_name [GW_LEASE_NAME_MAX + 1];
    char ckpt [GW_SNAP_NAME_MAX + 1];           //  resumed from this checkpoint, "" not
    const char *end_kind;                       //  gw_session_end_kind, NULL: not ended
    bool restarted;                             //  ended by a client's restart
    bool ws_taken;                              //  adopt is the store's kept /workspace,
                                                //  not yet consumed
    gw_vm_config_t cfg;                         //  qemu-img, jail, disk size: a restart's save
    gw_status_t *status;
    const char *state;                          //  as last written
    char *egress;                               //  the client list from's meta recorded
};

int
gw_persist_conn_read (const gw_conn_t *conn, const char *conn_file, gw_persist_conn_t *out,
                      char *err, size_t errlen)
{
    assert (conn && conn_file && out && err);
    memset (out, 0, sizeof *out);
    size_t len = 0;
    const uint8_t *key = gw_conn_key (conn, &len);
    char *text = calloc (1, len + 1);
    if (!text)
        abort ();
    memcpy (text, key, len);
    int rc = gw_keep_identity (conn_file, text, out->identity, sizeof out->identity);
    free (text);
    if (rc < 0) {
        snprintf (err, errlen, "connection file %s: %s", conn_file, strerror (-rc));
        return rc;
    }
    json_t *conn_json = json_load_file (conn_file, 0, NULL);
    const char *kname = json_string_value (json_object_get (conn_json, "kernel_name"));
    snprintf (out->kernel_name, sizeof out->kernel_name, "%s", kname ? kname : "");
    json_decref (conn_json);
    return 0;
}

//  The kept /workspace of a restarted predecessor, claimed into a stage
//  dir of ours (a crash before adoption leaves it for the sweep).
static void
s_claim (gw_persist_t *self)
{
    char err [600] = "", dir [PATH_MAX];
    gw_keep_sweep (self->base, GW_KEEP_MAX_AGE_S, ch_clock_wall_s ());
    if (gw_keep_stage (self->base, self->identity, dir, sizeof dir, err, sizeof err) < 0
    ||  rmdir (dir) < 0)
        return;
    int rc = gw_keep_claim (self->base, self->identity, dir, err, sizeof err);
    if (rc == 0) {
        snprintf (self->adopt, sizeof self->adopt, "%s", dir);
        gw_log (GW_LOG_INFO, "session.adopting", "dir=%s reason=\"a restart kept /workspace\"",
                dir);
    }
    else if (rc != -ENOENT)
        gw_log (GW_LOG_WARN, "session.adopt_failed", "reason=\"%s\"", err);
}

//  Is the snapshot to start from there, whole, and made for these options?
static int
s_check_from (gw_persist_t *self, gw_args_t *args, char *err, size_t errlen)
{
    if (!self->microvm) {
        snprintf (err, errlen, "snapshot \"%s\": starting from a snapshot needs the microvm "
                  "backend", self->from);
        return -ENOTSUP;
    }
    gw_vm_config_t cfg;
    int rc = gw_args_vm_config_resolved (args, &cfg);
    if (rc < 0) {
        snprintf (err, errlen, "the VM options are not usable: %s", strerror (-rc));
        return rc;
    }
    gw_snapstore_t *store = gw_snapstore_new (self->store, err, errlen);
    gw_snapref_t *ref = store ? gw_snapstore_open (store, self->from, &rc, err, errlen) : NULL;
    json_t *want = gw_vmsave_expected (&cfg);
    char why [600], qemu [160];
    //  This host's QEMU build, when its binary says (a snapshot resumes only on its own).
    if (gw_qemuver_of (cfg.qemu, S_QEMUVER_MS, qemu, sizeof qemu) == 0)
        json_object_set_new (want, "qemu_version", json_string (qemu));
    if (!ref)
        rc = rc < 0 ? rc : -EIO;
    else if (gw_wsstore_is_kept (gw_snapref_meta (ref))) {
        snprintf (err, errlen, "snapshot \"%s\" holds only the /workspace a restart kept: the "
                  "next launch of its session (--session-name) takes it", self->from);
        rc = -EINVAL;
    }
    else if (gw_snapref_mismatch (ref, want, why, sizeof why)) {
        snprintf (err, errlen, "%s", why);
        rc = -EPROTO;
    }
    else
        rc = gw_snapref_verify_state (ref, err, errlen);   //  ~0.2 s per 250 MB
    const char *egress = ref ? json_string_value (json_object_get (json_object_get (
                             gw_snapref_meta (ref), "egress"), "client_allow")) : NULL;
    free (self->egress);
    self->egress = egress ? strdup (egress) : NULL;
    json_decref (want);
    gw_snapref_destroy (&ref);
    gw_snapstore_destroy (&store);
    return rc;
}

static int
s_paths (gw_persist_t *self, const gw_args_t *args, char *err, size_t errlen)
{
    const char *run = args->text [GW_OPT_RUN_DIR], *dir = args->text [GW_OPT_SNAPSHOT_DIR];
    int rc = run ? (snprintf (self->base, sizeof self->base, "%s", run), 0)
                 : gw_runbase_default (self->base, sizeof self->base);
    if (rc == 0)
        rc = dir ? (snprintf (self->store, sizeof self->store, "%s", dir), 0)
                 : gw_snapstore_default_dir (self->store, sizeof self->store);
    if (rc < 0)
        snprintf (err, errlen, "cannot name the run or snapshot directory: %s", strerror (-rc));
    return rc;
}

//  The snapshot to start from, unless a restart's kept /workspace is
//  there: checked whole. 0, or -errno with one line in err.
static int
s_from (gw_persist_t *self, gw_args_t *args, const char *from, char *err, size_t errlen)
{
    if (!from || !from [0])
        return 0;
    if (self->adopt [0]) {
        gw_log (GW_LOG_INFO, "session.restart_over_snapshot", "snapshot=%.80s reason=\"a "
                "restart gives a fresh interpreter over the kept /workspace\"", from);
        return 0;
    }
    if (!gw_snapstore_name_ok (from)) {
        snprintf (err, errlen, "snapshot name \"%.80s\" is not valid: use "
                  "[A-Za-z0-9_-]{1,64}", from);
        return -EINVAL;
    }
    snprintf (self->from, sizeof self->from, "%s", from);
    return s_check_from (self, args, err, errlen);
}

//  Does the store hold name (whole or not: the check says which)?
static bool
s_in_store (const gw_persist_t *self, const char *name)
{
    char path [PATH_MAX + GW_SNAP_NAME_MAX + 2];
    snprintf (path, sizeof path, "%s/%s", self->store, name);
    return access (path, F_OK) == 0;
}

//  Take name's lease; one held by another host is tried again each second for
//  up to wait_s, the time a dead host's lease takes to expire: a cluster
//  engine that requeues a dead node's job relaunches it sooner than that.
//  A live holder renews, so it still ends in a refusal, with its words.
static gw_lease_t *
s_take_lease (gw_persist_t *self, const char *name, const char *host, double ttl,
              double wait_s, int *rc_p, char *err, size_t errlen)
{
    double deadline = ch_clock_wall_s () + wait_s;
    bool logged = false;
    for (;;) {
        gw_lease_t *lease = gw_lease_take (self->store, name, host, ttl, ch_clock_wall_s (),
                                           rc_p, err, errlen);
        if (lease || *rc_p != -EBUSY || ch_clock_wall_s () + 1 > deadline)
            return lease;
        if (!logged)
            gw_log (GW_LOG_INFO, "session.lease_wait", "name=%s wait_s=%g reason=\"%s\"",
                    name, wait_s, err);
        logged = true;
        sleep (1);
    }
}

//  Remove the store's entry name, which a newer state of the session
//  supersedes (logged either way).
static void
s_supersede (gw_persist_t *self, const char *name, const char *by)
{
    char err [600] = "";
    int rc = 0;
    if (strncmp (name, "ckpt-", 5) == 0)
        gw_ckpt_prune (self->store, self->session_name, NULL);
    else if (strncmp (name, GW_WSSTORE_PREFIX, strlen (GW_WSSTORE_PREFIX)) == 0)
        rc = gw_wsstore_remove (self->store, self->session_name, err, sizeof err);
    else {
        gw_snapstore_t *store = gw_snapstore_new (self->store, err, sizeof err);
        rc = store ? gw_snapstore_remove (store, name, 2000, err, sizeof err) : -EACCES;
        gw_snapstore_destroy (&store);
    }
    gw_log (rc < 0 ? GW_LOG_WARN : GW_LOG_INFO, "session.superseded", "name=%s by=%s rc=%d "
            "reason=\"%s\"", name, by, rc, rc < 0 ? err : "older: the newer one is the session");
}

//  A restart's /workspace kept in the store (gw_wsstore), when it is newer
//  than *found_p (the suspend or checkpoint the launch would resume, or
//  NULL): taken into a stage dir of ours for the backend to adopt, a fresh
//  interpreter over it as a restart gives. The older of the two goes. 0, or
//  -errno with err (it cannot be taken: the entry stays for a next try).
static int
s_take_kept (gw_persist_t *self, const char **found_p, char *err, size_t errlen)
{
    char name [GW_SNAP_NAME_MAX + 1], dir [PATH_MAX];
    double kept = gw_wsstore_name (self->session_name, name, sizeof name) == 0
                ? gw_wsstore_created (self->store, name) : -1;
    double other = *found_p ? gw_wsstore_created (self->store, *found_p) : -1;
    if (kept < 0)
        return 0;
    if (!gw_wsstore_newer (kept, other)) {
        s_supersede (self, name, *found_p);
        return 0;
    }
    int rc = gw_keep_stage (self->base, self->identity, dir, sizeof dir, err, errlen);
    if (rc == 0 && (rc = gw_wsstore_take (self->store, self->session_name,
                                          self->cfg.disk_bytes, dir, err, errlen)) < 0)
        gw_fs_remove_tree (dir);
    if (rc < 0)
        return rc;
    snprintf (self->adopt, sizeof self->adopt, "%s", dir);
    self->ws_taken = true;
    gw_log (GW_LOG_INFO, "session.adopting", "dir=%s from=%s reason=\"a restart kept "
            "/workspace in the store\"", dir, name);
    if (*found_p)
        s_supersede (self, *found_p, name);
    self->resume = false;
    self->ckpt [0] = '\0';
    *found_p = NULL;
    return 0;
}

//  What a launch of the name starts from: its suspend (newer than any
//  checkpoint), else its newest checkpoint (what a dead host left), else a
//  restart's kept /workspace when that is newer still. 0 or -errno + err.
static int
s_found (gw_persist_t *self, const char **found_p, char *err, size_t errlen)
{
    self->resume = s_in_store (self, self->pause_name);
    if (!self->resume && gw_ckpt_newest (self->store, self->session_name, self->ckpt,
                                         sizeof self->ckpt) < 0)
        self->ckpt [0] = '\0';
    *found_p = self->resume ? self->pause_name : self->ckpt [0] ? self->ckpt : NULL;
    return s_take_kept (self, found_p, err, errlen);
}

//  A named session: hold its lease before anything of it is touched, and
//  resume it when the store has it (a suspend's, or an idle pause's, save).
static int
s_named (gw_persist_t *self, const gw_args_t *args, const char **from_p, char *err,
         size_t errlen)
{
    const char *name = args->text [GW_OPT_SESSION_NAME] ? args->text [GW_OPT_SESSION_NAME]
                     : getenv ("CELLVM_SESSION_NAME");
    if (!name || !name [0])
        return 0;
    if (!self->microvm) {
        snprintf (err, errlen, "session \"%.80s\": a named session needs the microvm "
                  "backend", name);
        return -ENOTSUP;
    }
    gw_snapstore_t *store = gw_snapstore_new (self->store, err, errlen);
    if (!store)
        return -EACCES;
    gw_snapstore_destroy (&store);
    char host [128] = "";
    gethostname (host, sizeof host - 1);
    int rc = 0;
    double ttl = args->lease_ttl > 0 ? args->lease_ttl : GW_PERSIST_LEASE_TTL_S;
    self->lease = s_take_lease (self, name, host [0] ? host : "?", ttl, args->lease_wait,
                                &rc, err, errlen);
    if (!self->lease)
        return rc;
    snprintf (self->session_name, sizeof self->session_name, "%s", name);
    snprintf (self->pause_name, sizeof self->pause_name, "session-%s", name);
    const char *found = NULL;
    if ((rc = s_found (self, &found, err, errlen)) < 0)
        return rc;
    if (found && *from_p && (*from_p) [0])
        gw_log (GW_LOG_INFO, "session.resume_over_snapshot", "snapshot=%.80s reason=\"the "
                "store holds this session: it resumes from %s\"", *from_p, found);
    if (found)
        *from_p = found;
    gw_log (GW_LOG_INFO, "session.lease_taken", "name=%s epoch=%d ttl_s=%g from=%s", name,
            gw_lease_epoch (self->lease), ttl, found ? found : self->ws_taken
            ? "kept-workspace" : "-");
    return 0;
}

//  Renew a named session's lease; lost, stop at once and leave the store
//  to its new holder.
static void
s_renew (gw_persist_t *self, gw_session_t *session)
{
    if (!self->lease || self->lease_lost)
        return;
    char err [600] = "";
    double now = ch_clock_wall_s ();
    int rc = gw_lease_renew (self->lease, now, err, sizeof err);
    if (rc == 0)
        return;
    if (rc != -ESTALE && !gw_lease_lapsed (self->lease, now)) {
        gw_log (GW_LOG_WARN, "session.lease_renew_failed", "reason=\"%s\"", err);
        return;
    }
    self->lease_lost = true;
    gw_log (GW_LOG_ERROR, "session.lease_lost", "reason=\"%s\" action=\"stop now: the "
            "session may run on another host\"", rc == -ESTALE ? err
            : "it could not be renewed before it expired");
    gw_backend_keep_paused (gw_session_backend (session));
    gw_session_shutdown (session);
}

//  The status file `cellvm ls` reads; a session goes on without one.
static void
s_status (gw_persist_t *self, const char *backend, const char *conn_file)
{
    char serr [300] = "";
    self->status = gw_status_new (self->base, self->identity, backend, conn_file,
                                  self->kernel_name [0] ? self->kernel_name : NULL, serr,
                                  sizeof serr);
    if (!self->status)
        gw_log (GW_LOG_WARN, "session.no_status_file", "reason=\"%s\"", serr);
    else if (self->from [0])
        gw_status_set (self->status, "from_snapshot", json_string (self->from));
}

gw_persist_t *
gw_persist_new (gw_args_t *args, const gw_persist_conn_t *facts, const char *conn_file,
                char *err, size_t errlen)
{
    assert (args && facts && conn_file);
    gw_persist_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    const char *backend = args->text [GW_OPT_BACKEND] ? args->text [GW_OPT_BACKEND] : "";
    const char *from = args->text [GW_OPT_FROM_SNAPSHOT] ? args->text [GW_OPT_FROM_SNAPSHOT]
                     : getenv ("CELLVM_FROM_SNAPSHOT");
    self->microvm = strcmp (backend, "microvm") == 0;
    snprintf (self->identity, sizeof self->identity, "%s", facts->identity);
    snprintf (self->kernel_name, sizeof self->kernel_name, "%s", facts->kernel_name);
    snprintf (self->pause_name, sizeof self->pause_name, "paused-%s", self->identity);
    gw_args_vm_config (args, &self->cfg);
    if (s_paths (self, args, err, errlen) < 0 || s_named (self, args, &from, err, errlen) < 0)
        goto fail;
    if (!self->adopt [0])
        s_claim (self);                         //  a restart's /workspace wins over a snapshot
    if (s_from (self, args, from, err, errlen) < 0)
        goto fail;
    s_status (self, backend, conn_file);
    return self;
fail:;
    char ignored [200];
    if (self->ws_taken)                         //  the store keeps it for a next try
        gw_fs_remove_tree (self->adopt);
    else if (self->adopt [0])                   //  not adopted: leave it for a next try
        gw_keep_commit (self->base, self->identity, self->adopt, ignored, sizeof ignored);
    gw_lease_destroy (&self->lease);
    free (self);
    return NULL;
}

//  A named session's checkpoints go once it is suspended (the suspend is
//  newer) or ended; a suspend that failed leaves them, its only copy. Once
//  the backend is gone: a checkpoint still being written is then whole.
static void
s_end_named (gw_persist_t *self)
{
    if (!self->lease || self->lease_lost || !self->end_kind)
        return;
    if (strcmp (self->end_kind, "suspend_failed") == 0)
        gw_log (GW_LOG_WARN, "session.checkpoints_kept", "name=%s reason=\"the suspend "
                "failed: the next launch resumes the newest checkpoint\"", self->session_name);
    else
        gw_ckpt_prune (self->store, self->session_name, NULL);
    char err [600] = "";
    //  An end discards all of it; a restart's /workspace is there for the next launch.
    int rc = strcmp (self->end_kind, "ended") == 0 && !self->restarted
           ? gw_wsstore_remove (self->store, self->session_name, err, sizeof err) : -ENOENT;
    if (rc < 0 && rc != -ENOENT)
        gw_log (GW_LOG_WARN, "session.workspace_left", "name=%s reason=\"%s\"",
                self->session_name, err);
}

void
gw_persist_destroy (gw_persist_t **self_p)
{
    assert (self_p);
    gw_persist_t *self = *self_p;
    if (!self)
        return;
    gw_status_destroy (&self->status);
    s_end_named (self);
    gw_lease_destroy (&self->lease);            //  the session is saved or gone: let go
    if (self->adopt [0] && access (self->adopt, F_OK) == 0)
        gw_fs_remove_tree (self->adopt);        //  adopted (linked) or abandoned
    free (self->egress);
    free (self);
    *self_p = NULL;
}

const char *
gw_persist_egress (const gw_persist_t *self)
{
    assert (self);
    return self->egress;
}

const char *
gw_persist_adopt_dir (const gw_persist_t *self)
{
    return self->adopt [0] ? self->adopt : NULL;
}

void
gw_persist_microvm_opts (const gw_persist_t *self, gw_microvm_opts_t *opts)
{
    opts->adopt_chain_dir = gw_persist_adopt_dir (self);
    opts->from_snapshot = self->from [0] ? self->from : NULL;
    opts->resume = self->resume;
    opts->snapshot_dir = self->store;
}

void
gw_persist_session_opts (const gw_persist_t *self, const gw_args_t *args,
                         gw_session_opts_t *opts)
{
    opts->idle_pause = self->microvm ? args->idle_pause : 0;
    opts->idle_timeout = args->idle_timeout;
    opts->ttl = args->ttl;
    opts->snapshot_dir = self->store;
    opts->pause_name = self->pause_name;
    opts->suspend_on_term = self->lease != NULL;
    opts->session_name = self->lease ? self->session_name : NULL;
    opts->checkpoint_every = self->lease ? args->checkpoint_every : 0;
    opts->kernel_name = self->kernel_name [0] ? self->kernel_name : NULL;
    //  A local kernel already runs in the launch folder itself.
    static char cwd [PATH_MAX];
    if (self->microvm && gw_args_has (args, GW_OPT_SHARE_CWD) && getcwd (cwd, sizeof cwd)) {
        opts->share_dir = cwd;
        opts->share_max = (size_t) args->share_max;
    }
}

//  The store's kept /workspace, once the VM runs over it, is consumed: a
//  launch that dies before that leaves it for the next.
static void
s_consume (gw_persist_t *self, gw_session_t *session)
{
    const char *state = gw_session_state_name (session);
    if (!self->ws_taken || self->lease_lost || !strcmp (state, "starting")
    ||  !strcmp (state, "stopping"))
        return;
    self->ws_taken = false;
    char err [600] = "";
    int rc = gw_wsstore_remove (self->store, self->session_name, err, sizeof err);
    gw_log (rc < 0 ? GW_LOG_WARN : GW_LOG_INFO, "session.workspace_consumed", "name=%s rc=%d "
            "reason=\"%s\"", self->session_name, rc, rc < 0 ? err : "the VM runs over it");
}

void
gw_persist_tick (gw_persist_t *self, gw_session_t *session)
{
    s_renew (self, session);
    s_consume (self, session);
    if (!self->status)
        return;
    const char *state = gw_session_state_name (session);
    gw_backend_t *be = gw_session_backend (session);
    const char *ws = gw_backend_workspace (be);
    gw_status_set (self->status, "qemu_pid", json_integer (gw_backend_pid (be)));
    gw_status_set (self->status, "workspace", ws ? json_string (ws) : NULL);
    gw_status_set (self->status, "paused_snapshot", strcmp (state, "paused") == 0
                   ? json_string (self->pause_name) : NULL);
    if (strcmp (state, "idle") != 0)
        gw_status_touch (self->status);
    if (state != self->state)
        gw_status_set_state (self->status, state);
    self->state = state;
    gw_status_flush (self->status, false);
}

//  A named session's restart keeps /workspace in the store, for the next
//  launch of the name on any host, while the lease still holds it. True
//  when kept there; false leaves it to this host's kept/, and says so.
static bool
s_store_kept (gw_persist_t *self, const char *dir)
{
    if (!self->lease || self->lease_lost)
        return false;
    char err [600] = "";
    int64_t t0 = ch_clock_mono_ms ();
    int rc = gw_wsstore_save (self->store, self->session_name, dir, &self->cfg, err,
                              sizeof err);
    if (rc == 0)
        gw_log (GW_LOG_INFO, "session.workspace_kept", "name=%s rc=0 store=%s ms=%lld "
                "reason=\"restart requested: the next launch of the name, on any host, gets "
                "it\"",
                self->session_name, self->store, (long long) (ch_clock_mono_ms () - t0));
    else
        gw_log (GW_LOG_ERROR, "session.workspace_store_failed", "name=%s rc=%d reason=\"%s\" "
                "action=\"kept on this host only: a launch elsewhere starts with an empty "
                "/workspace\"", self->session_name, rc, err);
    self->ws_taken = false;                     //  replaced, or it was never consumed
    return rc == 0;
}

void
gw_persist_end (gw_persist_t *self, gw_session_t *session)
{
    char dir [PATH_MAX], err [600] = "";
    self->end_kind = gw_session_end_kind (session);
    self->restarted = gw_session_restart_requested (session);
    if (!self->restarted)
        return;
    int rc = gw_keep_stage (self->base, self->identity, dir, sizeof dir, err, sizeof err);
    if (rc == 0 && (rc = gw_session_keep_workspace (session, dir, err, sizeof err)) < 0)
        gw_fs_remove_tree (dir);
    else if (rc == 0 && s_store_kept (self, dir)) {
        gw_fs_remove_tree (dir);
        return;
    }
    else if (rc == 0)
        rc = gw_keep_commit (self->base, self->identity, dir, err, sizeof err);
    gw_log (rc < 0 ? GW_LOG_ERROR : GW_LOG_INFO, "session.workspace_kept", "identity=%s rc=%d "
            "reason=\"%s\"", self->identity, rc, rc < 0 ? err : "restart requested");
}

int
gw_persist_gc_main (gw_args_t *args)
{
    char dir [PATH_MAX], err [600] = "";
    int rc = args->text [GW_OPT_SNAPSHOT_DIR]
           ? (snprintf (dir, sizeof dir, "%s", args->text [GW_OPT_SNAPSHOT_DIR]), 0)
           : gw_snapstore_default_dir (dir, sizeof dir);
    gw_snapstore_t *store = rc == 0 ? gw_snapstore_new (dir, err, sizeof err) : NULL;
    if (store)
        rc = gw_snapstore_gc (store, args->snapshot_max_age, args->snapshot_max_bytes,
                              ch_clock_wall_s ());
    gw_snapstore_destroy (&store);
    if (!store && !err [0])
        snprintf (err, sizeof err, "no snapshot store: %s", strerror (-rc));
    if (err [0] || rc < 0)
        fprintf (stderr, "cellvm-gateway: --snapshot-gc: %s\n", err [0] ? err : strerror (-rc));
    else
        gw_log (GW_LOG_INFO, "snapshot.gc_done", "deleted=%d dir=%s", rc, dir);
    return err [0] || rc < 0 ? 1 : 0;
}
