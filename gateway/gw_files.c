/*  gw_files - files between the client and the session's /workspace. */
#include "gw_files.h"
#include "gw_log.h"
#include "gw_wsfiles.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct _gw_files_t {
    char *dir;                  //  artifacts for this session; NULL: off
    size_t max_file, max_session;
    size_t used;                //  bytes copied so far
};

gw_files_t *
gw_files_new (const char *dir, const char *session, size_t max_file, size_t max_session)
{
    gw_files_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
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

static json_t *
s_error (const char *ename, const char *evalue)
{
    return json_pack ("{s:s, s:s, s:s, s:[]}", "status", "error", "ename", ename,
                      "evalue", evalue, "traceback");
}

json_t *
gw_files_handle (gw_files_t *self, gw_backend_t *be, const kn_msg_t *req, uint8_t **buf_p,
                 size_t *len_p)
{
    (void) self;
    const char *path = json_string_value (json_object_get (kn_msg_content (req), "path"));
    bool put = strcmp (kn_msg_type (req), "cellvm_put_request") == 0;
    char err [512] = "";
    json_t *reply = NULL;
    *buf_p = NULL;
    *len_p = 0;
    if (!path || !*path || strlen (path) > 1024)
        return s_error ("BadRequest", "content.path must be a non-empty string");
    if (put ? !be->put_file : !be->get_file)
        return s_error ("NotSupported", "this backend cannot move files");
    if (put) {
        size_t len = 0;
        const uint8_t *data = kn_msg_buffer (req, 0, &len);
        if (kn_msg_nbuffers (req) > 1)
            return s_error ("BadRequest", "send the file's bytes as exactly one buffer");
        if (be->put_file (be->ctx, path, data ? data : (const uint8_t *) "", len, &reply,
                          err, sizeof err) < 0)
            return s_error ("FileTransferError", err);
        return reply;
    }
    if (be->get_file (be->ctx, path, GW_FILES_MAX_PUT, buf_p, len_p, err, sizeof err) < 0)
        return s_error ("FileTransferError", err);
    char hex [65];
    gw_sha256_hex (*buf_p, *len_p, hex);
    return json_pack ("{s:s, s:s, s:I, s:s}", "status", "ok", "path", path,
                      "size", (json_int_t) *len_p, "sha256", hex);
}

//  mkdir -p for the directories of rel under base; no symlinks followed.
static int
s_write_beneath (const char *base, const char *rel, const uint8_t *data, size_t len,
                 char *out, size_t cap)
{
    char path [4096];
    if (snprintf (path, sizeof path, "%s/%s", base, rel) >= (int) sizeof path)
        return -ENAMETOOLONG;
    for (char *p = path + strlen (base) + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir (path, 0700) < 0 && errno != EEXIST)
                return -errno;
            *p = '/';
        }
    int fd = open (path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    ssize_t w = write (fd, data, len);
    close (fd);
    if (w < 0 || (size_t) w != len)
        return -EIO;
    snprintf (out, cap, "%s", path);
    return 0;
}

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

//  One entry: copy it or say why not.
static void
s_collect_one (gw_files_t *self, gw_backend_t *be, const char *outdir, json_t *entry)
{
    const char *path = json_string_value (json_object_get (entry, "path"));
    const char *sha = json_string_value (json_object_get (entry, "sha256"));
    json_int_t size = json_integer_value (json_object_get (entry, "size"));
    const char *rel = path ? s_rel_path (outdir, path) : NULL;
    const char *skip = NULL;
    char err [512] = "", host [4096];
    uint8_t *data = NULL;
    size_t len = 0;
    if (!rel || !sha)
        skip = "not a plain path under the output directory";
    else if (size < 0 || (size_t) size > self->max_file)
        skip = "larger than the per-file artifact cap";
    else if (self->used + (size_t) size > self->max_session)
        skip = "the session's artifact cap is used up";
    else if (be->get_file (be->ctx, path, self->max_file, &data, &len, err, sizeof err) < 0)
        skip = err;
    if (!skip) {
        char hex [65];
        gw_sha256_hex (data, len, hex);
        if (strcmp (hex, sha) != 0)
            skip = "the file changed after the cell listed it";
        else if (s_write_beneath (self->dir, rel, data, len, host, sizeof host) < 0)
            skip = "cannot write the artifacts directory";
    }
    free (data);
    if (skip) {
        json_object_set_new (entry, "skipped", json_string (skip));
        gw_log (GW_LOG_WARN, "artifact.skip", "reason=\"%s\"", skip);
        return;
    }
    self->used += len;
    json_object_set_new (entry, "host_path", json_string (host));
}

void
gw_files_collect (gw_files_t *self, gw_backend_t *be, const char *outdir, json_t *files)
{
    assert (self && be);
    if (!self->dir || !be->get_file || !outdir || !json_array_size (files))
        return;
    char *slash = strrchr (self->dir, '/');
    if (slash && slash != self->dir) {          //  the configured dir itself
        *slash = 0;
        mkdir (self->dir, 0700);
        *slash = '/';
    }
    if (mkdir (self->dir, 0700) < 0 && errno != EEXIST) {
        gw_log (GW_LOG_ERROR, "artifact.dir", "dir=%s reason=\"%s\"", self->dir, strerror (errno));
        return;
    }
    size_t i;
    json_t *entry;
    json_array_foreach (files, i, entry)
        if (json_is_object (entry))
            s_collect_one (self, be, outdir, entry);
}
