/*  test_gw_backend_microvm - the microvm backend with no QEMU.

    The backend's seam (gw_microvm_opts_t.seam) hands it mock VMs: a fast
    start (on gw_vmstart's thread, like a pool take or a restore) or a cold
    boot whose ports come up a few calls later. Each mock VM's kernel and
    init ports are socketpairs; the test plays init (docs/init.md) and the
    kernel's port on the other ends with the channel library (ch_asm in,
    ch_write_msg out). The backend is driven only through the gw_backend_*
    wrappers and a poll loop on its event fd, as the session drives it.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <czmq.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gw_backend_microvm.h"
#include "gw_init.h"
#include "gw_log.h"
#include "gw_vmh.h"
#include "gw_vmstart.h"
#include "ch_asm.h"
#include "ch_frame.h"
#include "ch_io.h"
#include "ch_msg.h"

#define CHUNK_MS 300                            //  the shortened chunk deadline
#define MAX_VMS 4

//  --------------------------------------------------------------------------
//  Mock VMs behind gw_vmh.

enum { KERNEL, INIT };

typedef struct {
    int pid;
    int port [2][2];                            //  [KERNEL|INIT][0 backend's end, 1 ours]
    bool holds_ports;                           //  fast start: ports came with it
    int connect_after;                          //  -EAGAIN this many times per port
    int tries [2], connects [2];
    int kills;
    bool dead;                                  //  reap reports wstatus
    int wstatus;
    bool destroyed;
    ch_asm_t *asm_;                             //  what the backend sent init
    uint8_t rbuf [65536];
    size_t rpos, rlen;
} mock_vm_t;

static int
s_mock_pid (void *vm)
{
    return ((mock_vm_t *) vm)->pid;
}

static int
s_mock_kill (void *vmp)
{
    mock_vm_t *vm = vmp;
    vm->kills++;
    vm->dead = true;
    vm->wstatus = SIGKILL;                      //  a waitpid status: killed by signal 9
    return 0;
}

static int
s_mock_reap (void *vmp, int *wstatus)
{
    mock_vm_t *vm = vmp;
    if (!vm->dead)
        return -EAGAIN;
    *wstatus = vm->wstatus;
    return 0;
}

static const char *s_mock_run_dir (void *vm) { (void) vm; return "/mock/run"; }
static const char *s_mock_console (void *vm) { (void) vm; return "/mock/run/console.log"; }

//  The handle owns the VM; the test keeps it to look at afterwards.
static void
s_mock_destroy (void *vmp)
{
    mock_vm_t *vm = vmp;
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
    mock_vm_t *vm = vmp;
    int i = strcmp (name, "kernel") == 0 ? KERNEL : strcmp (name, "init") == 0 ? INIT : -1;
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
    .kind = "mock", .pid = s_mock_pid, .kill = s_mock_kill, .reap = s_mock_reap,
    .run_dir = s_mock_run_dir, .console = s_mock_console, .destroy = s_mock_destroy,
    .connect_port = s_mock_connect_port
};

//  --------------------------------------------------------------------------
//  The fixture: the backend, its mock VMs, and what the chunks' done saw.

typedef struct {
    int calls;
    int rc;
    json_t *reply;                              //  a copy
    uint8_t data [256];
    size_t len;
    char err [600];
} done_t;

typedef struct {
    gw_backend_t *be;
    mock_vm_t *vms [MAX_VMS];                   //  made so far, oldest first
    int nvms;
    int fast_rc;                                //  the mock fast start: 0 or -ENOENT
    int fast_calls, boots;
    bool boot_fails;
    int connect_after;                          //  for cold-booted VMs
    int gate [2];                               //  fast start waits for a byte, when gated
    bool gated;
    int died;                                   //  on_event said the kernel died
    done_t done [4];
} fix_t;

static mock_vm_t *
s_vm_new (fix_t *f, bool holds_ports)
{
    assert_true (f->nvms < MAX_VMS);
    mock_vm_t *vm = calloc (1, sizeof *vm);
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
    fix_t *f = arg;
    char byte;
    if (f->gated)
        assert_int_equal (read (f->gate [0], &byte, 1), 1);
    f->fast_calls++;
    if (f->fast_rc < 0)
        return f->fast_rc;
    mock_vm_t *vm = s_vm_new (f, true);
    res->kernel_fd = vm->port [KERNEL][0];
    res->init = gw_init_new (vm->port [INIT][0], CH_FRAME_MAX_DEFAULT);
    vm->port [KERNEL][0] = vm->port [INIT][0] = -1;
    res->vm = gw_vmh_new (&s_mock_ops, vm);
    res->how = "mock";
    return 0;
}

//  The seam's cold boot, on the reactor.
static gw_vmh_t *
s_mock_boot (void *arg, const gw_vm_config_t *cfg, char *err, size_t errlen)
{
    fix_t *f = arg;
    assert_int_equal (cfg->mem_mib, 512);      //  the backend's config reaches it
    f->boots++;
    if (f->boot_fails) {
        snprintf (err, errlen, "mock boot failed");
        return NULL;
    }
    return gw_vmh_new (&s_mock_ops, s_vm_new (f, false));
}

static void
s_make (fix_t *f)
{
    gw_vm_config_t cfg;
    gw_vm_config_defaults (&cfg);
    cfg.image_dir = "/nonexistent";
    cfg.accel = GW_ACCEL_TCG;                   //  no probing
    cfg.tsc_khz = 1000000;
    gw_microvm_opts_t opts = {
        .seam = { .boot = s_mock_boot, .fast_start = s_mock_fast_start, .arg = f,
                  .chunk_ms = CHUNK_MS }
    };
    char err [256] = "";
    f->be = gw_backend_microvm_new_opts (&cfg, &opts, err, sizeof err);
    assert_non_null (f->be);
    assert_int_equal (gw_backend_event_fd (f->be) >= 0, 1);
}

static int
s_setup (void **state)
{
    fix_t *f = calloc (1, sizeof *f);
    assert_non_null (f);
    assert_int_equal (pipe2 (f->gate, O_CLOEXEC), 0);
    *state = f;
    return 0;
}

static int
s_teardown (void **state)
{
    fix_t *f = *state;
    gw_backend_destroy (&f->be);
    for (int i = 0; i < f->nvms; i++) {
        mock_vm_t *vm = f->vms [i];
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

//  Wait up to ms for the event fd; handle one event. Nothing once destroyed.
static void
s_pump (fix_t *f, int ms)
{
    if (!f->be)
        return;
    struct pollfd p = { gw_backend_event_fd (f->be), POLLIN, 0 };
    if (poll (&p, 1, ms) > 0)
        f->died |= gw_backend_on_event (f->be);
}

//  Pump until cond holds; fail the test after ms.
#define WAIT_FOR(f, ms, cond)                                                   \
    do {                                                                        \
        int64_t end_ = zclock_mono () + (ms);                                   \
        while (!(cond)) {                                                       \
            if (zclock_mono () > end_)                                          \
                fail_msg ("timed out waiting for %s", #cond);                   \
            s_pump ((f), 10);                                                   \
        }                                                                       \
    } while (0)

//  connect until it stops saying -EAGAIN, pumping between tries.
static int
s_connect (fix_t *f, int *fd_p, int ms)
{
    char err [256] = "";
    int64_t end = zclock_mono () + ms;
    int rc;
    while ((rc = gw_backend_connect (f->be, fd_p, err, sizeof err)) == -EAGAIN) {
        if (zclock_mono () > end)
            fail_msg ("connect still -EAGAIN after %d ms", ms);
        s_pump (f, 10);
    }
    return rc;
}

//  A fast-started session: start, then the kernel channel.
static int
s_fast_session (fix_t *f)
{
    s_make (f);
    int fd = -2;
    char err [256] = "";
    assert_int_equal (gw_backend_start (f->be, &fd, err, sizeof err), 0);
    assert_int_equal (fd, -1);                  //  the channel comes later
    assert_int_equal (s_connect (f, &fd, 5000), 0);
    assert_true (fd >= 0);
    return fd;
}

//  --------------------------------------------------------------------------
//  Playing init and the kernel's port.

//  The next message the backend sent init, pumping the backend meanwhile;
//  NULL when none came within ms.
static ch_msg_t *
s_init_recv (fix_t *f, mock_vm_t *vm, int ms)
{
    int64_t end = zclock_mono () + ms;
    while (true) {
        ch_msg_t *msg = NULL;
        size_t used = 0;
        if (vm->rpos < vm->rlen) {
            assert_int_equal (ch_asm_feed (vm->asm_, vm->rbuf + vm->rpos, vm->rlen - vm->rpos,
                                           &used, &msg), 0);
            vm->rpos += used;
            if (msg)
                return msg;
            continue;
        }
        if (zclock_mono () > end)
            return NULL;
        s_pump (f, 0);
        struct pollfd p = { vm->port [INIT][1], POLLIN, 0 };
        if (poll (&p, 1, 10) <= 0)
            continue;
        ssize_t n = read (vm->port [INIT][1], vm->rbuf, sizeof vm->rbuf);
        assert_true (n > 0);
        vm->rpos = 0;
        vm->rlen = (size_t) n;
    }
}

//  The next message must be of this type (hellos still in flight skipped
//  when skip_hellos).
static ch_msg_t *
s_init_expect (fix_t *f, mock_vm_t *vm, const char *type, bool skip_hellos)
{
    ch_msg_t *msg = s_init_recv (f, vm, 3000);
    while (msg && skip_hellos && strcmp (type, "hello") && !strcmp (ch_msg_type (msg), "hello")) {
        ch_msg_destroy (&msg);
        msg = s_init_recv (f, vm, 3000);
    }
    if (!msg)
        fail_msg ("init got no %s", type);
    assert_string_equal (ch_msg_type (msg), type);
    assert_int_equal (ch_msg_channel (msg), CH_CELLVM);
    return msg;
}

//  Init sends a message: a reply to req (NULL: a notice), with a buffer.
static void
s_init_send (mock_vm_t *vm, const ch_msg_t *req, const char *type, json_t *content,
             const void *buf, size_t len)
{
    ch_msg_t *msg = ch_msg_new (CH_CELLVM, type, req ? ch_msg_header (req) : NULL, &content,
                                "init-session");
    if (len) {
        uint8_t *copy = malloc (len);
        assert_non_null (copy);
        memcpy (copy, buf, len);
        assert_int_equal (ch_msg_add_buffer (msg, &copy, len), 0);
    }
    assert_int_equal (ch_write_msg (vm->port [INIT][1], msg, CH_FRAME_MAX_DEFAULT, false, 1000),
                      0);
    ch_msg_destroy (&msg);
}

static void
s_init_hello_reply (mock_vm_t *vm, const ch_msg_t *hello)
{
    s_init_send (vm, hello, "hello", json_pack ("{s:s, s:i, s:s, s:s}", "protocol",
                 "cellvm-init", "version", 1, "role", "init", "status", "ok"), NULL, 0);
}

//  Bytes written on one end of the kernel channel arrive at the other.
static void
s_kernel_talks (int gw_fd, mock_vm_t *vm)
{
    char buf [8] = "";
    assert_int_equal (write (vm->port [KERNEL][1], "ping", 4), 4);
    struct pollfd p = { gw_fd, POLLIN, 0 };
    assert_int_equal (poll (&p, 1, 2000), 1);
    assert_int_equal (read (gw_fd, buf, sizeof buf), 4);
    assert_memory_equal (buf, "ping", 4);
    assert_int_equal (write (gw_fd, "pong", 4), 4);
    assert_int_equal (read (vm->port [KERNEL][1], buf, sizeof buf), 4);
    assert_memory_equal (buf, "pong", 4);
}

//  --------------------------------------------------------------------------
//  Chunks.

static bool s_in_call;                          //  inside a put/get call

static void
s_on_done (void *arg, int rc, const json_t *reply, const uint8_t *data, size_t len,
           const char *err)
{
    done_t *d = arg;
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

//  put_chunk of text (static: it must outlive the chunk) into done [i].
static int
s_put (fix_t *f, int i, const char *path, bool append, const char *text, char *err)
{
    s_in_call = true;
    int rc = gw_backend_put_chunk (f->be, path, append, (const uint8_t *) text, strlen (text),
                                   s_on_done, &f->done [i], err, 256);
    s_in_call = false;
    return rc;
}

static int
s_get (fix_t *f, int i, const char *path, uint64_t offset, size_t len, char *err)
{
    s_in_call = true;
    int rc = gw_backend_get_chunk (f->be, path, offset, len, s_on_done, &f->done [i], err, 256);
    s_in_call = false;
    return rc;
}

static const char *
s_str (const json_t *obj, const char *key)
{
    return json_string_value (json_object_get (obj, key));
}

static json_int_t
s_int (const json_t *obj, const char *key)
{
    return json_integer_value (json_object_get (obj, key));
}

//  ==========================================================================
//  Starting.

static void
test_fast_start_gives_a_working_kernel_fd (void **state)
{
    fix_t *f = *state;
    int fd = s_fast_session (f);
    assert_int_equal (f->fast_calls, 1);
    assert_int_equal (f->boots, 0);
    mock_vm_t *vm = f->vms [0];
    assert_int_equal (gw_backend_pid (f->be), vm->pid);
    s_kernel_talks (fd, vm);
    gw_exit_t ex;
    assert_int_equal (gw_backend_reap (f->be, &ex), -EAGAIN);
    close (fd);
    //  Init's hello was done on the starter's thread: no hello now, and
    //  the end is a shutdown_request so the guest can sync its disk.
    gw_backend_destroy (&f->be);
    assert_true (vm->destroyed);
    ch_msg_t *msg = s_init_expect (f, vm, "shutdown_request", false);
    ch_msg_destroy (&msg);
}

static void
test_failed_fast_start_cold_boots_and_says_hello_until_answered (void **state)
{
    fix_t *f = *state;
    f->fast_rc = -ENOENT;
    f->connect_after = 3;
    s_make (f);
    int fd = -2, again = 0;
    char err [256] = "";
    assert_int_equal (gw_backend_start (f->be, &fd, err, sizeof err), 0);
    assert_int_equal (fd, -1);
    int rc;
    while ((rc = gw_backend_connect (f->be, &fd, err, sizeof err)) == -EAGAIN) {
        again += f->boots > 0;                  //  booted, ports not there yet
        s_pump (f, 10);
    }
    assert_int_equal (rc, 0);
    assert_int_equal (f->fast_calls, 1);
    assert_int_equal (f->boots, 1);
    assert_true (again >= 3);
    mock_vm_t *vm = f->vms [0];
    assert_int_equal (vm->connects [KERNEL], 1);
    s_kernel_talks (fd, vm);
    close (fd);
    //  Init's port comes up on a later call or tick, then hellos until one
    //  is answered; a chunk waits for the answer.
    ch_msg_t *h1 = s_init_expect (f, vm, "hello", false);
    assert_string_equal (s_str (ch_msg_content (h1), "protocol"), "cellvm-init");
    assert_string_equal (s_str (ch_msg_content (h1), "role"), "driver");
    ch_msg_t *h2 = s_init_expect (f, vm, "hello", false);
    assert_int_equal (vm->connects [INIT], 1);
    assert_int_equal (s_put (f, 0, "early.txt", false, "early", err), 0);
    s_init_hello_reply (vm, h2);
    ch_msg_t *put = s_init_expect (f, vm, "put_request", true);
    assert_string_equal (s_str (ch_msg_content (put), "path"), "early.txt");
    s_init_send (vm, put, "put_reply", json_pack ("{s:s, s:i}", "status", "ok", "size", 5),
                 NULL, 0);
    WAIT_FOR (f, 2000, f->done [0].calls == 1);
    assert_int_equal (f->done [0].rc, 0);
    ch_msg_t *more = s_init_recv (f, vm, 600);  //  answered: no more hellos
    assert_null (more);
    ch_msg_destroy (&h1);
    ch_msg_destroy (&h2);
    ch_msg_destroy (&put);
}

static void
test_a_cold_boot_that_fails_is_an_error (void **state)
{
    fix_t *f = *state;
    f->fast_rc = -ENOENT;
    f->boot_fails = true;
    s_make (f);
    int fd = -2;
    char err [256] = "";
    assert_int_equal (gw_backend_start (f->be, &fd, err, sizeof err), 0);
    assert_int_equal (s_connect (f, &fd, 5000), -EIO);
    assert_int_equal (fd, -1);
    assert_int_equal (f->boots, 1);
    gw_exit_t ex;
    assert_int_equal (gw_backend_reap (f->be, &ex), -ECHILD);
    //  The next start tries again from the top.
    f->fast_rc = 0;
    assert_int_equal (gw_backend_start (f->be, &fd, err, sizeof err), 0);
    assert_int_equal (s_connect (f, &fd, 5000), 0);
    assert_int_equal (f->fast_calls, 2);
    close (fd);
}

//  Killed while the starter runs, then started again: the start in flight
//  goes on (it used to be refused with -EBUSY for good).
static void
test_a_start_killed_in_flight_can_be_started_again (void **state)
{
    fix_t *f = *state;
    f->gated = true;
    s_make (f);
    int fd = -2;
    char err [256] = "";
    gw_exit_t ex;
    assert_int_equal (gw_backend_start (f->be, &fd, err, sizeof err), 0);
    assert_int_equal (gw_backend_kill (f->be), 0);
    assert_int_equal (gw_backend_reap (f->be, &ex), -EAGAIN);
    assert_int_equal (gw_backend_start (f->be, &fd, err, sizeof err), 0);
    assert_int_equal (write (f->gate [1], "g", 1), 1);
    assert_int_equal (s_connect (f, &fd, 5000), 0);
    assert_int_equal (f->fast_calls, 1);
    s_kernel_talks (fd, f->vms [0]);
    close (fd);
}

static void
test_a_start_killed_in_flight_is_reaped_with_its_vm (void **state)
{
    fix_t *f = *state;
    f->gated = true;
    s_make (f);
    int fd = -2;
    char err [256] = "";
    gw_exit_t ex;
    assert_int_equal (gw_backend_start (f->be, &fd, err, sizeof err), 0);
    assert_int_equal (gw_backend_kill (f->be), 0);
    assert_int_equal (write (f->gate [1], "g", 1), 1);
    int64_t end = zclock_mono () + 5000;
    int rc;
    while ((rc = gw_backend_reap (f->be, &ex)) == -EAGAIN && zclock_mono () < end)
        s_pump (f, 10);
    assert_int_equal (rc, 0);
    assert_non_null (strstr (ex.detail, "stopped before it was ready"));
    assert_true (f->vms [0]->destroyed);
    assert_int_equal (gw_backend_reap (f->be, &ex), -ECHILD);
}

//  ==========================================================================
//  File chunks through init.

static void
test_put_chunk_round_trip (void **state)
{
    fix_t *f = *state;
    close (s_fast_session (f));
    mock_vm_t *vm = f->vms [0];
    char err [256] = "";
    assert_int_equal (s_put (f, 0, "data/in.csv", true, "a,b\n1,2\n", err), 0);
    assert_int_equal (f->done [0].calls, 0);
    ch_msg_t *req = s_init_expect (f, vm, "put_request", false);
    json_t *c = ch_msg_content (req);
    assert_string_equal (s_str (c, "path"), "data/in.csv");
    assert_true (json_is_true (json_object_get (c, "append")));
    size_t len = 0;
    const uint8_t *buf = ch_msg_buffer (req, 0, &len);
    assert_int_equal (ch_msg_nbuffers (req), 1);
    assert_int_equal (len, 8);
    assert_memory_equal (buf, "a,b\n1,2\n", 8);
    s_init_send (vm, req, "put_reply", json_pack ("{s:s, s:s, s:i, s:i}", "status", "ok",
                 "path", "/workspace/data/in.csv", "size", 108, "written", 8), NULL, 0);
    WAIT_FOR (f, 2000, f->done [0].calls == 1);
    assert_int_equal (f->done [0].rc, 0);
    assert_string_equal (s_str (f->done [0].reply, "path"), "/workspace/data/in.csv");
    assert_int_equal (s_int (f->done [0].reply, "size"), 108);
    assert_int_equal (f->done [0].len, 0);
    ch_msg_destroy (&req);
}

static void
test_put_chunk_refused_by_init_says_why (void **state)
{
    fix_t *f = *state;
    close (s_fast_session (f));
    mock_vm_t *vm = f->vms [0];
    char err [256] = "";
    assert_int_equal (s_put (f, 0, "../etc/passwd", false, "x", err), 0);
    ch_msg_t *req = s_init_expect (f, vm, "put_request", false);
    assert_false (json_is_true (json_object_get (ch_msg_content (req), "append")));
    s_init_send (vm, req, "put_reply", json_pack ("{s:s, s:s, s:s}", "status", "error",
                 "ename", "PathOutsideWorkspace", "evalue", "../etc/passwd is outside"),
                 NULL, 0);
    WAIT_FOR (f, 2000, f->done [0].calls == 1);
    assert_int_equal (f->done [0].rc, -EPERM);
    assert_null (f->done [0].reply);
    assert_string_equal (f->done [0].err, "PathOutsideWorkspace: ../etc/passwd is outside");
    ch_msg_destroy (&req);
}

static void
test_get_chunk_round_trip (void **state)
{
    fix_t *f = *state;
    close (s_fast_session (f));
    mock_vm_t *vm = f->vms [0];
    char err [256] = "";
    assert_int_equal (s_get (f, 1, "out/plot.png", 4096, 100, err), 0);
    ch_msg_t *req = s_init_expect (f, vm, "get_request", false);
    json_t *c = ch_msg_content (req);
    assert_string_equal (s_str (c, "path"), "out/plot.png");
    assert_int_equal (s_int (c, "offset"), 4096);
    assert_int_equal (s_int (c, "length"), 100);
    assert_int_equal (ch_msg_nbuffers (req), 0);
    s_init_send (vm, req, "get_reply", json_pack ("{s:s, s:s, s:i, s:i, s:i, s:b}", "status",
                 "ok", "path", "/workspace/out/plot.png", "size", 4101, "offset", 4096,
                 "length", 5, "eof", 1), "\x89PNG!", 5);
    WAIT_FOR (f, 2000, f->done [1].calls == 1);
    done_t *d = &f->done [1];
    assert_int_equal (d->rc, 0);
    assert_int_equal (d->len, 5);
    assert_memory_equal (d->data, "\x89PNG!", 5);
    assert_int_equal (s_int (d->reply, "size"), 4101);
    assert_true (json_is_true (json_object_get (d->reply, "eof")));
    assert_int_equal (f->done [0].calls, 0);
    ch_msg_destroy (&req);
}

//  Replies are matched by msg_id, whatever their order.
static void
test_chunk_replies_are_matched_by_id (void **state)
{
    fix_t *f = *state;
    close (s_fast_session (f));
    mock_vm_t *vm = f->vms [0];
    char err [256] = "";
    assert_int_equal (s_get (f, 0, "a", 0, 10, err), 0);
    assert_int_equal (s_get (f, 1, "b", 0, 10, err), 0);
    ch_msg_t *ra = s_init_expect (f, vm, "get_request", false);
    ch_msg_t *rb = s_init_expect (f, vm, "get_request", false);
    s_init_send (vm, rb, "get_reply", json_pack ("{s:s, s:i}", "status", "ok", "size", 1),
                 "B", 1);
    s_init_send (vm, ra, "get_reply", json_pack ("{s:s, s:i}", "status", "ok", "size", 1),
                 "A", 1);
    WAIT_FOR (f, 2000, f->done [0].calls == 1 && f->done [1].calls == 1);
    assert_memory_equal (f->done [0].data, "A", 1);
    assert_memory_equal (f->done [1].data, "B", 1);
    ch_msg_destroy (&ra);
    ch_msg_destroy (&rb);
}

static void
test_a_chunk_without_reply_times_out (void **state)
{
    fix_t *f = *state;
    close (s_fast_session (f));
    mock_vm_t *vm = f->vms [0];
    char err [256] = "";
    int64_t t0 = zclock_mono ();
    assert_int_equal (s_get (f, 0, "slow", 0, 10, err), 0);
    ch_msg_t *req = s_init_expect (f, vm, "get_request", false);
    WAIT_FOR (f, 3000, f->done [0].calls == 1);
    assert_true (zclock_mono () - t0 >= CHUNK_MS);
    assert_int_equal (f->done [0].rc, -ETIMEDOUT);
    assert_string_equal (f->done [0].err, "the VM's init did not answer within 0.3 s");
    //  A late reply is one nobody waits for.
    s_init_send (vm, req, "get_reply", json_pack ("{s:s}", "status", "ok"), "late", 4);
    s_pump (f, 100);
    assert_int_equal (f->done [0].calls, 1);
    ch_msg_destroy (&req);
}

static void
test_init_port_closing_fails_chunks_with_epipe (void **state)
{
    fix_t *f = *state;
    close (s_fast_session (f));
    mock_vm_t *vm = f->vms [0];
    char err [256] = "";
    assert_int_equal (s_put (f, 0, "x", false, "data", err), 0);
    ch_msg_t *req = s_init_expect (f, vm, "put_request", false);
    close (vm->port [INIT][1]);
    vm->port [INIT][1] = -1;
    WAIT_FOR (f, 2000, f->done [0].calls == 1);
    assert_int_equal (f->done [0].rc, -EPIPE);
    assert_string_equal (f->done [0].err, "the VM's init stopped answering");
    //  No port, no chunks: refused in the call.
    assert_int_equal (s_put (f, 1, "y", false, "data", err), -ENOTCONN);
    assert_string_equal (err, "the session has no running VM");
    s_pump (f, 50);
    assert_int_equal (f->done [1].calls, 0);
    ch_msg_destroy (&req);
}

//  A port that is gone before the backend noticed: the chunk is refused
//  in the call (its done used to run inside put_chunk).
static void
test_a_chunk_to_a_dead_port_is_refused_in_the_call (void **state)
{
    fix_t *f = *state;
    close (s_fast_session (f));
    mock_vm_t *vm = f->vms [0];
    char err [256] = "";
    close (vm->port [INIT][1]);
    vm->port [INIT][1] = -1;
    assert_int_equal (s_put (f, 0, "x", false, "data", err), -EPIPE);
    assert_string_equal (err, "the VM's init is not reading its port");
    s_pump (f, 50);
    assert_int_equal (f->done [0].calls, 0);
}

static void
test_cancel_chunks_means_no_done (void **state)
{
    fix_t *f = *state;
    close (s_fast_session (f));
    mock_vm_t *vm = f->vms [0];
    char err [256] = "";
    assert_int_equal (s_put (f, 0, "p", false, "data", err), 0);
    assert_int_equal (s_get (f, 1, "g", 0, 10, err), 0);
    ch_msg_t *rp = s_init_expect (f, vm, "put_request", false);
    ch_msg_t *rg = s_init_expect (f, vm, "get_request", false);
    gw_backend_cancel_chunks (f->be);
    s_init_send (vm, rp, "put_reply", json_pack ("{s:s}", "status", "ok"), NULL, 0);
    s_init_send (vm, rg, "get_reply", json_pack ("{s:s}", "status", "ok"), "g", 1);
    int64_t end = zclock_mono () + 2 * CHUNK_MS;   //  past any deadline too
    while (zclock_mono () < end)
        s_pump (f, 20);
    assert_int_equal (f->done [0].calls + f->done [1].calls, 0);
    ch_msg_destroy (&rp);
    ch_msg_destroy (&rg);
}

static void
test_destroy_with_a_chunk_in_flight_calls_no_done (void **state)
{
    fix_t *f = *state;
    close (s_fast_session (f));
    char err [256] = "";
    assert_int_equal (s_put (f, 0, "p", false, "data", err), 0);
    assert_int_equal (s_get (f, 1, "g", 0, 10, err), 0);
    gw_backend_destroy (&f->be);
    assert_true (f->vms [0]->destroyed);
    assert_int_equal (f->done [0].calls + f->done [1].calls, 0);
}

//  ==========================================================================
//  Deaths, kills, restarts.

static json_t *
s_exited (const char *reason, int code, json_t *exit_code, const char *sig, bool oom,
          bool requested, const char *description)
{
    return json_pack ("{s:i, s:s, s:i, s:o, s:s?, s:b, s:b, s:s}", "pid", 102, "reason", reason,
                      "code", code, "exit_code", exit_code, "signal", sig, "oom_killed", oom,
                      "requested", requested, "description", description);
}

static void
test_kernel_exited_makes_on_event_say_so_and_reap_tell_it (void **state)
{
    fix_t *f = *state;
    close (s_fast_session (f));
    mock_vm_t *vm = f->vms [0];
    gw_exit_t ex;
    assert_int_equal (gw_backend_reap (f->be, &ex), -EAGAIN);
    const char *words = "The kernel died from signal SIGSEGV (Segmentation fault).";
    s_init_send (vm, NULL, "kernel_exited",
                 s_exited ("signaled", 139, json_null (), "SIGSEGV", false, false, words),
                 NULL, 0);
    WAIT_FOR (f, 2000, f->died);
    memset (&ex, 0x55, sizeof ex);
    assert_int_equal (gw_backend_reap (f->be, &ex), 0);
    assert_int_equal (ex.signal, SIGSEGV);
    assert_int_equal (ex.exit_code, -1);
    assert_false (ex.oom_killed);
    assert_false (ex.vm_died);
    assert_string_equal (ex.detail, words);
    assert_int_equal (gw_backend_reap (f->be, &ex), -EAGAIN);   //  reported once; VM runs
    assert_int_equal (vm->kills, 0);
}

static void
test_an_oom_kill_and_an_exit_are_told_apart (void **state)
{
    fix_t *f = *state;
    close (s_fast_session (f));
    mock_vm_t *vm = f->vms [0];
    char err [256] = "";
    gw_exit_t ex;
    int fd = -1;
    s_init_send (vm, NULL, "kernel_exited", s_exited ("oom_killed", 137, json_null (),
                 "SIGKILL", true, false, "The kernel was killed for exceeding memory."), NULL, 0);
    WAIT_FOR (f, 2000, f->died);
    assert_int_equal (gw_backend_reap (f->be, &ex), 0);
    assert_true (ex.oom_killed);
    assert_int_equal (ex.signal, SIGKILL);
    f->died = 0;
    assert_int_equal (gw_backend_start (f->be, &fd, err, sizeof err), 0);
    close (fd);
    s_init_send (vm, NULL, "kernel_exited", s_exited ("exited", 3, json_integer (3), NULL,
                 false, false, "The kernel exited with status 3."), NULL, 0);
    WAIT_FOR (f, 2000, f->died);
    assert_int_equal (gw_backend_reap (f->be, &ex), 0);
    assert_int_equal (ex.exit_code, 3);
    assert_int_equal (ex.signal, 0);
    assert_false (ex.oom_killed);
}

//  The stop a restart_request asked for reports the kernel already given
//  up on: never the kernel that replaces it.
static void
test_a_requested_kernel_exit_is_ignored (void **state)
{
    fix_t *f = *state;
    close (s_fast_session (f));
    mock_vm_t *vm = f->vms [0];
    s_init_send (vm, NULL, "kernel_exited", s_exited ("requested", 137, json_null (),
                 "SIGKILL", false, true, "The kernel was stopped as requested."), NULL, 0);
    int64_t end = zclock_mono () + 300;
    while (zclock_mono () < end)
        s_pump (f, 20);
    assert_int_equal (f->died, 0);
    gw_exit_t ex;
    assert_int_equal (gw_backend_reap (f->be, &ex), -EAGAIN);
}

static void
test_the_vm_dying_is_reaped_as_vm_died (void **state)
{
    fix_t *f = *state;
    close (s_fast_session (f));
    mock_vm_t *vm = f->vms [0];
    char err [256] = "";
    assert_int_equal (s_get (f, 0, "g", 0, 10, err), 0);
    vm->dead = true;
    vm->wstatus = 1 << 8;                       //  QEMU exited with status 1
    gw_exit_t ex;
    assert_int_equal (gw_backend_reap (f->be, &ex), 0);
    assert_true (ex.vm_died);
    assert_int_equal (ex.exit_code, 1);
    assert_int_equal (ex.signal, 0);
    assert_non_null (strstr (ex.detail, "virtual machine itself stopped (QEMU exited with "
                                        "status 1)"));
    assert_true (vm->destroyed);
    assert_int_equal (f->done [0].calls, 1);     //  the chunk went with it
    assert_int_equal (f->done [0].rc, -EPIPE);
    assert_int_equal (gw_backend_pid (f->be), 0);
    assert_int_equal (gw_backend_reap (f->be, &ex), -ECHILD);
    //  The next start brings a new VM.
    int fd = -2;
    assert_int_equal (gw_backend_connect (f->be, &fd, err, sizeof err), -ECHILD);
    assert_int_equal (gw_backend_start (f->be, &fd, err, sizeof err), 0);
    assert_int_equal (s_connect (f, &fd, 5000), 0);
    assert_int_equal (f->nvms, 2);
    s_kernel_talks (fd, f->vms [1]);
    close (fd);
}

static void
test_kill_sends_init_a_kill_request (void **state)
{
    fix_t *f = *state;
    close (s_fast_session (f));
    mock_vm_t *vm = f->vms [0];
    assert_int_equal (gw_backend_kill (f->be), 0);
    ch_msg_t *req = s_init_expect (f, vm, "kill_request", false);
    assert_string_equal (s_str (ch_msg_content (req), "signal"), "SIGKILL");
    assert_int_equal (vm->kills, 0);            //  the VM and /workspace stay
    s_init_send (vm, req, "kill_reply", json_pack ("{s:s}", "status", "ok"), NULL, 0);
    s_init_send (vm, NULL, "kernel_exited", s_exited ("signaled", 137, json_null (),
                 "SIGKILL", false, false, "The kernel was killed by SIGKILL."), NULL, 0);
    WAIT_FOR (f, 2000, f->died);
    gw_exit_t ex;
    assert_int_equal (gw_backend_reap (f->be, &ex), 0);
    assert_int_equal (ex.signal, SIGKILL);
    ch_msg_destroy (&req);
}

//  Before init answered its hello, only QEMU itself can be killed.
static void
test_kill_before_init_answers_kills_the_vm (void **state)
{
    fix_t *f = *state;
    f->fast_rc = -ENOENT;
    s_make (f);
    int fd = -2;
    char err [256] = "";
    assert_int_equal (gw_backend_start (f->be, &fd, err, sizeof err), 0);
    assert_int_equal (s_connect (f, &fd, 5000), 0);
    close (fd);
    mock_vm_t *vm = f->vms [0];
    assert_int_equal (gw_backend_kill (f->be), 0);
    assert_int_equal (vm->kills, 1);
    gw_exit_t ex;
    assert_int_equal (gw_backend_reap (f->be, &ex), 0);
    assert_true (ex.vm_died);
    assert_int_equal (ex.signal, SIGKILL);
    assert_true (vm->destroyed);
}

static void
test_a_second_start_sends_restart_request (void **state)
{
    fix_t *f = *state;
    close (s_fast_session (f));
    mock_vm_t *vm = f->vms [0];
    s_init_send (vm, NULL, "kernel_exited", s_exited ("exited", 0, json_integer (0), NULL,
                 false, false, "The kernel exited with status 0."), NULL, 0);
    WAIT_FOR (f, 2000, f->died);
    gw_exit_t ex;
    assert_int_equal (gw_backend_reap (f->be, &ex), 0);
    int fd = -2;
    char err [256] = "";
    assert_int_equal (gw_backend_start (f->be, &fd, err, sizeof err), 0);
    assert_true (fd >= 0);                      //  the same port, at once
    ch_msg_t *req = s_init_expect (f, vm, "restart_request", false);
    assert_int_equal (json_object_size (ch_msg_content (req)), 0);
    assert_int_equal (f->fast_calls, 1);
    assert_int_equal (f->nvms, 1);
    s_kernel_talks (fd, vm);
    close (fd);
    assert_int_equal (gw_backend_reap (f->be, &ex), -EAGAIN);
    ch_msg_destroy (&req);
}

//  A restart with init's port gone replaces the VM.
static void
test_a_restart_without_init_replaces_the_vm (void **state)
{
    fix_t *f = *state;
    close (s_fast_session (f));
    mock_vm_t *vm = f->vms [0];
    close (vm->port [INIT][1]);
    vm->port [INIT][1] = -1;
    s_pump (f, 100);                            //  the backend sees the port close
    int fd = -2;
    char err [256] = "";
    assert_int_equal (gw_backend_start (f->be, &fd, err, sizeof err), -EIO);
    assert_string_equal (err, "the VM's init does not answer; it will be replaced");
    assert_true (vm->destroyed);
    assert_int_equal (gw_backend_start (f->be, &fd, err, sizeof err), 0);
    assert_int_equal (s_connect (f, &fd, 5000), 0);
    assert_int_equal (f->nvms, 2);
    close (fd);
}

int
main (void)
{
    signal (SIGPIPE, SIG_IGN);                  //  as the gateway does
    gw_log_init (getenv ("TEST_LOG") ? GW_LOG_DEBUG : GW_LOG_ERROR, NULL);
#define T(name) cmocka_unit_test_setup_teardown (name, s_setup, s_teardown)
    const struct CMUnitTest tests [] = {
        T (test_fast_start_gives_a_working_kernel_fd),
        T (test_failed_fast_start_cold_boots_and_says_hello_until_answered),
        T (test_a_cold_boot_that_fails_is_an_error),
        T (test_a_start_killed_in_flight_can_be_started_again),
        T (test_a_start_killed_in_flight_is_reaped_with_its_vm),
        T (test_put_chunk_round_trip),
        T (test_put_chunk_refused_by_init_says_why),
        T (test_get_chunk_round_trip),
        T (test_chunk_replies_are_matched_by_id),
        T (test_a_chunk_without_reply_times_out),
        T (test_init_port_closing_fails_chunks_with_epipe),
        T (test_a_chunk_to_a_dead_port_is_refused_in_the_call),
        T (test_cancel_chunks_means_no_done),
        T (test_destroy_with_a_chunk_in_flight_calls_no_done),
        T (test_kernel_exited_makes_on_event_say_so_and_reap_tell_it),
        T (test_an_oom_kill_and_an_exit_are_told_apart),
        T (test_a_requested_kernel_exit_is_ignored),
        T (test_the_vm_dying_is_reaped_as_vm_died),
        T (test_kill_sends_init_a_kill_request),
        T (test_kill_before_init_answers_kills_the_vm),
        T (test_a_second_start_sends_restart_request),
        T (test_a_restart_without_init_replaces_the_vm),
    };
#undef T
    return cmocka_run_group_tests (tests, NULL, NULL);
}
