/*  gw_status - a gateway's status file (see gw_status.h). */
#include "cli/gw_status.h"
#include "base/gw_log.h"
#include "base/gw_owndir.h"
#include "base/gw_procstat.h"
#include "base/gw_runbase.h"
#include "ch_util.h"
#include "ch_clock.h"
#include "ch_io.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct _gw_status_t {
    char path [PATH_MAX];                       //  BASE/sessions/<pid>.json
    char tmp [PATH_MAX];                        //  written, then renamed over path
    json_t *json;                               //  the document, always whole
    bool dirty;                                 //  json differs from the file
    bool warned;                                //  a write failure was logged
    int64_t written_ms;                         //  ch_clock_mono_ms of the last write
    //  Files are written on a thread of their own: a rename on a loaded
    //  host can take longer than a reactor turn may.
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    char *pending;                              //  the next text to write, guarded
    uint64_t posted, written;                   //  guarded
    int last_rc;                                //  guarded
    bool quit, running;
};

//  The keys and what each must hold: the reader checks every one.
typedef enum { S_PID, S_COUNT, S_NUMBER, S_STRING, S_STRING_OR_NULL } s_kind_t;

static const struct {
    const char *key;
    s_kind_t kind;
} s_fields [] = {
    { "pid", S_PID }, { "pid_start", S_COUNT }, { "id", S_STRING }, { "backend", S_STRING },
    { "state", S_STRING }, { "started", S_NUMBER }, { "last_activity", S_NUMBER },
    { "qemu_pid", S_COUNT }, { "workspace", S_STRING_OR_NULL },
    { "from_snapshot", S_STRING_OR_NULL }, { "paused_snapshot", S_STRING_OR_NULL },
    { "connection_file", S_STRING_OR_NULL }, { "kernel_name", S_STRING_OR_NULL },
};
#define S_FIELDS (sizeof s_fields / sizeof s_fields [0])

int
gw_status_proc_start (pid_t pid, unsigned long long *start_p)
{
    assert (start_p);
    char path [64], text [1024];
    if (pid <= 0)
        return -ESRCH;
    snprintf (path, sizeof path, "/proc/%d/stat", (int) pid);
    ssize_t n = ch_read_small (path, text, sizeof text);
    if (n < 0)
        return n == -ENOENT ? -ESRCH : (int) n;
    //  A zombie keeps its start time, but the process is gone.
    const char *paren = strrchr (text, ')');
    if (paren && paren [1] == ' ' && (paren [2] == 'Z' || paren [2] == 'X'))
        return -ESRCH;
    return gw_procstat_parse_starttime (text, start_p);
}

//  ==========================================================================
//  Writing

//  BASE and BASE/sessions made and checked; the file's paths into self.
static int
s_paths (gw_status_t *self, const char *base, char *err, size_t errlen)
{
    char dir [PATH_MAX];
    int n = snprintf (dir, sizeof dir, "%s/" GW_STATUS_DIR, base);
    int m = snprintf (self->path, sizeof self->path, "%s/%d.json", dir, (int) getpid ());
    int k = snprintf (self->tmp, sizeof self->tmp, "%s/.%d.json.tmp", dir, (int) getpid ());
    if (n < 0 || m < 0 || k < 0 || (size_t) n >= sizeof dir || (size_t) m >= sizeof self->path
    ||  (size_t) k >= sizeof self->tmp) {
        snprintf (err, errlen, "status dir under %.200s: path too long", base);
        return -ENAMETOOLONG;
    }
    int rc = ch_mkdir_p (base, 0700);           //  its parents may be missing (tests)
    if (rc < 0) {
        snprintf (err, errlen, "cannot create %s: %s", base, strerror (-rc));
        return rc;
    }
    char why [PATH_MAX + 64] = "";
    rc = gw_owndir_make (base, geteuid (), why, sizeof why);
    if (rc == 0)
        rc = gw_owndir_make (dir, geteuid (), why, sizeof why);
    if (rc < 0)
        snprintf (err, errlen, "status dir %s", why);
    return rc;
}

//  A path that is not UTF-8 cannot be JSON: null rather than nothing.
static json_t *
s_string_or_null (const char *text)
{
    json_t *j = text ? json_string (text) : NULL;
    return j ? j : json_null ();
}

//  The document of a starting session.
static json_t *
s_document (const char *identity, const char *backend, const char *connection_file,
            const char *kernel_name, unsigned long long pid_start)
{
    json_int_t now = (json_int_t) time (NULL);
    json_t *doc = json_pack ("{s:i, s:I, s:o, s:o, s:s, s:I, s:I, s:i, s:n, s:n, s:n, s:o, s:o}",
                             "pid", (int) getpid (), "pid_start", (json_int_t) pid_start,
                             "id", s_string_or_null (identity),
                             "backend", s_string_or_null (backend), "state", "starting",
                             "started", now, "last_activity", now, "qemu_pid", 0,
                             "workspace", "from_snapshot", "paused_snapshot",
                             "connection_file", s_string_or_null (connection_file),
                             "kernel_name", s_string_or_null (kernel_name));
    if (!doc)
        abort ();                               //  out of memory
    return doc;
}

static void *s_writer (void *arg);

gw_status_t *
gw_status_new (const char *base, const char *identity, const char *backend,
               const char *connection_file, const char *kernel_name, char *err, size_t errlen)
{
    assert (identity && backend && err);
    char dflt [PATH_MAX];
    unsigned long long start = 0;
    gw_status_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    if (!base && gw_runbase_default (dflt, sizeof dflt) == 0)
        base = dflt;
    if (!base || s_paths (self, base, err, errlen) < 0)
        goto fail;
    int rc = gw_status_proc_start (getpid (), &start);
    if (rc < 0) {
        snprintf (err, errlen, "cannot read our start time from /proc: %s", strerror (-rc));
        goto fail;
    }
    self->json = s_document (identity, backend, connection_file, kernel_name, start);
    self->dirty = true;
    if ((rc = gw_status_flush (self, true)) < 0) {
        snprintf (err, errlen, "cannot write %s: %s", self->path, strerror (-rc));
        goto fail;
    }
    pthread_mutex_init (&self->lock, NULL);
    pthread_cond_init (&self->wake, NULL);
    pthread_cond_init (&self->done, NULL);
    if (pthread_create (&self->thread, NULL, s_writer, self) != 0)
        abort ();                               //  no thread: nothing else would work either
    self->running = true;
    return self;
fail:
    if (!base)
        snprintf (err, errlen, "no status dir: the default run base is too long");
    json_decref (self->json);
    free (self);
    return NULL;
}

void
gw_status_destroy (gw_status_t **self_p)
{
    assert (self_p);
    gw_status_t *self = *self_p;
    if (!self)
        return;
    if (self->running) {                        //  what it is writing lands first
        pthread_mutex_lock (&self->lock);
        self->quit = true;
        pthread_cond_signal (&self->wake);
        pthread_mutex_unlock (&self->lock);
        pthread_join (self->thread, NULL);
        pthread_mutex_destroy (&self->lock);
        pthread_cond_destroy (&self->wake);
        pthread_cond_destroy (&self->done);
    }
    if (unlink (self->path) < 0 && errno != ENOENT)
        gw_log (GW_LOG_WARN, "status.left", "path=%s reason=\"%s\"", self->path,
                strerror (errno));
    unlink (self->tmp);                         //  a write cut short
    json_decref (self->json);
    free (self);
    *self_p = NULL;
}

const char *
gw_status_path (const gw_status_t *self)
{
    assert (self);
    return self->path;
}

void
gw_status_set_state (gw_status_t *self, const char *state)
{
    assert (self && state);
    gw_status_set (self, "state", json_string (state));
    gw_status_flush (self, true);
}

void
gw_status_set (gw_status_t *self, const char *key, json_t *value)
{
    assert (self && key);
    if (!value)
        value = json_null ();
    if (json_equal (json_object_get (self->json, key), value)) {
        json_decref (value);
        return;
    }
    json_object_set_new (self->json, key, value);
    self->dirty = true;
}

void
gw_status_touch (gw_status_t *self)
{
    assert (self);
    gw_status_set (self, "last_activity", json_integer ((json_int_t) time (NULL)));
}

//  text into tmp, renamed over path: readers see the old file or the new
//  one. No fsync: the file only matters while we run.
static int
s_write_text (gw_status_t *self, const char *text)
{
    int rc = 0, fd = open (self->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
                           0600);
    if (fd < 0)
        rc = -errno;
    if (rc == 0)
        rc = ch_write_bytes (fd, text, strlen (text));
    if (fd >= 0 && close (fd) < 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename (self->tmp, self->path) < 0)
        rc = -errno;
    if (rc < 0)
        unlink (self->tmp);
    return rc;
}

static void *
s_writer (void *arg)
{
    gw_status_t *self = arg;
    pthread_mutex_lock (&self->lock);
    while (!self->quit || self->pending) {
        if (!self->pending) {
            pthread_cond_wait (&self->wake, &self->lock);
            continue;
        }
        char *text = self->pending;
        uint64_t gen = self->posted;
        self->pending = NULL;
        pthread_mutex_unlock (&self->lock);
        int rc = s_write_text (self, text);
        free (text);
        if (rc < 0 && !self->warned) {
            self->warned = true;
            gw_log (GW_LOG_WARN, "status.write_failed", "path=%s reason=\"%s\"", self->path,
                    strerror (-rc));
        }
        pthread_mutex_lock (&self->lock);
        self->written = gen;
        self->last_rc = rc;
        pthread_cond_broadcast (&self->done);
    }
    pthread_mutex_unlock (&self->lock);
    return NULL;
}

//  Hand the document to the writer (before it runs: write it here).
static int
s_write (gw_status_t *self)
{
    char *text = json_dumps (self->json, JSON_COMPACT);
    if (!text)
        abort ();
    if (!self->running) {
        int rc = s_write_text (self, text);
        free (text);
        return rc;
    }
    pthread_mutex_lock (&self->lock);
    free (self->pending);
    self->pending = text;
    self->posted++;
    int rc = self->last_rc;
    pthread_cond_signal (&self->wake);
    pthread_mutex_unlock (&self->lock);
    return rc;
}

int
gw_status_sync (gw_status_t *self)
{
    assert (self);
    if (!self->running)
        return 0;
    pthread_mutex_lock (&self->lock);
    while (self->written < self->posted)
        pthread_cond_wait (&self->done, &self->lock);
    int rc = self->last_rc;
    pthread_mutex_unlock (&self->lock);
    return rc;
}

int
gw_status_flush (gw_status_t *self, bool force)
{
    assert (self);
    if (!self->dirty)
        return 0;
    int64_t now = ch_clock_mono_ms ();
    if (!force && self->written_ms && now - self->written_ms < GW_STATUS_THROTTLE_MS)
        return 0;
    int rc = s_write (self);
    self->written_ms = now;                     //  a failing disk is retried at the same pace
    if (rc == 0)
        self->dirty = false;
    else if (!self->warned) {
        self->warned = true;
        gw_log (GW_LOG_WARN, "status.write_failed", "path=%s reason=\"%s\"", self->path,
                strerror (-rc));
    }
    return rc;
}

//  ==========================================================================
//  Reading

//  Does value have the kind the key needs?
static bool
s_kind_ok (const json_t *value, s_kind_t kind)
{
    json_int_t i = json_integer_value (value);
    switch (kind) {
        case S_PID:
            return json_is_integer (value) && i > 0 && i <= INT32_MAX;
        case S_COUNT:
            return json_is_integer (value) && i >= 0;
        case S_NUMBER:
            return json_is_number (value) && json_number_value (value) >= 0;
        case S_STRING:
            return json_is_string (value);
        case S_STRING_OR_NULL:
            return json_is_string (value) || json_is_null (value);
    }
    return false;
}

//  The first key of st that is missing or of the wrong kind, or NULL.
static const char *
s_bad_field (const json_t *st)
{
    if (!json_is_object (st))
        return "(not an object)";
    for (size_t i = 0; i < S_FIELDS; i++)
        if (!s_kind_ok (json_object_get (st, s_fields [i].key), s_fields [i].kind))
            return s_fields [i].key;
    return NULL;
}

//  At most GW_STATUS_MAX_BYTES of the regular file at path into a new
//  buffer. 0 or -errno, with the reason in err.
static int
s_slurp (const char *path, char **text_p, size_t *len_p, char *err, size_t errlen)
{
    struct stat st;
    char *text = NULL;
    ssize_t n = 0;
    //  O_NONBLOCK: a FIFO planted there must not hang us.
    int rc = 0, fd = open (path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0 || fstat (fd, &st) < 0)
        rc = -errno;
    else if (!S_ISREG (st.st_mode))
        rc = -EINVAL;
    else if (st.st_size > GW_STATUS_MAX_BYTES)
        rc = -EFBIG;
    else if (!(text = malloc (GW_STATUS_MAX_BYTES + 1)))
        abort ();
    //  One byte more than allowed: a file that grew since fstat is caught too.
    else if ((n = pread (fd, text, GW_STATUS_MAX_BYTES + 1, 0)) < 0)
        rc = -errno;
    else if (n > GW_STATUS_MAX_BYTES)
        rc = -EFBIG;
    if (fd >= 0)
        close (fd);
    if (rc < 0) {
        snprintf (err, errlen, "%s: %s", path, rc == -EINVAL ? "not a regular file"
                  : rc == -EFBIG ? "over 64 KiB" : strerror (-rc));
        free (text);
        return rc;
    }
    *text_p = text;
    *len_p = (size_t) n;
    return 0;
}

int
gw_status_read (const char *path, json_t **out, char *err, size_t errlen)
{
    assert (path && out && err);
    char *text = NULL;
    size_t len = 0;
    json_error_t jerr;
    *out = NULL;
    int rc = s_slurp (path, &text, &len, err, errlen);
    if (rc < 0)
        return rc;
    json_t *st = json_loadb (text, len, JSON_REJECT_DUPLICATES, &jerr);
    free (text);
    const char *bad = st ? s_bad_field (st) : NULL;
    if (!st)
        snprintf (err, errlen, "%s: not JSON (%s)", path, jerr.text);
    else if (bad)
        snprintf (err, errlen, "%s: \"%s\" is missing or of the wrong type", path, bad);
    if (!st || bad) {
        json_decref (st);
        return -EBADMSG;
    }
    *out = st;
    return 0;
}

bool
gw_status_alive (const json_t *st)
{
    const json_t *pid = json_object_get (st, "pid"), *start = json_object_get (st, "pid_start");
    if (!s_kind_ok (pid, S_PID) || !s_kind_ok (start, S_COUNT))
        return false;
    unsigned long long now_start = 0;
    return gw_status_proc_start ((pid_t) json_integer_value (pid), &now_start) == 0
        && now_start == (unsigned long long) json_integer_value (start);
}
