/*  tu_microvm - the microvm backend tests' mock VMs, fixture and drivers
    (tu_microvm.h).
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "backend/gw_backend_microvm.h"
#include "guest/gw_init.h"
#include "base/gw_log.h"
#include "backend/gw_vmh.h"
#include "backend/gw_vmstart.h"
#include "ch_frame.h"
#include "ch_io.h"
#include "tu_microvm.h"
#include "ch_clock.h"

//  --------------------------------------------------------------------------
//  Mock VMs behind gw_vmh.

static int s_mock_pid (void *vm) { return ((tu_microvm_vm_t *) vm)->pid; }
static const char *s_mock_run_dir (void *vm) { (void) vm; return "/mock/run"; }
static const char *s_mock_console (void *vm) { (void) vm; return "/mock/run/console.log"; }

static int
s_mock_kill (void *vmp)
{
    tu_microvm_vm_t *vm = vmp;
    vm->kills++;
    vm->dead = true;
    vm->wstatus = SIGKILL;                      //  a waitpid status: killed by signal 9
    return 0;
}

static int
s_mock_reap (void *vmp, int *wstatus)
{
    tu_microvm_vm_t *vm = vmp;
    if (!vm->dead)
        return -EAGAIN;
    *wstatus = vm->wstatus;
    return 0;
}

//  The handle owns the VM; the test keeps it to look at afterwards.
static void
s_mock_destroy (void *vmp)
{
    tu_microvm_vm_t *vm = vmp;
    assert_false (vm->destroyed);
    vm->destroyed = true;
    for (int i = 0; i < 2; i++)
        if (vm->port [i][0] >= 0) {
            close (vm->port [i][0]);
            vm->port [i][0] = -1;
        }
}

static int
s_mock_connect_port (void *vmp, const char *name, int *fd_p)
{
    tu_microvm_vm_t *vm = vmp;
    int i = strcmp (name, "kernel") == 0 ? TU_MICROVM_KERNEL
          : strcmp (name, "init") == 0 ? TU_MICROVM_INIT : -1;
    if (i < 0)
        return -EINVAL;
    if (vm->holds_ports)
        return -ENOTSUP;                        //  as a pool lease
    if (vm->tries [i]++ < vm->connect_after)
        return -EAGAIN;
    if (vm->port [i][0] < 0)
        return -ECONNREFUSED;                   //  handed out before
    *fd_p = vm->port [i][0];
    vm->port [i][0] = -1;
    vm->connects [i]++;
    return 0;
}

static const gw_vmh_ops_t s_mock_ops = {
    .pid = s_mock_pid, .kill = s_mock_kill, .reap = s_mock_reap,
    .run_dir = s_mock_run_dir, .console = s_mock_console, .destroy = s_mock_destroy,
    .connect_port = s_mock_connect_port
};

//  --------------------------------------------------------------------------
//  The seam's mock VMs, and the fixture.

static tu_microvm_vm_t *
s_vm_new (tu_microvm_fixture_t *f, bool holds_ports)
{
    assert_true (f->nvms < TU_MICROVM_MAX_VMS);
    tu_microvm_vm_t *vm = calloc (1, sizeof *vm);
    assert_non_null (vm);
    vm->pid = 4200 + f->nvms;
    vm->holds_ports = holds_ports;
    vm->connect_after = holds_ports ? 0 : f->connect_after;
    for (int i = 0; i < 2; i++)
        assert_int_equal (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, vm->port [i]), 0);
    vm->asm_ = ch_asm_new (NULL);
    f->vms [f->nvms++] = vm;
    return vm;
}

//  The seam's fast start, on gw_vmstart's thread.
static int
s_mock_fast_start (void *arg, gw_vmstart_result_t *res)
{
    tu_microvm_fixture_t *f = arg;
    char byte;
    if (f->gated)
        assert_int_equal (read (f->gate [0], &byte, 1), 1);
    f->fast_calls++;
    if (f->fast_rc < 0)
        return f->fast_rc;
    tu_microvm_vm_t *vm = s_vm_new (f, true);
    res->kernel_fd = vm->port [TU_MICROVM_KERNEL][0];
    res->init = gw_init_new (vm->port [TU_MICROVM_INIT][0], CH_FRAME_MAX_DEFAULT);
    vm->port [TU_MICROVM_KERNEL][0] = vm->port [TU_MICROVM_INIT][0] = -1;
    res->vm = gw_vmh_new (&s_mock_ops, vm);
    res->how = "mock";
    return 0;
}

//  The seam's cold boot, on the reactor.
static gw_vmh_t *
s_mock_boot (void *arg, const gw_vm_config_t *cfg, char *err, size_t errlen)
{
    tu_microvm_fixture_t *f = arg;
    assert_int_equal (cfg->mem_mib, 512);      //  the backend's config reaches it
    f->boots++;
    if (f->boot_fails) {
        snprintf (err, errlen, "mock boot failed");
        return NULL;
    }
    return gw_vmh_new (&s_mock_ops, s_vm_new (f, false));
}

static void
s_make (tu_microvm_fixture_t *f)
{
    gw_vm_config_t cfg;
    gw_vm_config_defaults (&cfg);
    cfg.image_dir = "/nonexistent";
    cfg.accel = GW_ACCEL_TCG;                   //  no probing
    cfg.tsc_khz = 1000000;
    gw_microvm_opts_t opts = {
        .seam = { .boot = s_mock_boot, .fast_start = s_mock_fast_start, .arg = f,
                  .chunk_ms = TU_MICROVM_CHUNK_MS }
    };
    f->be = gw_backend_microvm_new_opts (&cfg, &opts, f->err, sizeof f->err);
    assert_non_null (f->be);
    assert_int_equal (gw_backend_event_fd (f->be) >= 0, 1);
}

void
tu_microvm_prepare (void)
{
    signal (SIGPIPE, SIG_IGN);                  //  as the gateway does
    gw_log_init (getenv ("TEST_LOG") ? GW_LOG_DEBUG : GW_LOG_ERROR, NULL);
}

int
tu_microvm_setup (void **state)
{
    tu_microvm_fixture_t *f = calloc (1, sizeof *f);
    assert_non_null (f);
    assert_int_equal (pipe2 (f->gate, O_CLOEXEC), 0);
    *state = f;
    return 0;
}

int
tu_microvm_teardown (void **state)
{
    tu_microvm_fixture_t *f = *state;
    gw_backend_destroy (&f->be);
    for (int i = 0; i < f->nvms; i++) {
        tu_microvm_vm_t *vm = f->vms [i];
        assert_true (vm->destroyed);            //  the backend let go of every VM
        for (int p = 0; p < 2; p++)
            for (int e = 0; e < 2; e++)
                if (vm->port [p][e] >= 0)
                    close (vm->port [p][e]);
        ch_asm_destroy (&vm->asm_);
        free (vm);
    }
    for (int i = 0; i < 4; i++)
        json_decref (f->done [i].reply);
    close (f->gate [0]);
    close (f->gate [1]);
    free (f);
    return 0;
}

//  --------------------------------------------------------------------------
//  Driving the backend as the session's reactor does.

void
tu_microvm_pump (tu_microvm_fixture_t *f, int ms)
{
    if (!f->be)
        return;
    struct pollfd p = { gw_backend_event_fd (f->be), POLLIN, 0 };
    if (poll (&p, 1, ms) > 0)
        f->died |= gw_backend_on_event (f->be);
}

void
tu_microvm_pump_for (tu_microvm_fixture_t *f, int ms)
{
    int64_t end = ch_clock_mono_ms () + ms;
    while (ch_clock_mono_ms () < end)
        tu_microvm_pump (f, 20);
}

int
tu_microvm_start (tu_microvm_fixture_t *f, int *fd_p)
{
    return gw_backend_start (f->be, fd_p, f->err, sizeof f->err);
}

int tu_microvm_reap (tu_microvm_fixture_t *f) { return gw_backend_reap (f->be, &f->ex); }

int
tu_microvm_connect (tu_microvm_fixture_t *f, int *fd_p)
{
    int64_t end = ch_clock_mono_ms () + 5000;
    int rc;
    while ((rc = gw_backend_connect (f->be, fd_p, f->err, sizeof f->err)) == -EAGAIN) {
        if (ch_clock_mono_ms () > end)
            fail_msg ("connect still -EAGAIN after 5 s");
        f->again += f->boots > 0;
        tu_microvm_pump (f, 10);
    }
    return rc;
}

int
tu_microvm_open (tu_microvm_fixture_t *f, int fast_rc, int *fd_p)
{
    f->fast_rc = fast_rc;
    s_make (f);
    *fd_p = -2;
    assert_int_equal (tu_microvm_start (f, fd_p), 0);
    assert_int_equal (*fd_p, -1);               //  the channel comes later
    return tu_microvm_connect (f, fd_p);
}

tu_microvm_vm_t *
tu_microvm_fast (tu_microvm_fixture_t *f, int *fd_p)
{
    int fd;
    assert_int_equal (tu_microvm_open (f, 0, &fd), 0);
    assert_true (fd >= 0);
    if (fd_p)
        *fd_p = fd;
    else
        close (fd);
    return f->vms [0];
}

void
tu_microvm_start_gated_then_kill (tu_microvm_fixture_t *f, int *fd_p)
{
    f->gated = true;
    s_make (f);
    *fd_p = -2;
    assert_int_equal (tu_microvm_start (f, fd_p), 0);
    assert_int_equal (gw_backend_kill (f->be), 0);
}

//  --------------------------------------------------------------------------
//  Playing init and the kernel's port.

ch_msg_t *
tu_microvm_init_recv (tu_microvm_fixture_t *f, tu_microvm_vm_t *vm, int ms)
{
    int64_t end = ch_clock_mono_ms () + ms;
    while (true) {
        ch_msg_t *msg = NULL;
        size_t used = 0;                        //  all of it, unless a message came
        assert_int_equal (ch_asm_feed (vm->asm_, vm->rbuf + vm->rpos, vm->rlen - vm->rpos,
                                       &used, &msg), 0);
        vm->rpos += used;
        if (msg)
            return msg;
        if (ch_clock_mono_ms () > end)
            return NULL;
        tu_microvm_pump (f, 0);
        struct pollfd p = { vm->port [TU_MICROVM_INIT][1], POLLIN, 0 };
        if (poll (&p, 1, 10) <= 0)
            continue;
        ssize_t n = read (vm->port [TU_MICROVM_INIT][1], vm->rbuf, sizeof vm->rbuf);
        assert_true (n > 0);
        vm->rpos = 0;
        vm->rlen = (size_t) n;
    }
}

ch_msg_t *
tu_microvm_init_expect (tu_microvm_fixture_t *f, tu_microvm_vm_t *vm, const char *type,
                        bool skip_hellos)
{
    ch_msg_t *msg = tu_microvm_init_recv (f, vm, 3000);
    while (msg && skip_hellos && strcmp (type, "hello") && !strcmp (ch_msg_type (msg), "hello")) {
        ch_msg_destroy (&msg);
        msg = tu_microvm_init_recv (f, vm, 3000);
    }
    if (!msg)
        fail_msg ("init got no %s", type);
    assert_string_equal (ch_msg_type (msg), type);
    assert_int_equal (ch_msg_channel (msg), CH_CELLVM);
    return msg;
}

void
tu_microvm_init_send (tu_microvm_vm_t *vm, const ch_msg_t *req, const char *type,
                      json_t *content, const void *buf, size_t len)
{
    char reply_type [64];
    if (!type) {
        assert_true (ch_msg_reply_type (ch_msg_type (req), reply_type, sizeof reply_type));
        type = reply_type;
    }
    ch_msg_t *msg = ch_msg_new (CH_CELLVM, type, req ? ch_msg_header (req) : NULL, &content,
                                "init-session");
    if (len) {
        uint8_t *copy = malloc (len);
        assert_non_null (copy);
        memcpy (copy, buf, len);
        assert_int_equal (ch_msg_add_buffer (msg, &copy, len), 0);
    }
    assert_int_equal (ch_write_msg (vm->port [TU_MICROVM_INIT][1], msg, CH_FRAME_MAX_DEFAULT,
                                    false, 1000), 0);
    ch_msg_destroy (&msg);
}

json_t *tu_microvm_ok (void) { return json_pack ("{s:s}", "status", "ok"); }

void
tu_microvm_close_init (tu_microvm_vm_t *vm)
{
    close (vm->port [TU_MICROVM_INIT][1]);
    vm->port [TU_MICROVM_INIT][1] = -1;
}

void
tu_microvm_kernel_talks (int gw_fd, tu_microvm_vm_t *vm)
{
    char buf [8] = "";
    assert_int_equal (write (vm->port [TU_MICROVM_KERNEL][1], "ping", 4), 4);
    struct pollfd p = { gw_fd, POLLIN, 0 };
    assert_int_equal (poll (&p, 1, 2000), 1);
    assert_int_equal (read (gw_fd, buf, sizeof buf), 4);
    assert_memory_equal (buf, "ping", 4);
    assert_int_equal (write (gw_fd, "pong", 4), 4);
    assert_int_equal (read (vm->port [TU_MICROVM_KERNEL][1], buf, sizeof buf), 4);
    assert_memory_equal (buf, "pong", 4);
}

void
tu_microvm_starts_a_new_vm (tu_microvm_fixture_t *f)
{
    int fd = -2;
    assert_int_equal (tu_microvm_start (f, &fd), 0);
    assert_int_equal (tu_microvm_connect (f, &fd), 0);
    assert_int_equal (f->nvms, 2);
    tu_microvm_kernel_talks (fd, f->vms [1]);
    close (fd);
}

//  --------------------------------------------------------------------------
//  Chunks.

static bool s_in_call;                          //  inside a put/get call

static void
s_on_done (void *arg, int rc, const json_t *reply, const uint8_t *data, size_t len,
           const char *err)
{
    tu_microvm_done_t *d = arg;
    assert_false (s_in_call);                   //  never inside put_chunk/get_chunk
    d->calls++;
    d->rc = rc;
    json_decref (d->reply);
    d->reply = reply ? json_deep_copy (reply) : NULL;
    assert_true (len <= sizeof d->data);
    if (len)
        memcpy (d->data, data, len);
    d->len = len;
    snprintf (d->err, sizeof d->err, "%s", err ? err : "");
}

int
tu_microvm_put (tu_microvm_fixture_t *f, int i, const char *path, bool append,
                const char *text)
{
    s_in_call = true;
    int rc = gw_backend_put_chunk (f->be, path, append, (const uint8_t *) text, strlen (text),
                                   s_on_done, &f->done [i], f->err, sizeof f->err);
    s_in_call = false;
    return rc;
}

int
tu_microvm_get (tu_microvm_fixture_t *f, int i, const char *path, uint64_t offset, size_t len)
{
    s_in_call = true;
    int rc = gw_backend_get_chunk (f->be, path, offset, len, s_on_done, &f->done [i], f->err,
                                   sizeof f->err);
    s_in_call = false;
    return rc;
}

void
tu_microvm_put_refused (tu_microvm_fixture_t *f, int i, int rc, const char *why)
{
    assert_int_equal (tu_microvm_put (f, i, "y", false, "data"), rc);
    assert_string_equal (f->err, why);
    tu_microvm_pump (f, 50);
    assert_int_equal (f->done [i].calls, 0);
}

tu_microvm_done_t *
tu_microvm_answer (tu_microvm_fixture_t *f, tu_microvm_vm_t *vm, ch_msg_t **req_p, int i,
                   json_t *content, const void *buf, size_t len)
{
    tu_microvm_init_send (vm, *req_p, NULL, content, buf, len);
    ch_msg_destroy (req_p);
    TU_MICROVM_WAIT_FOR (f, 2000, f->done [i].calls == 1);
    return &f->done [i];
}

const char *
tu_microvm_str (const json_t *obj, const char *key)
{
    return json_string_value (json_object_get (obj, key));
}

json_int_t
tu_microvm_int (const json_t *obj, const char *key)
{
    return json_integer_value (json_object_get (obj, key));
}
