/*  gi_ops - control-port requests: a pure decoder, then the effects. */
#include "gi_ops.h"
#include "ch_hello.h"
#include "gi_files.h"
#include "gi_log.h"
#include "gi_proxy.h"
#include "gi_sys.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/random.h>
#include <math.h>
#include <sys/resource.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define S_VERSION "0.1.0"
#define S_PROTOCOL CH_PROTO_INIT
#define GI_FILES_NICE 10            //  file chunks yield to the kernel
#define S_ENTROPY_MAX 4096
#define S_TIME_MAX 4e11         //  seconds since the epoch: year ~14600
#define S_SENT 1                //  an effect sent its reply itself
#define S_POWEROFF 2            //  an effect wants the VM off
#define S_UNMOUNT_MS 1000       //  a busy /workspace is retried this long
#define S_CLEAR_MS 5000         //  for a killed kernel's cgroup to empty
#define S_DETACHED "/workspace is not mounted (the VM is being saved or handed over)"
#define S_BUSY "cannot unmount /workspace: EBUSY (Device or resource busy) for 1 s; a process " \
               "still uses /workspace (its cwd or an open file there): chdir away, or pass " \
               "kill_kernel"
#define S_NO_EGRESS "this VM has no egress port: the image or the gateway is older"

struct _gi_ops_t {
    gi_ctl_t *ctl;
    gi_kernel_t *kernel;
    char workspace [16];
    int hellos;
    bool mounted;               //  /workspace is mounted (not detached)
    pid_t proxy;                //  the egress proxy (gi_proxy), 0 when none
};

//  ---------------------------------------------------------------------------
//  Decoding: what a message asks for, or why it is refused. No side effects.

typedef int (s_decode_fn) (const ch_msg_t *req, gi_req_t *out, char *why, size_t whylen);

//  A refusal: the reply's ename, and its evalue ("detail: strerror") in why.
static int
s_refuse (gi_req_t *out, const char *ename, int err, const char *detail,
          char *why, size_t whylen)
{
    snprintf (why, whylen, "%s%s%s", detail ? detail : "", detail ? ": " : "",
              strerror (err));
    out->op = GI_OP_NONE;
    out->ename = ename;
    return -err;
}

static int
s_time_ok (double t)
{
    return isfinite (t) && t >= 0 && t <= S_TIME_MAX;
}

static int
s_entropy_ok (size_t len)
{
    return len > 0 && len <= S_ENTROPY_MAX;
}

//  The first buffer, when there is one, into out->data / out->len.
static void
s_first_buffer (const ch_msg_t *req, gi_req_t *out)
{
    if (ch_msg_nbuffers (req))
        out->data = ch_msg_buffer (req, 0, &out->len);
}

static int
s_dec_hello (const ch_msg_t *req, gi_req_t *out, char *why, size_t whylen)
{
    (void) why;
    (void) whylen;
    json_t *c = ch_msg_content (req), *t = json_object_get (c, "time");
    out->protocol = json_string_value (json_object_get (c, "protocol"));
    out->has_time = json_is_number (t);
    out->time = json_number_value (t);
    s_first_buffer (req, out);
    return 0;
}

static int
s_dec_kill (const ch_msg_t *req, gi_req_t *out, char *why, size_t whylen)
{
    json_t *s = json_object_get (ch_msg_content (req), "signal");
    out->signal = json_is_string (s) ? gi_signal_from_name (json_string_value (s))
                : !s || json_is_null (s) ? SIGKILL : -1;
    if (out->signal <= 0)
        return s_refuse (out, "BadRequest", EINVAL, "signal must be a name like \"SIGINT\"",
                         why, whylen);
    return 0;
}

//  put and get: the path must name something below /workspace.
static int
s_dec_path (gi_req_t *out, char *why, size_t whylen)
{
    out->rel = gi_files_relative (out->path);
    if (!out->rel)
        return s_refuse (out, "PathOutsideWorkspace", EXDEV, "paths must be under " GI_WORKSPACE,
                         why, whylen);
    return 0;
}

static int
s_dec_put (const ch_msg_t *req, gi_req_t *out, char *why, size_t whylen)
{
    json_t *c = ch_msg_content (req);
    json_t *mode = json_object_get (c, "mode"), *append = json_object_get (c, "append");
    out->path = json_string_value (json_object_get (c, "path"));
    if (!out->path || ch_msg_nbuffers (req) > 1 || (mode && !json_is_integer (mode)))
        return s_refuse (out, "BadRequest", EINVAL, "put needs a path and at most 1 buffer",
                         why, whylen);
    //  A mistyped append must not truncate the file it meant to extend.
    if (append && !json_is_boolean (append) && !json_is_null (append))
        return s_refuse (out, "BadRequest", EINVAL, "append must be true or false", why, whylen);
    out->append = json_is_true (append);
    out->mode = (unsigned) json_integer_value (mode);
    s_first_buffer (req, out);
    if ((out->rel = gi_files_notebook_relative (out->path)))
        return 0;                               //  the host's notebook copy (gi_files.h)
    return s_dec_path (out, why, whylen);
}

//  A non-negative integer, or def when absent. -1 when neither.
static json_int_t
s_count (const json_t *content, const char *key, json_int_t def)
{
    json_t *v = json_object_get (content, key);
    if (!v)
        return def;
    return json_is_integer (v) && json_integer_value (v) >= 0 ? json_integer_value (v) : -1;
}

static int
s_dec_get (const ch_msg_t *req, gi_req_t *out, char *why, size_t whylen)
{
    json_t *c = ch_msg_content (req);
    json_int_t off = s_count (c, "offset", 0), len = s_count (c, "length", GI_CHUNK_MAX);
    out->path = json_string_value (json_object_get (c, "path"));
    if (!out->path || off < 0 || len < 0)
        return s_refuse (out, "BadRequest", EINVAL, "get needs a path, offset, length",
                         why, whylen);
    out->offset = (uint64_t) off;
    out->length = len < (json_int_t) GI_CHUNK_MAX ? (size_t) len : GI_CHUNK_MAX;
    return s_dec_path (out, why, whylen);
}

static int
s_dec_set_time (const ch_msg_t *req, gi_req_t *out, char *why, size_t whylen)
{
    json_t *t = json_object_get (ch_msg_content (req), "time");
    if (!json_is_number (t))
        return s_refuse (out, "BadRequest", EINVAL, "time must be a number", why, whylen);
    out->has_time = 1;
    out->time = json_number_value (t);
    if (!s_time_ok (out->time))
        return s_refuse (out, "BadRequest", EINVAL, "time", why, whylen);
    return 0;
}

static int
s_dec_entropy (const ch_msg_t *req, gi_req_t *out, char *why, size_t whylen)
{
    if (ch_msg_nbuffers (req) == 1)
        s_first_buffer (req, out);
    if (!out->data || !s_entropy_ok (out->len))
        return s_refuse (out, "BadRequest", EINVAL, "entropy must be 1..4096 bytes",
                         why, whylen);
    return 0;
}

static int
s_dec_detach (const ch_msg_t *req, gi_req_t *out, char *why, size_t whylen)
{
    json_t *kill = json_object_get (ch_msg_content (req), "kill_kernel");
    if (kill && !json_is_boolean (kill) && !json_is_null (kill))
        return s_refuse (out, "BadRequest", EINVAL, "kill_kernel must be true or false",
                         why, whylen);
    out->kill_kernel = json_is_true (kill);
    json_t *freeze = json_object_get (ch_msg_content (req), "freeze");
    if (freeze && !json_is_boolean (freeze) && !json_is_null (freeze))
        return s_refuse (out, "BadRequest", EINVAL, "freeze must be true or false",
                         why, whylen);
    out->freeze = json_is_true (freeze);
    return 0;
}

//  The nonce is the host's: its proxy knows ours by it (gi_proxy.h).
static int
s_dec_egress (const ch_msg_t *req, gi_req_t *out, char *why, size_t whylen)
{
    json_t *c = ch_msg_content (req), *nonce = json_object_get (c, "nonce");
    const char *hex = json_string_value (nonce);
    size_t n = json_string_length (nonce);
    if (!hex || n < 16 || n > 64 || strspn (hex, "0123456789abcdef") != n)
        return s_refuse (out, "BadRequest", EINVAL, "nonce must be 16..64 of [0-9a-f]",
                         why, whylen);
    json_int_t port = s_count (c, "port", GI_PROXY_PORT);
    if (port < 1024 || port > 65535)
        return s_refuse (out, "BadRequest", EINVAL, "port must be an integer 1024..65535",
                         why, whylen);
    out->nonce = hex;
    out->port = (unsigned) port;
    return 0;
}

static const struct {
    const char *request, *reply;
    gi_op_t op;
    s_decode_fn *decode;        //  NULL: nothing to decode
} s_table [] = {
    { "hello", "hello", GI_OP_HELLO, s_dec_hello },
    { "status_request", "status_reply", GI_OP_STATUS, NULL },
    { "restart_request", "restart_reply", GI_OP_RESTART, NULL },
    { "kill_request", "kill_reply", GI_OP_KILL, s_dec_kill },
    { "put_request", "put_reply", GI_OP_PUT, s_dec_put },
    { "get_request", "get_reply", GI_OP_GET, s_dec_get },
    { "set_time_request", "set_time_reply", GI_OP_SET_TIME, s_dec_set_time },
    { "add_entropy_request", "add_entropy_reply", GI_OP_ADD_ENTROPY, s_dec_entropy },
    { "shutdown_request", "shutdown_reply", GI_OP_SHUTDOWN, NULL },
    { "workspace_detach_request", "workspace_detach_reply", GI_OP_WORKSPACE_DETACH,
      s_dec_detach },
    { "egress_start_request", "egress_start_reply", GI_OP_EGRESS_START, s_dec_egress },
};

//  A request nobody knows gets an error reply when it looks like one.
static int
s_dec_unknown (const ch_msg_t *req, gi_req_t *out, char *why, size_t whylen)
{
    const char *type = ch_msg_type (req);
    size_t n = strlen (type);
    if (n <= 8 || n > 120 || strcmp (type + n - 8, "_request") != 0) {
        snprintf (why, whylen, "unknown message %.120s on %s", type,
                  ch_channel_name (ch_msg_channel (req)));
        return -ENOMSG;
    }
    snprintf (out->reply, sizeof out->reply, "%.*s_reply", (int) (n - 8), type);
    return s_refuse (out, "UnknownMessageType", ENOSYS, type, why, whylen);
}

int
gi_ops_decode (const ch_msg_t *req, gi_req_t *out, char *why, size_t whylen)
{
    assert (req && out && why && whylen);
    *out = (gi_req_t) { .op = GI_OP_NONE };
    why [0] = 0;
    const char *type = ch_msg_type (req);
    for (size_t i = 0; i < sizeof s_table / sizeof s_table [0]; i++) {
        if (ch_msg_channel (req) != CH_CELLVM || strcmp (type, s_table [i].request) != 0)
            continue;
        snprintf (out->reply, sizeof out->reply, "%s", s_table [i].reply);
        out->op = s_table [i].op;
        return s_table [i].decode ? s_table [i].decode (req, out, why, whylen) : 0;
    }
    return s_dec_unknown (req, out, why, whylen);
}

//  ---------------------------------------------------------------------------
//  Effects: a decoded request acted upon.

typedef int (s_effect_fn) (gi_ops_t *self, const gi_req_t *r, const ch_msg_t *req,
                           json_t *reply);

gi_ops_t *
gi_ops_new (gi_ctl_t *ctl, gi_kernel_t *kernel, const char *workspace)
{
    gi_ops_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->ctl = ctl;
    self->kernel = kernel;
    snprintf (self->workspace, sizeof self->workspace, "%s", workspace);
    self->mounted = true;
    return self;
}

//  Kill the egress proxy, if one runs, and reap it here.
static void
s_proxy_stop (gi_ops_t *self)
{
    if (!self->proxy)
        return;
    kill (self->proxy, SIGKILL);
    while (waitpid (self->proxy, NULL, 0) < 0 && errno == EINTR)
        ;
    gi_log (CH_LOG_INFO, "proxy.stopped", "pid=%d", (int) self->proxy);
    self->proxy = 0;
}

void
gi_ops_destroy (gi_ops_t **self_p)
{
    assert (self_p);
    if (*self_p)
        s_proxy_stop (*self_p);
    free (*self_p);
    *self_p = NULL;
}

static void
s_send (gi_ops_t *self, const json_t *parent, const char *type, json_t *content,
        uint8_t **data_p, size_t len)
{
    ch_msg_t *msg = ch_msg_new (CH_CELLVM, type, parent, &content, gi_ctl_session (self->ctl));
    if (data_p && *data_p && len)
        ch_msg_add_buffer (msg, data_p, len);
    gi_ctl_send (self->ctl, &msg);
}

//  Jupyter-style error fields on a reply, evalue as it stands.
static void
s_error_words (json_t *reply, const char *ename, const char *evalue)
{
    json_object_set_new (reply, "status", json_string ("error"));
    json_object_set_new (reply, "ename", json_string (ename));
    json_object_set_new (reply, "evalue", json_string (evalue));
}

//  The same, evalue "detail: strerror(err)". Returns -err.
static int
s_error (json_t *reply, const char *ename, int err, const char *detail)
{
    char text [512];
    snprintf (text, sizeof text, "%s%s%s", detail ? detail : "", detail ? ": " : "",
              strerror (err));
    s_error_words (reply, ename, text);
    return -err;
}

static int
s_set_time (double t, json_t *reply)
{
    if (!s_time_ok (t))
        return s_error (reply, "BadRequest", EINVAL, "time");
    struct timespec before, ts = { (time_t) t, (long) ((t - floor (t)) * 1e9) };
    clock_gettime (CLOCK_REALTIME, &before);
    if (clock_settime (CLOCK_REALTIME, &ts) < 0)
        return s_error (reply, "SystemError", errno, "clock_settime");
    double was = (double) before.tv_sec + (double) before.tv_nsec / 1e9;
    json_object_set_new (reply, "adjusted_s", json_real (t - was));
    return 0;
}

//  Mix bytes into the guest's pool and credit them (RNDADDENTROPY).
static int
s_add_entropy (const uint8_t *data, size_t len, json_t *reply)
{
    if (!s_entropy_ok (len))
        return s_error (reply, "BadRequest", EINVAL, "entropy must be 1..4096 bytes");
    struct rand_pool_info *info = malloc (sizeof *info + len);
    if (!info)
        return s_error (reply, "SystemError", ENOMEM, NULL);
    info->entropy_count = (int) (len * 8);
    info->buf_size = (int) len;
    memcpy (info->buf, data, len);
    int fd = open ("/dev/random", O_WRONLY | O_CLOEXEC);
    int rc = fd < 0 || ioctl (fd, RNDADDENTROPY, info) < 0 ? -errno : 0;
    //  Credited entropy alone does not reseed an initialised crng (it
    //  reseeds on a timer of jiffies, which a restored clone shares with
    //  its template): force it, or clones return the same os.urandom.
    if (rc == 0 && ioctl (fd, RNDRESEEDCRNG) < 0)
        rc = -errno;
    if (fd >= 0)
        close (fd);
    free (info);
    if (rc < 0)
        return s_error (reply, "SystemError", -rc, "RNDADDENTROPY");
    json_object_set_new (reply, "entropy_bytes", json_integer ((json_int_t) len));
    return 0;
}

static void
s_boot_id (char *boot, size_t len)
{
    boot [0] = 0;
    FILE *f = fopen ("/proc/sys/kernel/random/boot_id", "re");
    if (f && fgets (boot, (int) len, f))
        boot [strcspn (boot, "\n")] = 0;
    if (f)
        fclose (f);
}

//  /workspace mounted again if it was detached (here, or in the template
//  this VM was restored from), before any kernel hello can chdir into it.
static int
s_attach (gi_ops_t *self)
{
    if (self->mounted)
        return 0;
    int rc = gi_sys_workspace_attach ();
    self->mounted = rc == 0;
    return rc;
}

static void
s_hello_workspace (gi_ops_t *self, json_t *reply)
{
    int rc = s_attach (self);
    if (rc < 0) {
        char text [256];
        snprintf (text, sizeof text, "cannot mount the session disk on /workspace: %s",
                  strerror (-rc));
        json_object_set_new (reply, "workspace_error", json_string (text));
    }
    json_object_set_new (reply, "workspace_mounted", json_boolean (self->mounted));
}

static int
s_hello (gi_ops_t *self, const gi_req_t *r, const ch_msg_t *req, json_t *reply)
{
    (void) req;
    self->hellos++;
    if (r->protocol && strcmp (r->protocol, S_PROTOCOL) != 0)
        gi_log (CH_LOG_WARN, "ctl.hello_protocol", "protocol=\"%s\" action=answer", r->protocol);
    if (r->has_time)
        s_set_time (r->time, reply);
    if (r->data)
        s_add_entropy (r->data, r->len, reply);
    s_hello_workspace (self, reply);
    char boot [64];
    s_boot_id (boot, sizeof boot);
    json_object_update_missing_new (reply, json_pack (
        "{s:s, s:i, s:s, s:i, s:s, s:s, s:s, s:i, s:s, s:s, s:s, s:i, s:o}",
        "protocol", S_PROTOCOL, "version", 1, "role", "init", "pid", (int) getpid (),
        "implementation", "cellvm-init", "implementation_version", S_VERSION,
        "boot_id", boot, "hellos", self->hellos, "workspace", GI_WORKSPACE,
        "workspace_fs", self->workspace, "kernel_port", GI_KERNEL_PORT,
        "max_frame", (int) gi_ctl_max_frame (self->ctl),
        "kernel", gi_kernel_state (self->kernel)));
    return 0;
}

static int
s_status (gi_ops_t *self, const gi_req_t *r, const ch_msg_t *req, json_t *reply)
{
    (void) r;
    (void) req;
    json_object_set_new (reply, "kernel", gi_kernel_state (self->kernel));
    json_object_set_new (reply, "workspace_mounted", json_boolean (self->mounted));
    return 0;
}

//  Stop the kernel if it runs (reported as requested), then start afresh.
static int
s_restart (gi_ops_t *self, const gi_req_t *r, const ch_msg_t *req, json_t *reply)
{
    (void) r;
    (void) req;
    //  A kernel starts in /workspace: never in the bare mount point.
    int rc = s_attach (self);
    if (rc < 0)
        return s_error (reply, "WorkspaceError", -rc,
                        "cannot mount /workspace again, so no kernel was started");
    if (gi_kernel_pid (self->kernel)) {
        gi_kernel_stop (self->kernel);
        gi_ops_kernel_exited (self);
    }
    rc = gi_kernel_start (self->kernel);
    if (rc < 0)
        return s_error (reply, "SystemError", -rc, "starting the kernel");
    json_object_set_new (reply, "kernel", gi_kernel_state (self->kernel));
    return 0;
}

static int
s_kill (gi_ops_t *self, const gi_req_t *r, const ch_msg_t *req, json_t *reply)
{
    (void) req;
    int rc = gi_kernel_signal (self->kernel, r->signal);
    if (rc < 0)
        return s_error (reply, "NoKernel", -rc, "the kernel is not running");
    return 0;
}

static int
s_file_error (json_t *reply, int rc, const char *path)
{
    const char *ename = rc == -EXDEV ? "PathOutsideWorkspace" : rc == -ELOOP ? "SymlinkRefused"
                      : rc == -ENOENT ? "FileNotFound" : rc == -EFBIG ? "FileTooLarge"
                      : rc == -EINVAL || rc == -EISDIR ? "NotARegularFile" : "OSError";
    if (rc == -EXDEV)
        return s_error (reply, ename, EXDEV, "paths must be under " GI_WORKSPACE);
    return s_error (reply, ename, -rc, path);
}

//  File chunks run niced: the guest has one vCPU, and a 4 MiB chunk (its
//  disk write and SHA-256, ~10x slower under TCG) must not keep the
//  kernel's control thread from an interrupt_request.
static void
s_background (bool on)
{
    if (setpriority (PRIO_PROCESS, 0, on ? GI_FILES_NICE : 0) < 0)
        gi_log (CH_LOG_WARN, "kernel.setpriority", "reason=\"%s\"", strerror (errno));
}

//  1 (and the error on reply) when put and get have no /workspace to go to:
//  the bare mount point would take the files into the root's RAM overlay.
static int
s_detached (const gi_ops_t *self, json_t *reply)
{
    if (!self->mounted)
        s_error_words (reply, "WorkspaceDetached", S_DETACHED);
    return !self->mounted;
}

static int
s_put (gi_ops_t *self, const gi_req_t *r, const ch_msg_t *req, json_t *reply)
{
    (void) req;
    if (s_detached (self, reply))
        return -ENOTCONN;
    gi_file_info_t info;
    s_background (true);
    int rc = gi_files_put (r->path, r->data, r->len, r->append, r->mode, &info);
    s_background (false);
    if (rc < 0)
        return s_file_error (reply, rc, r->path);
    json_object_update_new (reply, json_pack ("{s:s, s:I, s:I, s:s}", "path", info.path,
        "size", (json_int_t) info.size, "written", (json_int_t) r->len, "sha256", info.sha256));
    return 0;
}

//  The reply goes out here, with the bytes as a buffer frame.
static int
s_get (gi_ops_t *self, const gi_req_t *r, const ch_msg_t *req, json_t *reply)
{
    uint8_t *data = NULL;
    gi_file_info_t info;
    if (s_detached (self, reply))
        return -ENOTCONN;
    s_background (true);
    int rc = gi_files_get (r->path, r->offset, r->length, &data, &info);
    s_background (false);
    if (rc < 0)
        return s_file_error (reply, rc, r->path);
    json_object_update_new (reply, json_pack ("{s:s, s:s, s:I, s:I, s:I, s:b, s:s}",
        "status", "ok", "path", info.path, "size", (json_int_t) info.size,
        "offset", (json_int_t) info.offset, "length", (json_int_t) info.length,
        "eof", info.eof, "sha256", info.sha256));
    s_send (self, ch_msg_header (req), r->reply, json_incref (reply), &data, info.length);
    free (data);
    return S_SENT;
}

static int
s_set_time_req (gi_ops_t *self, const gi_req_t *r, const ch_msg_t *req, json_t *reply)
{
    (void) self;
    (void) req;
    return s_set_time (r->time, reply);
}

static int
s_entropy_req (gi_ops_t *self, const gi_req_t *r, const ch_msg_t *req, json_t *reply)
{
    (void) self;
    (void) req;
    return s_add_entropy (r->data, r->len, reply);
}

static int
s_shutdown (gi_ops_t *self, const gi_req_t *r, const ch_msg_t *req, json_t *reply)
{
    (void) r;
    (void) req;
    (void) reply;
    if (gi_kernel_pid (self->kernel))
        gi_kernel_stop (self->kernel);
    return S_POWEROFF;
}

//  The VM is about to go and its disk to be kept (a client's restart): the
//  kernel's processes are frozen where they are (no exit to wait for, ~0.2 s
//  under TCG) and so is /workspace, which leaves ext4 clean and complete on
//  the disk, as an unmount would; then the disk is flushed (docs/init.md).
static int
s_detach_frozen (gi_ops_t *self, json_t *reply)
{
    int rc = self->mounted ? gi_sys_workspace_freeze () : 0;
    if (rc < 0)
        return s_error (reply, "WorkspaceError", -rc, "cannot freeze /workspace");
    if ((rc = gi_sys_disk_flush ()) < 0)
        return s_error (reply, "WorkspaceError", -rc,
                        "/workspace is frozen, but flushing its disk failed");
    json_object_update_new (reply, json_pack ("{s:b, s:b}", "frozen", 1, "kernel_killed", 0));
    return 0;
}

//  Unmount /workspace and flush its disk, so the VM can be saved as a
//  template that restores over any session's disk (docs/init.md).
static int
s_detach (gi_ops_t *self, const gi_req_t *r, const ch_msg_t *req, json_t *reply)
{
    (void) req;
    if (strcmp (self->workspace, "ext4") != 0) {
        s_error_words (reply, "WorkspaceNotDetachable", "/workspace is a tmpfs in guest RAM "
                       "(there is no session disk): it cannot be detached");
        return -EOPNOTSUPP;
    }
    if (r->freeze)
        return s_detach_frozen (self, reply);
    bool killed = r->kill_kernel && gi_kernel_pid (self->kernel);
    if (r->kill_kernel) {
        gi_kernel_stop (self->kernel);      //  recorded as requested; no notice
        gi_kernel_clear_cgroup (S_CLEAR_MS);
    }
    int rc = self->mounted ? gi_sys_workspace_unmount (S_UNMOUNT_MS) : 0;
    if (rc == -EBUSY)
        s_error_words (reply, "WorkspaceBusy", S_BUSY);
    else if (rc < 0)
        s_error (reply, "WorkspaceError", -rc, "cannot unmount /workspace");
    if (rc < 0)
        return rc;
    self->mounted = false;
    if ((rc = gi_sys_disk_flush ()) < 0)
        return s_error (reply, "WorkspaceError", -rc,
                        "/workspace is unmounted, but flushing its disk failed");
    json_object_update_new (reply, json_pack ("{s:b, s:b}", "detached", 1,
                                              "kernel_killed", killed));
    return 0;
}

//  A proxy for the host's nonce. One that runs already goes first: a VM
//  restored from a snapshot brings the proxy of a host that is gone.
static int
s_egress_start (gi_ops_t *self, const gi_req_t *r, const ch_msg_t *req, json_t *reply)
{
    (void) req;
    s_proxy_stop (self);
    pid_t pid = 0;
    int rc = gi_proxy_spawn (GI_PROXY_DEVICE, r->nonce, r->port, &pid);
    if (rc == -ENOENT)
        s_error_words (reply, "NoEgressPort", S_NO_EGRESS);
    else if (rc < 0)
        s_error (reply, rc == -EADDRINUSE ? "PortInUse" : "SystemError", -rc,
                 "starting the egress proxy");
    if (rc < 0)
        return rc;
    self->proxy = pid;
    json_object_update_new (reply, json_pack ("{s:i, s:i}", "pid", (int) pid,
                                              "port", (int) r->port));
    return 0;
}

static s_effect_fn *const s_effects [GI_OP_COUNT] = {
    [GI_OP_HELLO] = s_hello, [GI_OP_STATUS] = s_status, [GI_OP_RESTART] = s_restart,
    [GI_OP_KILL] = s_kill, [GI_OP_PUT] = s_put, [GI_OP_GET] = s_get,
    [GI_OP_SET_TIME] = s_set_time_req, [GI_OP_ADD_ENTROPY] = s_entropy_req,
    [GI_OP_SHUTDOWN] = s_shutdown, [GI_OP_WORKSPACE_DETACH] = s_detach,
    [GI_OP_EGRESS_START] = s_egress_start,
};

int
gi_ops_handle (gi_ops_t *self, ch_msg_t **msg_p)
{
    assert (self && msg_p && *msg_p);
    const ch_msg_t *req = *msg_p;
    gi_req_t r;
    char why [512];
    int rc = gi_ops_decode (req, &r, why, sizeof why);
    if (rc == -ENOSYS || rc == -ENOMSG)
        gi_log (CH_LOG_WARN, "ctl.unknown_message", "msg_type=%s", ch_msg_type (req));
    json_t *reply = json_object ();
    if (rc < 0 && r.reply [0])
        s_error_words (reply, r.ename, why);
    else if (rc == 0)
        rc = s_effects [r.op] (self, &r, req, reply);
    if (r.reply [0] && rc != S_SENT) {
        if (!json_object_get (reply, "status"))
            json_object_set_new (reply, "status", json_string ("ok"));
        s_send (self, ch_msg_header (req), r.reply, json_incref (reply), NULL, 0);
    }
    json_decref (reply);
    ch_msg_destroy (msg_p);
    return rc == S_POWEROFF;
}

void
gi_ops_kernel_exited (gi_ops_t *self)
{
    json_t *exit = gi_kernel_last_exit (self->kernel);
    if (exit)
        s_send (self, NULL, "kernel_exited", exit, NULL, 0);
}

int
gi_ops_reaped (gi_ops_t *self, pid_t pid, int status)
{
    assert (self);
    if (!self->proxy || pid != self->proxy)
        return 0;
    if (WIFSIGNALED (status))
        gi_log (CH_LOG_WARN, "proxy.gone", "pid=%d signal=%d", (int) pid, WTERMSIG (status));
    else
        gi_log (CH_LOG_WARN, "proxy.gone", "pid=%d exit_code=%d", (int) pid,
                WEXITSTATUS (status));
    self->proxy = 0;
    return 1;
}
