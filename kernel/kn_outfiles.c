/*  kn_outfiles - which files under the output directory a cell changed. */
#include "kn_outfiles.h"
#include "ch_util.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    char *path;                 //  absolute
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime, ctime;
} s_entry_t;

typedef struct {
    s_entry_t *v;
    size_t n, cap;
    bool truncated;
} s_list_t;

struct _kn_outfiles_t {
    char *dir;
    size_t cap;
    s_list_t snap;              //  sorted by path
};

static void
s_list_clear (s_list_t *l)
{
    for (size_t i = 0; i < l->n; i++)
        free (l->v [i].path);
    free (l->v);
    memset (l, 0, sizeof *l);
}

kn_outfiles_t *
kn_outfiles_new (const char *dir, size_t cap)
{
    assert (dir);
    if (ch_mkdir_p (dir, 0755) < 0)
        return NULL;
    kn_outfiles_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->dir = strdup (dir);
    self->cap = cap;
    return self;
}

void
kn_outfiles_destroy (kn_outfiles_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        s_list_clear (&(*self_p)->snap);
        free ((*self_p)->dir);
        free (*self_p);
        *self_p = NULL;
    }
}

static void
s_add (s_list_t *l, const char *path, const struct stat *st)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->v = realloc (l->v, l->cap * sizeof *l->v);
        if (!l->v)
            abort ();
    }
    s_entry_t *e = &l->v [l->n++];
    e->path = strdup (path);
    e->dev = st->st_dev;
    e->ino = st->st_ino;
    e->size = st->st_size;
    e->mtime = st->st_mtim;
    e->ctime = st->st_ctim;
}

//  Walk dir recursively without following symlinks (lstat, O_NOFOLLOW).
static void
s_walk (s_list_t *l, const char *dir, int depth)
{
    DIR *d = depth < 64 ? opendir (dir) : NULL;
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir (d))) {
        if (!strcmp (de->d_name, ".") || !strcmp (de->d_name, ".."))
            continue;
        if (l->n >= KN_OUTFILES_WALK_CAP) {
            l->truncated = true;
            break;
        }
        char path [4096];
        struct stat st;
        if (snprintf (path, sizeof path, "%s/%s", dir, de->d_name) >= (int) sizeof path
        ||  lstat (path, &st) < 0)
            continue;
        if (S_ISDIR (st.st_mode))
            s_walk (l, path, depth + 1);
        else if (S_ISREG (st.st_mode))
            s_add (l, path, &st);
    }
    closedir (d);
}

static int
s_cmp (const void *a, const void *b)
{
    return strcmp (((const s_entry_t *) a)->path, ((const s_entry_t *) b)->path);
}

static void
s_scan (kn_outfiles_t *self, s_list_t *l)
{
    memset (l, 0, sizeof *l);
    s_walk (l, self->dir, 0);
    if (l->n > 1)       //  v is NULL for an empty list: qsort must not see it
        qsort (l->v, l->n, sizeof *l->v, s_cmp);
}

void
kn_outfiles_snapshot (kn_outfiles_t *self)
{
    assert (self);
    s_list_clear (&self->snap);
    s_scan (self, &self->snap);
}

static bool
s_same (const s_entry_t *a, const s_entry_t *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size
        && a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec
        && a->ctime.tv_sec == b->ctime.tv_sec && a->ctime.tv_nsec == b->ctime.tv_nsec;
}

static json_t *
s_describe (const s_entry_t *e)
{
    char hex [65];
    off_t size = 0;
    if (ch_sha256_file (e->path, O_NOFOLLOW, hex, &size) < 0)
        return NULL;    //  vanished or unreadable since the scan
    const char *base = strrchr (e->path, '/');
    return json_pack ("{s:s, s:I, s:s, s:s}", "path", e->path, "size", (json_int_t) size,
                      "mime", kn_outfiles_mime (base ? base + 1 : e->path), "sha256", hex);
}

json_t *
kn_outfiles_changes (kn_outfiles_t *self, bool *truncated)
{
    assert (self);
    s_list_t now;
    s_scan (self, &now);
    json_t *out = json_array ();
    *truncated = now.truncated;
    for (size_t i = 0; i < now.n; i++) {
        s_entry_t *hit = self->snap.n == 0 ? NULL
                       : bsearch (&now.v [i], self->snap.v, self->snap.n, sizeof *hit, s_cmp);
        if (hit && s_same (hit, &now.v [i]))
            continue;
        if (json_array_size (out) >= self->cap) {
            *truncated = true;
            break;
        }
        json_t *d = s_describe (&now.v [i]);
        if (d)
            json_array_append_new (out, d);
    }
    s_list_clear (&self->snap);
    self->snap = now;
    return out;
}

static const struct { const char *ext, *mime; } s_mimes [] = {
    { "png", "image/png" }, { "jpg", "image/jpeg" }, { "jpeg", "image/jpeg" },
    { "gif", "image/gif" }, { "svg", "image/svg+xml" }, { "webp", "image/webp" },
    { "pdf", "application/pdf" }, { "csv", "text/csv" }, { "tsv", "text/tab-separated-values" },
    { "txt", "text/plain" }, { "log", "text/plain" }, { "md", "text/markdown" },
    { "html", "text/html" }, { "htm", "text/html" }, { "json", "application/json" },
    { "xml", "application/xml" }, { "py", "text/x-python" }, { "ipynb", "application/x-ipynb+json" },
    { "parquet", "application/vnd.apache.parquet" }, { "npy", "application/octet-stream" },
    { "zip", "application/zip" }, { "gz", "application/gzip" }, { "tar", "application/x-tar" },
    { "xlsx", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet" },
    { "mp4", "video/mp4" }, { "wav", "audio/wav" }, { "mp3", "audio/mpeg" },
};

const char *
kn_outfiles_mime (const char *name)
{
    const char *dot = strrchr (name, '.');
    if (dot && dot != name)
        for (size_t i = 0; i < sizeof s_mimes / sizeof s_mimes [0]; i++)
            if (strcasecmp (dot + 1, s_mimes [i].ext) == 0)
                return s_mimes [i].mime;
    return "application/octet-stream";
}
