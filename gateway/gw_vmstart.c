/*  gw_vmstart - a session's VM made ready off the reactor thread. */
#include "gw_vmstart.h"
#include "gw_log.h"
#include "gw_pool.h"
#include "gw_template.h"
#include "ch_frame.h"

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
#define S_RESTORE_MS 5000           //  restore + reseed + handshake, else cold boot

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
    int64_t t0 = zclock_mono ();
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
    struct timespec now;
    clock_gettime (CLOCK_REALTIME, &now);
    json_t *c = json_pack ("{s:f}", "time", (double) now.tv_sec + now.tv_nsec / 1e9);
    gw_init_send (res->init, "set_time_request", &c, NULL, 0, NULL);
    gw_log (GW_LOG_INFO, "vm.from_pool", "pid=%d run_dir=%s ms=%lld", gw_pool_lease_pid (lease),
            gw_pool_lease_run_dir (lease), (long long) (zclock_mono () - t0));
    res->vm = gw_vmh_from_lease (&lease);
    res->how = "pool";
    return 0;
}

//  Restore a clone of the template, reseed it and redo both handshakes.
static int
s_restore (gw_vmstart_t *self, gw_vmstart_result_t *res)
{
    char err [512] = "";
    int rc = -ENOTSUP;
    int64_t t0 = zclock_mono ();
    gw_template_t *t = NULL;
    if (self->opts.template_dir)
        t = gw_template_open (self->opts.template_dir, &self->cfg, &rc, err, sizeof err);
    if (!t) {
        gw_log (self->opts.template_dir ? GW_LOG_WARN : GW_LOG_INFO, "vm.cold_boot",
                "reason=\"%s\"", self->opts.template_dir ? err : "templates are off");
        if (rc == -ENOENT || rc == -ESTALE)
            s_spawn_once (self, &self->build_requested, self->opts.build_argv, "build.log",
                          "template.build_requested");
        return rc;
    }
    gw_vm_t *vm = gw_template_restore (t, &self->cfg, S_RESTORE_MS, err, sizeof err);
    int64_t t_run = zclock_mono ();
    rc = vm ? gw_template_reseed (vm, S_RESTORE_MS, &res->init, &res->kernel_fd, err,
                                  sizeof err) : -EIO;
    if (rc < 0)
        gw_log (GW_LOG_WARN, "vm.cold_boot", "reason=\"restoring %s failed: %s\"",
                gw_template_path (t), err);
    else
        gw_log (GW_LOG_INFO, "vm.restored", "pid=%d template=%s running_ms=%lld ready_ms=%lld "
                "run_dir=%s", gw_vm_pid (vm), gw_template_path (t), (long long) (t_run - t0),
                (long long) (zclock_mono () - t0), gw_vm_run_dir (vm));
    if (rc == 0) {
        res->vm = gw_vmh_from_vm (&vm);
        res->how = "restore";
    }
    gw_vm_destroy (&vm);
    gw_template_destroy (&t);
    return rc < 0 ? -EIO : 0;
}

//  The documented order, or the seam's stand-in. 0 or -ENOENT.
static int
s_fast_start (gw_vmstart_t *self, gw_vmstart_result_t *res)
{
    const gw_microvm_seam_t *seam = &self->opts.seam;
    if (seam->fast_start)
        return seam->fast_start (seam->arg, res) == 0 ? 0 : -ENOENT;
    return s_take_from_pool (self, res) == 0 || s_restore (self, res) == 0 ? 0 : -ENOENT;
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
        if (self->state != S_RUNNING) {
            pthread_cond_wait (&self->wake, &self->lock);
            continue;
        }
        pthread_mutex_unlock (&self->lock);
        gw_vmstart_result_t res = { .kernel_fd = -1 };
        int rc = s_fast_start (self, &res);
        pthread_mutex_lock (&self->lock);
        self->res = res;
        self->rc = rc;
        if (self->state == S_RUNNING)
            self->state = S_DONE;
        uint64_t one = 1;
        if (write (self->events, &one, sizeof one) < 0)
            gw_log (GW_LOG_WARN, "vm.start_event", "reason=\"%s\"", strerror (errno));
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
    s_result_free (&self->res);
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
