/*  gw_rundir - a VM's private run directory, and sweeping dead ones.

    A gateway is identified by pid *and* start time (field 22 of
    /proc/PID/stat), so a recycled pid does not keep a dead gateway's
    directory alive forever.
*/
#include "vm/gw_rundir.h"
#include "ch_util.h"
#include "base/gw_fs.h"
#include "base/gw_log.h"
#include "base/gw_owndir.h"
#include "base/gw_procstat.h"
#include "base/gw_runbase.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#define S_PIDFILE "gateway.pid"
#define S_QEMU_PIDFILE "qemu.pid"
#define S_YOUNG_S 60                            //  a dir without pid file may be in creation
#define S_TMPFS_MAGIC 0x01021994

struct _gw_rundir_t {
    char *path;                                 //  the run directory
};

//  Start time of a live process, or -errno (-ENOENT when it is gone).
static int
s_proc_starttime (pid_t pid, unsigned long long *start_p)
{
    char path [64], text [1024];
    snprintf (path, sizeof path, "/proc/%d/stat", (int) pid);
    ssize_t n = ch_read_small (path, text, sizeof text);
    if (n < 0)
        return (int) n;
    return gw_procstat_parse_starttime (text, start_p);
}

//  A zombie (killed, not yet reaped by its parent) keeps its start time but
//  owns nothing any more.
static bool
s_proc_dead (pid_t pid)
{
    char path [64], text [1024];
    snprintf (path, sizeof path, "/proc/%d/stat", (int) pid);
    if (ch_read_small (path, text, sizeof text) < 0)
        return true;
    const char *paren = strrchr (text, ')');
    return !paren || paren [1] != ' ' || paren [2] == 'Z' || paren [2] == 'X';
}

//  --------------------------------------------------------------------------
//  The base directory and a fresh run dir in it.

//  base made private (gw_owndir); a warning when it is on tmpfs.
static int
s_make_base (const char *base, char *err, size_t errlen)
{
    char why [PATH_MAX + 64];
    if (gw_owndir_make (base, geteuid (), why, sizeof why) < 0) {
        snprintf (err, errlen, "run dir base %s", why);
        return -EACCES;
    }
    struct statfs sf;
    if (statfs (base, &sf) == 0 && sf.f_type == S_TMPFS_MAGIC)
        gw_log (GW_LOG_WARN, "vm.rundir_tmpfs", "base=%s reason=\"on tmpfs: /workspace "
                "disks there use RAM\"", base);
    return 0;
}

static int
s_write_pidfile (const gw_rundir_t *self)
{
    unsigned long long start = 0;
    int rc = s_proc_starttime (getpid (), &start);
    if (rc < 0)
        return rc;
    char text [64];
    snprintf (text, sizeof text, "%d %llu\n", (int) getpid (), start);
    return gw_rundir_write (self, S_PIDFILE, text);
}

gw_rundir_t *
gw_rundir_new (const char *base, char *err, size_t errlen)
{
    assert (err);
    char dflt [PATH_MAX], tmpl [PATH_MAX];
    gw_rundir_t *self = NULL;
    if (!base && gw_runbase_default (dflt, sizeof dflt) == 0)
        base = dflt;
    int n = base ? snprintf (tmpl, sizeof tmpl, "%s/vm-%d-XXXXXX", base, (int) getpid ()) : -1;
    if (n < 0 || (size_t) n >= sizeof tmpl) {
        snprintf (err, errlen, "run dir base is missing or too long");
        goto fail;
    }
    if (s_make_base (base, err, errlen) < 0)
        goto fail;
    if (!mkdtemp (tmpl)) {
        snprintf (err, errlen, "cannot create a run dir in %s: %s", base, strerror (errno));
        goto fail;
    }
    self = calloc (1, sizeof *self);
    if (!self || !(self->path = strdup (tmpl)))
        abort ();
    int rc = s_write_pidfile (self);
    if (rc < 0) {
        snprintf (err, errlen, "cannot write %s/" S_PIDFILE ": %s", tmpl, strerror (-rc));
        goto fail;
    }
    return self;
fail:
    gw_rundir_destroy (&self);
    return NULL;
}

void
gw_rundir_destroy (gw_rundir_t **self_p)
{
    assert (self_p);
    gw_rundir_t *self = *self_p;
    if (!self)
        return;
    int rc = gw_fs_remove_tree (self->path);
    if (rc < 0)
        gw_log (GW_LOG_WARN, "vm.rundir_left", "dir=%s reason=\"%s\"", self->path,
                strerror (-rc));
    free (self->path);
    free (self);
    *self_p = NULL;
}

const char *
gw_rundir_path (const gw_rundir_t *self)
{
    assert (self);
    return self->path;
}

int
gw_rundir_file (const gw_rundir_t *self, const char *name, char *out, size_t cap)
{
    assert (self && name && out);
    int n = snprintf (out, cap, "%s/%s", self->path, name);
    return n < 0 || (size_t) n >= cap ? -ENAMETOOLONG : 0;
}

int
gw_rundir_write (const gw_rundir_t *self, const char *name, const char *text)
{
    char path [PATH_MAX];
    int rc = gw_rundir_file (self, name, path, sizeof path);
    if (rc < 0)
        return rc;
    int fd = open (path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -errno;
    size_t len = strlen (text);
    ssize_t n = write (fd, text, len);
    rc = n == (ssize_t) len ? 0 : n < 0 ? -errno : -EIO;
    close (fd);
    return rc;
}

//  --------------------------------------------------------------------------
//  Sweeping.

//  True when the gateway that made dir is gone (or the dir is an orphan).
static bool
s_is_stale (const char *dir)
{
    char path [PATH_MAX + 32], text [128];
    snprintf (path, sizeof path, "%s/" S_PIDFILE, dir);
    int pid = 0;
    unsigned long long start = 0, now_start = 0;
    if (ch_read_small (path, text, sizeof text) < 0
    ||  sscanf (text, "%d %llu", &pid, &start) != 2 || pid <= 0) {
        struct stat st;                         //  no owner: stale once old
        return lstat (dir, &st) == 0 && time (NULL) - st.st_mtime > S_YOUNG_S;
    }
    if (pid == (int) getpid ())
        return false;
    return s_proc_starttime (pid, &now_start) < 0 || now_start != start || s_proc_dead (pid);
}

//  SIGKILL the QEMU named by dir/qemu.pid if its command line uses dir.
static void
s_kill_qemu (const char *dir)
{
    char path [PATH_MAX + 32], text [32];
    snprintf (path, sizeof path, "%s/" S_QEMU_PIDFILE, dir);
    int pid = 0;
    if (ch_read_small (path, text, sizeof text) < 0 || sscanf (text, "%d", &pid) != 1
    ||  pid <= 1)
        return;
    char *cmdline = malloc (65536);
    if (!cmdline)
        abort ();
    snprintf (path, sizeof path, "/proc/%d/cmdline", pid);
    ssize_t n = ch_read_small (path, cmdline, 65536);
    for (ssize_t i = 0; i < n; i++)
        if (cmdline [i] == 0)
            cmdline [i] = ' ';                  //  argv is NUL-separated
    char needle [PATH_MAX + 2];
    snprintf (needle, sizeof needle, "%s/", dir);    //  vm-1-x/ is not vm-1-xy/
    if (n > 0 && strstr (cmdline, needle) && kill (pid, SIGKILL) == 0)
        gw_log (GW_LOG_WARN, "vm.sweep_killed", "pid=%d dir=%s", pid, dir);
    free (cmdline);
}

int
gw_rundir_sweep (const char *base)
{
    assert (base);
    DIR *dir = opendir (base);
    if (!dir)
        return -errno;
    int removed = 0;
    struct dirent *de;
    while ((de = readdir (dir))) {
        char path [PATH_MAX];
        int n = snprintf (path, sizeof path, "%s/%s", base, de->d_name);
        if (strncmp (de->d_name, "vm-", 3) || n < 0 || (size_t) n >= sizeof path
        ||  !s_is_stale (path))
            continue;
        s_kill_qemu (path);
        if (gw_fs_remove_tree (path) == 0) {
            gw_log (GW_LOG_INFO, "vm.swept", "dir=%s", path);
            removed++;
        }
    }
    closedir (dir);
    return removed;
}
