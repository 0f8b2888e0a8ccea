/*  gw_backend_microvm - each session's kernel in its own QEMU microVM. */
#include "gw_backend_microvm.h"
#include "gw_init.h"
#include "gw_log.h"
#include "gw_pool.h"
#include "gw_template.h"
#include "kn_frame.h"

#include <czmq.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <limits.h>
#include <time.h>
#include <unistd.h>

#define S_PORT_WAIT_MS 5000         //  QEMU listens on its ports within ~0.1 s
#define S_HELLO_EVERY_MS 200        //  init drops what comes before it opens the port
#define S_CALL_MS 30000             //  file transfer round trip
#define S_CHUNK (16u << 20)         //  init's get/put chunk
#define S_RESTORE_MS 5000           //  restore + reseed + handshake, else cold boot

typedef struct {
    gw_vm_config_t cfg;
    gw_microvm_opts_t opts;
    bool build_requested;           //  a background template build was started
    bool daemon_requested;          //  the pool daemon was started on demand
    gw_vm_t *vm;                    //  a VM we started (cold boot or restore) ...
    gw_pool_lease_t *lease;         //  ... or a clone the pool handed us
    int kernel_fd;                  //  our connection to the kernel port
    gw_init_t *init;
    int epfd, timerfd;              //  event fd: init's port + hello timer
    bool init_ready;                //  init answered a hello
    bool kernel_alive;              //  started and not reported dead
    bool have_exit;                 //  exit waiting for reap
    gw_exit_t exit;
} s_self_t;

static bool
s_has_vm (const s_self_t *self)
{
    return self->vm || self->lease;
}

static int
s_vm_pid (const s_self_t *self)
{
    return self->vm ? gw_vm_pid (self->vm) : self->lease ? gw_pool_lease_pid (self->lease) : 0;
}

static const char *
s_console (const s_self_t *self)
{
    return self->vm ? gw_vm_console_log (self->vm)
         : self->lease ? gw_pool_lease_console (self->lease) : "?";
}

static int
s_vm_kill (s_self_t *self)
{
    return self->vm ? gw_vm_kill (self->vm)
         : self->lease ? gw_pool_lease_kill (self->lease) : -ESRCH;
}


//  ---------------------------------------------------------------------------
//  Init's port

static void
s_hello_timer (s_self_t *self, bool on)
{
    struct itimerspec it = { { 0, 0 }, { 0, 0 } };
    if (on) {
        it.it_value.tv_nsec = it.it_interval.tv_nsec = S_HELLO_EVERY_MS * 1000000L;
    }
    timerfd_settime (self->timerfd, 0, &it, NULL);
}

static void
s_send_init_hello (s_self_t *self)
{
    json_t *c = json_pack ("{s:s, s:i, s:s}", "protocol", "cellvm-init", "version", 1,
                           "role", "driver");
    gw_init_send (self->init, "hello", &c, NULL, 0, NULL);
}

//  A kernel_exited notice becomes the exit reap will report.
static void
s_on_kernel_exited (s_self_t *self, json_t *c)
{
    memset (&self->exit, 0, sizeof self->exit);
    json_t *code = json_object_get (c, "exit_code");
    const char *sig = json_string_value (json_object_get (c, "signal"));
    self->exit.exit_code = json_is_integer (code) ? (int) json_integer_value (code) : -1;
    self->exit.signal = 0;
    if (sig) {
        for (int s = 1; s < 65; s++) {
            const char *ab = sigabbrev_np (s);
            if (ab && strncmp (sig, "SIG", 3) == 0 && strcmp (sig + 3, ab) == 0)
                self->exit.signal = s;
        }
    }
    self->exit.oom_killed = json_is_true (json_object_get (c, "oom_killed"));
    const char *desc = json_string_value (json_object_get (c, "description"));
    snprintf (self->exit.detail, sizeof self->exit.detail, "%s", desc ? desc : "");
    self->have_exit = true;
    self->kernel_alive = false;
    gw_log (GW_LOG_WARN, "vm.kernel_exited", "reason=%s code=%" JSON_INTEGER_FORMAT,
            json_string_value (json_object_get (c, "reason")) ?: "?",
            json_integer_value (json_object_get (c, "code")));
}

//  Handle one message from init. Returns 1 when the kernel died.
static int
s_on_init_msg (s_self_t *self, kn_msg_t *msg)
{
    const char *type = kn_msg_type (msg);
    int died = 0;
    if (strcmp (type, "hello") == 0 && !self->init_ready) {
        self->init_ready = true;
        s_hello_timer (self, false);
        gw_log (GW_LOG_INFO, "vm.init_ready", "pid=%d", s_vm_pid (self));
    }
    else if (strcmp (type, "kernel_exited") == 0) {
        //  A stop we asked for (restart_request) reports the kernel we already
        //  gave up on: never pin it on the kernel that replaces it.
        if (self->kernel_alive
        &&  !json_is_true (json_object_get (kn_msg_content (msg), "requested"))) {
            s_on_kernel_exited (self, kn_msg_content (msg));
            died = 1;
        }
        else
            gw_log (GW_LOG_INFO, "vm.kernel_exited_stale", "requested=%s",
                    json_is_true (json_object_get (kn_msg_content (msg), "requested"))
                    ? "true" : "false");
    }
    else if (strcmp (json_string_value (json_object_get (kn_msg_content (msg), "status"))
                     ?: "ok", "ok") != 0)
        gw_log (GW_LOG_WARN, "vm.init_error", "msg_type=%s ename=%s", type,
                json_string_value (json_object_get (kn_msg_content (msg), "ename")) ?: "?");
    return died;
}

static void s_try_init (s_self_t *self);

static int
s_event_fd (void *ctx)
{
    return ((s_self_t *) ctx)->epfd;
}

static int
s_on_event (void *ctx)
{
    s_self_t *self = ctx;
    uint64_t ticks;
    if (read (self->timerfd, &ticks, sizeof ticks) > 0 && !self->init_ready) {
        if (!self->init)
            s_try_init (self);
        else
            s_send_init_hello (self);
    }
    int died = 0, rc = 0;
    while (self->init && rc == 0) {
        kn_msg_t *msg = NULL;
        rc = gw_init_pump (self->init, &msg);
        if (rc == 0)
            died |= s_on_init_msg (self, msg);
        kn_msg_destroy (&msg);
    }
    if (rc == -EPIPE || rc == -EPROTO) {
        //  Init's port closed (QEMU is going) or lies: stop listening to it;
        //  the kernel channel's end of stream and the reap tell the rest.
        gw_log (GW_LOG_WARN, "vm.init_lost", "reason=\"%s\"",
                rc == -EPIPE ? "control port closed" : "malformed frame from init");
        epoll_ctl (self->epfd, EPOLL_CTL_DEL, gw_init_fd (self->init), NULL);
        gw_init_destroy (&self->init);
        if (rc == -EPROTO)
            s_vm_kill (self);
    }
    return died;
}

//  ---------------------------------------------------------------------------
//  Start, kill, reap

//  Spawn the VM; its ports come up a little later (s_connect, s_try_init).
static int
s_boot (s_self_t *self, char *err, size_t errlen)
{
    self->vm = gw_vm_new (&self->cfg, err, errlen);
    if (!self->vm || gw_vm_start (self->vm, err, errlen) < 0) {
        gw_vm_destroy (&self->vm);
        return -EIO;
    }
    self->init_ready = false;
    s_hello_timer (self, true);                 //  also drives connecting init's port
    gw_log (GW_LOG_INFO, "vm.booting", "pid=%d run_dir=%s", gw_vm_pid (self->vm),
            gw_vm_run_dir (self->vm));
    return 0;
}

//  Connect init's port once QEMU listens on it; say hello.
static void
s_try_init (s_self_t *self)
{
    int ifd = -1;
    if (self->init || !self->vm || gw_vm_connect_port (self->vm, "init", &ifd) < 0)
        return;
    self->init = gw_init_new (ifd, KN_FRAME_MAX_DEFAULT);
    struct epoll_event ev = { .events = EPOLLIN };
    epoll_ctl (self->epfd, EPOLL_CTL_ADD, ifd, &ev);
    s_send_init_hello (self);
}

static void
s_drop_vm (s_self_t *self)
{
    if (self->init) {
        epoll_ctl (self->epfd, EPOLL_CTL_DEL, gw_init_fd (self->init), NULL);
        gw_init_destroy (&self->init);
    }
    s_hello_timer (self, false);
    if (self->kernel_fd >= 0)
        close (self->kernel_fd);
    self->kernel_fd = -1;
    gw_vm_destroy (&self->vm);
    gw_pool_lease_destroy (&self->lease);       //  the holder kills the clone
}

//  No usable template: have one built in the background, once.
static void
s_request_build (s_self_t *self)
{
    char log_path [PATH_MAX];
    if (self->build_requested || !self->opts.build_argv)
        return;
    self->build_requested = true;
    snprintf (log_path, sizeof log_path, "%s/build.log", self->opts.template_dir);
    int rc = gw_template_build_detached (self->opts.build_argv, log_path);
    gw_log (rc < 0 ? GW_LOG_WARN : GW_LOG_INFO, "template.build_requested",
            "dir=%s log=%s rc=%d", self->opts.template_dir, log_path, rc);
}

//  Restore a clone of the template, reseed it and redo both handshakes.
//  Blocks for the restore (~0.3-0.5 s under TCG). 0, or -errno when the
//  caller should cold-boot instead (the reason is logged).
static int
s_restore (s_self_t *self)
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
            s_request_build (self);
        return rc;
    }
    self->vm = gw_template_restore (t, &self->cfg, S_RESTORE_MS, err, sizeof err);
    int64_t t_run = zclock_mono ();
    rc = self->vm ? gw_template_reseed (self->vm, S_RESTORE_MS, &self->init, &self->kernel_fd,
                                        err, sizeof err) : -EIO;
    if (rc < 0) {
        gw_log (GW_LOG_WARN, "vm.cold_boot", "reason=\"restoring %s failed: %s\"",
                gw_template_path (t), err);
        s_drop_vm (self);
    }
    else {
        struct epoll_event ev = { .events = EPOLLIN };
        epoll_ctl (self->epfd, EPOLL_CTL_ADD, gw_init_fd (self->init), &ev);
        self->init_ready = true;
        gw_log (GW_LOG_INFO, "vm.restored", "pid=%d template=%s running_ms=%lld ready_ms=%lld "
                "run_dir=%s", gw_vm_pid (self->vm), gw_template_path (t),
                (long long) (t_run - t0), (long long) (zclock_mono () - t0),
                gw_vm_run_dir (self->vm));
    }
    gw_template_destroy (&t);
    return rc < 0 ? -EIO : 0;
}

//  A clone from the pool daemon, already restored and reseeded by its
//  holder; the host clock is pushed again now (it ran while it waited).
//  0, or -errno when the caller should restore directly (logged).
static int
s_take_from_pool (s_self_t *self)
{
    char err [512] = "";
    if (!self->opts.pool_socket)
        return -ENOTSUP;
    int64_t t0 = zclock_mono ();
    int rc = gw_pool_take (self->opts.pool_socket, 2000, &self->lease, err, sizeof err);
    if (rc < 0) {
        gw_log (GW_LOG_INFO, "vm.pool_miss", "socket=%s reason=\"%s\"", self->opts.pool_socket,
                err);
        if ((rc == -ENOENT || rc == -ECONNREFUSED) && self->opts.pool_argv
        &&  !self->daemon_requested) {
            self->daemon_requested = true;      //  on demand; this session restores itself
            char log_path [PATH_MAX];
            snprintf (log_path, sizeof log_path, "%s/pool.log", self->opts.template_dir);
            gw_template_build_detached (self->opts.pool_argv, log_path);
            gw_log (GW_LOG_INFO, "pool.daemon_started", "log=%s", log_path);
        }
        return rc;
    }
    self->kernel_fd = gw_pool_lease_take_kernel_fd (self->lease);
    self->init = gw_init_new (gw_pool_lease_take_init_fd (self->lease), KN_FRAME_MAX_DEFAULT);
    struct timespec now;
    clock_gettime (CLOCK_REALTIME, &now);
    json_t *c = json_pack ("{s:f}", "time", (double) now.tv_sec + now.tv_nsec / 1e9);
    gw_init_send (self->init, "set_time_request", &c, NULL, 0, NULL);
    struct epoll_event ev = { .events = EPOLLIN };
    epoll_ctl (self->epfd, EPOLL_CTL_ADD, gw_init_fd (self->init), &ev);
    self->init_ready = true;
    gw_log (GW_LOG_INFO, "vm.from_pool", "pid=%d run_dir=%s ms=%lld", s_vm_pid (self),
            gw_pool_lease_run_dir (self->lease), (long long) (zclock_mono () - t0));
    return 0;
}

static int
s_start (void *ctx, int *fd_p, char *err, size_t errlen)
{
    s_self_t *self = ctx;
    if (!s_has_vm (self) && (s_take_from_pool (self) == 0 || s_restore (self) == 0)) {
        self->kernel_alive = true;
        self->have_exit = false;
        *fd_p = fcntl (self->kernel_fd, F_DUPFD_CLOEXEC, 3);
        return *fd_p < 0 ? -errno : 0;
    }
    if (!s_has_vm (self)) {
        if (s_boot (self, err, errlen) < 0)
            return -EIO;
        *fd_p = -1;                             //  s_connect hands it over
        self->kernel_alive = true;
        self->have_exit = false;
        return 0;
    }
    else {
        json_t *c = json_object ();
        if (!self->init || gw_init_send (self->init, "restart_request", &c, NULL, 0, NULL) < 0) {
            snprintf (err, errlen, "the VM's init does not answer; it will be replaced");
            s_drop_vm (self);
            return -EIO;
        }
        gw_log (GW_LOG_INFO, "vm.kernel_restart", "pid=%d", s_vm_pid (self));
    }
    *fd_p = fcntl (self->kernel_fd, F_DUPFD_CLOEXEC, 3);
    if (*fd_p < 0) {
        snprintf (err, errlen, "dup: %s", strerror (errno));
        return -errno;
    }
    self->kernel_alive = true;
    self->have_exit = false;
    return 0;
}

static int
s_connect (void *ctx, int *fd_p, char *err, size_t errlen)
{
    s_self_t *self = ctx;
    if (!self->vm)
        return -ECHILD;
    if (self->kernel_fd < 0) {
        int rc = gw_vm_connect_port (self->vm, "kernel", &self->kernel_fd);
        if (rc == -EAGAIN)
            return -EAGAIN;
        if (rc < 0) {
            snprintf (err, errlen, "the VM did not open its kernel port (%s); see %s",
                      strerror (-rc), gw_vm_console_log (self->vm));
            return rc;
        }
        gw_log (GW_LOG_INFO, "vm.kernel_port", "pid=%d", gw_vm_pid (self->vm));
    }
    s_try_init (self);
    *fd_p = fcntl (self->kernel_fd, F_DUPFD_CLOEXEC, 3);
    return *fd_p < 0 ? -errno : 0;
}

static int
s_kill (void *ctx)
{
    s_self_t *self = ctx;
    if (!s_has_vm (self))
        return -ESRCH;
    json_t *c = json_pack ("{s:s}", "signal", "SIGKILL");
    //  Kill only the kernel (its whole cgroup); the VM and /workspace stay.
    if (self->init && self->init_ready
    &&  gw_init_send (self->init, "kill_request", &c, NULL, 0, NULL) == 0)
        return 0;
    json_decref (c);
    return s_vm_kill (self);
}

static int
s_reap (void *ctx, gw_exit_t *exit_p)
{
    s_self_t *self = ctx;
    if (!s_has_vm (self))
        return -ECHILD;
    if (self->have_exit) {
        *exit_p = self->exit;
        self->have_exit = false;
        return 0;
    }
    int status;
    if ((self->vm ? gw_vm_reap (self->vm, &status)
                  : gw_pool_lease_reap (self->lease, &status)) < 0)
        return -EAGAIN;
    memset (exit_p, 0, sizeof *exit_p);
    exit_p->vm_died = true;
    exit_p->exit_code = WIFEXITED (status) ? WEXITSTATUS (status) : -1;
    exit_p->signal = WIFSIGNALED (status) ? WTERMSIG (status) : 0;
    snprintf (exit_p->detail, sizeof exit_p->detail, "The session's virtual machine itself "
              "stopped (QEMU %s %d); everything in its memory and /workspace is gone. A new "
              "VM is starting", exit_p->signal ? "killed by signal" : "exited with status",
              exit_p->signal ? exit_p->signal : exit_p->exit_code);
    gw_log (GW_LOG_ERROR, "vm.died", "exit_code=%d signal=%d console=%s", exit_p->exit_code,
            exit_p->signal, s_console (self));
    s_drop_vm (self);
    self->kernel_alive = false;
    return 0;
}

static int
s_pid (void *ctx)
{
    s_self_t *self = ctx;
    return s_vm_pid (self);
}

//  ---------------------------------------------------------------------------
//  Files in and out of /workspace, through init

//  Notices read during a blocking call wait in gw_init's queue: fire the
//  timer once so the reactor comes back for them.
static void
s_poke (s_self_t *self)
{
    struct itimerspec it = { { 0, 0 }, { 0, 1 } };
    if (self->init_ready)
        timerfd_settime (self->timerfd, 0, &it, NULL);
}

//  Wait until init has answered a hello (it boots ~3 s after QEMU).
static int
s_wait_init (s_self_t *self)
{
    for (int i = 0; i < 60 && self->init && !self->init_ready; i++) {
        json_t *c = json_pack ("{s:s, s:i, s:s}", "protocol", "cellvm-init", "version", 1,
                               "role", "driver");
        kn_msg_t *reply = NULL;
        if (gw_init_call (self->init, "hello", &c, NULL, 0, 250, &reply) == 0) {
            s_on_init_msg (self, reply);
            s_hello_timer (self, false);
        }
        kn_msg_destroy (&reply);
    }
    return self->init_ready ? 0 : -EHOSTDOWN;
}

//  A call to init with the error in words. Takes *content_p.
static int
s_call (s_self_t *self, const char *type, json_t **content_p, const uint8_t *buf,
        size_t len, kn_msg_t **reply_p, char *err, size_t errlen)
{
    int rc = s_wait_init (self);
    if (rc == 0)
        rc = gw_init_call (self->init, type, content_p, buf, len, S_CALL_MS, reply_p);
    json_decref (content_p ? *content_p : NULL);
    s_poke (self);
    if (rc < 0) {
        snprintf (err, errlen, "the VM's init did not answer %s (%s)", type, strerror (-rc));
        return rc;
    }
    json_t *c = kn_msg_content (*reply_p);
    if (strcmp (json_string_value (json_object_get (c, "status")) ?: "", "ok") != 0) {
        snprintf (err, errlen, "%s: %s", json_string_value (json_object_get (c, "ename")) ?: "Error",
                  json_string_value (json_object_get (c, "evalue")) ?: "refused by init");
        kn_msg_destroy (reply_p);
        return -EPERM;
    }
    return 0;
}

static int
s_put_file (void *ctx, const char *path, const uint8_t *data, size_t len, json_t **reply_p,
            char *err, size_t errlen)
{
    s_self_t *self = ctx;
    size_t off = 0;
    kn_msg_t *reply = NULL;
    do {
        size_t n = len - off < S_CHUNK ? len - off : S_CHUNK;
        json_t *c = json_pack ("{s:s, s:b}", "path", path, "append", off > 0);
        kn_msg_destroy (&reply);
        int rc = s_call (self, "put_request", &c, data + off, n, &reply, err, errlen);
        if (rc < 0)
            return rc;
        off += n;
    } while (off < len);
    *reply_p = json_deep_copy (kn_msg_content (reply));
    kn_msg_destroy (&reply);
    return 0;
}

static int
s_get_file (void *ctx, const char *path, size_t max, uint8_t **data_p, size_t *len_p,
            char *err, size_t errlen)
{
    s_self_t *self = ctx;
    uint8_t *data = NULL;
    size_t have = 0;
    bool eof = false;
    while (!eof) {
        kn_msg_t *reply = NULL;
        json_t *c = json_pack ("{s:s, s:I, s:I}", "path", path, "offset", (json_int_t) have,
                               "length", (json_int_t) S_CHUNK);
        int rc = s_call (self, "get_request", &c, NULL, 0, &reply, err, errlen);
        if (rc < 0) {
            free (data);
            return rc;
        }
        json_t *rc_c = kn_msg_content (reply);
        json_int_t size = json_integer_value (json_object_get (rc_c, "size"));
        eof = json_is_true (json_object_get (rc_c, "eof"));
        size_t blen = 0;
        const uint8_t *b = kn_msg_buffer (reply, 0, &blen);
        if ((size_t) size > max || have + blen > max) {
            snprintf (err, errlen, "file is %" JSON_INTEGER_FORMAT " bytes, over the %zu-byte cap",
                      size, max);
            kn_msg_destroy (&reply);
            free (data);
            return -EFBIG;
        }
        data = realloc (data, have + blen + 1);
        if (!data)
            abort ();
        if (blen)
            memcpy (data + have, b, blen);
        have += blen;
        eof = eof || blen == 0;
        kn_msg_destroy (&reply);
    }
    *data_p = data;
    *len_p = have;
    return 0;
}

//  ---------------------------------------------------------------------------
//  Construction

static void
s_destroy (void *ctx)
{
    s_self_t *self = ctx;
    if (!self)
        return;
    if (self->init && self->init_ready) {
        json_t *c = json_object ();    //  let the guest sync its disk; we kill anyway
        gw_init_send (self->init, "shutdown_request", &c, NULL, 0, NULL);
    }
    s_drop_vm (self);
    if (self->epfd >= 0)
        close (self->epfd);
    if (self->timerfd >= 0)
        close (self->timerfd);
    free (self);
}

gw_backend_t *
gw_backend_microvm_new (const gw_vm_config_t *cfg, char *err, size_t errlen)
{
    return gw_backend_microvm_new_opts (cfg, NULL, err, errlen);
}

gw_backend_t *
gw_backend_microvm_new_opts (const gw_vm_config_t *cfg, const gw_microvm_opts_t *opts,
                             char *err, size_t errlen)
{
    assert (cfg);
    s_self_t *self = calloc (1, sizeof *self);
    gw_backend_t *be = calloc (1, sizeof *be);
    if (!self || !be)
        abort ();
    self->cfg = *cfg;
    if (opts)
        self->opts = *opts;
    self->kernel_fd = -1;
    self->epfd = epoll_create1 (EPOLL_CLOEXEC);
    self->timerfd = timerfd_create (CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    struct epoll_event ev = { .events = EPOLLIN };
    if (self->epfd < 0 || self->timerfd < 0
    ||  epoll_ctl (self->epfd, EPOLL_CTL_ADD, self->timerfd, &ev) < 0) {
        snprintf (err, errlen, "epoll/timerfd: %s", strerror (errno));
        goto fail;
    }
    if (self->cfg.accel == GW_ACCEL_AUTO) {
        gw_accel_probe_t probe;
        char why [256];
        gw_accel_probe (&probe);
        int acc = gw_accel_choose (GW_ACCEL_AUTO, &probe, why, sizeof why);
        if (acc < 0) {
            snprintf (err, errlen, "%s", why);
            goto fail;
        }
        self->cfg.accel = (gw_accel_t) acc;
        gw_log (GW_LOG_INFO, "vm.accel", "choice=%s reason=\"%s\"", gw_accel_name (self->cfg.accel), why);
    }
    if (!self->cfg.tsc_khz)
        self->cfg.tsc_khz = gw_accel_tsc_khz ();
    *be = (gw_backend_t) {
        .name = "microvm", .start = s_start, .connect = s_connect, .interrupt = NULL, .kill = s_kill,
        .reap = s_reap, .pid = s_pid, .destroy = s_destroy, .ctx = self,
        .sync_markers = true, .event_fd = s_event_fd, .on_event = s_on_event,
        .put_file = s_put_file, .get_file = s_get_file,
    };
    return be;
fail:
    s_destroy (self);
    free (be);
    return NULL;
}
