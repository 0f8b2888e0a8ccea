/*  gw_cli - `cellvm ls` and `cellvm rm`, and the helpers every command
    shares (see gw_cli.h). The snapshot commands are in gw_cli_snap.c.

    A session is listed when its status file reads back whole and its
    gateway still runs with the start time the file records. Files of
    gateways that are gone (SIGKILLed, crashed) are deleted when they are
    ours; anything else unreadable is skipped with a line on stderr.
*/
#include "cli/gw_cli.h"
#include "base/gw_runbase.h"
#include "cli/gw_status.h"
#include "ch_text.h"
#include "ch_clock.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define S_DU_DEPTH 64                           //  deeper than any real workspace
#define S_POLL_MS 20                            //  rm: how often we look for the pid

//  ==========================================================================
//  Shared helpers

void
gw_cli_error (const char *fmt, ...)
{
    char line [1024];
    va_list ap;
    va_start (ap, fmt);
    vsnprintf (line, sizeof line, fmt, ap);
    va_end (ap);
    fprintf (stderr, "cellvm: %s\n", line);
}

void
gw_cli_duration (double s, char *out, size_t cap)
{
    assert (out && cap);
    //  No libm here: the gateway, which links this file too, does not use it.
    unsigned long long t = isfinite (s) && s > 0 ? (unsigned long long) (s < 1e15 ? s : 1e15) : 0;
    if (t < 60)
        snprintf (out, cap, "%llus", t);
    else if (t < 3600)
        snprintf (out, cap, "%llum%02llus", t / 60, t % 60);
    else if (t < 86400)
        snprintf (out, cap, "%lluh%02llum", t / 3600, t % 3600 / 60);
    else
        snprintf (out, cap, "%llud%02lluh", t / 86400, t % 86400 / 3600);
}

void
gw_cli_bytes (double b, char *out, size_t cap)
{
    assert (out && cap);
    static const char *units [] = { "KiB", "MiB", "GiB", "TiB", "PiB" };
    if (!isfinite (b) || b < 1024) {
        snprintf (out, cap, "%.0f B", isfinite (b) && b > 0 ? b : 0);
        return;
    }
    int u = -1;
    while (b >= 1024 && u < 4) {
        b /= 1024;
        u++;
    }
    snprintf (out, cap, "%.1f %s", b, units [u]);
}

void
gw_cli_clean (const char *text, size_t max, char *out, size_t cap)
{
    assert (out && cap);
    snprintf (out, cap, "%.*s", (int) (max < cap ? max : cap), text ? text : "-");
    ch_text_printable (out, NULL);
}

int
gw_cli_parse_seconds (const char *text, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = text && *text ? strtod (text, &end) : -1;
    if (!text || !*text || errno || *end || !isfinite (v) || v < 0 || v > 1e12)
        return -EINVAL;
    *out = v;
    return 0;
}

int
gw_cli_parse_bytes (const char *text, uint64_t *out)
{
    static const char *suffixes = "kmgt";
    char *end = NULL;
    errno = 0;
    if (!text || *text < '0' || *text > '9')
        return -EINVAL;
    unsigned long long v = strtoull (text, &end, 10);
    const char *s = *end ? strchr (suffixes, end [0] | 0x20) : NULL;
    if (errno || (*end && (!s || end [1])))
        return -EINVAL;
    int shift = s ? 10 * (int) (s - suffixes + 1) : 0;
    if (shift && v > (UINT64_MAX >> shift))
        return -EINVAL;
    *out = (uint64_t) v << shift;
    return 0;
}

//  ==========================================================================
//  Collecting the live sessions

//  "<pid>.json" (what gw_status writes): its pid, else 0.
static pid_t
s_status_pid (const char *name)
{
    char *end = NULL;
    if (*name < '1' || *name > '9')
        return 0;
    errno = 0;
    unsigned long v = strtoul (name, &end, 10);
    return errno || strcmp (end, ".json") || v > INT32_MAX ? 0 : (pid_t) v;
}

//  Delete a status file of a gateway that is gone, when it is ours.
static void
s_remove_stale (const char *path)
{
    struct stat st;
    if (lstat (path, &st) == 0 && S_ISREG (st.st_mode) && st.st_uid == geteuid ())
        unlink (path);
}

//  The status at dir/name when its gateway (pid, from the name) is alive;
//  NULL otherwise, the file deleted when stale and ours.
static json_t *
s_load (const char *dir, const char *name, pid_t pid)
{
    char path [PATH_MAX], err [PATH_MAX + 128];
    json_t *st = NULL;
    unsigned long long start;
    if (snprintf (path, sizeof path, "%s/%s", dir, name) >= (int) sizeof path)
        return NULL;
    int rc = gw_status_read (path, &st, err, sizeof err);
    bool named_alive = gw_status_proc_start (pid, &start) == 0;
    if (rc == 0 && json_integer_value (json_object_get (st, "pid")) != pid) {
        snprintf (err, sizeof err, "%s: names pid %lld", path,
                  (long long) json_integer_value (json_object_get (st, "pid")));
        rc = -EBADMSG;
    }
    if (rc == 0 && gw_status_alive (st))
        return st;
    json_decref (st);
    if (rc == 0 || !named_alive)                //  its gateway is gone
        s_remove_stale (path);
    else if (rc != -ENOENT)                     //  gone meanwhile: nothing to say
        gw_cli_error ("skipping %s", err);
    return NULL;
}

static int
s_by_started (const void *a, const void *b)
{
    const json_t *x = *(json_t * const *) a, *y = *(json_t * const *) b;
    double d = json_number_value (json_object_get (x, "started"))
             - json_number_value (json_object_get (y, "started"));
    return d < 0 ? -1 : d > 0 ? 1 : 0;
}

//  A new array of the statuses in items, oldest first.
static json_t *
s_sorted (json_t **items, size_t n)
{
    qsort (items, n, sizeof *items, s_by_started);
    json_t *all = json_array ();
    for (size_t i = 0; i < n; i++)
        json_array_append_new (all, items [i]);
    free (items);
    return all;
}

//  The live sessions listed in d (dir), oldest first: a new array.
static json_t *
s_read_dir (DIR *d, const char *dir)
{
    size_t n = 0, cap = 16;
    json_t **items = malloc (cap * sizeof *items), *st;
    struct dirent *de;
    while (items && (de = readdir (d))) {
        pid_t pid = s_status_pid (de->d_name);
        if (!pid || !(st = s_load (dir, de->d_name, pid)))
            continue;
        if (n == cap && !(items = realloc (items, (cap *= 2) * sizeof *items)))
            break;
        items [n++] = st;
    }
    if (!items)
        abort ();
    return s_sorted (items, n);
}

//  Every live session under BASE/sessions into *out (a new array; empty
//  when there is no such directory). 0, or -errno with a message printed.
static int
s_collect (const gw_cli_opts_t *opts, json_t **out)
{
    char base [PATH_MAX], dir [PATH_MAX + 16];
    int rc = 0;
    if (opts->run_base)
        snprintf (base, sizeof base, "%s", opts->run_base);
    else if ((rc = gw_runbase_default (base, sizeof base)) < 0) {
        gw_cli_error ("the default run base does not fit in a path; give --run-base DIR");
        return rc;
    }
    snprintf (dir, sizeof dir, "%s/" GW_STATUS_DIR, base);
    DIR *d = opendir (dir);
    if (!d && errno != ENOENT) {
        rc = -errno;
        gw_cli_error ("cannot read %s: %s", dir, strerror (-rc));
        return rc;
    }
    *out = d ? s_read_dir (d, dir) : json_array ();
    if (d)
        closedir (d);
    return 0;
}

//  ==========================================================================
//  What a session costs: memory and disk

//  Proportional set size of pid in bytes (/proc/PID/smaps_rollup), or -errno.
static long long
s_pss (long long pid)
{
    char path [64], text [4096];
    snprintf (path, sizeof path, "/proc/%lld/smaps_rollup", pid);
    int fd = open (path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = read (fd, text, sizeof text - 1);
    close (fd);
    if (n <= 0)
        return -EIO;
    text [n] = 0;
    const char *line = strstr (text, "\nPss:");
    unsigned long long kb = 0;
    if (!line || sscanf (line + 5, " %llu kB", &kb) != 1)
        return -EBADMSG;
    return (long long) (kb * 1024);
}

//  Allocated bytes (st_blocks) under parent/name, symlinks not followed.
static void
s_du_at (int parent, const char *name, int depth, uint64_t *bytes)
{
    struct stat st;
    if (fstatat (parent, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return;
    *bytes += (uint64_t) st.st_blocks * 512;
    if (!S_ISDIR (st.st_mode) || depth >= S_DU_DEPTH)
        return;
    int fd = openat (parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir (fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close (fd);
        return;
    }
    struct dirent *de;
    while ((de = readdir (d)))
        if (strcmp (de->d_name, ".") && strcmp (de->d_name, ".."))
            s_du_at (dirfd (d), de->d_name, depth + 1, bytes);
    closedir (d);
}

//  Allocated bytes of the workspace path, or JSON null when there is none.
static json_t *
s_workspace_bytes (const json_t *st)
{
    const char *path = json_string_value (json_object_get (st, "workspace"));
    struct stat sb;
    if (!path || path [0] != '/' || lstat (path, &sb) < 0)
        return json_null ();
    uint64_t bytes = 0;
    s_du_at (AT_FDCWD, path, 0, &bytes);
    return json_integer ((json_int_t) bytes);
}

//  Seconds from a status time to now, never negative.
static json_int_t
s_since (const json_t *st, const char *key, double now)
{
    double d = now - json_number_value (json_object_get (st, key));
    return d > 0 ? (json_int_t) d : 0;
}

//  age_s, idle_s, host_pss_bytes and workspace_bytes added to st.
static void
s_measure (json_t *st, double now)
{
    const char *state = json_string_value (json_object_get (st, "state"));
    long long qemu = json_integer_value (json_object_get (st, "qemu_pid"));
    long long pss = s_pss (json_integer_value (json_object_get (st, "pid")));
    long long qpss = qemu > 0 ? s_pss (qemu) : 0;
    json_object_set_new (st, "age_s", json_integer (s_since (st, "started", now)));
    json_object_set_new (st, "idle_s", strcmp (state, "running") == 0 ? json_null ()
                         : json_integer (s_since (st, "last_activity", now)));
    json_object_set_new (st, "host_pss_bytes", pss < 0 ? json_null ()
                         : json_integer (pss + (qpss > 0 ? qpss : 0)));
    json_object_set_new (st, "workspace_bytes", s_workspace_bytes (st));
}

//  ==========================================================================
//  cellvm ls

#define S_LS_FORMAT "%-12s  %7s  %-9s  %7s  %7s  %10s  %10s  %s\n"

//  A number of st as a duration or size; "-" when null.
static const char *
s_human (const json_t *st, const char *key, bool bytes, char *out, size_t cap)
{
    const json_t *v = json_object_get (st, key);
    if (!json_is_number (v))
        return "-";
    if (bytes)
        gw_cli_bytes (json_number_value (v), out, cap);
    else
        gw_cli_duration (json_number_value (v), out, cap);
    return out;
}

static void
s_ls_row (const json_t *st)
{
    char id [16], pid [24], state [16], age [32], idle [32], ram [32], disk [32], snap [80];
    const char *s = json_string_value (json_object_get (st, "paused_snapshot"));
    if (!s)
        s = json_string_value (json_object_get (st, "from_snapshot"));
    gw_cli_clean (s, 64, snap, sizeof snap);
    gw_cli_clean (json_string_value (json_object_get (st, "id")), 12, id, sizeof id);
    gw_cli_clean (json_string_value (json_object_get (st, "state")), 9, state, sizeof state);
    snprintf (pid, sizeof pid, "%lld",
              (long long) json_integer_value (json_object_get (st, "pid")));
    printf (S_LS_FORMAT, id, pid, state,
            s_human (st, "age_s", false, age, sizeof age),
            s_human (st, "idle_s", false, idle, sizeof idle),
            s_human (st, "host_pss_bytes", true, ram, sizeof ram),
            s_human (st, "workspace_bytes", true, disk, sizeof disk), snap);
}

//  The sessions as the table a person reads.
static void
s_ls_table (const json_t *all)
{
    size_t i;
    const json_t *st;
    printf (S_LS_FORMAT, "ID", "PID", "STATE", "AGE", "IDLE", "HOST RAM", "WORKSPACE",
            "SNAPSHOT");
    json_array_foreach (all, i, st)
        s_ls_row (st);
}

int
gw_cli_ls (const gw_cli_opts_t *opts, char **args, int count)
{
    (void) args;
    assert (opts && count == 0);
    json_t *all = NULL, *st;
    size_t i;
    if (s_collect (opts, &all) < 0)
        return GW_CLI_FAILED;
    double now = ch_clock_wall_s ();
    json_array_foreach (all, i, st)
        s_measure (st, now);
    if (opts->json) {
        json_dumpf (all, stdout, JSON_INDENT (1));
        printf ("\n");
    }
    else
        s_ls_table (all);
    json_decref (all);
    return fflush (stdout) == 0 ? GW_CLI_OK : GW_CLI_FAILED;
}

//  ==========================================================================
//  cellvm rm

//  "abc1 (pid 12), abc2 (pid 34)": the sessions in matches, for a message.
static void
s_describe (const json_t *matches, char *out, size_t cap)
{
    size_t i, used = 0;
    const json_t *st;
    out [0] = 0;
    json_array_foreach (matches, i, st) {
        char id [32];
        gw_cli_clean (json_string_value (json_object_get (st, "id")), 24, id, sizeof id);
        int n = snprintf (out + used, cap - used, "%s%s (pid %lld)", i ? ", " : "", id,
                          (long long) json_integer_value (json_object_get (st, "pid")));
        if (n < 0 || (size_t) n >= cap - used)
            break;
        used += (size_t) n;
    }
}

//  The one session target names: a pid exactly, else a unique prefix of an
//  identity. A new reference, or NULL with the reason printed.
static json_t *
s_find (const json_t *all, const char *target)
{
    json_t *pid_match = NULL, *matches = json_array (), *st;
    size_t i;
    char *end = NULL, what [1024], t [64];
    long long pid = strtoll (target, &end, 10);
    json_array_foreach (all, i, st) {
        if (*target && !*end && json_integer_value (json_object_get (st, "pid")) == pid)
            pid_match = st;
        const char *id = json_string_value (json_object_get (st, "id"));
        if (*target && strncmp (id, target, strlen (target)) == 0)
            json_array_append (matches, st);
    }
    json_t *found = pid_match ? pid_match : json_array_size (matches) == 1
                  ? json_array_get (matches, 0) : NULL;
    json_incref (found);
    gw_cli_clean (target, 40, t, sizeof t);
    s_describe (matches, what, sizeof what);
    if (!found && json_array_size (matches) == 0)
        gw_cli_error ("no live session has ID or PID '%s'; `cellvm ls` lists them", t);
    else if (!found)
        gw_cli_error ("'%s' matches %zu sessions: %s; give more of the ID, or the PID", t,
                      json_array_size (matches), what);
    json_decref (matches);
    return found;
}

//  SIGTERM to the process st names, only if it is still that process:
//  a pidfd pins it, then its start time is checked again. 0, -ESRCH when
//  it is gone already, or -errno.
static int
s_terminate (const json_t *st)
{
    pid_t pid = (pid_t) json_integer_value (json_object_get (st, "pid"));
    int fd = (int) syscall (SYS_pidfd_open, pid, 0);
    if (fd < 0 && errno != ENOSYS)
        return -errno;
    int rc = 0;
    if (!gw_status_alive (st))
        rc = -ESRCH;
    else if (fd >= 0 && syscall (SYS_pidfd_send_signal, fd, SIGTERM, NULL, 0) < 0)
        rc = -errno;
    else if (fd < 0 && kill (pid, SIGTERM) < 0)   //  kernels before 5.3
        rc = -errno;
    if (fd >= 0)
        close (fd);
    return rc;
}

//  Wait up to wait_s for st's process to go. Seconds it took, or -1.
static double
s_wait_gone (const json_t *st, double wait_s)
{
    struct timespec nap = { 0, S_POLL_MS * 1000000L };
    int64_t t0 = ch_clock_mono_ms ();
    for (;;) {
        double took = (double) (ch_clock_mono_ms () - t0) / 1e3;
        if (!gw_status_alive (st))
            return took;
        if (took >= wait_s)
            return -1;
        nanosleep (&nap, NULL);
    }
}

//  Stop the session st and say what happened. An exit status.
static int
s_stop (const json_t *st, double wait_s)
{
    char id [32];
    long long pid = json_integer_value (json_object_get (st, "pid"));
    gw_cli_clean (json_string_value (json_object_get (st, "id")), 24, id, sizeof id);
    int rc = s_terminate (st);
    if (rc == -ESRCH) {
        printf ("session %s (pid %lld) had already exited\n", id, pid);
        return GW_CLI_OK;
    }
    if (rc < 0) {
        gw_cli_error ("cannot signal session %s (pid %lld): %s%s", id, pid, strerror (-rc),
                      rc == -EPERM ? " (is it another user's?)" : "");
        return GW_CLI_FAILED;
    }
    if (wait_s <= 0) {
        printf ("sent SIGTERM to session %s (pid %lld); not waiting\n", id, pid);
        return GW_CLI_OK;
    }
    double took = s_wait_gone (st, wait_s);
    if (took >= 0) {
        printf ("stopped session %s (pid %lld) in %.1f s\n", id, pid, took);
        return GW_CLI_OK;
    }
    gw_cli_error ("session %s (pid %lld) still runs %g s after SIGTERM; wait longer "
                  "(--wait S) or stop it with `kill -KILL %lld`", id, pid, wait_s, pid);
    return GW_CLI_FAILED;
}

int
gw_cli_rm (const gw_cli_opts_t *opts, char **args, int count)
{
    assert (opts && args && count == 1);
    json_t *all = NULL;
    if (s_collect (opts, &all) < 0)
        return GW_CLI_FAILED;
    json_t *st = s_find (all, args [0]);
    json_decref (all);
    int code = st ? s_stop (st, opts->wait_s) : GW_CLI_FAILED;
    json_decref (st);
    return code;
}
