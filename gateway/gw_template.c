/*  gw_template - snapshot templates (see gw_template.h, docs/snapshots.md). */
#include "gw_template.h"
#include "gw_rundir.h"
#include "gw_chan.h"
#include "gw_log.h"
#include "gw_qmp.h"
#include "kn_frame.h"

#include <czmq.h>
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <openssl/evp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define S_FORMAT 2                  //  bump when the layout or the warm-up changes
#define S_QMP_MS 5000
//  Also pay, once, for what a user's first error and first Tab would cost
//  under TCG: IPython parsing its own source for the traceback (seconds),
//  and jedi's first completion.
#define S_WARMUP "import os, sys, random, uuid, json, base64\n" \
                 "import numpy, pandas, IPython\n" \
                 "import matplotlib, matplotlib.pyplot\n" \
                 "_ip = get_ipython()\n" \
                 "_ip.run_cell('1/0', store_history=False, silent=True)\n" \
                 "from IPython.core.completer import provisionalcompleter as _pc\n" \
                 "with _pc():\n" \
                 "    _ = list(_ip.Completer.completions('import o', 8))\n" \
                 "del _ip, _pc, _\n"

struct _gw_template_t {
    char path [PATH_MAX];           //  BASE/<key>
    char ram [PATH_MAX + 8], state [PATH_MAX + 8], disk [PATH_MAX + 24];
    char layer [PATH_MAX + 16];     //  a pristine clone layer over disk, "" if none
    unsigned tsc_khz;               //  the template's, so the clone's -append matches
};

int
gw_template_default_dir (char *out, size_t cap)
{
    const char *env = getenv ("CELLVM_TEMPLATE_DIR");
    int n = env && env [0] == '/' ? snprintf (out, cap, "%s", env)
          : snprintf (out, cap, "/var/tmp/cellvm-%u/templates", (unsigned) getuid ());
    return n < 0 || (size_t) n >= cap ? -ENAMETOOLONG : 0;
}

//  mkdir -p, 0700.
static int
s_mkdirs (const char *path)
{
    char tmp [PATH_MAX];
    snprintf (tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir (tmp, 0700);
            *p = '/';
        }
    return mkdir (tmp, 0700) == 0 || errno == EEXIST ? 0 : -errno;
}

//  rm -rf without following symlinks (a template dir holds only files).
//  ==========================================================================
//  The key.

//  Full path of an executable on PATH (for QEMU's stat).
static int
s_which (const char *name, char *out, size_t cap)
{
    if (strchr (name, '/'))
        return snprintf (out, cap, "%s", name) < (int) cap ? 0 : -ENAMETOOLONG;
    const char *path = getenv ("PATH");
    char dirs [4096];
    snprintf (dirs, sizeof dirs, "%s", path && *path ? path : "/usr/bin:/bin");
    char *save = NULL;
    for (char *dir = strtok_r (dirs, ":", &save); dir; dir = strtok_r (NULL, ":", &save)) {
        snprintf (out, cap, "%s/%s", dir, name);
        if (access (out, X_OK) == 0)
            return 0;
    }
    return -ENOENT;
}

static void
s_add_stat (json_t *inputs, const char *what, const char *path)
{
    struct stat st;
    if (stat (path, &st) == 0)
        json_object_set_new (inputs, what, json_sprintf ("%s size=%lld mtime=%lld.%09ld", path,
                             (long long) st.st_size, (long long) st.st_mtim.tv_sec,
                             st.st_mtim.tv_nsec));
    else
        json_object_set_new (inputs, what, json_sprintf ("%s missing", path));
}

//  Everything a clone must match, as a JSON object (canonical when dumped
//  with sorted keys).
static json_t *
s_key_inputs (const gw_vm_config_t *cfg)
{
    char path [PATH_MAX], qemu [PATH_MAX];
    json_t *in = json_pack ("{s:i, s:i, s:i, s:s, s:s, s:s, s:I}", "format", S_FORMAT,
                            "mem_mib", (int) cfg->mem_mib, "vcpus", (int) cfg->vcpus,
                            "accel", gw_accel_name (cfg->accel), "cpu", cfg->cpu ? cfg->cpu : "",
                            "append", cfg->append ? cfg->append : "",
                            "disk_bytes", (json_int_t) cfg->disk_bytes);
    snprintf (path, sizeof path, "%s/image.json", cfg->image_dir);
    json_t *image = json_load_file (path, 0, NULL);
    const char *hash = json_string_value (json_object_get (image, "image_hash"));
    json_object_set_new (in, "image_hash", json_string (hash ? hash : "none"));
    json_decref (image);
    const char *files [3] = { cfg->kernel, cfg->initrd, cfg->rootfs };
    const char *names [3] = { "vmlinux", "initrd.img", "rootfs.ext4" };
    for (int i = 0; i < 3; i++) {
        if (!files [i])
            snprintf (path, sizeof path, "%s/%s", cfg->image_dir, names [i]);
        s_add_stat (in, names [i], files [i] ? files [i] : path);
    }
    if (s_which (cfg->qemu ? cfg->qemu : "qemu-system-x86_64", qemu, sizeof qemu) == 0)
        s_add_stat (in, "qemu", qemu);
    return in;
}

static void
s_hex (const unsigned char *md, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf (out + 2 * i, "%02x", md [i]);
}

int
gw_template_key (const gw_vm_config_t *cfg, char *key, size_t cap, char *err, size_t errlen)
{
    assert (cfg && key);
    if (!cfg->image_dir || cap < GW_TEMPLATE_KEY_LEN + 1) {
        snprintf (err, errlen, "template: no image dir");
        return -EINVAL;
    }
    json_t *in = s_key_inputs (cfg);
    char *text = json_dumps (in, JSON_SORT_KEYS | JSON_COMPACT);
    unsigned char md [32];
    char hex [65];
    EVP_Digest (text, strlen (text), md, NULL, EVP_sha256 (), NULL);
    s_hex (md, sizeof md, hex);
    snprintf (key, cap, "%.*s", GW_TEMPLATE_KEY_LEN, hex);
    free (text);
    json_decref (in);
    return 0;
}

//  ==========================================================================
//  Opening and checking.

static int
s_sha256_file (const char *path, char out [65])
{
    int fd = open (path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new ();
    EVP_DigestInit_ex (ctx, EVP_sha256 (), NULL);
    char buf [65536];
    ssize_t n;
    while ((n = read (fd, buf, sizeof buf)) > 0)
        EVP_DigestUpdate (ctx, buf, (size_t) n);
    unsigned char md [32];
    EVP_DigestFinal_ex (ctx, md, NULL);
    EVP_MD_CTX_free (ctx);
    close (fd);
    s_hex (md, sizeof md, out);
    return n < 0 ? -EIO : 0;
}

static void
s_set_paths (gw_template_t *self, const char *dir)
{
    snprintf (self->path, sizeof self->path, "%s", dir);
    snprintf (self->ram, sizeof self->ram, "%s/ram", dir);
    snprintf (self->state, sizeof self->state, "%s/state", dir);
    snprintf (self->disk, sizeof self->disk, "%s/workspace.qcow2", dir);
    snprintf (self->layer, sizeof self->layer, "%s/layer.qcow2", dir);
}

//  Keep self->layer only if it looks like a qcow2 (else qemu-img makes each
//  clone's layer, as before there were seeds).
static void
s_check_layer (gw_template_t *self)
{
    char magic [4] = "";
    int fd = open (self->layer, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    bool ok = fd >= 0 && read (fd, magic, 4) == 4 && memcmp (magic, "QFI\xfb", 4) == 0;
    if (fd >= 0)
        close (fd);
    if (!ok && fd >= 0)
        gw_log (GW_LOG_WARN, "template.layer_ignored", "path=%s reason=\"not a qcow2\"",
                self->layer);
    if (!ok)
        self->layer [0] = '\0';
}

//  Why the template in self->path cannot be used, or NULL when it can.
static const char *
s_check (gw_template_t *self, const gw_vm_config_t *cfg, const char *key)
{
    char path [PATH_MAX + 16], sha [65];
    snprintf (path, sizeof path, "%s/meta.json", self->path);
    json_t *meta = json_load_file (path, 0, NULL);
    const char *why = NULL;
    struct stat st;
    json_int_t state_bytes = json_integer_value (json_object_get (meta, "state_bytes"));
    const char *want_sha = json_string_value (json_object_get (meta, "state_sha256"));
    if (!json_is_object (meta))
        why = "meta.json missing or not JSON";
    else if (strcmp (json_string_value (json_object_get (meta, "key")) ?: "", key))
        why = "meta.json names another key";
    else if (stat (self->ram, &st) < 0 || (uint64_t) st.st_size != (uint64_t) cfg->mem_mib << 20)
        why = "RAM file missing or of the wrong size";
    else if (access (self->disk, R_OK) < 0)
        why = "workspace disk missing";
    else if (stat (self->state, &st) < 0 || st.st_size != state_bytes || state_bytes <= 0)
        why = "state file missing or truncated";
    else if (!want_sha || s_sha256_file (self->state, sha) < 0 || strcmp (sha, want_sha))
        why = "state file checksum mismatch";
    json_int_t tsc = json_integer_value (json_object_get (meta, "tsc_khz"));
    self->tsc_khz = tsc > 0 && tsc < 20000000 ? (unsigned) tsc : 0;
    json_decref (meta);
    return why;
}

gw_template_t *
gw_template_open (const char *base, const gw_vm_config_t *cfg, int *rc_p, char *err,
                  size_t errlen)
{
    assert (base && cfg && rc_p);
    char key [GW_TEMPLATE_KEY_LEN + 1], dir [PATH_MAX];
    gw_template_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    *rc_p = gw_template_key (cfg, key, sizeof key, err, errlen);
    if (*rc_p < 0)
        goto fail;
    snprintf (dir, sizeof dir, "%s/%s", base, key);
    s_set_paths (self, dir);
    if (access (dir, F_OK) < 0) {
        *rc_p = -ENOENT;
        snprintf (err, errlen, "no template %s yet", dir);
        goto fail;
    }
    const char *why = s_check (self, cfg, key);
    if (why) {
        *rc_p = -ESTALE;
        snprintf (err, errlen, "template %s is corrupt (%s); deleted", dir, why);
        gw_log (GW_LOG_WARN, "template.corrupt", "dir=%s reason=\"%s\"", dir, why);
        gw_rundir_remove_tree (dir);
        goto fail;
    }
    s_check_layer (self);
    char meta [PATH_MAX + 16];
    snprintf (meta, sizeof meta, "%s/meta.json", dir);
    utimensat (AT_FDCWD, meta, NULL, 0);        //  "last used", for gw_tplsweep
    *rc_p = 0;
    return self;
fail:
    free (self);
    return NULL;
}

void
gw_template_destroy (gw_template_t **self_p)
{
    assert (self_p);
    free (*self_p);
    *self_p = NULL;
}

const char *
gw_template_path (const gw_template_t *self)
{
    assert (self);
    return self->path;
}

//  ==========================================================================
//  Talking to a VM (blocking: template builds, restores).

//  Run a QMP command that must succeed; args is borrowed.
static int
s_qmp (gw_qmp_t *qmp, const char *cmd, json_t *args, char *err, size_t errlen)
{
    return gw_qmp_execute (qmp, cmd, args, NULL, S_QMP_MS, err, errlen);
}

static int
s_ignore_shared (gw_qmp_t *qmp, char *err, size_t errlen)
{
    json_t *args = json_pack ("{s:[{s:s, s:b}]}", "capabilities", "capability",
                              "x-ignore-shared", "state", 1);
    int rc = s_qmp (qmp, "migrate-set-capabilities", args, err, errlen);
    json_decref (args);
    return rc;
}

//  Give QEMU path as fd "state" and run cmd (migrate / migrate-incoming).
static int
s_migrate_fd (gw_qmp_t *qmp, const char *cmd, const char *path, int flags, char *err,
              size_t errlen)
{
    int fd = open (path, flags | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf (err, errlen, "open %s: %s", path, strerror (errno));
        return -errno;
    }
    int rc = gw_qmp_getfd (qmp, "state", fd, S_QMP_MS, err, errlen);
    close (fd);                                 //  QEMU holds its own copy
    json_t *args = json_pack ("{s:s}", "uri", "fd:state");
    if (rc == 0)
        rc = s_qmp (qmp, cmd, args, err, errlen);
    json_decref (args);
    return rc;
}

static int
s_wait_migration (gw_qmp_t *qmp, int64_t deadline, char *err, size_t errlen)
{
    char status [32] = "";
    while (zclock_mono () < deadline) {
        int rc = gw_qmp_query_migrate (qmp, status, sizeof status, S_QMP_MS, err, errlen);
        if (rc < 0)
            return rc;
        if (strcmp (status, "completed") == 0)
            return 0;
        if (strcmp (status, "failed") == 0 || strcmp (status, "cancelled") == 0) {
            snprintf (err, errlen, "migration %s", status);
            return -EIO;
        }
        struct timespec ts = { 0, 2 * 1000 * 1000 };
        nanosleep (&ts, NULL);
    }
    snprintf (err, errlen, "migration still \"%s\" at the deadline", status);
    return -ETIMEDOUT;
}

static gw_qmp_t *
s_qmp_connect (gw_vm_t *vm, int timeout_ms, char *err, size_t errlen)
{
    int fd = -1;
    int rc = gw_vm_wait_port (vm, "qmp", timeout_ms, &fd);
    if (rc < 0) {
        snprintf (err, errlen, "QMP port: %s", strerror (-rc));
        return NULL;
    }
    gw_qmp_t *qmp = gw_qmp_new (fd, 0);
    if (gw_qmp_handshake (qmp, S_QMP_MS, err, errlen) < 0)
        gw_qmp_destroy (&qmp);
    return qmp;
}

static int
s_init_hello_send (gw_init_t *init, const json_t *extra, const uint8_t *buf, size_t len,
                   char id [37])
{
    json_t *c = json_pack ("{s:s, s:i, s:s}", "protocol", "cellvm-init", "version", 1,
                           "role", "driver");
    if (extra)
        json_object_update (c, (json_t *) extra);
    return gw_init_send (init, "hello", &c, buf, len, id);
}

//  Init's hello, repeated every 250 ms until answered (a hello sent before
//  init opened its port is lost). extra: more content (time), buf: entropy
//  or NULL.
static int
s_init_hello (gw_init_t *init, const json_t *extra, const uint8_t *buf, size_t len,
              int64_t deadline, json_t **reply_p)
{
    char id [37];
    int rc = s_init_hello_send (init, extra, buf, len, id);
    while (rc == 0) {
        kn_msg_t *reply = NULL;
        rc = gw_init_wait (init, id, 250, &reply);
        const char *role = rc == 0 ? json_string_value (json_object_get (
            kn_msg_content (reply), "role")) : NULL;
        if (rc == 0 && role && strcmp (role, "init") == 0) {
            if (reply_p)
                *reply_p = json_deep_copy (kn_msg_content (reply));
            kn_msg_destroy (&reply);
            return 0;
        }
        kn_msg_destroy (&reply);                //  not init's hello: keep asking
        if (rc == -EPIPE || rc == -EPROTO)
            return rc;
        if (zclock_mono () >= deadline)
            return -ETIMEDOUT;
        rc = s_init_hello_send (init, extra, buf, len, id);
    }
    return rc;
}

//  What a blocking chat with the kernel waits for.
typedef struct {
    const char *want_type;          //  stop at this msg_type ...
    const char *parent_id;          //  ... with this parent msg_id (NULL: any)
    const char *state;              //  ... and this execution_state (NULL: any)
    json_t *got;                    //  the message's content, then owned by the caller
    gw_init_t *init;                //  watched for kernel_exited meanwhile, NULL: not
    char died [200];                //  init's description, when the kernel died
} s_wait_t;

static int
s_on_msg (void *arg, kn_msg_t **msg_p)
{
    s_wait_t *w = arg;
    const char *pid = json_string_value (json_object_get (kn_msg_parent (*msg_p), "msg_id"));
    int stop = strcmp (kn_msg_type (*msg_p), w->want_type) == 0
            && (!w->parent_id || (pid && strcmp (pid, w->parent_id) == 0))
            && (!w->state || strcmp (json_string_value (json_object_get (
                    kn_msg_content (*msg_p), "execution_state")) ?: "", w->state) == 0);
    if (stop)
        w->got = json_incref (kn_msg_content (*msg_p));
    kn_msg_destroy (msg_p);
    return stop;
}

//  Init's notices meanwhile: 1 when the kernel died (w->died says how).
//  Waiting on for a reply of a dead kernel would only time out.
static int
s_init_notices (s_wait_t *w)
{
    kn_msg_t *msg = NULL;
    int rc = 0;
    while (rc == 0 && gw_init_pump (w->init, &msg) == 0) {
        if (strcmp (kn_msg_type (msg), "kernel_exited") == 0) {
            snprintf (w->died, sizeof w->died, "%s", json_string_value (json_object_get (
                      kn_msg_content (msg), "description")) ?: "the kernel exited");
            rc = 1;
        }
        kn_msg_destroy (&msg);
    }
    return rc;
}

//  Read the channel until w is met. 0, -ETIMEDOUT, -ECONNRESET (the kernel
//  died: w->died), or the channel's error.
static int
s_chan_wait (gw_chan_t *chan, s_wait_t *w, int64_t deadline)
{
    while (zclock_mono () < deadline) {
        struct pollfd p [2] = { { gw_chan_fd (chan), POLLIN, 0 },
                                { w->init ? gw_init_fd (w->init) : -1, POLLIN, 0 } };
        if (gw_chan_wants_write (chan)) {
            p [0].events |= POLLOUT;
            if (gw_chan_flush (chan) < 0)
                return -EPIPE;
        }
        int64_t left = deadline - zclock_mono ();
        poll (p, 2, left > 0 ? (int) left : 0);
        if (p [1].revents && s_init_notices (w))
            return -ECONNRESET;
        const char *why = NULL;
        int rc = gw_chan_read (chan, s_on_msg, w, &why);
        if (rc > 0)
            return 0;
        if (rc < 0)
            return rc;
    }
    return -ETIMEDOUT;
}

//  Send the kernel a driver hello (with entropy when given) and wait for
//  its hello. chan wraps a dup of the port.
static int
s_kernel_hello (gw_chan_t *chan, const char *entropy_b64, int64_t deadline)
{
    json_t *c = json_pack ("{s:s, s:i, s:s, s:s, s:f}", "protocol", "cellvm-channel",
                           "version", 1, "role", "driver", "implementation", "cellvm-gateway",
                           "time", (double) time (NULL));
    if (entropy_b64)
        json_object_set_new (c, "entropy", json_string (entropy_b64));
    kn_msg_t *hello = kn_msg_new (KN_CH_CELLVM, "hello", NULL, &c, "template");
    int rc = gw_chan_send (chan, hello);
    kn_msg_destroy (&hello);
    s_wait_t w = { .want_type = "hello" };
    if (rc == 0)
        rc = s_chan_wait (chan, &w, deadline);
    json_decref (w.got);
    return rc;
}


//  ==========================================================================
//  Building.

//  The kernel runs code as a silent cell (no history, no output, no count)
//  and goes idle: no partial frame is left on the channel.
static int
s_silent_cell (gw_chan_t *chan, const char *code, gw_init_t *init, int64_t deadline,
               char *err, size_t errlen)
{
    json_t *c = json_pack ("{s:s, s:b, s:b, s:{}, s:b, s:b}", "code", code, "silent", 1,
                           "store_history", 0, "user_expressions", "allow_stdin", 0,
                           "stop_on_error", 1);
    kn_msg_t *req = kn_msg_new (KN_CH_SHELL, "execute_request", NULL, &c, "template");
    char id [64];
    snprintf (id, sizeof id, "%s", kn_msg_id (req));
    int rc = gw_chan_send (chan, req);
    kn_msg_destroy (&req);
    s_wait_t reply = { .want_type = "execute_reply", .parent_id = id, .init = init };
    s_wait_t idle = { .want_type = "status", .parent_id = id, .state = "idle", .init = init };
    if (rc == 0)
        rc = s_chan_wait (chan, &reply, deadline);
    const char *st = json_string_value (json_object_get (reply.got, "status"));
    if (rc == 0 && (!st || strcmp (st, "ok"))) {
        snprintf (err, errlen, "warm-up cell failed: %s: %s", st ? st : "?",
                  json_string_value (json_object_get (reply.got, "evalue")) ?: "");
        rc = -EIO;
    }
    if (rc == 0)
        rc = s_chan_wait (chan, &idle, deadline);
    if (rc == -ECONNRESET && !err [0])
        snprintf (err, errlen, "warm-up cell: the kernel died: %s", reply.died [0] ? reply.died
                  : idle.died);
    if (rc < 0 && !err [0])
        snprintf (err, errlen, "warm-up cell: %s", strerror (-rc));
    json_decref (reply.got);
    json_decref (idle.got);
    return rc;
}

//  Boot vm to a warmed-up kernel. *init_p and *chan_p stay open (connected
//  through the snapshot, as in the tested recipe).
static int
s_boot_warm (gw_vm_t *vm, gw_init_t **init_p, gw_chan_t **chan_p, char *err, size_t errlen)
{
    int64_t deadline = zclock_mono () + 300000;
    int fd = -1, rc = gw_vm_wait_port (vm, "init", 10000, &fd);
    if (rc == 0) {
        *init_p = gw_init_new (fd, KN_FRAME_MAX_DEFAULT);
        rc = s_init_hello (*init_p, NULL, NULL, 0, deadline, NULL);
    }
    if (rc == 0)
        rc = gw_vm_wait_port (vm, "kernel", 10000, &fd);
    if (rc == 0) {
        *chan_p = gw_chan_new (fd, KN_FRAME_MAX_DEFAULT, KN_FRAME_MAX_DEFAULT, 0);
        gw_chan_hunt (*chan_p);
        rc = s_kernel_hello (*chan_p, NULL, deadline);
    }
    if (rc < 0) {
        snprintf (err, errlen, "template boot: no %s hello (%s); see %s",
                  *chan_p ? "kernel" : "init", strerror (-rc), gw_vm_console_log (vm));
        return rc;
    }
    gw_log (GW_LOG_INFO, "template.kernel_ready", "pid=%d", gw_vm_pid (vm));
    return s_silent_cell (*chan_p, S_WARMUP, *init_p, deadline, err, errlen);
}

//  Stop the template, save its state into dir/state, copy its disk.
static int
s_save (gw_vm_t *vm, const char *dir, char *err, size_t errlen)
{
    char path [PATH_MAX + 32], disk [PATH_MAX + 32];
    gw_qmp_t *qmp = s_qmp_connect (vm, 5000, err, errlen);
    int rc = qmp ? s_ignore_shared (qmp, err, errlen) : -EIO;
    if (rc == 0)
        rc = s_qmp (qmp, "stop", NULL, err, errlen);
    snprintf (path, sizeof path, "%s/state", dir);
    if (rc == 0)
        rc = s_migrate_fd (qmp, "migrate", path, O_WRONLY | O_CREAT | O_TRUNC, err, errlen);
    if (rc == 0)
        rc = s_wait_migration (qmp, zclock_mono () + 60000, err, errlen);
    snprintf (path, sizeof path, "%s/workspace.qcow2", gw_vm_run_dir (vm));
    snprintf (disk, sizeof disk, "%s/workspace.qcow2", dir);
    if (rc == 0 && (rc = gw_rundir_copy (path, disk, true)) < 0)
        snprintf (err, errlen, "copy %s: %s", path, strerror (-rc));
    gw_qmp_destroy (&qmp);
    return rc;
}

static int
s_write_meta (const char *dir, const char *key, const gw_vm_config_t *cfg, unsigned tsc_khz,
              int64_t build_ms)
{
    char path [PATH_MAX + 32], sha [65];
    struct stat st;
    snprintf (path, sizeof path, "%s/state", dir);
    if (stat (path, &st) < 0 || s_sha256_file (path, sha) < 0)
        return -EIO;
    json_t *meta = json_pack ("{s:s, s:o, s:I, s:s, s:I, s:I, s:I}", "key", key,
                              "inputs", s_key_inputs (cfg), "state_bytes",
                              (json_int_t) st.st_size, "state_sha256", sha,
                              "tsc_khz", (json_int_t) tsc_khz, "build_ms", (json_int_t) build_ms,
                              "built_at", (json_int_t) time (NULL));
    snprintf (path, sizeof path, "%s/meta.json", dir);
    int rc = json_dump_file (meta, path, JSON_INDENT (1) | JSON_SORT_KEYS) < 0 ? -EIO : 0;
    json_decref (meta);
    return rc;
}

//  A failed build's guest console, last lines, into the log: the VM and its
//  run dir are gone right after, and the console says why.
static void
s_log_console (gw_vm_t *vm)
{
    char buf [4097];
    int fd = open (gw_vm_console_log (vm), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    off_t end = fd >= 0 ? lseek (fd, 0, SEEK_END) : -1;
    ssize_t n = end >= 0 ? pread (fd, buf, sizeof buf - 1, end > 4096 ? end - 4096 : 0) : -1;
    if (fd >= 0)
        close (fd);
    buf [n > 0 ? n : 0] = '\0';
    char *line = end > 4096 ? strchr (buf, '\n') : buf;     //  skip a cut first line
    for (char *next; line && *line; line = next) {
        next = strchr (line, '\n');
        if (next)
            *next++ = '\0';
        for (char *c = line; *c; c++)
            if (*c == '"' || (unsigned char) *c < 0x20)
                *c = '\'';
        if (*line)
            gw_log (GW_LOG_WARN, "template.console", "line=\"%.300s\"", line);
    }
}

//  Boot, warm up and save into tmp, which becomes dir.
static int
s_build_into (const char *tmp, const char *dir, const char *key, const gw_vm_config_t *cfg,
              char *err, size_t errlen)
{
    char layer [PATH_MAX + 32], backing [PATH_MAX + 24];
    snprintf (layer, sizeof layer, "%s/layer.qcow2", tmp);
    snprintf (backing, sizeof backing, "%s/workspace.qcow2", dir);
    int64_t t0 = zclock_mono ();
    char ram [PATH_MAX + 32];
    snprintf (ram, sizeof ram, "%s/ram", tmp);
    gw_vm_config_t c = *cfg;
    c.mem_path = ram;
    c.mem_share = true;
    c.incoming_defer = false;
    c.disk_backing = NULL;
    c.disk_seed = NULL;
    gw_init_t *init = NULL;
    gw_chan_t *chan = NULL;
    gw_vm_t *vm = gw_vm_new (&c, err, errlen);
    int rc = vm ? gw_vm_start (vm, err, errlen) : -EIO;
    if (rc == 0)
        rc = s_boot_warm (vm, &init, &chan, err, errlen);
    if (rc == 0)
        rc = s_save (vm, tmp, err, errlen);
    if (rc == 0)
        rc = gw_vm_make_layer (vm, layer, backing, err, errlen);
    if (rc == 0)
        rc = s_write_meta (tmp, key, &c, c.tsc_khz ? c.tsc_khz : gw_accel_tsc_khz (),
                           zclock_mono () - t0);
    if (rc < 0 && vm)
        s_log_console (vm);
    gw_chan_destroy (&chan);
    gw_init_destroy (&init);
    gw_vm_destroy (&vm);
    return rc;
}

int
gw_template_build (const char *base, const gw_vm_config_t *cfg, char *err, size_t errlen)
{
    assert (base && cfg);
    char key [GW_TEMPLATE_KEY_LEN + 1], dir [PATH_MAX], tmp [PATH_MAX + 8], lock [PATH_MAX + 8];
    int lock_fd = -1, rc = gw_template_key (cfg, key, sizeof key, err, errlen);
    if (rc < 0 || (rc = s_mkdirs (base)) < 0)
        goto fail;
    snprintf (dir, sizeof dir, "%s/%s", base, key);
    snprintf (tmp, sizeof tmp, "%s.tmp", dir);
    snprintf (lock, sizeof lock, "%s.lock", dir);
    lock_fd = open (lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (lock_fd < 0 || flock (lock_fd, LOCK_EX | LOCK_NB) < 0) {
        rc = lock_fd < 0 ? -errno : -EBUSY;
        snprintf (err, errlen, "template %s: %s", dir, rc == -EBUSY ? "another process is "
                  "building it" : strerror (-rc));
        goto fail;
    }
    gw_log (GW_LOG_INFO, "template.building", "dir=%s", dir);
    int64_t t0 = zclock_mono ();
    gw_rundir_remove_tree (tmp);                        //  a build that died half way
    if ((rc = s_mkdirs (tmp)) < 0 || (rc = s_build_into (tmp, dir, key, cfg, err, errlen)) < 0)
        goto fail;
    gw_rundir_remove_tree (dir);
    if (rename (tmp, dir) < 0) {
        rc = -errno;
        goto fail;
    }
    gw_log (GW_LOG_INFO, "template.built", "dir=%s ms=%lld", dir, (long long) (zclock_mono () - t0));
    close (lock_fd);
    return 0;
fail:
    if (rc != -EBUSY && lock_fd >= 0)
        gw_rundir_remove_tree (tmp);
    if (lock_fd >= 0)
        close (lock_fd);
    if (!err [0])
        snprintf (err, errlen, "template: %s", strerror (-rc));
    return rc;
}

int
gw_template_build_detached (char *const argv [], const char *log_path)
{
    char self [PATH_MAX];
    ssize_t n = readlink ("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return -errno;
    self [n] = 0;
    pid_t pid = fork ();
    if (pid < 0)
        return -errno;
    if (pid == 0) {                             //  exec only: other threads existed
        setsid ();
        if (fork () != 0)
            _exit (0);
        int null_fd = open ("/dev/null", O_RDWR);
        int log_fd = open (log_path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, 0600);
        dup2 (null_fd, 0);
        dup2 (log_fd >= 0 ? log_fd : null_fd, 1);
        dup2 (log_fd >= 0 ? log_fd : null_fd, 2);
        close_range (3, ~0U, 0);
        sigset_t none;                          //  the gateway blocks SIGTERM for its signalfd
        sigemptyset (&none);
        sigprocmask (SIG_SETMASK, &none, NULL);
        execv (self, argv);
        _exit (127);
    }
    while (waitpid (pid, NULL, 0) < 0 && errno == EINTR)
        ;
    return 0;
}

//  ==========================================================================
//  Restoring.

gw_vm_t *
gw_template_restore (gw_template_t *self, const gw_vm_config_t *cfg, int timeout_ms,
                     char *err, size_t errlen)
{
    assert (self && cfg);
    int64_t deadline = zclock_mono () + timeout_ms;
    gw_vm_config_t c = *cfg;
    c.mem_path = self->ram;
    c.mem_share = false;                        //  copy-on-write
    c.incoming_defer = true;
    c.disk_backing = self->disk;
    c.disk_seed = self->layer [0] ? self->layer : NULL;
    if (self->tsc_khz)
        c.tsc_khz = self->tsc_khz;              //  the template's -append, exactly
    gw_qmp_t *qmp = NULL;
    gw_vm_t *vm = gw_vm_new (&c, err, errlen);
    int rc = vm ? gw_vm_start (vm, err, errlen) : -EIO;
    if (rc == 0 && !(qmp = s_qmp_connect (vm, timeout_ms, err, errlen)))
        rc = -EIO;
    if (rc == 0)
        rc = s_ignore_shared (qmp, err, errlen);
    if (rc == 0)
        rc = s_migrate_fd (qmp, "migrate-incoming", self->state, O_RDONLY, err, errlen);
    if (rc == 0)
        rc = s_wait_migration (qmp, deadline, err, errlen);
    if (rc == 0)
        rc = s_qmp (qmp, "cont", NULL, err, errlen);
    gw_qmp_destroy (&qmp);
    if (rc < 0)
        gw_vm_destroy (&vm);
    return vm;
}

//  n random bytes from the host.
static int
s_random (uint8_t *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom (buf + got, n - got, 0);
        if (r < 0 && errno != EINTR)
            return -errno;
        got += r > 0 ? (size_t) r : 0;
    }
    return 0;
}

//  Init's reseed: a hello carrying 64 random bytes and the host's clock.
static int
s_reseed_init (gw_init_t *init, int64_t deadline, char *err, size_t errlen)
{
    uint8_t pool [64];
    struct timespec now;
    clock_gettime (CLOCK_REALTIME, &now);
    json_t *extra = json_pack ("{s:f}", "time", (double) now.tv_sec + now.tv_nsec / 1e9);
    json_t *reply = NULL;
    int rc = s_random (pool, sizeof pool);
    if (rc == 0)
        rc = s_init_hello (init, extra, pool, sizeof pool, deadline, &reply);
    json_decref (extra);
    json_int_t credited = json_integer_value (json_object_get (reply, "entropy_bytes"));
    if (rc == 0 && credited <= 0)
        rc = -EPROTO;
    if (rc < 0)
        snprintf (err, errlen, "init did not take entropy and time (%s)", strerror (-rc));
    else
        gw_log (GW_LOG_INFO, "vm.reseeded", "entropy_bytes=%lld clock_adjusted_s=%.3f",
                (long long) credited, json_number_value (json_object_get (reply, "adjusted_s")));
    json_decref (reply);
    return rc;
}

static int
s_reseed_kernel (int fd, int64_t deadline, char *err, size_t errlen)
{
    uint8_t seed [32];
    unsigned char b64 [64];
    int rc = s_random (seed, sizeof seed);
    if (rc < 0)
        return rc;
    EVP_EncodeBlock (b64, seed, sizeof seed);
    int dup_fd = fcntl (fd, F_DUPFD_CLOEXEC, 3);
    if (dup_fd < 0)
        return -errno;
    gw_chan_t *chan = gw_chan_new (dup_fd, KN_FRAME_MAX_DEFAULT, KN_FRAME_MAX_DEFAULT, 0);
    gw_chan_hunt (chan);
    rc = s_kernel_hello (chan, (const char *) b64, deadline);
    gw_chan_destroy (&chan);
    if (rc < 0)
        snprintf (err, errlen, "the restored kernel did not answer its hello (%s)",
                  strerror (-rc));
    return rc;
}

int
gw_template_reseed (gw_vm_t *vm, int timeout_ms, gw_init_t **init_p, int *kernel_fd_p,
                    char *err, size_t errlen)
{
    assert (vm && init_p && kernel_fd_p);
    int64_t deadline = zclock_mono () + timeout_ms;
    int ifd = -1, kfd = -1;
    gw_init_t *init = NULL;
    int rc = gw_vm_wait_port (vm, "init", timeout_ms, &ifd);
    if (rc == 0) {
        init = gw_init_new (ifd, KN_FRAME_MAX_DEFAULT);
        rc = s_reseed_init (init, deadline, err, errlen);
    }
    else
        snprintf (err, errlen, "init port: %s", strerror (-rc));
    if (rc == 0 && (rc = gw_vm_wait_port (vm, "kernel", timeout_ms, &kfd)) < 0)
        snprintf (err, errlen, "kernel port: %s", strerror (-rc));
    if (rc == 0)
        rc = s_reseed_kernel (kfd, deadline, err, errlen);
    if (rc < 0)
        goto fail;
    *init_p = init;
    *kernel_fd_p = kfd;
    return 0;
fail:
    gw_init_destroy (&init);
    if (kfd >= 0)
        close (kfd);
    return rc;
}

//  A kernel_info round trip (busy, reply, idle) on chan.
static int
s_kernel_info (gw_chan_t *chan, int64_t deadline)
{
    json_t *c = json_object ();
    kn_msg_t *req = kn_msg_new (KN_CH_SHELL, "kernel_info_request", NULL, &c, "template");
    char id [64];
    snprintf (id, sizeof id, "%s", kn_msg_id (req));
    int rc = gw_chan_send (chan, req);
    kn_msg_destroy (&req);
    s_wait_t idle = { .want_type = "status", .parent_id = id, .state = "idle" };
    if (rc == 0)
        rc = s_chan_wait (chan, &idle, deadline);
    json_decref (idle.got);
    return rc;
}

int
gw_template_warm (int kernel_fd, gw_init_t *init, int timeout_ms, char *err, size_t errlen)
{
    int64_t deadline = zclock_mono () + timeout_ms;
    int dup_fd = fcntl (kernel_fd, F_DUPFD_CLOEXEC, 3);
    if (dup_fd < 0) {
        snprintf (err, errlen, "dup: %s", strerror (errno));
        return -errno;
    }
    gw_chan_t *chan = gw_chan_new (dup_fd, KN_FRAME_MAX_DEFAULT, KN_FRAME_MAX_DEFAULT, 0);
    int rc = s_kernel_info (chan, deadline);
    if (rc < 0)
        snprintf (err, errlen, "warming the clone: kernel_info: %s", strerror (-rc));
    else
        rc = s_silent_cell (chan, "pass", init, deadline, err, errlen);
    gw_chan_destroy (&chan);
    return rc;
}
