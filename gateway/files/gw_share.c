/*  gw_share - the launch folder, copied into the session (see gw_share.h). */
#include "files/gw_share.h"
#include "base/gw_log.h"
#include "files/gw_xfer.h"
#include "ch_clock.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

//  ---------------------------------------------------------------------------
//  The walk (worker thread, or a test): no socket, no reactor state.

typedef struct {
    gw_share_file_t *files;
    size_t count, cap, max_bytes, visited;
    gw_share_stats_t *stats;
} s_walk_t;

static int
s_cmp (const void *a, const void *b)
{
    return strcmp (*(char *const *) a, *(char *const *) b);
}

//  The entry names of an open directory, sorted (stable caps), hidden ones counted out.
static char **
s_names (int dfd, size_t *n_p, gw_share_stats_t *stats)
{
    int fd = dup (dfd);
    DIR *d = fd < 0 ? NULL : fdopendir (fd);
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while (d && (e = readdir (d))) {
        if (e->d_name [0] == '.') {
            stats->hidden += strcmp (e->d_name, ".") && strcmp (e->d_name, "..");
            continue;
        }
        if (n == cap && !(names = realloc (names, (cap = cap ? 2 * cap : 16) * sizeof *names)))
            abort ();
        if (!(names [n++] = strdup (e->d_name)))
            abort ();
    }
    if (d)
        closedir (d);
    else if (fd >= 0)
        close (fd);
    if (n)
        qsort (names, n, sizeof *names, s_cmp);
    *n_p = n;
    return names;
}

//  Read the whole regular file name (at most its size when opened).
static int
s_read_file (int dfd, const char *name, const struct stat *st, uint8_t **data_p)
{
    int fd = openat (dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t len = (size_t) st->st_size, got = 0;
    uint8_t *data = malloc (len ? len : 1);
    if (!data)
        abort ();
    while (got < len) {
        ssize_t n = read (fd, data + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t) n;
    }
    close (fd);
    if (got < len) {                            //  shrank meanwhile, or an I/O error
        free (data);
        return -EIO;
    }
    *data_p = data;
    return 0;
}

static void
s_take (s_walk_t *w, const char *rel, uint8_t *data, size_t len)
{
    if (w->count == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 32;
        if (!(w->files = realloc (w->files, w->cap * sizeof *w->files)))
            abort ();
    }
    w->files [w->count++] = (gw_share_file_t) { strdup (rel), data, len };
    w->stats->files++;
    w->stats->bytes += len;
}

static void s_walk_dir (s_walk_t *w, int dfd, const char *prefix, unsigned depth);
static void s_walk_job (void *arg);

//  One entry of a directory: a file taken, a directory walked, or counted out.
static void
s_walk_entry (s_walk_t *w, int dfd, const char *prefix, const char *name, unsigned depth)
{
    char rel [GW_SHARE_PATH_MAX + 1];
    struct stat st;
    if (++w->visited > GW_SHARE_MAX_VISITS) {
        w->stats->over_cap++;                   //  not even looked at
        return;
    }
    int n = snprintf (rel, sizeof rel, "%s%s%s", prefix, *prefix ? "/" : "", name);
    if (n < 0 || (size_t) n >= sizeof rel || fstatat (dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        w->stats->special++;
    else if (S_ISLNK (st.st_mode))
        w->stats->links++;
    else if (S_ISDIR (st.st_mode)) {
        int sub = depth < GW_SHARE_MAX_DEPTH
                ? openat (dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
        if (sub < 0)
            w->stats->over_cap++;
        else {
            s_walk_dir (w, sub, rel, depth + 1);
            close (sub);
        }
    }
    else if (!S_ISREG (st.st_mode))
        w->stats->special++;
    else if (w->count >= GW_SHARE_MAX_FILES || (size_t) st.st_size > w->max_bytes - w->stats->bytes)
        w->stats->over_cap++;
    else {
        uint8_t *data = NULL;
        if (s_read_file (dfd, name, &st, &data) == 0)
            s_take (w, rel, data, (size_t) st.st_size);
        else
            w->stats->special++;
    }
}

static void
s_walk_dir (s_walk_t *w, int dfd, const char *prefix, unsigned depth)
{
    size_t n = 0;
    char **names = s_names (dfd, &n, w->stats);
    for (size_t i = 0; i < n; i++) {
        s_walk_entry (w, dfd, prefix, names [i], depth);
        free (names [i]);
    }
    free (names);
}

int
gw_share_scan (const char *dir, size_t max_bytes, gw_share_file_t **files_p, size_t *count_p,
               gw_share_stats_t *stats)
{
    memset (stats, 0, sizeof *stats);
    *files_p = NULL;
    *count_p = 0;
    int dfd = open (dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return -errno;
    s_walk_t w = { .max_bytes = max_bytes, .stats = stats };
    s_walk_dir (&w, dfd, "", 0);
    close (dfd);
    *files_p = w.files;
    *count_p = w.count;
    return 0;
}

void
gw_share_files_free (gw_share_file_t *files, size_t count)
{
    for (size_t i = 0; files && i < count; i++) {
        free (files [i].rel);
        free (files [i].data);
    }
    free (files);
}

void
gw_share_summary (const gw_share_stats_t *st, char *out, size_t len)
{
    out [0] = 0;
    if (!st->failed && !st->over_cap && !st->links && !st->special)
        return;                                 //  hidden entries are left out by design
    snprintf (out, len, "cellvm: %zu files of the notebook's folder are in " GW_SHARE_ROOT
              " (read-only); left out: %zu past the size, file or depth caps (--share-max), "
              "%zu symlinks, %zu special or unreadable files, %zu that failed to copy%s%s.\n",
              st->files - st->failed, st->over_cap, st->links, st->special, st->failed,
              st->error [0] ? ": " : "", st->error);
}

//  ---------------------------------------------------------------------------
//  The copy (reactor thread, but for the job's walk).

typedef struct {
    gw_share_t *share;                          //  not touched by the worker
    char dir [PATH_MAX];
    size_t max_bytes;
    gw_share_file_t *files;
    size_t count;
    gw_share_stats_t stats;
    int rc;
} s_job_t;

struct _gw_share_t {
    char dir [PATH_MAX];
    size_t max_bytes;
    gw_backend_t *backend;
    gw_worker_t *worker;
    s_job_t *job;                               //  the walk under way, the worker's
    gw_xfer_t *xfer;                            //  the puts under way
    size_t pending;
    gw_share_stats_t stats;
    int64_t started;                            //  ch_clock_mono_ms
    gw_share_done_fn *done;
    void *arg;
};

gw_share_t *
gw_share_new (const char *dir, size_t max_bytes, gw_backend_t *backend, gw_worker_t *worker)
{
    gw_share_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    snprintf (self->dir, sizeof self->dir, "%s", dir);
    self->max_bytes = max_bytes ? max_bytes : GW_SHARE_MAX_BYTES;
    self->backend = backend;
    self->worker = worker;
    return self;
}

static void
s_job_free (void *arg)
{
    s_job_t *job = arg;
    gw_share_files_free (job->files, job->count);
    free (job);
}

void
gw_share_stop (gw_share_t *self)
{
    if (self->job) {
        gw_worker_cancel (self->worker, s_walk_job, self->job, s_job_free);
        self->job = NULL;
    }
    gw_xfer_destroy (&self->xfer);
    self->pending = 0;
}

void
gw_share_destroy (gw_share_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    gw_share_stop (*self_p);
    free (*self_p);
    *self_p = NULL;
}

//  The xfer stays until the next start (this may run inside its done callback).
static void
s_finished (gw_share_t *self)
{
    gw_log (self->stats.failed || self->stats.over_cap ? GW_LOG_WARN : GW_LOG_INFO,
            "share.done", "files=%zu bytes=%zu failed=%zu over_cap=%zu links=%zu special=%zu "
            "hidden=%zu ms=%lld", self->stats.files, self->stats.bytes, self->stats.failed,
            self->stats.over_cap, self->stats.links, self->stats.special, self->stats.hidden,
            (long long) (ch_clock_mono_ms () - self->started));
    if (self->done)
        self->done (self->arg, &self->stats);
}

static void
s_put_done (void *arg, json_t **content_p, uint8_t **data_p, size_t len)
{
    (void) data_p, (void) len;
    gw_share_t *self = arg;
    json_t *c = *content_p;
    const char *status = json_string_value (json_object_get (c, "status"));
    if (!status || strcmp (status, "ok") != 0) {
        const char *why = json_string_value (json_object_get (c, "evalue"));
        if (!self->stats.failed++)
            snprintf (self->stats.error, sizeof self->stats.error, "%s",
                      why ? why : "the copy failed");
    }
    json_decref (c);
    *content_p = NULL;
    if (--self->pending == 0)
        s_finished (self);
}

static void
s_walk_job (void *arg)
{
    s_job_t *job = arg;
    job->rc = gw_share_scan (job->dir, job->max_bytes, &job->files, &job->count, &job->stats);
}

//  The walk is back: queue one put per file (the bytes move into the transfer).
static void
s_walked (void *arg)
{
    s_job_t *job = arg;
    gw_share_t *self = job->share;
    self->job = NULL;
    self->stats = job->stats;
    if (job->rc < 0)
        snprintf (self->stats.error, sizeof self->stats.error, "cannot read %.180s: %s", self->dir,
                  strerror (-job->rc));
    self->pending = job->count + 1;             //  + 1: done runs once, after the loop
    self->xfer = job->count ? gw_xfer_new (self->backend, self->worker) : NULL;
    for (size_t i = 0; i < job->count; i++) {
        char path [GW_SHARE_PATH_MAX + sizeof GW_SHARE_ROOT + 1];
        snprintf (path, sizeof path, GW_SHARE_ROOT "/%s", job->files [i].rel);
        gw_xfer_put (self->xfer, path, false, job->files [i].data, job->files [i].len, NULL,
                     NULL, s_put_done, self);
        job->files [i].data = NULL;
    }
    s_job_free (job);
    if (--self->pending == 0)
        s_finished (self);
}

void
gw_share_start (gw_share_t *self, gw_share_done_fn *done, void *arg)
{
    gw_share_stop (self);
    s_job_t *job = calloc (1, sizeof *job);
    if (!job)
        abort ();
    job->share = self;
    snprintf (job->dir, sizeof job->dir, "%s", self->dir);
    job->max_bytes = self->max_bytes;
    self->done = done;
    self->arg = arg;
    self->started = ch_clock_mono_ms ();
    self->job = job;
    gw_worker_submit (self->worker, s_walk_job, s_walked, job);
}
