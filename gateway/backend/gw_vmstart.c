/*  gw_vmstart - a session's VM made ready off the reactor thread. */
#include "backend/gw_vmstart.h"
#include "disk/gw_chain.h"
#include "base/gw_admit.h"
#include "base/gw_log.h"
#include "base/gw_mem.h"
#include "snap/gw_pool.h"
#include "snap/gw_template.h"
#include "snap/gw_snapstore.h"
#include "ch_frame.h"
#include "ch_clock.h"

#include <czmq.h>
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define S_POOL_MS 2000              //  the daemon answers a take within this
#define S_RESTORE_MS 5000           //  each step of a restore, unless opts say (gw_patience)

typedef enum { S_IDLE, S_RUNNING, S_DONE, S_QUIT } s_state_t;

struct _gw_vmstart_t {
    gw_vm_config_t cfg;
    gw_microvm_opts_t opts;
    bool build_requested;           //  a background template build was started
    bool daemon_requested;          //  the pool daemon was started on demand
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    s_state_t state;                //  guarded by lock
    int rc;                         //  the ended start's: 0 or -ENOENT
    gw_vmstart_result_t res;        //  its VM, when rc is 0
    int events;                     //  eventfd: a start ended
    zlistx_t *dispose;              //  gw_vmh_t: VMs to destroy here; guarded by lock
    //  The next start's source (gw_vmstart_set_source); guarded by lock.
    char *chain_dir, *store_dir, *snapshot;
    bool keep_seeds, consume;
    char error [600];               //  why the last start failed
    gw_admit_t *admit;              //  the host's admission queue, NULL: none
    int admit_place;                //  the place last logged
    //  A save (gw_vmstart_save), guarded by lock.
    s_state_t save_state;
    gw_vmsave_req_t save_req;
    char save_run_dir [PATH_MAX], save_top [NAME_MAX + 1], *save_store, *save_name;
    gw_vmsave_out_t save_out;
    int save_rc;
    char save_err [600];
};

//  --------------------------------------------------------------------------
//  On the thread

//  Run argv detached, once; log where its output goes.
static void
s_spawn_once (gw_vmstart_t *self, bool *done, char *const *argv, const char *log_name,
              const char *event)
{
    char log_path [PATH_MAX];
    if (*done || !argv || !self->opts.template_dir)
        return;
    *done = true;
    snprintf (log_path, sizeof log_path, "%s/%s", self->opts.template_dir, log_name);
    int rc = gw_template_build_detached (argv, log_path);
    gw_log (rc < 0 ? GW_LOG_WARN : GW_LOG_INFO, event, "log=%s rc=%d", log_path, rc);
}

//  A clone from the pool daemon, already restored and reseeded by its
//  holder; the host clock is pushed again now (it ran while it waited).
static int
s_take_from_pool (gw_vmstart_t *self, gw_vmstart_result_t *res)
{
    char err [512] = "";
    gw_pool_lease_t *lease = NULL;
    if (!self->opts.pool_socket)
        return -ENOTSUP;
    int64_t t0 = ch_clock_mono_ms ();
    int rc = gw_pool_take (self->opts.pool_socket, S_POOL_MS, &lease, err, sizeof err);
    if (rc < 0) {
        gw_log (GW_LOG_INFO, "vm.pool_miss", "socket=%s reason=\"%s\"", self->opts.pool_socket,
                err);
        if (rc == -ENOENT || rc == -ECONNREFUSED)
            s_spawn_once (self, &self->daemon_requested, self->opts.pool_argv, "pool.log",
                          "pool.daemon_started");
        return rc;
    }
    res->kernel_fd = gw_pool_lease_take_kernel_fd (lease);
    res->init = gw_init_new (gw_pool_lease_take_init_fd (lease), CH_FRAME_MAX_DEFAULT);
    json_t *c = json_pack ("{s:f}", "time", ch_clock_wall_s ());
    gw_init_send (res->init, "set_time_request", &c, NULL, 0, NULL);
    gw_log (GW_LOG_INFO, "vm.from_pool", "pid=%d run_dir=%s ms=%lld", gw_pool_lease_pid (lease),
            gw_pool_lease_run_dir (lease), (long long) (ch_clock_mono_ms () - t0));
    res->vm = gw_vmh_from_lease (&lease);
    res->how = "pool";
    return 0;
}

static int
s_step_ms (const gw_vmstart_t *self)
{
    return self->opts.start_timeout_ms > 0 ? self->opts.start_timeout_ms : S_RESTORE_MS;
}

//  While the start waits in line: its place logged when it changes; the
//  wait ends when the session does.
static bool
s_in_line (void *arg, int place, int slots)
{
    gw_vmstart_t *self = arg;
    if (place != self->admit_place)
        gw_log (GW_LOG_INFO, "vm.admission_wait", "place=%d slots=%d", place, slots);
    self->admit_place = place;
    pthread_mutex_lock (&self->lock);
    bool wanted = self->state == S_RUNNING;
    pthread_mutex_unlock (&self->lock);
    return wanted;
}

//  A slot of the host's for a restore or a resume, so a burst of starts
//  does not make every one of them slow. 0, or -ECANCELED: the session
//  ended. A queue that fails is logged, and the start goes on without.
static int
s_admit (gw_vmstart_t *self)
{
    if (!self->admit)
        return 0;
    int64_t t0 = ch_clock_mono_ms ();
    self->admit_place = 0;
    int rc = gw_admit_enter (self->admit, -1, s_in_line, self);
    if (rc == -ECANCELED)
        return rc;
    if (rc < 0)
        gw_log (GW_LOG_WARN, "vm.admission_failed", "reason=\"%s\"", strerror (-rc));
    else
        gw_log (GW_LOG_INFO, "vm.admitted", "slot=%d waited_ms=%lld place=%d",
                gw_admit_slot (self->admit), (long long) (ch_clock_mono_ms () - t0),
                self->admit_place ? self->admit_place : 1);
    return 0;
}

//  Restore a clone of the template, reseed it and redo both handshakes.
//  The template to restore, or NULL and *rc_p: the cold boot it means is
//  logged with its reason, and a missing template is built for next time.
static gw_template_t *
s_open_template (gw_vmstart_t *self, int *rc_p)
{
    char err [512] = "";
    int rc = -ENOTSUP;
    gw_template_t *t = NULL;
    if (self->opts.template_dir)
        t = gw_template_open (self->opts.template_dir, &self->cfg, &rc, err, sizeof err);
    if (!t) {
        gw_log (self->opts.template_dir ? GW_LOG_WARN : GW_LOG_INFO, "vm.cold_boot",
                "reason=\"%s\"", self->opts.template_dir ? err : "templates are off");
        if (rc == -ENOENT || rc == -ESTALE)
            s_spawn_once (self, &self->build_requested, self->opts.build_argv, "build.log",
                          "template.build_requested");
    }
    *rc_p = rc;
    return t;
}

static int
s_restore (gw_vmstart_t *self, gw_vmstart_result_t *res)
{
    char err [512] = "";
    int rc = 0;
    gw_template_t *t = s_open_template (self, &rc);
    if (!t)
        return rc;
    gw_vm_config_t c = self->cfg;
    char top [NAME_MAX + 1];
    if (self->chain_dir && gw_chain_top (self->chain_dir, top, sizeof top) == 0) {
        c.disk_chain_dir = self->chain_dir;     //  the session's own /workspace
        c.disk_name = top;
    }
    if (s_admit (self) < 0) {
        gw_template_destroy (&t);
        return -ECANCELED;
    }
    int64_t t0 = ch_clock_mono_ms ();           //  the restore's own time, not the line's
    gw_vm_t *vm = gw_template_restore (t, &c, s_step_ms (self), err, sizeof err);
    int64_t t_run = ch_clock_mono_ms ();
    rc = vm ? gw_template_reseed (vm, s_step_ms (self), &res->init, &res->kernel_fd, err,
                                  sizeof err) : -EIO;
    gw_admit_leave (self->admit);
    if (rc < 0)
        gw_log (GW_LOG_WARN, "vm.cold_boot", "reason=\"restoring %s failed: %s\"",
                gw_template_path (t), err);
    else
        gw_log (GW_LOG_INFO, "vm.restored", "pid=%d template=%s running_ms=%lld ready_ms=%lld "
                "run_dir=%s", gw_vm_pid (vm), gw_template_path (t), (long long) (t_run - t0),
                (long long) (ch_clock_mono_ms () - t0), gw_vm_run_dir (vm));
    if (rc == 0) {
        res->vm = gw_vmh_from_vm (&vm);
        res->how = "restore";
    }
    gw_vm_destroy (&vm);
    gw_template_destroy (&t);
    return rc < 0 ? -EIO : 0;
}

//  A session's snapshot, resumed (a fork, a resume, an idle pause's end).
static int
s_resume (gw_vmstart_t *self, gw_vmstart_result_t *res)
{
    char *err = self->error;
    size_t errlen = sizeof self->error;
    int rc = 0;
    int64_t t0 = ch_clock_mono_ms ();
    gw_snapstore_t *store = gw_snapstore_new (self->store_dir, err, errlen);
    //  Its checksum was verified when the gateway started (gw_persist), or
    //  it is this session's own pause, held open since.
    gw_snapref_t *ref = store ? gw_snapstore_open (store, self->snapshot, &rc, err, errlen) : NULL;
    if (ref && s_admit (self) < 0) {            //  the session ended while in line
        gw_snapref_destroy (&ref);
        gw_snapstore_destroy (&store);
        return -ECANCELED;
    }
    gw_vm_t *vm = ref ? gw_vmsave_resume (ref, &self->cfg, s_step_ms (self) * 4, err, errlen) : NULL;
    gw_snapref_destroy (&ref);
    gw_snapstore_destroy (&store);
    rc = !vm ? -EIO : self->keep_seeds
       ? gw_template_rehello (vm, s_step_ms (self), &res->init, &res->kernel_fd, err, errlen)
       : gw_template_reseed (vm, s_step_ms (self), &res->init, &res->kernel_fd, err, errlen);
    gw_admit_leave (self->admit);
    if (rc < 0) {
        gw_log (GW_LOG_ERROR, "vm.resume_failed", "snapshot=%s reason=\"%s\"", self->snapshot,
                err);
        gw_vm_destroy (&vm);
        return -EIO;
    }
    gw_log (GW_LOG_INFO, "vm.resumed", "pid=%d snapshot=%s ms=%lld run_dir=%s", gw_vm_pid (vm),
            self->snapshot, (long long) (ch_clock_mono_ms () - t0), gw_vm_run_dir (vm));
    if (self->consume && (store = gw_snapstore_new (self->store_dir, err, errlen)))
        gw_snapstore_remove (store, self->snapshot, 0, err, errlen);   //  resumed: not needed
    gw_snapstore_destroy (&store);
    res->vm = gw_vmh_from_vm (&vm);
    res->how = "snapshot";
    return 0;
}

//  The documented order, or the seam's stand-in; a source set for this
//  start comes first. 0, -ENOENT (cold-boot), -EIO (a resume failed).
static int
s_fast_start (gw_vmstart_t *self, gw_vmstart_result_t *res)
{
    const gw_microvm_seam_t *seam = &self->opts.seam;
    self->error [0] = '\0';
    if (seam->fast_start)
        return seam->fast_start (seam->arg, res) == 0 ? 0 : -ENOENT;
    if (self->snapshot)
        return s_resume (self, res);
    if (self->chain_dir)                        //  a pool clone has a fresh disk
        return s_restore (self, res) == 0 ? 0 : -ENOENT;
    return s_take_from_pool (self, res) == 0 || s_restore (self, res) == 0 ? 0 : -ENOENT;
}

static void
s_source_clear (gw_vmstart_t *self)
{
    free (self->chain_dir);
    free (self->store_dir);
    free (self->snapshot);
    self->chain_dir = self->store_dir = self->snapshot = NULL;
    self->keep_seeds = self->consume = false;
}

//  The save waiting on the thread, done; called without the lock.
static void
s_run_save (gw_vmstart_t *self)
{
    char err [600] = "";
    gw_vmsave_out_t out;
    gw_snapstore_t *store = gw_snapstore_new (self->save_store, err, sizeof err);
    int rc = store ? gw_vmsave_snapshot (store, self->save_name, &self->save_req, &out, err,
                                         sizeof err) : -EIO;
    gw_snapstore_destroy (&store);
    gw_log (rc < 0 ? GW_LOG_ERROR : GW_LOG_INFO, "vm.saved", "name=%s live=%s rc=%d ms=%lld "
            "pause_ms=%lld bytes=%llu reason=\"%s\"", self->save_name,
            self->save_req.live ? "yes" : "no", rc, (long long) out.ms,
            (long long) out.pause_ms, (unsigned long long) out.bytes, err);
    pthread_mutex_lock (&self->lock);
    self->save_out = out;
    self->save_rc = rc;
    snprintf (self->save_err, sizeof self->save_err, "%s", err);
    self->save_state = S_DONE;
    pthread_mutex_unlock (&self->lock);
}

static void
s_signal (gw_vmstart_t *self)
{
    uint64_t one = 1;
    if (write (self->events, &one, sizeof one) < 0)
        gw_log (GW_LOG_WARN, "vm.start_event", "reason=\"%s\"", strerror (errno));
}

static void *
s_thread (void *arg)
{
    gw_vmstart_t *self = arg;
    pthread_mutex_lock (&self->lock);
    while (self->state != S_QUIT) {
        gw_vmh_t *old = zlistx_detach (self->dispose, NULL);
        if (old) {                              //  kill, reap, rm -rf: not on the reactor
            pthread_mutex_unlock (&self->lock);
            gw_vmh_destroy (&old);
            pthread_mutex_lock (&self->lock);
            continue;
        }
        if (self->save_state == S_RUNNING) {
            pthread_mutex_unlock (&self->lock);
            s_run_save (self);
            s_signal (self);
            pthread_mutex_lock (&self->lock);
            continue;
        }
        if (self->state != S_RUNNING) {
            pthread_cond_wait (&self->wake, &self->lock);
            continue;
        }
        pthread_mutex_unlock (&self->lock);
        gw_vmstart_result_t res = { .kernel_fd = -1 };
        int rc = s_fast_start (self, &res);
        pthread_mutex_lock (&self->lock);
        s_source_clear (self);
        self->res = res;
        self->rc = rc;
        if (self->state == S_RUNNING)
            self->state = S_DONE;
        s_signal (self);
    }
    pthread_mutex_unlock (&self->lock);
    return NULL;
}

//  --------------------------------------------------------------------------
//  On the reactor

gw_vmstart_t *
gw_vmstart_new (const gw_vm_config_t *cfg, const gw_microvm_opts_t *opts)
{
    assert (cfg);
    gw_vmstart_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->cfg = *cfg;
    if (opts)
        self->opts = *opts;
    self->res.kernel_fd = -1;
    char err [300] = "";
    if (self->opts.admit_slots > 0 && self->opts.admit_dir
    &&  !(self->admit = gw_admit_new (self->opts.admit_dir, self->opts.admit_slots, err,
                                      sizeof err)))
        gw_log (GW_LOG_WARN, "vm.admission_off", "reason=\"%s\"", err);
    self->dispose = zlistx_new ();
    self->events = eventfd (0, EFD_NONBLOCK | EFD_CLOEXEC);
    pthread_mutex_init (&self->lock, NULL);
    pthread_cond_init (&self->wake, NULL);
    if (self->events < 0 || pthread_create (&self->thread, NULL, s_thread, self) != 0)
        abort ();                               //  no thread, no fd: nothing can work
    return self;
}

static void
s_result_free (gw_vmstart_result_t *res)
{
    gw_vmh_destroy (&res->vm);
    gw_init_destroy (&res->init);
    if (res->kernel_fd >= 0)
        close (res->kernel_fd);
    res->kernel_fd = -1;
}

void
gw_vmstart_destroy (gw_vmstart_t **self_p)
{
    assert (self_p);
    gw_vmstart_t *self = *self_p;
    if (!self)
        return;
    pthread_mutex_lock (&self->lock);
    bool running = self->state == S_RUNNING;
    self->state = S_QUIT;
    pthread_cond_signal (&self->wake);
    pthread_mutex_unlock (&self->lock);
    if (running)
        gw_log (GW_LOG_INFO, "vm.start_abandoned", "reason=\"the session ends\"");
    pthread_join (self->thread, NULL);
    gw_vmh_t *old;
    while ((old = zlistx_detach (self->dispose, NULL)))
        gw_vmh_destroy (&old);
    zlistx_destroy (&self->dispose);
    gw_admit_destroy (&self->admit);
    s_result_free (&self->res);
    s_source_clear (self);
    free (self->save_store);
    free (self->save_name);
    json_decref (self->save_req.extra);
    close (self->events);
    pthread_mutex_destroy (&self->lock);
    pthread_cond_destroy (&self->wake);
    free (self);
    *self_p = NULL;
}

int
gw_vmstart_fd (const gw_vmstart_t *self)
{
    assert (self);
    return self->events;
}

void
gw_vmstart_dispose (gw_vmstart_t *self, gw_vmh_t **vm_p)
{
    assert (self && vm_p);
    if (!*vm_p)
        return;
    pthread_mutex_lock (&self->lock);
    zlistx_add_end (self->dispose, *vm_p);
    pthread_cond_signal (&self->wake);
    pthread_mutex_unlock (&self->lock);
    *vm_p = NULL;
}

int
gw_vmstart_begin (gw_vmstart_t *self)
{
    assert (self);
    pthread_mutex_lock (&self->lock);
    int rc = self->state == S_IDLE ? 0 : -EBUSY;
    if (rc == 0) {
        self->state = S_RUNNING;
        pthread_cond_signal (&self->wake);
    }
    pthread_mutex_unlock (&self->lock);
    return rc;
}

int
gw_vmstart_take (gw_vmstart_t *self, gw_vmstart_result_t *res)
{
    assert (self && res);
    uint64_t n;
    if (read (self->events, &n, sizeof n) < 0 && errno != EAGAIN)
        gw_log (GW_LOG_WARN, "vm.start_event", "reason=\"%s\"", strerror (errno));
    pthread_mutex_lock (&self->lock);
    int rc = self->state == S_RUNNING ? -EAGAIN : self->state == S_IDLE ? -ECHILD : self->rc;
    if (self->state == S_DONE) {
        *res = self->res;
        self->res = (gw_vmstart_result_t) { .kernel_fd = -1 };
        self->state = S_IDLE;
    }
    pthread_mutex_unlock (&self->lock);
    return rc;
}

void
gw_vmstart_set_source (gw_vmstart_t *self, const gw_vmstart_source_t *src)
{
    assert (self && src);
    pthread_mutex_lock (&self->lock);
    s_source_clear (self);
    self->chain_dir = gw_strdup (src->chain_dir);
    self->store_dir = gw_strdup (src->store_dir);
    self->snapshot = gw_strdup (src->snapshot);
    self->keep_seeds = src->keep_seeds;
    self->consume = src->consume;
    pthread_mutex_unlock (&self->lock);
}

const char *
gw_vmstart_error (gw_vmstart_t *self)
{
    assert (self);
    return self->error;                         //  written only while a start runs
}

int
gw_vmstart_save (gw_vmstart_t *self, const gw_vmsave_req_t *req, const char *store_dir,
                 const char *name)
{
    assert (self && req && name);
    pthread_mutex_lock (&self->lock);
    int rc = self->save_state == S_IDLE ? 0 : -EBUSY;
    if (rc == 0) {
        json_decref (self->save_req.extra);
        self->save_req = *req;
        self->save_req.extra = req->extra ? json_deep_copy (req->extra) : NULL;
        snprintf (self->save_run_dir, sizeof self->save_run_dir, "%s", req->run_dir);
        snprintf (self->save_top, sizeof self->save_top, "%s", req->disk_top);
        self->save_req.run_dir = self->save_run_dir;
        self->save_req.disk_top = self->save_top;
        free (self->save_store);
        free (self->save_name);
        self->save_store = gw_strdup (store_dir);
        self->save_name = gw_strdup (name);
        self->save_state = S_RUNNING;
        pthread_cond_signal (&self->wake);
    }
    pthread_mutex_unlock (&self->lock);
    return rc;
}

int
gw_vmstart_save_take (gw_vmstart_t *self, gw_vmsave_out_t *out, char *err, size_t errlen)
{
    assert (self && out);
    pthread_mutex_lock (&self->lock);
    int rc = self->save_state == S_RUNNING ? -EAGAIN : self->save_state == S_IDLE ? -ECHILD
           : self->save_rc;
    if (self->save_state == S_DONE) {
        *out = self->save_out;
        snprintf (err, errlen, "%s", self->save_err);
        self->save_state = S_IDLE;
    }
    pthread_mutex_unlock (&self->lock);
    return rc;
}
