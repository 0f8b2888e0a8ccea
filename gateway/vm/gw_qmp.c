/*  gw_qmp - a small QEMU Machine Protocol client.

    One receive buffer of max_line bytes: a message is complete at its
    newline; a buffer full of bytes without one is a protocol error, so QEMU
    (or whatever sits on the socket) cannot make us allocate without bound.
    Lines are taken from an offset into the buffer, which moves what is left
    to its start only before a read: moving it after every line would cost a
    buffer of short lines the square of its size.
*/
#include "vm/gw_qmp.h"
#include "base/gw_log.h"
#include "ch_clock.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define S_POLL_MAX 256              //  messages one gw_qmp_poll handles past its deadline

struct _gw_qmp_t {
    int fd;                                     //  the QMP socket, owned
    size_t max_line;                            //  bytes in one message, newline included
    char *buf;                                  //  received bytes, max_line long
    size_t len;                                 //  bytes in buf
    size_t off;                                 //  of which read already (lines taken)
    json_int_t next_id;                         //  id of the last command sent
    int broken;                                 //  0, or -EPIPE/-EPROTO once unusable
    const char *why;                            //  what broke it (static string)
    gw_qmp_event_fn *event_fn;                  //  events go here, or are dropped
    void *event_arg;
};

//  Milliseconds left until deadline, for poll (0 once it has passed).
static int
s_left_ms (int64_t deadline)
{
    int64_t left = deadline - ch_clock_mono_ms ();
    return left <= 0 ? 0 : left > 3600000 ? 3600000 : (int) left;
}

gw_qmp_t *
gw_qmp_new (int fd, size_t max_line)
{
    assert (fd >= 0);
    gw_qmp_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->fd = fd;
    self->max_line = max_line ? max_line : GW_QMP_MAX_LINE_DEFAULT;
    self->buf = malloc (self->max_line);
    if (!self->buf)
        abort ();
    int flags = fcntl (fd, F_GETFL);
    if (flags >= 0)
        fcntl (fd, F_SETFL, flags | O_NONBLOCK);
    return self;
}

void
gw_qmp_destroy (gw_qmp_t **self_p)
{
    assert (self_p);
    gw_qmp_t *self = *self_p;
    if (!self)
        return;
    close (self->fd);
    free (self->buf);
    free (self);
    *self_p = NULL;
}

void
gw_qmp_set_event_fn (gw_qmp_t *self, gw_qmp_event_fn *fn, void *arg)
{
    assert (self);
    self->event_fn = fn;
    self->event_arg = arg;
}

//  The connection cannot be used any more: remember why.
static int
s_break (gw_qmp_t *self, int rc, const char *why)
{
    self->broken = rc;
    self->why = why;
    return rc;
}

//  --------------------------------------------------------------------------
//  Receiving.

//  One read into the buffer, waiting until deadline for data; what was not
//  read yet goes to the buffer's start first.
static int
s_fill (gw_qmp_t *self, int64_t deadline)
{
    memmove (self->buf, self->buf + self->off, self->len - self->off);
    self->len -= self->off;
    self->off = 0;
    struct pollfd pfd = { .fd = self->fd, .events = POLLIN };
    int n = poll (&pfd, 1, s_left_ms (deadline));
    if (n < 0)
        return errno == EINTR ? 0 : -errno;
    if (n == 0)
        return -ETIMEDOUT;
    ssize_t got = read (self->fd, self->buf + self->len, self->max_line - self->len);
    if (got < 0)
        return errno == EINTR || errno == EAGAIN ? 0
             : s_break (self, -EPIPE, "read failed");
    if (got == 0)
        return s_break (self, -EPIPE, "QEMU closed the connection");
    self->len += (size_t) got;
    return 0;
}

//  Next complete message as a JSON object (caller owns), waiting until
//  deadline. Blank lines are skipped.
static int
s_next_msg (gw_qmp_t *self, int64_t deadline, json_t **msg_p)
{
    while (true) {
        char *line = self->buf + self->off;
        char *nl = memchr (line, '\n', self->len - self->off);
        if (nl) {
            size_t n = (size_t) (nl - line);
            self->off += n + 1;
            if (n > 0 && line [n - 1] == '\r')
                n--;
            json_t *msg = n ? json_loadb (line, n, 0, NULL) : NULL;
            if (n == 0 && ch_clock_mono_ms () >= deadline)
                return -ETIMEDOUT;              //  a flood of blank lines ends too
            if (n == 0)
                continue;
            if (!json_is_object (msg)) {
                json_decref (msg);
                return s_break (self, -EPROTO, "a QMP line is not a JSON object");
            }
            *msg_p = msg;
            return 0;
        }
        if (self->off == 0 && self->len == self->max_line)
            return s_break (self, -EPROTO, "a QMP line is over the length limit");
        int rc = s_fill (self, deadline);
        if (rc < 0)
            return rc;
    }
}

//  Route one message: events to the callback, the reply with id to
//  *reply_p (returns 1), stale replies dropped (0), anything else -EPROTO.
static int
s_route (gw_qmp_t *self, json_t *msg, json_int_t id, json_t **reply_p)
{
    json_t *event = json_object_get (msg, "event");
    if (json_is_string (event)) {
        if (self->event_fn)
            self->event_fn (self->event_arg, json_string_value (event),
                            json_object_get (msg, "data"));
        json_decref (msg);
        return 0;
    }
    if (!json_object_get (msg, "return") && !json_is_object (json_object_get (msg, "error"))) {
        json_decref (msg);
        return s_break (self, -EPROTO, "a QMP message is neither event nor reply");
    }
    json_t *got = json_object_get (msg, "id");
    if (id > 0 && json_is_integer (got) && json_integer_value (got) == id) {
        *reply_p = msg;
        return 1;
    }
    //  The answer to a command that timed out earlier.
    gw_log (GW_LOG_DEBUG, "qmp.stale_reply", "id=%" JSON_INTEGER_FORMAT,
            json_is_integer (got) ? json_integer_value (got) : (json_int_t) -1);
    json_decref (msg);
    return 0;
}

//  Read until the reply to id arrives (id 0: until deadline, events only).
//  A peer that never stops sending (events, replies to nothing) cannot hold
//  us past the deadline: once it has passed, a wait for a reply ends, and a
//  poll after S_POLL_MAX more messages.
static int
s_wait_reply (gw_qmp_t *self, json_int_t id, int64_t deadline, json_t **reply_p)
{
    for (int handled = 0; ; handled++) {
        if (handled > 0 && ch_clock_mono_ms () >= deadline && (id > 0 || handled >= S_POLL_MAX))
            return -ETIMEDOUT;
        json_t *msg = NULL;
        int rc = s_next_msg (self, deadline, &msg);
        if (rc < 0)
            return rc;
        rc = s_route (self, msg, id, reply_p);
        if (rc != 0)
            return rc < 0 ? rc : 0;
    }
}

int
gw_qmp_poll (gw_qmp_t *self, int timeout_ms)
{
    assert (self);
    if (self->broken)
        return self->broken;
    int rc = s_wait_reply (self, 0, ch_clock_mono_ms () + (timeout_ms > 0 ? timeout_ms : 0), NULL);
    return rc == -ETIMEDOUT ? 0 : rc;
}

//  --------------------------------------------------------------------------
//  Sending.

//  Write data; the first chunk carries pass_fd when it is >= 0.
static int
s_send (gw_qmp_t *self, const char *data, size_t len, int pass_fd, int64_t deadline)
{
    size_t off = 0;
    while (off < len) {
        struct iovec iov = { .iov_base = (char *) data + off, .iov_len = len - off };
        union { struct cmsghdr h; char buf [CMSG_SPACE (sizeof (int))]; } ctl;
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
        if (pass_fd >= 0) {
            memset (&ctl, 0, sizeof ctl);
            mh.msg_control = ctl.buf;
            mh.msg_controllen = sizeof ctl.buf;
            struct cmsghdr *cm = CMSG_FIRSTHDR (&mh);
            cm->cmsg_level = SOL_SOCKET;
            cm->cmsg_type = SCM_RIGHTS;
            cm->cmsg_len = CMSG_LEN (sizeof (int));
            memcpy (CMSG_DATA (cm), &pass_fd, sizeof (int));
        }
        ssize_t n = sendmsg (self->fd, &mh, MSG_NOSIGNAL);
        if (n > 0) {
            off += (size_t) n;
            pass_fd = -1;                       //  sent with the first bytes
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return s_break (self, -EPIPE, "write failed");
        struct pollfd pfd = { .fd = self->fd, .events = POLLOUT };
        if (poll (&pfd, 1, s_left_ms (deadline)) == 0)
            return -ETIMEDOUT;
    }
    return 0;
}

//  The command as one line: {"execute": ..., "arguments": ..., "id": N}\n
static char *
s_encode (const char *command, json_t *args, json_int_t id, size_t *len_p)
{
    json_t *req = json_pack ("{s:s, s:I}", "execute", command, "id", id);
    if (!req)
        abort ();
    if (args)
        json_object_set (req, "arguments", args);
    char *text = json_dumps (req, JSON_COMPACT);
    json_decref (req);
    if (!text)
        abort ();
    size_t len = strlen (text);
    char *line = realloc (text, len + 2);
    if (!line)
        abort ();
    memcpy (line + len, "\n", 2);
    *len_p = len + 1;
    return line;
}

//  A reply: hand out "return", or turn "error" into -EIO and words.
static int
s_take_return (json_t *reply, const char *command, json_t **return_p, char *err, size_t errlen)
{
    json_t *error = json_object_get (reply, "error");
    if (error) {
        const char *cls = json_string_value (json_object_get (error, "class"));
        const char *desc = json_string_value (json_object_get (error, "desc"));
        snprintf (err, errlen, "QMP %s failed: %s: %s", command, cls ? cls : "?",
                  desc ? desc : "?");
        return -EIO;
    }
    if (return_p)
        *return_p = json_incref (json_object_get (reply, "return"));
    return 0;
}

static void
s_explain (gw_qmp_t *self, int rc, const char *command, int timeout_ms, char *err, size_t errlen)
{
    if (rc == -ETIMEDOUT)
        snprintf (err, errlen, "QMP %s: no answer within %d ms", command, timeout_ms);
    else if (rc == -EPIPE || rc == -EPROTO)
        snprintf (err, errlen, "QMP %s: %s", command, self->why ? self->why : strerror (-rc));
    else if (rc < 0 && rc != -EIO)
        snprintf (err, errlen, "QMP %s: %s", command, strerror (-rc));
}

//  gw_qmp_execute, with pass_fd sent alongside the command (SCM_RIGHTS; -1:
//  none). pass_fd stays owned by the caller (QEMU holds its own copy).
static int
s_execute_fd (gw_qmp_t *self, const char *command, json_t *args, int pass_fd,
              json_t **return_p, int timeout_ms, char *err, size_t errlen)
{
    assert (self && command && err);
    assert (!args || json_is_object (args));
    if (return_p)
        *return_p = NULL;
    int64_t deadline = ch_clock_mono_ms () + (timeout_ms > 0 ? timeout_ms : 0);
    json_t *reply = NULL;
    size_t len = 0;
    char *line = NULL;
    int rc = self->broken;
    if (rc < 0)
        goto fail;
    line = s_encode (command, args, ++self->next_id, &len);
    rc = s_send (self, line, len, pass_fd, deadline);
    if (rc < 0)
        goto fail;
    rc = s_wait_reply (self, self->next_id, deadline, &reply);
    if (rc < 0)
        goto fail;
    rc = s_take_return (reply, command, return_p, err, errlen);
fail:
    s_explain (self, rc, command, timeout_ms, err, errlen);
    json_decref (reply);
    free (line);
    return rc;
}

int
gw_qmp_execute (gw_qmp_t *self, const char *command, json_t *args,
                json_t **return_p, int timeout_ms, char *err, size_t errlen)
{
    return s_execute_fd (self, command, args, -1, return_p, timeout_ms, err, errlen);
}

int
gw_qmp_handshake (gw_qmp_t *self, int timeout_ms, char *err, size_t errlen)
{
    assert (self && err);
    int64_t deadline = ch_clock_mono_ms () + (timeout_ms > 0 ? timeout_ms : 0);
    json_t *greeting = NULL;
    int rc = self->broken ? self->broken : s_next_msg (self, deadline, &greeting);
    if (rc == 0 && !json_is_object (json_object_get (greeting, "QMP")))
        rc = s_break (self, -EPROTO, "the first QMP message is not a greeting");
    json_decref (greeting);
    if (rc < 0) {
        s_explain (self, rc, "greeting", timeout_ms, err, errlen);
        return rc;
    }
    return gw_qmp_execute (self, "qmp_capabilities", NULL, NULL,
                           s_left_ms (deadline), err, errlen);
}

//  --------------------------------------------------------------------------
//  Commands the VM layer uses.

int
gw_qmp_getfd (gw_qmp_t *self, const char *fdname, int fd, int timeout_ms,
              char *err, size_t errlen)
{
    assert (fdname && fd >= 0);
    json_t *args = json_pack ("{s:s}", "fdname", fdname);
    int rc = s_execute_fd (self, "getfd", args, fd, NULL, timeout_ms, err, errlen);
    json_decref (args);
    return rc;
}

//  Run command and copy the string member key of its return into out.
static int
s_query_string (gw_qmp_t *self, const char *command, const char *key, const char *dflt,
                char *out, size_t cap, json_t **return_p, int timeout_ms,
                char *err, size_t errlen)
{
    assert (out && cap > 0);
    int rc = gw_qmp_execute (self, command, NULL, return_p, timeout_ms, err, errlen);
    if (rc < 0)
        return rc;
    const char *value = json_string_value (json_object_get (*return_p, key));
    if (!value && !(dflt && json_is_object (*return_p))) {
        snprintf (err, errlen, "QMP %s: the reply has no \"%s\"", command, key);
        json_decref (*return_p);
        *return_p = NULL;
        return -EPROTO;
    }
    snprintf (out, cap, "%s", value ? value : dflt);
    return 0;
}

int
gw_qmp_query_status (gw_qmp_t *self, char *status, size_t cap, bool *running_p,
                     int timeout_ms, char *err, size_t errlen)
{
    json_t *ret = NULL;
    int rc = s_query_string (self, "query-status", "status", NULL, status, cap, &ret,
                             timeout_ms, err, errlen);
    if (rc == 0 && running_p)
        *running_p = json_is_true (json_object_get (ret, "running"));
    json_decref (ret);
    return rc;
}

int
gw_qmp_query_migrate (gw_qmp_t *self, char *status, size_t cap, int timeout_ms,
                      char *err, size_t errlen)
{
    //  Before any migration QEMU answers {} rather than a status.
    json_t *ret = NULL;
    int rc = s_query_string (self, "query-migrate", "status", "none", status, cap, &ret,
                             timeout_ms, err, errlen);
    json_decref (ret);
    return rc;
}

int
gw_qmp_quit (gw_qmp_t *self, int timeout_ms, char *err, size_t errlen)
{
    return gw_qmp_execute (self, "quit", NULL, NULL, timeout_ms, err, errlen);
}
