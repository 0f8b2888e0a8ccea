/*  gw_backend_microvm - each session's kernel in its own QEMU microVM.

    Nothing here waits: a restore or a pool take runs on gw_vmstart's
    thread, a cold boot is a spawn whose ports come up later, and file
    chunks go to init as requests whose replies come back through the
    event fd. The event fd is an epoll set of init's port, a timer (init
    hellos while it boots, chunk deadlines) and gw_vmstart's eventfd.
    Where VMs come from (a cold boot, a fast start) is opts->seam, so the
    unit tests run all of this on mock VMs.
*/
#include "backend/gw_backend_microvm.h"
#include "base/gw_readlease.h"
#include "backend/gw_microvm_int.h"
#include "disk/gw_chain.h"
#include "guest/gw_init.h"
#include "vm/gw_rundir.h"
#include "vm/gw_vmargv.h"
#include "jail/gw_priv.h"
#include "base/gw_fdborrow.h"
#include "base/gw_log.h"
#include "backend/gw_vmh.h"
#include "backend/gw_vmstart.h"
#include "ch_frame.h"
#include "ch_hello.h"
#include "ch_clock.h"

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
#include <unistd.h>

#define S_TICK_MS 200               //  init hellos while it boots; chunk deadlines
#define S_CHUNK_MS 60000            //  one chunk's round trip through init (seam: less)
#define S_NOT_READING "the VM's init is not reading its port"
#define S_PUMP_MAX 256              //  messages from init per event; then the timer goes on
#define S_READ_BUDGET (1u << 20)    //  bytes read from init per event

//  ---------------------------------------------------------------------------
//  Init's port

static void
s_timer (s_self_t *self, bool on)
{
    struct itimerspec it = { { 0, 0 }, { 0, 0 } };
    if (on)
        it.it_value.tv_nsec = it.it_interval.tv_nsec = S_TICK_MS * 1000000L;
    timerfd_settime (self->timerfd, 0, &it, NULL);
}

//  Poll init's port for writing too while its queue holds bytes.
void
gw_microvm__watch_init (s_self_t *self)
{
    if (!self->init)
        return;
    struct epoll_event ev = { .events = EPOLLIN
                              | (gw_init_wants_write (self->init) ? EPOLLOUT : 0) };
    if (epoll_ctl (self->epfd, EPOLL_CTL_MOD, gw_init_fd (self->init), &ev) < 0)
        epoll_ctl (self->epfd, EPOLL_CTL_ADD, gw_init_fd (self->init), &ev);
}

static void
s_adopt_init (s_self_t *self, gw_init_t **init_p, bool ready)
{
    self->init = *init_p;
    *init_p = NULL;
    self->init_ready = ready;
    gw_microvm__watch_init (self);
}

static void
s_drop_init (s_self_t *self)
{
    if (self->init) {
        epoll_ctl (self->epfd, EPOLL_CTL_DEL, gw_init_fd (self->init), NULL);
        gw_init_destroy (&self->init);
    }
    self->init_ready = false;
}

static void
s_send_init_hello (s_self_t *self)
{
    char id [37];
    json_t *c = ch_hello_driver (CH_PROTO_INIT, "cellvm-gateway", 0);
    if (gw_init_send (self->init, "hello", &c, NULL, 0, id) == 0)
        gw_watch_owed (self->watch, "hello");
    json_decref (c);                            //  NULL once sent
    gw_microvm__watch_init (self);
}

//  ---------------------------------------------------------------------------
//  File chunks through init

static void
s_op_end (s_self_t *self, s_op_t *op, int rc, const ch_msg_t *reply, const char *err)
{
    s_op_t **pp = &self->ops;
    while (*pp != op)
        pp = &(*pp)->next;
    *pp = op->next;
    size_t len = 0;
    const uint8_t *data = reply ? ch_msg_buffer (reply, 0, &len) : NULL;
    op->done (op->arg, rc, reply ? ch_msg_content (reply) : NULL, data, len, err);
    free (op->path);
    free (op);
}

//  0, or -errno when init's port refuses it (the op is not ended).
static int
s_op_send (s_self_t *self, s_op_t *op)
{
    json_t *c = op->put ? json_pack ("{s:s, s:b}", "path", op->path, "append", op->append)
                        : json_pack ("{s:s, s:I, s:I}", "path", op->path, "offset",
                                     (json_int_t) op->offset, "length", (json_int_t) op->len);
    int rc = gw_init_send (self->init, op->put ? "put_request" : "get_request", &c,
                           op->put ? op->data : NULL, op->put ? op->len : 0, op->id);
    gw_microvm__watch_init (self);
    op->deadline = ch_clock_mono_ms () + self->chunk_ms;
    return rc;
}

//  Send what waited for init's hello.
static void
s_ops_send_waiting (s_self_t *self)
{
    s_op_t *op = self->ops;
    while (op) {
        s_op_t *next = op->next;
        int rc = op->id [0] ? 0 : s_op_send (self, op);
        if (rc < 0)
            s_op_end (self, op, rc, NULL, S_NOT_READING);
        op = next;
    }
}

//  A reply from init: is it one a chunk waits for? Then it ends it.
static bool
s_op_reply (s_self_t *self, const ch_msg_t *msg)
{
    const char *pid = ch_msg_parent_id (msg);
    for (s_op_t *op = self->ops; *pid && op; op = op->next)
        if (op->id [0] && strcmp (op->id, pid) == 0) {
            json_t *c = ch_msg_content (msg);
            char bad [400];
            bool ok = strcmp (json_string_value (json_object_get (c, "status")) ?: "", "ok") == 0;
            if (ok && gw_microvm__check_file_reply (op, msg, bad, sizeof bad) < 0) {
                s_op_end (self, op, -EPROTO, NULL, bad);
                gw_microvm__unasked (self, "a file reply that breaks the protocol");
            }
            else if (ok)
                s_op_end (self, op, 0, msg, "");
            else {
                char err [600];
                snprintf (err, sizeof err, "%s: %s",
                          json_string_value (json_object_get (c, "ename")) ?: "Error",
                          json_string_value (json_object_get (c, "evalue")) ?: "refused by init");
                s_op_end (self, op, -EPERM, NULL, err);
            }
            return true;
        }
    return false;
}

//  End every chunk now (init is gone, or a deadline passed).
static void
s_ops_fail (s_self_t *self, bool expired_only, const char *why)
{
    int64_t now = ch_clock_mono_ms ();
    s_op_t *op = self->ops;
    while (op) {
        s_op_t *next = op->next;
        if (!expired_only || (op->id [0] && now >= op->deadline))
            s_op_end (self, op, expired_only ? -ETIMEDOUT : -EPIPE, NULL, why);
        op = next;
    }
}

static int
s_chunk (s_self_t *self, s_op_t *proto, char *err, size_t errlen)
{
    if ((!self->vm || !self->init) && !self->starting) {
        snprintf (err, errlen, "the session has no running VM");
        return -ENOTCONN;
    }
    s_op_t *op = malloc (sizeof *op), **pp = &self->ops;
    if (!op)
        abort ();
    *op = *proto;
    if (!(op->path = strdup (proto->path)))
        abort ();
    op->next = NULL;
    op->id [0] = 0;
    while (*pp)
        pp = &(*pp)->next;
    *pp = op;
    s_timer (self, true);                                 //  deadlines are checked on it
    int rc = self->init && self->init_ready ? s_op_send (self, op) : 0;
    if (rc < 0) {                               //  done never runs inside this call
        *pp = NULL;
        free (op->path);
        free (op);
        snprintf (err, errlen, "%s", S_NOT_READING);
    }
    return rc;
}

static int
s_put_chunk (void *ctx, const char *path, bool append, const uint8_t *data, size_t len,
             gw_chunk_fn *done, void *arg, char *err, size_t errlen)
{
    s_op_t op = { .put = true, .append = append, .path = (char *) path, .data = data,
                  .len = len, .done = done, .arg = arg };
    return s_chunk ((s_self_t *) ctx, &op, err, errlen);
}

static int
s_get_chunk (void *ctx, const char *path, uint64_t offset, size_t len, gw_chunk_fn *done,
             void *arg, char *err, size_t errlen)
{
    s_op_t op = { .path = (char *) path, .offset = offset, .len = len, .done = done,
                  .arg = arg };
    return s_chunk ((s_self_t *) ctx, &op, err, errlen);
}

static void
s_cancel_chunks (void *ctx)
{
    s_self_t *self = ctx;
    while (self->ops) {
        s_op_t *op = self->ops;
        self->ops = op->next;
        free (op->path);
        free (op);
    }
}

//  ---------------------------------------------------------------------------
//  Init's notices

//  A kernel_exited notice becomes the exit reap will report.
static void
s_on_kernel_exited (s_self_t *self, json_t *c)
{
    memset (&self->exit, 0, sizeof self->exit);
    json_t *code = json_object_get (c, "exit_code");
    const char *sig = json_string_value (json_object_get (c, "signal"));
    self->exit.exit_code = json_is_integer (code) ? (int) json_integer_value (code) : -1;
    for (int s = 1; sig && s < 65; s++) {
        const char *ab = sigabbrev_np (s);
        if (ab && strncmp (sig, "SIG", 3) == 0 && strcmp (sig + 3, ab) == 0)
            self->exit.signal = s;
    }
    self->exit.oom_killed = json_is_true (json_object_get (c, "oom_killed"));
    const char *desc = json_string_value (json_object_get (c, "description"));
    snprintf (self->exit.detail, sizeof self->exit.detail, "%s", desc ? desc : "");
    self->have_exit = true;
    self->kernel_alive = false;
    const char *reason = json_string_value (json_object_get (c, "reason")) ?: "?";
    bool clean = strcmp (reason, "exited") == 0 && self->exit.exit_code == 0;
    gw_log (clean ? GW_LOG_INFO : GW_LOG_WARN, "vm.kernel_exited", "reason=%s code=%"
            JSON_INTEGER_FORMAT, reason, json_integer_value (json_object_get (c, "code")));
}

//  Handle one message from init. Returns 1 when the kernel died.
static int
s_on_init_msg (s_self_t *self, ch_msg_t *msg)
{
    const char *type = ch_msg_type (msg);
    json_t *c = ch_msg_content (msg);
    bool asked = gw_watch_answer (self->watch, msg);
    if (gw_microvm__on_init_reply (self, msg) || gw_microvm__net_reply (self, msg))
        return 0;
    if (strcmp (type, "hello") == 0 && !self->init_ready) {
        self->init_ready = true;
        s_timer (self, self->ops != NULL);
        gw_log (GW_LOG_INFO, "vm.init_ready", "pid=%d", self->vm ? gw_vmh_pid (self->vm) : 0);
        s_ops_send_waiting (self);
        gw_microvm__net_start (self);
    }
    else if (strcmp (type, "kernel_exited") == 0) {
        //  A stop we asked for (restart_request) reports the kernel we already
        //  gave up on: never pin it on the kernel that replaces it.
        bool requested = json_is_true (json_object_get (c, "requested"));
        if (self->kernel_alive && !requested) {
            s_on_kernel_exited (self, c);
            return 1;
        }
        if (requested)
            gw_log (GW_LOG_INFO, "vm.kernel_exited_stale", "requested=true");
        else
            gw_microvm__unasked (self, "kernel_exited for no running kernel");
    }
    else if (s_op_reply (self, msg))
        ;
    else if (!asked)
        gw_microvm__unasked (self, type);
    else if (strcmp (json_string_value (json_object_get (c, "status")) ?: "ok", "ok") != 0)
        gw_log (GW_LOG_WARN, "vm.init_error", "msg_type=%s ename=%s", type,
                json_string_value (json_object_get (c, "ename")) ?: "?");
    return 0;
}

//  ---------------------------------------------------------------------------
//  Events

static void s_try_init (s_self_t *self);

static int
s_event_fd (void *ctx)
{
    return ((s_self_t *) ctx)->epfd;
}

//  Init's port closed (QEMU is going) or lies: stop listening to it; the
//  kernel channel's end of stream and the reap tell the rest.
static void
s_init_lost (s_self_t *self, int rc)
{
    char why [300];
    snprintf (why, sizeof why, "its init broke the protocol of its control port (%s)",
              self->init ? gw_init_why (self->init) : "?");
    gw_log (GW_LOG_WARN, "vm.init_lost", "reason=\"%s\"",
            rc == -EPIPE ? "control port closed" : "malformed input from init");
    s_drop_init (self);
    s_ops_fail (self, false, rc == -EPROTO ? "the VM's init broke the protocol"
                                           : "the VM's init stopped answering");
    if (rc == -EPROTO)
        gw_microvm__stop_vm (self, why);
}

static void
s_on_tick (s_self_t *self)
{
    uint64_t ticks;
    if (read (self->timerfd, &ticks, sizeof ticks) <= 0)
        return;
    if (!self->init_ready && !self->init)
        s_try_init (self);
    else if (!self->init_ready)
        s_send_init_hello (self);
    char why [80];
    snprintf (why, sizeof why, "the VM's init did not answer within %g s",
              (double) self->chunk_ms / 1000);
    s_ops_fail (self, true, why);
    if (self->init_ready && !self->ops)
        s_timer (self, false);
}

static int
s_on_event (void *ctx)
{
    s_self_t *self = ctx;
    gw_readlease_dispatch ();                   //  a RAM file's writer stops its VM first
    s_on_tick (self);
    int died = 0, n = 0, rc = self->init ? gw_init_flush (self->init) : 0;
    if (self->init)
        gw_init_set_budget (self->init, S_READ_BUDGET);
    while (self->init && rc == 0 && !self->stop_why [0]) {
        if (n++ == S_PUMP_MAX) {                //  a flood must not hold the reactor:
            s_timer (self, true);               //  the rest on the next tick
            break;
        }
        ch_msg_t *msg = NULL;
        rc = gw_init_pump (self->init, &msg);
        if (rc == 0)
            died |= s_on_init_msg (self, msg);
        ch_msg_destroy (&msg);
    }
    if (rc == -EPIPE || rc == -EPROTO)
        s_init_lost (self, rc);
    gw_microvm__net_event (self);
    gw_microvm__watch_init (self);
    gw_microvm__on_save (self);
    return died;
}

//  ---------------------------------------------------------------------------
//  Start, connect, kill, reap

//  Connect init's port once a cold-booted QEMU listens on it; say hello.
static void
s_try_init (s_self_t *self)
{
    int ifd = -1;
    if (self->init || !self->vm || gw_vmh_connect_port (self->vm, "init", &ifd) < 0)
        return;
    gw_init_t *init = gw_init_new (ifd, CH_FRAME_MAX_DEFAULT);
    s_adopt_init (self, &init, false);
    s_send_init_hello (self);
}

void
gw_microvm__drop_vm (s_self_t *self)
{
    gw_microvm__net_drop (self);
    s_drop_init (self);
    s_ops_fail (self, false, "the session's VM is gone");
    if (self->kernel_fd >= 0)
        close (self->kernel_fd);
    self->kernel_fd = -1;
    //  A pool clone: its holder kills it. Ours: the starter's thread does.
    if (self->starter)
        gw_vmstart_dispose (self->starter, &self->vm);
    else
        gw_vmh_destroy (&self->vm);
    s_timer (self, false);
    gw_microvm__watch_vm (self);
}

//  The real cold boot: a QEMU from the image.
static gw_vmh_t *
s_boot_vm (void *arg, const gw_vm_config_t *cfg, char *err, size_t errlen)
{
    (void) arg;
    gw_vm_t *vm = gw_vm_new (cfg, err, errlen);
    if (!vm || gw_vm_start (vm, err, errlen) < 0) {
        gw_vm_destroy (&vm);
        return NULL;
    }
    return gw_vmh_from_vm (&vm);
}

//  Spawn a VM from the image; its ports come up a little later.
static int
s_boot (s_self_t *self, char *err, size_t errlen)
{
    gw_vmh_t *vm = (self->seam.boot ? self->seam.boot : s_boot_vm) (self->seam.arg, &self->cfg,
                                                                     err, errlen);
    if (!vm)
        return -EIO;
    gw_log (GW_LOG_INFO, "vm.booting", "pid=%d run_dir=%s", gw_vmh_pid (vm),
            gw_vmh_run_dir (vm));
    self->vm = vm;
    self->init_ready = false;
    gw_microvm__watch_vm (self);
    s_timer (self, true);                                 //  also drives connecting init's port
    return 0;
}

//  A cold boot, over the disk chain a restart or a death left, if any.
static int
s_boot_keeping (s_self_t *self, char *err, size_t errlen)
{
    char top [NAME_MAX + 1];
    const char *chain = self->chain_dir [0] ? self->chain_dir
                      : !self->first_start_done ? self->opts.adopt_chain_dir : NULL;
    if (chain && gw_chain_top (chain, top, sizeof top) == 0) {
        self->cfg.disk_chain_dir = chain;
        self->cfg.disk_name = top;
    }
    int rc = s_boot (self, err, errlen);
    snprintf (self->disk_top, sizeof self->disk_top, "%s", self->cfg.disk_name
              ? self->cfg.disk_name : GW_VMARGV_DISK);
    self->cfg.disk_chain_dir = self->cfg.disk_name = NULL;
    if (rc == 0)
        gw_rundir_destroy (&self->chain_rd);
    if (rc == 0) {
        self->chain_dir [0] = '\0';
        self->first_start_done = true;
    }
    return rc;
}

static int
s_dup_kernel_fd (s_self_t *self, int *fd_p, char *err, size_t errlen)
{
    *fd_p = fcntl (self->kernel_fd, F_DUPFD_CLOEXEC, 3);
    if (*fd_p < 0) {
        snprintf (err, errlen, "dup: %s", strerror (errno));
        return -EIO;
    }
    self->kernel_alive = true;
    self->have_exit = false;
    return 0;
}

static int
s_start (void *ctx, int *fd_p, char *err, size_t errlen)
{
    s_self_t *self = ctx;
    *fd_p = -1;
    self->stop_start = false;                   //  a start killed in flight goes on
    if (!self->vm && !self->starting)
        gw_microvm__prepare_start (self);
    if (!self->vm) {                            //  the starter reports to s_connect
        if (!self->starting && gw_vmstart_begin (self->starter) < 0) {
            snprintf (err, errlen, "a VM start is already under way");
            return -EBUSY;
        }
        self->starting = true;
        self->kernel_alive = true;
        self->have_exit = false;
        return 0;
    }
    if (!self->starting && gw_microvm__rebirth (self)) {
        self->kernel_alive = true;
        self->have_exit = false;
        return 0;                               //  connect takes the new VM
    }
    json_t *c = json_object ();
    char id [37];
    int rc = self->init ? gw_init_send (self->init, "restart_request", &c, NULL, 0, id) : -EPIPE;
    json_decref (c);                            //  NULL once sent
    if (rc == 0)
        gw_watch_sent (self->watch, id);
    if (rc < 0) {
        snprintf (err, errlen, "the VM's init does not answer; it will be replaced");
        gw_microvm__drop_vm (self);
        return -EIO;
    }
    gw_microvm__watch_init (self);
    gw_log (GW_LOG_INFO, "vm.kernel_restart", "pid=%d", gw_vmh_pid (self->vm));
    return s_dup_kernel_fd (self, fd_p, err, errlen);
}

//  The starter ended: adopt its VM, or cold-boot.
static int
s_take_start (s_self_t *self, char *err, size_t errlen)
{
    gw_vmstart_result_t res = { .kernel_fd = -1 };
    int rc = self->detach_id [0] ? -EAGAIN : gw_vmstart_take (self->starter, &res);
    if (rc == -EAGAIN)
        return -EAGAIN;
    self->starting = false;
    if (rc == -ECHILD && self->vm)              //  the rebirth fell back to a restart in place
        return 0;
    if (rc == -EIO) {                           //  a snapshot that would not resume
        snprintf (err, errlen, "%s", gw_vmstart_error (self->starter));
        gw_microvm__started (self, rc, NULL);
        return -EIO;
    }
    if (rc == 0) {
        gw_microvm__started (self, rc, res.how);
        self->vm = res.vm;
        self->kernel_fd = res.kernel_fd;
        gw_microvm__watch_vm (self);
        if (res.how && strcmp (res.how, "pool") == 0)
            gw_watch_owed (self->watch, "set_time_reply");  //  gw_vmstart asked it
        s_adopt_init (self, &res.init, true);
        s_ops_send_waiting (self);              //  chunks asked for while it started
        gw_microvm__net_start (self);
        return 0;
    }
    return s_boot_keeping (self, err, errlen) < 0 ? -EIO : -EAGAIN;
}

static int
s_connect (void *ctx, int *fd_p, char *err, size_t errlen)
{
    s_self_t *self = ctx;
    int rc = self->starting ? s_take_start (self, err, errlen) : 0;
    if (rc < 0)
        return rc;
    if (!self->vm)
        return -ECHILD;
    if (self->kernel_fd < 0) {
        rc = gw_vmh_connect_port (self->vm, "kernel", &self->kernel_fd);
        if (rc == -EAGAIN)
            return -EAGAIN;
        if (rc < 0) {
            snprintf (err, errlen, "the VM did not open its kernel port (%s); see %s",
                      strerror (-rc), gw_vmh_console (self->vm));
            return rc;
        }
        gw_log (GW_LOG_INFO, "vm.kernel_port", "pid=%d", gw_vmh_pid (self->vm));
    }
    s_try_init (self);
    return s_dup_kernel_fd (self, fd_p, err, errlen);
}

static int
s_kill (void *ctx)
{
    s_self_t *self = ctx;
    if (self->vm && self->detach_id [0]) {      //  a new VM was about to replace this one
        self->stop_start = true;
        return gw_vmh_kill (self->vm);
    }
    if (!self->vm && self->starting)
        self->stop_start = true;                //  a start in flight: reap ends it
    if (!self->vm)
        return self->starting ? 0 : -ESRCH;
    json_t *c = json_pack ("{s:s}", "signal", "SIGKILL");
    char id [37];
    //  Kill only the kernel (its whole cgroup); the VM and /workspace stay.
    if (self->init && self->init_ready && !self->stop_why [0]
    &&  gw_init_send (self->init, "kill_request", &c, NULL, 0, id) == 0) {
        gw_watch_sent (self->watch, id);
        gw_microvm__watch_init (self);
        return 0;
    }
    json_decref (c);
    return gw_vmh_kill (self->vm);
}

static void
s_vm_died (s_self_t *self, int status, gw_exit_t *exit_p)
{
    memset (exit_p, 0, sizeof *exit_p);
    exit_p->vm_died = true;
    exit_p->exit_code = WIFEXITED (status) ? WEXITSTATUS (status) : -1;
    exit_p->signal = WIFSIGNALED (status) ? WTERMSIG (status) : 0;
    const char *host = gw_vmh_death (self->vm);    //  e.g. its cgroup's OOM killer
    char how [300];
    if (*host)
        snprintf (how, sizeof how, ": %s", host);
    else
        snprintf (how, sizeof how, " (QEMU %s %d)", exit_p->signal ? "killed by signal"
                  : "exited with status", exit_p->signal ? exit_p->signal : exit_p->exit_code);
    gw_log (GW_LOG_ERROR, "vm.died", "exit_code=%d signal=%d console=%s host=\"%s\" by=%s",
            exit_p->exit_code, exit_p->signal, gw_vmh_console (self->vm), host,
            self->stop_why [0] ? "gateway" : "itself");
    gw_microvm__vm_detail (self, how, exit_p);
    gw_microvm__drop_vm (self);
    self->kernel_alive = false;
}

static int
s_reap (void *ctx, gw_exit_t *exit_p)
{
    s_self_t *self = ctx;
    if (self->starting && self->stop_start) {
        gw_vmstart_result_t res = { .kernel_fd = -1 };
        int rc = gw_vmstart_take (self->starter, &res);
        if (rc == -EAGAIN)
            return -EAGAIN;
        self->starting = self->stop_start = false;
        self->detach_id [0] = '\0';            //  a rebirth stopped before its detach ended
        gw_vmh_destroy (&res.vm);
        gw_init_destroy (&res.init);
        if (res.kernel_fd >= 0)
            close (res.kernel_fd);
        memset (exit_p, 0, sizeof *exit_p);
        snprintf (exit_p->detail, sizeof exit_p->detail, "The VM was stopped before it was ready");
        return 0;
    }
    if (!self->vm)
        return self->starting ? -EAGAIN : -ECHILD;
    gw_microvm__watch_tick (self);              //  a frozen or flooding VM is stopped
    if (self->have_exit) {
        *exit_p = self->exit;
        self->have_exit = false;
        return 0;
    }
    int status;
    if (gw_vmh_reap (self->vm, &status) < 0)
        return -EAGAIN;
    s_vm_died (self, status, exit_p);
    return 0;
}

static int
s_pid (void *ctx)
{
    s_self_t *self = ctx;
    return self->vm ? gw_vmh_pid (self->vm) : 0;
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
    s_cancel_chunks (self);
    gw_vmstart_destroy (&self->starter);
    gw_microvm__drop_vm (self);
    gw_microvm__end (self);
    gw_watch_destroy (&self->watch);
    gw_rundir_destroy (&self->chain_rd);
    if (self->epfd >= 0)
        close (self->epfd);
    if (self->timerfd >= 0)
        close (self->timerfd);
    free (self);
}

//  The accelerator, chosen once, with its reason in the log.
static int
s_choose_accel (s_self_t *self, char *err, size_t errlen)
{
    if (self->cfg.accel == GW_ACCEL_AUTO) {
        gw_accel_probe_t probe;
        char why [256];
        gw_accel_probe (&probe);
        int acc = gw_accel_choose (GW_ACCEL_AUTO, &probe, why, sizeof why);
        if (acc < 0) {
            snprintf (err, errlen, "%s", why);
            return -ENODEV;
        }
        self->cfg.accel = (gw_accel_t) acc;
        gw_log (GW_LOG_INFO, "vm.accel", "choice=%s reason=\"%s\"",
                gw_accel_name (self->cfg.accel), why);
    }
    if (!self->cfg.tsc_khz)
        self->cfg.tsc_khz = gw_accel_tsc_khz ();
    return 0;
}

static int
s_watch (int epfd, int fd)
{
    struct epoll_event ev = { .events = EPOLLIN };
    return fd >= 0 && epoll_ctl (epfd, EPOLL_CTL_ADD, fd, &ev) == 0 ? 0 : -errno;
}

//  The watchdog's seam (gw_watch_borrow_fn): a gateway that dropped to a
//  service user cannot reach QEMU's fds, and its root helper borrows the
//  console for it.
static int
s_borrow_console (void *ctx, int pid, const char *path, int *fd_p)
{
    (void) ctx;
    gw_priv_t *priv = gw_priv ();
    return priv ? gw_priv_console (priv, pid, path, fd_p) : gw_fdborrow (pid, path, fd_p);
}

//  The backend's own epoll: its timer, and the lease signal (a RAM file's
//  writer waits for the VM that maps it to stop).
static int
s_open_events (s_self_t *self, char *err, size_t errlen)
{
    self->epfd = epoll_create1 (EPOLL_CLOEXEC);
    self->timerfd = timerfd_create (CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    int leases = gw_readlease_signal_fd ();
    if (self->epfd < 0 || s_watch (self->epfd, self->timerfd) < 0
    ||  (leases >= 0 && s_watch (self->epfd, leases) < 0)) {
        snprintf (err, errlen, "epoll/timerfd: %s", strerror (errno));
        return -EIO;
    }
    return 0;
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
    self->seam = self->opts.seam;
    snprintf (self->disk_top, sizeof self->disk_top, "%s", GW_VMARGV_DISK);
    self->chunk_ms = self->seam.chunk_ms ? self->seam.chunk_ms : S_CHUNK_MS;
    self->kernel_fd = -1;
    self->watch = gw_watch_new (s_borrow_console, NULL);
    if (s_open_events (self, err, errlen) < 0)
        goto fail;
    if (s_choose_accel (self, err, errlen) < 0)
        goto fail;
    self->starter = gw_vmstart_new (&self->cfg, opts);
    if (s_watch (self->epfd, gw_vmstart_fd (self->starter)) < 0) {
        snprintf (err, errlen, "epoll: %s", strerror (errno));
        goto fail;
    }
    *be = (gw_backend_t) {
        .name = "microvm", .start = s_start, .connect = s_connect, .kill = s_kill,
        .reap = s_reap, .pid = s_pid, .destroy = s_destroy, .ctx = self,
        .sync_markers = true, .keep_live = true, .event_fd = s_event_fd, .on_event = s_on_event,
        .put_chunk = s_put_chunk, .get_chunk = s_get_chunk, .cancel_chunks = s_cancel_chunks,
        .keep_workspace = gw_microvm__keep_workspace, .snapshot = gw_microvm__snapshot,
        .pause = gw_microvm__pause, .keep_paused = gw_microvm__keep_paused,
        .workspace = gw_microvm__workspace,
    };
    return be;
fail:
    s_destroy (self);
    free (be);
    return NULL;
}
