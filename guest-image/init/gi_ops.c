/*  gi_ops - control-port requests. */
#include "gi_ops.h"
#include "gi_files.h"
#include "gi_log.h"
#include "gi_sys.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/random.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define S_VERSION "0.1.0"
#define S_PROTOCOL "cellvm-init"
#define S_ENTROPY_MAX 4096

struct _gi_ops_t {
    gi_ctl_t *ctl;
    gi_kernel_t *kernel;
    char workspace [16];
    int hellos;
};

typedef int (s_handler_fn) (gi_ops_t *self, kn_msg_t *req, json_t *reply);

gi_ops_t *
gi_ops_new (gi_ctl_t *ctl, gi_kernel_t *kernel, const char *workspace)
{
    gi_ops_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->ctl = ctl;
    self->kernel = kernel;
    snprintf (self->workspace, sizeof self->workspace, "%s", workspace);
    return self;
}

void
gi_ops_destroy (gi_ops_t **self_p)
{
    assert (self_p);
    free (*self_p);
    *self_p = NULL;
}

static void
s_send (gi_ops_t *self, const json_t *parent, const char *type, json_t *content,
        uint8_t **data_p, size_t len)
{
    kn_msg_t *msg = kn_msg_new (KN_CH_CELLVM, type, parent, &content, gi_ctl_session (self->ctl));
    if (data_p && *data_p && len)
        kn_msg_add_buffer (msg, data_p, len);
    gi_ctl_send (self->ctl, &msg);
}

//  Jupyter-style error fields on a reply.
static int
s_error (json_t *reply, const char *ename, int err, const char *detail)
{
    char text [512];
    snprintf (text, sizeof text, "%s%s%s", detail ? detail : "", detail ? ": " : "",
              strerror (err));
    json_object_set_new (reply, "status", json_string ("error"));
    json_object_set_new (reply, "ename", json_string (ename));
    json_object_set_new (reply, "evalue", json_string (text));
    return -err;
}

static int
s_set_time (double t, json_t *reply)
{
    if (!isfinite (t) || t < 0 || t > 4e11)
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
    if (len == 0 || len > S_ENTROPY_MAX)
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

static int
s_hello (gi_ops_t *self, kn_msg_t *req, json_t *reply)
{
    json_t *c = kn_msg_content (req);
    const char *proto = json_string_value (json_object_get (c, "protocol"));
    json_t *time = json_object_get (c, "time");
    size_t elen = 0;
    const uint8_t *ent = kn_msg_nbuffers (req) ? kn_msg_buffer (req, 0, &elen) : NULL;
    self->hellos++;
    if (proto && strcmp (proto, S_PROTOCOL) != 0)
        gi_log ("hello: unexpected protocol \"%s\", answering anyway", proto);
    if (json_is_number (time))
        s_set_time (json_number_value (time), reply);
    if (ent)
        s_add_entropy (ent, elen, reply);
    char boot [64] = "";
    FILE *f = fopen ("/proc/sys/kernel/random/boot_id", "re");
    if (f && fgets (boot, sizeof boot, f))
        boot [strcspn (boot, "\n")] = 0;
    if (f)
        fclose (f);
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
s_status (gi_ops_t *self, kn_msg_t *req, json_t *reply)
{
    (void) req;
    json_object_set_new (reply, "kernel", gi_kernel_state (self->kernel));
    return 0;
}

//  Stop the kernel if it runs (reported as requested), then start afresh.
static int
s_restart (gi_ops_t *self, kn_msg_t *req, json_t *reply)
{
    (void) req;
    if (gi_kernel_pid (self->kernel)) {
        gi_kernel_stop (self->kernel);
        gi_ops_kernel_exited (self);
    }
    int rc = gi_kernel_start (self->kernel);
    if (rc < 0)
        return s_error (reply, "SystemError", -rc, "starting the kernel");
    json_object_set_new (reply, "kernel", gi_kernel_state (self->kernel));
    return 0;
}

static int
s_kill (gi_ops_t *self, kn_msg_t *req, json_t *reply)
{
    json_t *s = json_object_get (kn_msg_content (req), "signal");
    int sig = json_is_string (s) ? gi_signal_from_name (json_string_value (s))
            : json_is_null (s) || !s ? SIGKILL : -1;
    if (sig <= 0)
        return s_error (reply, "BadRequest", EINVAL, "signal must be a name like \"SIGINT\"");
    int rc = gi_kernel_signal (self->kernel, sig);
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

static int
s_put (gi_ops_t *self, kn_msg_t *req, json_t *reply)
{
    (void) self;
    json_t *c = kn_msg_content (req);
    const char *path = json_string_value (json_object_get (c, "path"));
    json_t *mode = json_object_get (c, "mode");
    size_t len = 0;
    const uint8_t *data = kn_msg_nbuffers (req) ? kn_msg_buffer (req, 0, &len) : NULL;
    if (!path || kn_msg_nbuffers (req) > 1 || (mode && !json_is_integer (mode)))
        return s_error (reply, "BadRequest", EINVAL, "put needs a path and at most 1 buffer");
    gi_file_info_t info;
    int rc = gi_files_put (path, data, len, json_is_true (json_object_get (c, "append")),
                           (unsigned) json_integer_value (mode), &info);
    if (rc < 0)
        return s_file_error (reply, rc, path);
    json_object_update_new (reply, json_pack ("{s:s, s:I, s:I, s:s}", "path", info.path,
        "size", (json_int_t) info.size, "written", (json_int_t) len, "sha256", info.sha256));
    return 0;
}

//  The reply goes out here, with the bytes as a buffer frame.
static int
s_get (gi_ops_t *self, kn_msg_t *req, json_t *reply)
{
    json_t *c = kn_msg_content (req);
    const char *path = json_string_value (json_object_get (c, "path"));
    json_t *off = json_object_get (c, "offset"), *len = json_object_get (c, "length");
    if (!path || (off && (!json_is_integer (off) || json_integer_value (off) < 0))
    ||  (len && (!json_is_integer (len) || json_integer_value (len) < 0)))
        return s_error (reply, "BadRequest", EINVAL, "get needs a path, offset, length");
    uint8_t *data = NULL;
    gi_file_info_t info;
    int rc = gi_files_get (path, off ? (uint64_t) json_integer_value (off) : 0,
                           len ? (size_t) json_integer_value (len) : GI_CHUNK_MAX, &data, &info);
    if (rc < 0)
        return s_file_error (reply, rc, path);
    json_object_update_new (reply, json_pack ("{s:s, s:s, s:I, s:I, s:I, s:b, s:s}",
        "status", "ok", "path", info.path, "size", (json_int_t) info.size,
        "offset", (json_int_t) info.offset, "length", (json_int_t) info.length,
        "eof", info.eof, "sha256", info.sha256));
    s_send (self, kn_msg_header (req), "get_reply", json_incref (reply), &data, info.length);
    free (data);
    return 1;
}

static int
s_set_time_req (gi_ops_t *self, kn_msg_t *req, json_t *reply)
{
    (void) self;
    json_t *t = json_object_get (kn_msg_content (req), "time");
    if (!json_is_number (t))
        return s_error (reply, "BadRequest", EINVAL, "time must be a number");
    return s_set_time (json_number_value (t), reply);
}

static int
s_entropy_req (gi_ops_t *self, kn_msg_t *req, json_t *reply)
{
    (void) self;
    size_t len = 0;
    const uint8_t *data = kn_msg_nbuffers (req) == 1 ? kn_msg_buffer (req, 0, &len) : NULL;
    return s_add_entropy (data, data ? len : 0, reply);
}

static int
s_shutdown (gi_ops_t *self, kn_msg_t *req, json_t *reply)
{
    (void) req;
    (void) reply;
    if (gi_kernel_pid (self->kernel))
        gi_kernel_stop (self->kernel);
    return 2;
}

static const struct {
    const char *request, *reply;
    s_handler_fn *fn;
} s_table [] = {
    { "hello", "hello", s_hello },
    { "status_request", "status_reply", s_status },
    { "restart_request", "restart_reply", s_restart },
    { "kill_request", "kill_reply", s_kill },
    { "put_request", "put_reply", s_put },
    { "get_request", "get_reply", s_get },
    { "set_time_request", "set_time_reply", s_set_time_req },
    { "add_entropy_request", "add_entropy_reply", s_entropy_req },
    { "shutdown_request", "shutdown_reply", s_shutdown },
};

//  A request nobody knows gets an error reply when it looks like one.
static void
s_unknown (gi_ops_t *self, kn_msg_t *req)
{
    const char *type = kn_msg_type (req);
    size_t n = strlen (type);
    gi_log ("control port: unknown message %s", type);
    if (n <= 8 || strcmp (type + n - 8, "_request") != 0 || n > 120)
        return;
    char reply [128];
    snprintf (reply, sizeof reply, "%.*s_reply", (int) (n - 8), type);
    json_t *content = json_object ();
    s_error (content, "UnknownMessageType", ENOSYS, type);
    s_send (self, kn_msg_header (req), reply, content, NULL, 0);
}

int
gi_ops_handle (gi_ops_t *self, kn_msg_t **msg_p)
{
    assert (self && msg_p && *msg_p);
    kn_msg_t *req = *msg_p;
    int rc = 0, found = 0;
    for (size_t i = 0; !found && i < sizeof s_table / sizeof s_table [0]; i++) {
        if (kn_msg_channel (req) != KN_CH_CELLVM || strcmp (kn_msg_type (req), s_table [i].request))
            continue;
        found = 1;
        json_t *reply = json_object ();
        rc = s_table [i].fn (self, req, reply);
        if (rc != 1) {
            if (!json_object_get (reply, "status"))
                json_object_set_new (reply, "status", json_string ("ok"));
            s_send (self, kn_msg_header (req), s_table [i].reply, json_incref (reply), NULL, 0);
        }
        json_decref (reply);
    }
    if (!found)
        s_unknown (self, req);
    kn_msg_destroy (msg_p);
    return rc == 2 ? 1 : 0;
}

void
gi_ops_kernel_exited (gi_ops_t *self)
{
    json_t *exit = gi_kernel_last_exit (self->kernel);
    if (exit)
        s_send (self, NULL, "kernel_exited", exit, NULL, 0);
}
