/*  gw_drive - a blocking driver for a VM's init port and kernel channel
    (see gw_drive.h).
*/
#include "guest/gw_drive.h"
#include "wire/gw_chan.h"
#include "base/gw_patience.h"
#include "ch_frame.h"
#include "ch_hello.h"
#include "ch_clock.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_HELLO_REPEAT_MS 250       //  init's hello, again, until answered
#define S_SESSION "template"        //  the session id of our requests

struct _gw_drive_t {
    gw_vm_t *vm;                    //  borrowed; NULL when the ports were adopted
    gw_init_t *init;                //  init's port, NULL until connected
    bool init_gone;                 //  its port closed: no longer watched
    int kernel_fd;                  //  the kernel's port, -1 until connected
    gw_chan_t *chan;                //  on a dup of kernel_fd
    gw_patience_t *patience;        //  the deadline (QEMU's progress, not the wall)
    char died [200];                //  init's words, when the kernel died
};

//  One message a wait is for.
typedef struct {
    const char *type;               //  this msg_type ...
    const char *parent_id;          //  ... answering this msg_id (NULL: any)
    const char *state;              //  ... with this execution_state (NULL: any)
    json_t *got;                    //  its content once seen (owned)
} s_want_t;

typedef struct {
    s_want_t *want;
    size_t n;
} s_wants_t;

gw_drive_t *
gw_drive_new (gw_vm_t *vm, int timeout_ms)
{
    gw_drive_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->vm = vm;
    self->kernel_fd = -1;
    gw_drive_set_timeout (self, timeout_ms);
    return self;
}

//  Own fd as the kernel's port; the channel reads a dup of it.
static int
s_attach_kernel (gw_drive_t *self, int fd, bool hunt)
{
    self->kernel_fd = fd;
    int dup_fd = fcntl (fd, F_DUPFD_CLOEXEC, 3);
    if (dup_fd < 0)
        return -errno;
    self->chan = gw_chan_new (dup_fd, CH_FRAME_MAX_DEFAULT, CH_FRAME_MAX_DEFAULT, 0);
    if (hunt)                                   //  after a boot or a restore
        gw_chan_hunt (self->chan);
    return 0;
}

gw_drive_t *
gw_drive_adopt (gw_init_t **init_p, int kernel_fd, int timeout_ms)
{
    gw_drive_t *self = gw_drive_new (NULL, timeout_ms);
    if (init_p) {
        self->init = *init_p;
        *init_p = NULL;
    }
    if (kernel_fd >= 0)
        s_attach_kernel (self, kernel_fd, false);   //  a failed dup is retried on use
    return self;
}

void
gw_drive_destroy (gw_drive_t **self_p)
{
    assert (self_p);
    gw_drive_t *self = *self_p;
    if (!self)
        return;
    gw_chan_destroy (&self->chan);
    gw_init_destroy (&self->init);
    gw_patience_destroy (&self->patience);
    if (self->kernel_fd >= 0)
        close (self->kernel_fd);
    free (self);
    *self_p = NULL;
}

void
gw_drive_set_timeout (gw_drive_t *self, int timeout_ms)
{
    assert (self);
    if (!self->patience)                        //  the deadline measures the guest's progress
        self->patience = gw_patience_new (self->vm ? gw_vm_pid (self->vm) : 0, timeout_ms);
    else
        gw_patience_reset (self->patience, timeout_ms);
}

static int
s_left_ms (gw_drive_t *self)
{
    return gw_patience_left_ms (self->patience);
}

gw_init_t *
gw_drive_take_init (gw_drive_t *self)
{
    assert (self);
    gw_init_t *init = self->init;
    self->init = NULL;
    self->init_gone = false;
    return init;
}

int
gw_drive_take_kernel_fd (gw_drive_t *self)
{
    assert (self);
    gw_chan_destroy (&self->chan);
    int fd = self->kernel_fd;
    self->kernel_fd = -1;
    return fd;
}

//  Connect vm's port name: 0 and *fd_p, or -errno + err.
static int
s_port (gw_drive_t *self, const char *name, int *fd_p, char *err, size_t errlen)
{
    int rc = self->vm ? gw_vm_wait_port (self->vm, name, s_left_ms (self), fd_p) : -ENOTCONN;
    if (rc < 0)
        snprintf (err, errlen, "%s port: %s", name, strerror (-rc));
    return rc;
}

//  ==========================================================================
//  Init.

//  One hello and up to S_HELLO_REPEAT_MS for its answer.
static int
s_init_hello_once (gw_drive_t *self, const json_t *extra, const uint8_t *buf, size_t len,
                   ch_msg_t **reply_p)
{
    json_t *c = ch_hello_driver (CH_PROTO_INIT, "cellvm-gateway", 0);
    if (extra)
        json_object_update (c, (json_t *) extra);
    int left = s_left_ms (self);
    int wait = left < S_HELLO_REPEAT_MS ? left : S_HELLO_REPEAT_MS;
    return gw_init_call (self->init, "hello", &c, buf, len, wait, reply_p);
}

int
gw_drive_init_hello (gw_drive_t *self, const json_t *extra, const uint8_t *buf, size_t len,
                     json_t **reply_p, char *err, size_t errlen)
{
    assert (self);
    int fd = -1, rc = self->init ? 0 : s_port (self, "init", &fd, err, errlen);
    if (rc < 0)
        return rc;
    if (!self->init)
        self->init = gw_init_new (fd, CH_FRAME_MAX_DEFAULT);
    ch_msg_t *reply = NULL;
    do
        rc = s_init_hello_once (self, extra, buf, len, &reply);
    while (rc == -ETIMEDOUT && s_left_ms (self) > 0);
    char why [128] = "";
    if (rc == 0 && ch_hello_check (ch_msg_content (reply), CH_PROTO_INIT, "init", why,
                                   sizeof why) < 0)
        rc = -EPROTO;
    if (rc == 0 && reply_p)
        *reply_p = json_deep_copy (ch_msg_content (reply));
    if (rc < 0)
        snprintf (err, errlen, "no hello from init (%s)", why [0] ? why : strerror (-rc));
    ch_msg_destroy (&reply);
    return rc;
}

int
gw_drive_init_request (gw_drive_t *self, const char *msg_type, json_t *content,
                       json_t **reply_p, char *err, size_t errlen)
{
    assert (self && msg_type);
    ch_msg_t *reply = NULL;
    json_t *c = content ? json_incref (content) : json_object ();
    char id [37];
    int rc = self->init ? gw_init_send (self->init, msg_type, &c, NULL, 0, id) : -ENOTCONN;
    if (rc == 0)
        do                                      //  in steps while the guest is short of CPU
            rc = gw_init_wait_reply (self->init, id, s_left_ms (self), &reply);
        while (rc == -ETIMEDOUT && s_left_ms (self) > 0);
    json_decref (c);
    json_t *rc_content = reply ? ch_msg_content (reply) : NULL;
    const char *status = json_string_value (json_object_get (rc_content, "status"));
    if (rc == 0 && (!status || strcmp (status, "ok") != 0)) {
        snprintf (err, errlen, "%s: %s", json_string_value (json_object_get (rc_content, "ename"))
                  ?: "Error", json_string_value (json_object_get (rc_content, "evalue")) ?: "?");
        rc = -EIO;
    }
    else if (rc < 0)
        snprintf (err, errlen, "init did not answer %s: %s", msg_type, strerror (-rc));
    if (rc == 0 && reply_p)
        *reply_p = json_incref (rc_content);
    ch_msg_destroy (&reply);
    return rc;
}

//  Init's notices meanwhile: true when the kernel died (self->died says how).
static bool
s_kernel_died (gw_drive_t *self)
{
    ch_msg_t *msg = NULL;
    bool died = false;
    int rc = 0;
    while (!died && (rc = gw_init_pump (self->init, &msg)) == 0) {
        if (strcmp (ch_msg_type (msg), "kernel_exited") == 0) {
            snprintf (self->died, sizeof self->died, "%s", json_string_value (json_object_get (
                      ch_msg_content (msg), "description")) ?: "the kernel exited");
            died = true;
        }
        ch_msg_destroy (&msg);
    }
    self->init_gone = rc == -EPIPE || rc == -EPROTO;    //  polling it now would spin
    return died;
}

//  ==========================================================================
//  The kernel.

static bool
s_matches (const s_want_t *w, ch_msg_t *msg)
{
    const char *pid = ch_msg_parent_id (msg);
    const char *state = json_string_value (json_object_get (ch_msg_content (msg),
                                                            "execution_state"));
    return strcmp (ch_msg_type (msg), w->type) == 0
        && (!w->parent_id || (*pid && strcmp (pid, w->parent_id) == 0))
        && (!w->state || (state && strcmp (state, w->state) == 0));
}

//  Never stops the read: what else came in the same read() must not be lost.
static int
s_on_msg (void *arg, ch_msg_t **msg_p)
{
    s_wants_t *ws = arg;
    for (size_t i = 0; i < ws->n; i++)
        if (!ws->want [i].got && s_matches (&ws->want [i], *msg_p)) {
            ws->want [i].got = json_incref (ch_msg_content (*msg_p));
            break;
        }
    ch_msg_destroy (msg_p);
    return 0;
}

static bool
s_all_got (const s_wants_t *ws)
{
    for (size_t i = 0; i < ws->n; i++)
        if (!ws->want [i].got)
            return false;
    return true;
}

//  Read the channel until every want is met. 0, -ETIMEDOUT, -ECONNRESET
//  (the kernel died: self->died), or the channel's error.
static int
s_wait (gw_drive_t *self, s_want_t *want, size_t n)
{
    s_wants_t ws = { want, n };
    while (!s_all_got (&ws)) {
        struct pollfd p [2] = { { gw_chan_fd (self->chan), POLLIN, 0 },
                                { self->init && !self->init_gone ? gw_init_fd (self->init)
                                                                 : -1, POLLIN, 0 } };
        if (gw_chan_flush (self->chan) < 0)
            return -EPIPE;
        if (gw_chan_wants_write (self->chan))
            p [0].events |= POLLOUT;
        int left = s_left_ms (self);         //  past the deadline, this reads /proc: once
        if (left <= 0)
            return -ETIMEDOUT;
        poll (p, 2, left);
        if (p [1].revents && s_kernel_died (self))
            return -ECONNRESET;
        const char *why = NULL;
        int rc = gw_chan_read (self->chan, s_on_msg, &ws, &why);
        if (rc < 0)
            return rc;
    }
    return 0;
}

//  Send a request on shell (takes *content_p); its msg_id into id.
static int
s_request (gw_drive_t *self, const char *type, json_t **content_p, char id [64])
{
    ch_msg_t *req = ch_msg_new (CH_SHELL, type, NULL, content_p, S_SESSION);
    snprintf (id, 64, "%s", ch_msg_id (req));
    int rc = gw_chan_send (self->chan, req);
    ch_msg_destroy (&req);
    return rc;
}

//  The kernel's channel, made when it is not yet (connecting the port,
//  unless one was adopted).
static int
s_kernel (gw_drive_t *self, char *err, size_t errlen)
{
    int fd = self->kernel_fd, rc = 0;
    bool hunt = fd < 0;                         //  connected now: after a boot or a restore
    if (!self->chan && fd < 0)
        rc = s_port (self, "kernel", &fd, err, errlen);
    if (!self->chan && rc == 0 && (rc = s_attach_kernel (self, fd, hunt)) < 0)
        snprintf (err, errlen, "kernel port: %s", strerror (-rc));
    return rc;
}

static void
s_release (s_want_t *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        json_decref (want [i].got);
}

int
gw_drive_kernel_hello (gw_drive_t *self, const char *entropy_b64, char *err, size_t errlen)
{
    assert (self);
    int rc = s_kernel (self, err, errlen);
    if (rc < 0)
        return rc;
    json_t *c = ch_hello_driver (CH_PROTO_CHANNEL, "cellvm-gateway", 1);
    if (entropy_b64)
        json_object_set_new (c, "entropy", json_string (entropy_b64));
    ch_msg_t *hello = ch_msg_new (CH_CELLVM, "hello", NULL, &c, S_SESSION);
    rc = gw_chan_send (self->chan, hello);
    ch_msg_destroy (&hello);
    s_want_t want = { .type = "hello" };
    if (rc == 0)
        rc = s_wait (self, &want, 1);
    char why [128] = "";
    if (rc == 0 && ch_hello_check (want.got, CH_PROTO_CHANNEL, "kernel", why, sizeof why) < 0)
        rc = -EPROTO;
    if (rc < 0)
        snprintf (err, errlen, "no hello from the kernel (%s)", why [0] ? why
                  : rc == -ECONNRESET ? self->died : strerror (-rc));
    s_release (&want, 1);
    return rc;
}

int
gw_drive_kernel_info (gw_drive_t *self, char *err, size_t errlen)
{
    assert (self);
    char id [64];
    json_t *c = json_object ();
    int rc = s_kernel (self, err, errlen);
    if (rc == 0)
        rc = s_request (self, "kernel_info_request", &c, id);
    json_decref (c);                            //  NULL once sent
    s_want_t idle = { .type = "status", .parent_id = id, .state = "idle" };
    if (rc == 0 && (rc = s_wait (self, &idle, 1)) < 0)
        snprintf (err, errlen, "kernel_info: %s", rc == -ECONNRESET ? self->died
                  : strerror (-rc));
    s_release (&idle, 1);
    return rc;
}

//  Why a finished silent cell failed, into err: -EIO, or 0 when it did not.
static int
s_cell_status (const json_t *reply, char *err, size_t errlen)
{
    const char *st = json_string_value (json_object_get (reply, "status"));
    if (st && strcmp (st, "ok") == 0)
        return 0;
    snprintf (err, errlen, "warm-up cell failed: %s: %s", st ? st : "?",
              json_string_value (json_object_get (reply, "evalue")) ?: "");
    return -EIO;
}

int
gw_drive_silent_cell (gw_drive_t *self, const char *code, char *err, size_t errlen)
{
    assert (self && code);
    char id [64];
    json_t *c = json_pack ("{s:s, s:b, s:b, s:{}, s:b, s:b}", "code", code, "silent", 1,
                           "store_history", 0, "user_expressions", "allow_stdin", 0,
                           "stop_on_error", 1);
    int rc = s_kernel (self, err, errlen);
    if (rc == 0)
        rc = s_request (self, "execute_request", &c, id);
    json_decref (c);
    s_want_t want [2] = { { .type = "execute_reply", .parent_id = id },
                          { .type = "status", .parent_id = id, .state = "idle" } };
    if (rc == 0 && (rc = s_wait (self, want, 2)) < 0)
        snprintf (err, errlen, "warm-up cell: %s%s", rc == -ECONNRESET ? "the kernel died: "
                  : "", rc == -ECONNRESET ? self->died : strerror (-rc));
    if (rc == 0)
        rc = s_cell_status (want [0].got, err, errlen);
    s_release (want, 2);
    return rc;
}
