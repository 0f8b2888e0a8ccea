/*  gw_files - files between the client and the session's /workspace. */
#include "files/gw_files.h"
#include "ch_util.h"
#include "base/gw_log.h"
#include "files/gw_xfer.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct _gw_files_t {
    gw_xfer_t *xfer;            //  moves the bytes
    char *dir;                  //  artifacts for this session; NULL: off
    size_t max_file, max_session;
    size_t used;                //  bytes copied (or being copied) so far
};

//  One output_files list being copied out, an entry at a time.
typedef struct {
    gw_files_t *files;
    char *outdir;
    json_t *list;               //  the entries, annotated in place (a reference)
    size_t next;                //  the entry to do next
    json_t *entry;              //  the entry being copied
    int fd;                     //  its host copy
    char host [4096];           //  and its path
    size_t reserved;            //  bytes counted against the session cap
    gw_files_collected_fn *done;
    void *arg;
} s_collect_t;

//  A client's put or get on its way.
typedef struct {
    gw_files_reply_fn *reply;
    void *arg;
    char path [1100];
    bool put;
} s_request_t;

gw_files_t *
gw_files_new (gw_backend_t *backend, gw_worker_t *worker, const char *dir, const char *session,
              size_t max_file, size_t max_session)
{
    gw_files_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->xfer = gw_xfer_new (backend, worker);
    if (dir) {
        size_t n = strlen (dir) + strlen (session) + 2;
        self->dir = malloc (n);
        if (!self->dir)
            abort ();
        snprintf (self->dir, n, "%s/%s", dir, session);
    }
    self->max_file = max_file ? max_file : GW_FILES_MAX_FILE;
    self->max_session = max_session ? max_session : GW_FILES_MAX_SESSION;
    return self;
}

void
gw_files_destroy (gw_files_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        gw_xfer_destroy (&(*self_p)->xfer);
        free ((*self_p)->dir);
        free (*self_p);
        *self_p = NULL;
    }
}

bool
gw_files_is_request (const char *type)
{
    return strcmp (type, "cellvm_put_request") == 0 || strcmp (type, "cellvm_get_request") == 0;
}

size_t
gw_files_busy (const gw_files_t *self)
{
    assert (self);
    return gw_xfer_queued (self->xfer);
}

void
gw_files_abort (gw_files_t *self, const char *why)
{
    assert (self);
    gw_xfer_abort (self->xfer, why);
}

//  --------------------------------------------------------------------------
//  cellvm_put_request / cellvm_get_request

static json_t *
s_error (const char *ename, const char *evalue)
{
    return json_pack ("{s:s, s:s, s:s, s:[]}", "status", "error", "ename", ename,
                      "evalue", evalue, "traceback");
}

static void
s_request_done (void *arg, json_t **content_p, uint8_t **data_p, size_t len)
{
    s_request_t *r = arg;
    json_t *c = *content_p;
    //  A get answers with the client's own spelling of the path (docs/files.md).
    if (!r->put && json_object_get (c, "path"))
        json_object_set_new (c, "path", json_string (r->path));
    r->reply (r->arg, content_p, data_p, len);
    free (r);
}

//  Why req cannot be carried out, or NULL.
static const char *
s_refusal (const ch_msg_t *req, bool put)
{
    json_t *c = ch_msg_content (req);
    const char *path = json_string_value (json_object_get (c, "path"));
    json_t *append = json_object_get (c, "append");
    size_t len = 0;
    if (!path || !*path || strlen (path) > 1024)
        return "content.path must be a non-empty string of at most 1024 bytes";
    if (append && !json_is_boolean (append))
        return "content.append must be true or false";
    //  Init takes puts there from the gateway's own copy (gw_share), never a client's.
    if (put && strncmp (path, "/notebook", 9) == 0 && (path [9] == '/' || !path [9]))
        return "PathOutsideWorkspace: /notebook is the read-only copy of the notebook's "
               "folder; cellvm_put_request writes under /workspace only";
    if (put && ch_msg_nbuffers (req) > 1)
        return "send the file's bytes as exactly one buffer";
    if (put && ch_msg_buffer (req, 0, &len) && len > GW_FILES_MAX_PUT)
        return "the file is over the 268435456-byte (256 MiB) limit of one cellvm_put_request: "
               "send it in parts, each with {\"append\": true} after the first";
    return NULL;
}

void
gw_files_request (gw_files_t *self, ch_msg_t *req, gw_files_reply_fn *reply, void *arg)
{
    assert (self && req && reply);
    bool put = strcmp (ch_msg_type (req), "cellvm_put_request") == 0;
    const char *why = s_refusal (req, put);
    if (why) {
        json_t *c = s_error ("BadRequest", why);
        uint8_t *none = NULL;
        reply (arg, &c, &none, 0);
        json_decref (c);
        return;
    }
    s_request_t *r = calloc (1, sizeof *r);
    if (!r)
        abort ();
    r->reply = reply;
    r->arg = arg;
    r->put = put;
    json_t *c = ch_msg_content (req);
    snprintf (r->path, sizeof r->path, "%s", json_string_value (json_object_get (c, "path")));
    if (put) {
        size_t len = 0;
        ch_free_fn *free_fn = NULL;
        void *hint = NULL;
        uint8_t *data = ch_msg_take_buffer (req, 0, &len, &free_fn, &hint);
        gw_xfer_put (self->xfer, r->path, json_is_true (json_object_get (c, "append")), data,
                     len, free_fn, hint, s_request_done, r);
    }
    else
        gw_xfer_get (self->xfer, r->path, GW_FILES_MAX_PUT, -1, s_request_done, r);
}

//  --------------------------------------------------------------------------
//  Artifacts

//  rel of path under outdir, or NULL: no "..", no empty or dot parts.
static const char *
s_rel_path (const char *outdir, const char *path)
{
    size_t n = strlen (outdir);
    if (strncmp (path, outdir, n) != 0 || path [n] != '/' || !path [n + 1])
        return NULL;
    const char *rel = path + n + 1;
    for (const char *p = rel; *p; ) {
        const char *e = strchr (p, '/');
        size_t k = e ? (size_t) (e - p) : strlen (p);
        if (k == 0 || (k == 1 && p [0] == '.') || (k == 2 && p [0] == '.' && p [1] == '.'))
            return NULL;
        p += k + (e ? 1 : 0);
    }
    return rel;
}

//  Open base/rel for writing, making its directories; no symlinks followed.
static int
s_open_beneath (const char *base, const char *rel, char *out, size_t cap)
{
    if (snprintf (out, cap, "%s/%s", base, rel) >= (int) cap)
        return -ENAMETOOLONG;
    char *slash = strrchr (out, '/');
    *slash = 0;
    int rc = ch_mkdir_p (out, 0700);
    *slash = '/';
    if (rc < 0)
        return rc;
    int fd = open (out, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    return fd < 0 ? -errno : fd;
}

static void s_collect_next (s_collect_t *c);

static void
s_skip (s_collect_t *c, const char *why)
{
    json_object_set_new (c->entry, "skipped", json_string (why));
    gw_log (GW_LOG_WARN, "artifact.skip", "reason=\"%.200s\"", why);
}

//  One entry's bytes have arrived (or not): check them, annotate the entry.
static void
s_entry_done (void *arg, json_t **content_p, uint8_t **data_p, size_t len)
{
    (void) data_p, (void) len;
    s_collect_t *c = arg;
    json_t *r = *content_p;
    const char *want = json_string_value (json_object_get (c->entry, "sha256"));
    const char *got = json_string_value (json_object_get (r, "sha256"));
    bool ok = strcmp (json_string_value (json_object_get (r, "status")) ?: "", "ok") == 0;
    close (c->fd);
    c->fd = -1;
    if (ok && got && want && strcmp (got, want) == 0)
        json_object_set_new (c->entry, "host_path", json_string (c->host));
    else {
        unlink (c->host);
        c->files->used -= c->reserved;
        s_skip (c, ok ? "the file changed after the cell listed it"
                      : json_string_value (json_object_get (r, "evalue")) ?: "transfer failed");
    }
    s_collect_next (c);
}

//  Start copying entry, or say why not. True when a transfer was started.
static bool
s_collect_one (s_collect_t *c, json_t *entry)
{
    gw_files_t *self = c->files;
    const char *path = json_string_value (json_object_get (entry, "path"));
    const char *sha = json_string_value (json_object_get (entry, "sha256"));
    json_int_t size = json_integer_value (json_object_get (entry, "size"));
    const char *rel = path ? s_rel_path (c->outdir, path) : NULL;
    c->entry = entry;
    if (!rel || !sha)
        s_skip (c, "not a plain path under the output directory");
    else if (size < 0 || (size_t) size > self->max_file)
        s_skip (c, "larger than the per-file artifact cap");
    else if (self->used + (size_t) size > self->max_session)
        s_skip (c, "the session's artifact cap is used up");
    else if ((c->fd = s_open_beneath (self->dir, rel, c->host, sizeof c->host)) < 0)
        s_skip (c, "cannot write the artifacts directory");
    else {
        c->reserved = (size_t) size;
        self->used += c->reserved;
        gw_xfer_get (self->xfer, path, self->max_file, c->fd, s_entry_done, c);
        return true;
    }
    return false;
}

//  On to the next entry; at the end, tell the owner and free.
static void
s_collect_next (s_collect_t *c)
{
    while (c->next < json_array_size (c->list)) {
        json_t *entry = json_array_get (c->list, c->next++);
        if (json_is_object (entry) && s_collect_one (c, entry))
            return;
    }
    c->done (c->arg);
    json_decref (c->list);
    free (c->outdir);
    free (c);
}

bool
gw_files_collect (gw_files_t *self, const char *outdir, json_t *files,
                  gw_files_collected_fn *done, void *arg)
{
    assert (self && done);
    if (!self->dir || !outdir || !*outdir || !json_array_size (files))
        return false;
    int rc = ch_mkdir_p (self->dir, 0700);
    if (rc < 0) {
        gw_log (GW_LOG_ERROR, "artifact.dir", "dir=%s reason=\"%s\"", self->dir, strerror (-rc));
        return false;
    }
    s_collect_t *c = calloc (1, sizeof *c);
    if (!c || !(c->outdir = strdup (outdir)))
        abort ();
    c->files = self;
    c->list = json_incref (files);
    c->fd = -1;
    c->done = done;
    c->arg = arg;
    s_collect_next (c);
    return true;
}
