/*  gw_snapstore - the store of session snapshots (see gw_snapstore.h).

    Everything under STORE is reached from the store's directory fd with the
    *at calls and O_NOFOLLOW, and every name read back is checked: the
    store's contents may be corrupt or planted (symlinks, FIFOs, huge or
    broken meta.json), and none of it is trusted.
*/
#include "snap/gw_snapstore.h"
#include "ch_util.h"
#include "base/gw_log.h"
#include "base/gw_fs.h"
#include "ch_clock.h"
#include "ch_io.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif

#define S_META_MAX (64 * 1024)                  //  a real meta.json is ~1 KB
#define S_OPEN_WAIT_MS 2000                     //  how long a start waits for a remover
#define S_LEFTOVER_S 60                         //  a dead writer's staging/trash, once this old
#define S_STAGING ".staging-"
#define S_TRASH ".trash-"
#define S_HEX "0123456789abcdef"
#define S_BAD_NAME "\"%.64s\" is not a snapshot name (1 to 64 of A-Z a-z 0-9 _ -)"
#define S_DIR_FLAGS (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
//  O_NONBLOCK: opening a FIFO planted under a file's name must not hang.
#define S_FILE_FLAGS (O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)

struct _gw_snapstore_t {
    char *dir;                                  //  absolute, no trailing slash
    int fd;                                     //  the directory itself
};

//  The reason into err; returns rc (a negative errno).
static int __attribute__ ((format (printf, 4, 5)))
s_fail (char *err, size_t errlen, int rc, const char *fmt, ...)
{
    va_list args;
    va_start (args, fmt);
    if (err && errlen)
        vsnprintf (err, errlen, fmt, args);
    va_end (args);
    return rc;
}

//  nhex (<= 32) random hex digits. They make names unique, so the clock
//  and pid will do when getrandom has nothing yet (early boot).
static void
s_random_hex (char *out, size_t nhex)
{
    uint64_t b [2] = { (uint64_t) ch_clock_mono_ms () * 0x9e3779b97f4a7c15ULL, (uint64_t) getpid () };
    if (getrandom (b, sizeof b, GRND_NONBLOCK) < 0)
        b [1] ^= (uint64_t) clock ();
    for (size_t i = 0; i < nhex && i < 32; i++)
        out [i] = S_HEX [(((const uint8_t *) b) [i / 2] >> (i % 2 ? 0 : 4)) & 15];
    out [nhex < 32 ? nhex : 32] = 0;
}

//  flock, polling every 10 ms for up to wait_ms. 0, -EBUSY, or -errno.
static int
s_lock (int fd, int op, int wait_ms)
{
    int64_t until = ch_clock_mono_ms () + (wait_ms > 0 ? wait_ms : 0);
    while (flock (fd, op | LOCK_NB) < 0) {
        if (errno != EINTR && errno != EWOULDBLOCK)
            return -errno;
        if (errno == EWOULDBLOCK && ch_clock_mono_ms () >= until)
            return -EBUSY;
        nanosleep (&(struct timespec) { 0, 10 * 1000 * 1000 }, NULL);
    }
    return 0;
}

//  dfd/name as a directory stream of its own (its own offset, unlike dup).
static DIR *
s_opendir_at (int dfd, const char *name)
{
    int fd = openat (dfd, name, S_DIR_FLAGS);
    DIR *d = fd >= 0 ? fdopendir (fd) : NULL;
    if (!d && fd >= 0)
        close (fd);
    return d;
}

//  Allocated bytes of the regular files in dfd/name (snapshots are flat).
static uint64_t
s_dir_bytes (int dfd, const char *name)
{
    DIR *d = s_opendir_at (dfd, name);
    uint64_t total = 0;
    struct dirent *de;
    struct stat st;
    while (d && (de = readdir (d)))
        if (fstatat (dirfd (d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG (st.st_mode))
            total += (uint64_t) st.st_blocks * 512;
    if (d)
        closedir (d);
    return total;
}

//  rename within dfd, never replacing anything. 0, -EEXIST or -errno.
static int
s_rename_noreplace (int dfd, const char *from, const char *to)
{
    //  The syscall: glibc has the wrapper from 2.28 only.
    if (syscall (SYS_renameat2, dfd, from, dfd, to, RENAME_NOREPLACE) < 0) {
        struct stat st;
        if (errno != EINVAL && errno != ENOSYS)
            return errno == ENOTEMPTY ? -EEXIST : -errno;
        //  No RENAME_NOREPLACE (NFS): only an empty directory can be replaced.
        if (fstatat (dfd, to, &st, AT_SYMLINK_NOFOLLOW) == 0)
            return -EEXIST;
        if (renameat (dfd, from, dfd, to) < 0)
            return errno == ENOTEMPTY || errno == EEXIST ? -EEXIST : -errno;
    }
    return 0;
}

int
gw_snapstore_default_dir (char *out, size_t cap)
{
    assert (out);
    const char *env = getenv ("CELLVM_SNAPSHOT_DIR");
    const char *xdg = getenv ("XDG_DATA_HOME"), *home = getenv ("HOME");
    int n = -1;
    if (env && env [0] == '/')
        n = snprintf (out, cap, "%s", env);
    else if (geteuid () == 0)
        n = snprintf (out, cap, "/var/lib/cellvm/snapshots");
    else if (xdg && xdg [0] == '/')
        n = snprintf (out, cap, "%s/cellvm/snapshots", xdg);
    else if (home && home [0] == '/')
        n = snprintf (out, cap, "%s/.local/share/cellvm/snapshots", home);
    else
        return -ENOENT;
    return n < 0 || (size_t) n >= cap ? -ENAMETOOLONG : 0;
}

bool
gw_snapstore_name_ok (const char *name)
{
    static const char ok [] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-";
    size_t len = name ? strnlen (name, GW_SNAP_NAME_MAX + 1) : 0;
    return len >= 1 && len <= GW_SNAP_NAME_MAX && strspn (name, ok) == len;
}

void
gw_snapstore_new_name (char *out, size_t cap)
{
    assert (out && cap >= 32);
    time_t now = time (NULL);
    struct tm tm;
    char stamp [32], hex [5];
    strftime (stamp, sizeof stamp, "%Y%m%d-%H%M%S", gmtime_r (&now, &tm));
    s_random_hex (hex, 4);
    snprintf (out, cap, "snap-%s-%s", stamp, hex);
}

//  dir, made if missing, opened, or -errno. Only our own real directory will
//  do: a symlink or one others can write could hand sessions' RAM to them.
static int
s_open_store (const char *dir, char *err, size_t errlen)
{
    struct stat st;
    char why [128] = "";
    int rc = ch_mkdir_p (dir, 0700);
    int fd = rc < 0 ? -1 : open (dir, S_DIR_FLAGS), e = rc < 0 ? -rc : errno;
    if (fd < 0 && (e == ELOOP || e == ENOTDIR))     //  O_DIRECTORY on a link: either
        snprintf (why, sizeof why, "%s", lstat (dir, &st) == 0 && S_ISLNK (st.st_mode)
                  ? "is a symlink; give the real directory" : "is not a directory");
    else if (fd < 0)
        snprintf (why, sizeof why, "%s", strerror (e));
    else if (fstat (fd, &st) < 0)
        snprintf (why, sizeof why, "%s", strerror (errno));
    else if (st.st_uid != geteuid ())
        snprintf (why, sizeof why, "is owned by uid %u, not by us (uid %u)",
                  (unsigned) st.st_uid, (unsigned) geteuid ());
    else if (st.st_mode & 022)
        snprintf (why, sizeof why, "is writable by other users (mode %04o); chmod 700 it",
                  (unsigned) (st.st_mode & 07777));
    if (!why [0])
        return fd;
    if (fd >= 0)
        close (fd);
    return s_fail (err, errlen, -EACCES, "snapshot store %s: %s", dir, why);
}

gw_snapstore_t *
gw_snapstore_new (const char *dir, char *err, size_t errlen)
{
    assert (err);
    char path [PATH_MAX], cwd [PATH_MAX] = "";
    int n = dir ? -1 : gw_snapstore_default_dir (path, sizeof path);
    if (dir && *dir && (dir [0] == '/' || getcwd (cwd, sizeof cwd)))
        n = snprintf (path, sizeof path, "%s%s%s", cwd, cwd [0] ? "/" : "", dir);
    if (n < 0 || (size_t) n >= sizeof path) {
        snprintf (err, errlen, "snapshot store: %s", dir ? "the path is empty or too long"
                  : "no default directory ($CELLVM_SNAPSHOT_DIR and $HOME are unset)");
        return NULL;
    }
    for (size_t len = strlen (path); len > 1 && path [len - 1] == '/'; len--)
        path [len - 1] = 0;
    int fd = s_open_store (path, err, errlen);
    if (fd < 0)
        return NULL;
    gw_snapstore_t *self = calloc (1, sizeof *self);
    if (!self || !(self->dir = strdup (path)))
        abort ();
    self->fd = fd;
    return self;
}

void
gw_snapstore_destroy (gw_snapstore_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        close ((*self_p)->fd);
        free ((*self_p)->dir);
        free (*self_p);
        *self_p = NULL;
    }
}

const char *gw_snapstore_dir (const gw_snapstore_t *self) { return self->dir; }

//  ==========================================================================
//  Writing.

int
gw_snapstore_stage (gw_snapstore_t *self, const char *name, char *out, size_t cap,
                    char *err, size_t errlen)
{
    assert (self && out);
    char base [GW_SNAP_NAME_MAX + 64], hex [9];
    struct stat st;
    if (!gw_snapstore_name_ok (name))
        return s_fail (err, errlen, -EINVAL, S_BAD_NAME, name ? name : "");
    if (fstatat (self->fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
        return s_fail (err, errlen, -EEXIST, "snapshot \"%s\" already exists in %s", name,
                       self->dir);
    s_random_hex (hex, 8);
    snprintf (base, sizeof base, S_STAGING "%s-%d-%s", name, (int) getpid (), hex);
    int n = snprintf (out, cap, "%s/%s", self->dir, base);
    if (n < 0 || (size_t) n >= cap)
        return s_fail (err, errlen, -ENAMETOOLONG, "snapshot store %s: path too long", self->dir);
    if (mkdirat (self->fd, base, 0700) < 0) {
        int e = errno;
        return s_fail (err, errlen, -e, "cannot make a staging directory in %s: %s", self->dir,
                       strerror (e));
    }
    return 0;
}

//  staging's last component when it is a staging directory right in the store
//  (for name, unless NULL), else NULL: nothing outside the store is touched.
static const char *
s_staging_base (const gw_snapstore_t *self, const char *staging, const char *name)
{
    size_t len = strlen (self->dir), pre = strlen (S_STAGING);
    if (!staging || strncmp (staging, self->dir, len) || staging [len] != '/')
        return NULL;
    const char *base = staging + len + 1;
    if (strchr (base, '/') || strncmp (base, S_STAGING, pre) || strlen (base) > NAME_MAX)
        return NULL;
    if (name && (strncmp (base + pre, name, strlen (name)) || base [pre + strlen (name)] != '-'))
        return NULL;
    return base;
}

//  sfd/meta.json from meta, with format, name (and created if missing).
static int
s_write_meta (int sfd, json_t *meta, const char *name, char *what, size_t cap)
{
    snprintf (what, cap, "writing " GW_SNAP_META);
    if (!json_is_object (meta))
        return -EINVAL;
    json_object_set_new (meta, "format", json_integer (GW_SNAP_FORMAT));
    json_object_set_new (meta, "name", json_string (name));
    if (!json_object_get (meta, "created"))
        json_object_set_new (meta, "created", json_integer ((json_int_t) time (NULL)));
    char *text = json_dumps (meta, JSON_INDENT (1) | JSON_SORT_KEYS);
    size_t len = text ? strlen (text) : 0;
    int fd = -1, rc = !text ? -ENOMEM : len > S_META_MAX ? -EFBIG : 0;   //  open would refuse it
    if (rc == 0 && (fd = openat (sfd, GW_SNAP_META, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW
                                 | O_CLOEXEC, 0600)) < 0)
        rc = -errno;
    if (rc == 0)
        rc = ch_write_bytes (fd, text, len);
    if (fd >= 0 && close (fd) < 0 && rc == 0)
        rc = -errno;
    free (text);
    return rc;
}

//  Every regular file in the staging directory, then the directory, on disk.
static int
s_sync_staging (int sfd, char *what, size_t cap)
{
    DIR *d = s_opendir_at (sfd, ".");
    int rc = d ? 0 : -errno;
    struct dirent *de;
    struct stat st;
    while (rc == 0 && (de = readdir (d))) {
        if (fstatat (sfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG (st.st_mode))
            continue;
        snprintf (what, cap, "syncing %.64s", de->d_name);
        int fd = openat (sfd, de->d_name, S_FILE_FLAGS);
        rc = fd < 0 || fsync (fd) < 0 ? -errno : 0;
        if (fd >= 0)
            close (fd);
    }
    if (d)
        closedir (d);
    snprintf (what, cap, "syncing the staging directory");
    return rc == 0 && fsync (sfd) < 0 ? -errno : rc;
}

//  base renamed to name, then the store on disk; undone when that sync
//  fails, so the caller's cleanup of base leaves nothing half-durable.
static int
s_rename_in (gw_snapstore_t *self, const char *base, const char *name, char *what, size_t cap)
{
    snprintf (what, cap, "renaming it into place");
    int rc = s_rename_noreplace (self->fd, base, name);
    if (rc == 0 && fsync (self->fd) < 0) {
        rc = -errno;
        snprintf (what, cap, "syncing the store directory");
        renameat (self->fd, name, self->fd, base);
    }
    return rc;
}

int
gw_snapstore_publish (gw_snapstore_t *self, const char *staging, const char *name,
                      json_t *meta, char *err, size_t errlen)
{
    assert (self);
    char what [128] = "opening the staging directory";
    const char *base = gw_snapstore_name_ok (name) ? s_staging_base (self, staging, name) : NULL;
    if (!base)
        return s_fail (err, errlen, -EINVAL, "%.200s is not a staging directory for \"%.64s\" "
                       "in %s", staging ? staging : "(null)", name ? name : "", self->dir);
    int sfd = openat (self->fd, base, S_DIR_FLAGS);
    int rc = sfd < 0 ? -errno : s_write_meta (sfd, meta, name, what, sizeof what);
    if (rc == 0)
        rc = s_sync_staging (sfd, what, sizeof what);
    if (rc == 0)
        rc = s_rename_in (self, base, name, what, sizeof what);
    if (sfd >= 0)
        close (sfd);
    if (rc == 0)
        return 0;
    if (rc == -ENOSPC || rc == -EDQUOT)
        s_fail (err, errlen, rc, "the snapshot store %s has no space left (%s) while %s; "
                "nothing was kept", self->dir, rc == -ENOSPC ? "ENOSPC" : "EDQUOT", what);
    else if (rc == -EEXIST)
        s_fail (err, errlen, rc, "snapshot \"%s\" already exists in %s; the new one was not kept",
                name, self->dir);
    else
        s_fail (err, errlen, rc, "writing snapshot \"%s\" into %s failed while %s: %s; "
                "nothing was kept", name, self->dir, what, strerror (-rc));
    gw_fs_remove_tree (staging);
    return rc;
}

void
gw_snapstore_explain_space (const char *staging, char *err, size_t errlen)
{
    struct statvfs fs;
    if (statvfs (staging, &fs) < 0 || (uint64_t) fs.f_bavail * fs.f_frsize >= (64u << 20))
        return;
    char why [600];
    snprintf (why, sizeof why, "%s", err);
    snprintf (err, errlen, "the snapshot store has no space left (%llu MiB free; a snapshot "
              "needs about the guest's used RAM plus its /workspace): %s",
              (unsigned long long) ((uint64_t) fs.f_bavail * fs.f_frsize >> 20), why);
}

void
gw_snapstore_abort (gw_snapstore_t *self, const char *staging)
{
    assert (self);
    if (staging && *staging && s_staging_base (self, staging, NULL))
        gw_fs_remove_tree (staging);
    else if (staging && *staging)
        gw_log (GW_LOG_WARN, "snapshot.abort_refused", "dir=\"%.200s\" reason=\"not a staging "
                "directory of %s\"", staging, self->dir);
}

//  ==========================================================================
//  Reading.

//  dfd/meta.json (a regular file, <= 64 KiB, an object) into *meta_p, or -EBADMSG.
static int
s_read_meta (int dfd, json_t **meta_p, char *why, size_t cap)
{
    struct stat st;
    json_error_t jerr;
    char *buf = NULL;
    ssize_t n = -1;
    json_t *meta = NULL;
    int fd = openat (dfd, GW_SNAP_META, S_FILE_FLAGS);
    if (fd < 0)
        snprintf (why, cap, "meta.json %s", errno == ELOOP ? "is a symlink"
                  : errno == ENOENT ? "is missing" : "cannot be opened");
    else if (fstat (fd, &st) < 0 || !S_ISREG (st.st_mode))
        snprintf (why, cap, "meta.json is not a regular file");
    else if (st.st_size > S_META_MAX || !(buf = malloc (S_META_MAX + 1))
         ||  (n = pread (fd, buf, S_META_MAX + 1, 0)) < 0 || n > S_META_MAX)
        snprintf (why, cap, "meta.json is unreadable or over 64 KiB");
    else if (!(meta = json_loadb (buf, (size_t) n, JSON_REJECT_DUPLICATES, &jerr)))
        snprintf (why, cap, "meta.json is not JSON (line %d: %.80s)", jerr.line, jerr.text);
    else if (!json_is_object (meta))
        snprintf (why, cap, "meta.json is not a JSON object");
    free (buf);
    if (fd >= 0)
        close (fd);
    if (!json_is_object (meta)) {
        json_decref (meta);
        meta = NULL;
    }
    *meta_p = meta;
    return meta ? 0 : -EBADMSG;
}

//  STORE/name opened, locked with op (waiting up to wait_ms) and still
//  linked under its name once locked: its fd, or -errno with err.
static int
s_open_locked (gw_snapstore_t *self, const char *name, int op, int wait_ms,
               char *err, size_t errlen)
{
    struct stat st, now;
    if (!gw_snapstore_name_ok (name))
        return s_fail (err, errlen, -EINVAL, S_BAD_NAME, name ? name : "");
    int fd = openat (self->fd, name, S_DIR_FLAGS);
    int rc = fd >= 0 ? s_lock (fd, op, wait_ms) : errno == ELOOP || errno == ENOTDIR
           ? -EBADMSG : -errno;
    //  A remover renames it away while holding LOCK_EX: what we waited for
    //  may no longer be the snapshot by that name.
    if (rc == 0 && (fstat (fd, &st) < 0 || fstatat (self->fd, name, &now, AT_SYMLINK_NOFOLLOW) < 0
                ||  st.st_ino != now.st_ino || st.st_dev != now.st_dev))
        rc = -ENOENT;
    if (rc == 0)
        return fd;
    if (fd >= 0)
        close (fd);
    if (rc == -ENOENT)
        return s_fail (err, errlen, rc, "no snapshot \"%s\" in %s", name, self->dir);
    if (rc == -EBUSY)
        return s_fail (err, errlen, rc, "snapshot \"%s\" is being removed", name);
    if (rc == -EBADMSG)
        return s_fail (err, errlen, rc, "snapshot \"%s\" is corrupt: not a directory", name);
    return s_fail (err, errlen, rc, "cannot open snapshot \"%s\": %s", name, strerror (-rc));
}

//  Is dfd/file a regular file of the size meta records under key? name is
//  the snapshot's, for err.
static int
s_check_file (int dfd, const char *name, const json_t *meta, const char *file, const char *key,
              char *err, size_t errlen)
{
    json_t *v = json_object_get (meta, key);
    long long want = json_is_integer (v) ? (long long) json_integer_value (v) : -1;
    struct stat st;
    if (want < 0)
        return s_fail (err, errlen, -EBADMSG, "snapshot \"%s\" is corrupt: meta.json has no %s",
                       name, key);
    if (fstatat (dfd, file, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG (st.st_mode))
        return s_fail (err, errlen, -EBADMSG, "snapshot \"%s\" is corrupt: %s is missing or "
                       "not a regular file", name, file);
    if ((long long) st.st_size != want)
        return s_fail (err, errlen, -EBADMSG, "snapshot \"%s\" is %s: %s is %lld bytes, "
                       "meta.json says %lld", name, st.st_size < want ? "truncated"
                       : "corrupt", file, (long long) st.st_size, want);
    return 0;
}

//  Snapshot name's meta.json (in its directory dfd) read into *meta_p, and
//  the files checked against it. *meta_p is set even on failure.
static int
s_check (int dfd, const char *name, json_t **meta_p, char *err, size_t errlen)
{
    char why [160], magic [4] = "";
    if (s_read_meta (dfd, meta_p, why, sizeof why) < 0)
        return s_fail (err, errlen, -EBADMSG, "snapshot \"%s\" is corrupt: %s", name, why);
    const json_t *meta = *meta_p;
    json_t *format = json_object_get (meta, "format");
    const char *named = json_string_value (json_object_get (meta, "name"));
    if (!json_is_integer (format) || (json_integer_value (format) != GW_SNAP_FORMAT
                                      && json_integer_value (format) != GW_SNAP_FORMAT_STREAM))
        return s_fail (err, errlen, -EBADMSG, "snapshot \"%s\" has format %lld; this gateway "
                       "reads format %d", name, (long long) json_integer_value (format),
                       GW_SNAP_FORMAT);
    if (!named || strcmp (named, name))
        return s_fail (err, errlen, -EBADMSG, "snapshot \"%s\" is corrupt: its meta.json names "
                       "\"%.64s\"", name, named ? named : "no snapshot");
    //  A restart's kept /workspace (gw_wsstore) has a disk and no VM state.
    const char *kind = json_string_value (json_object_get (meta, "kind"));
    int rc = kind && strcmp (kind, GW_SNAP_KIND_WORKSPACE) == 0 ? 0
           : s_check_file (dfd, name, meta, GW_SNAP_STATE, "state_bytes", err, errlen);
    if (rc == 0 && json_object_get (meta, "ram_bytes"))
        rc = s_check_file (dfd, name, meta, GW_SNAP_RAM, "ram_bytes", err, errlen);
    if (rc == 0)
        rc = s_check_file (dfd, name, meta, GW_SNAP_DISK, "disk_file_bytes", err, errlen);
    int fd = rc == 0 ? openat (dfd, GW_SNAP_DISK, S_FILE_FLAGS) : -1;
    if (rc == 0 && (fd < 0 || pread (fd, magic, 4, 0) != 4 || memcmp (magic, "QFI\xfb", 4)))
        rc = s_fail (err, errlen, -EBADMSG, "snapshot \"%s\" is corrupt: " GW_SNAP_DISK
                     " is not a qcow2 image", name);
    if (fd >= 0)
        close (fd);
    return rc;
}

gw_snapref_t *
gw_snapstore_open (gw_snapstore_t *self, const char *name, int *rc_p, char *err, size_t errlen)
{
    assert (self);
    gw_snapref_t *ref = NULL;
    json_t *meta = NULL;
    int fd = s_open_locked (self, name, LOCK_SH, S_OPEN_WAIT_MS, err, errlen);
    int rc = fd < 0 ? fd : s_check (fd, name, &meta, err, errlen);
    if (rc == 0)
        ref = gw_snapref_new (&fd, &meta, self->dir, name);
    if (fd >= 0)
        close (fd);
    json_decref (meta);
    if (rc_p)
        *rc_p = rc;
    return ref;
}

//  ==========================================================================
//  Listing, removal, collection.

//  Append STORE/name to the list when it is a snapshot directory.
static void
s_list_add (gw_snapstore_t *self, const char *name, gw_snapinfo_t **items_p, int *n_p, int *cap_p)
{
    struct stat st;
    char why [160];
    if (!gw_snapstore_name_ok (name) || *n_p == INT_MAX
    ||  fstatat (self->fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR (st.st_mode))
        return;                                 //  dot-dirs (staging, trash) and junk
    if (*n_p == *cap_p) {
        *cap_p = *cap_p ? *cap_p * 2 : 16;
        if (!(*items_p = realloc (*items_p, (size_t) *cap_p * sizeof **items_p)))
            abort ();
    }
    gw_snapinfo_t *it = &(*items_p) [(*n_p)++];
    memset (it, 0, sizeof *it);
    snprintf (it->name, sizeof it->name, "%s", name);
    int fd = openat (self->fd, name, S_DIR_FLAGS);
    if (fd >= 0)
        s_read_meta (fd, &it->meta, why, sizeof why);
    json_t *created = json_object_get (it->meta, "created");
    it->created = json_is_number (created) ? json_number_value (created)
                : (double) st.st_mtim.tv_sec + st.st_mtim.tv_nsec / 1e9;
    it->bytes = s_dir_bytes (self->fd, name);
    if (fd >= 0)
        close (fd);
}

static int
s_by_created (const void *a, const void *b)
{
    const gw_snapinfo_t *x = a, *y = b;
    if (x->created != y->created)
        return x->created < y->created ? -1 : 1;
    return strcmp (x->name, y->name);
}

int
gw_snapstore_list (gw_snapstore_t *self, gw_snapinfo_t **items_p)
{
    assert (self && items_p);
    *items_p = NULL;
    DIR *d = s_opendir_at (self->fd, ".");
    if (!d)
        return -errno;
    int n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir (d)))
        s_list_add (self, de->d_name, items_p, &n, &cap);
    closedir (d);
    if (n > 1)
        qsort (*items_p, (size_t) n, sizeof **items_p, s_by_created);
    return n;
}

void
gw_snapstore_list_free (gw_snapinfo_t **items_p, int n)
{
    assert (items_p);
    for (int i = 0; *items_p && i < n; i++)
        json_decref ((*items_p) [i].meta);
    free (*items_p);
    *items_p = NULL;
}

//  Remove name, logged as snapshot.gc with reason, or as snapshot.removed.
static int
s_remove (gw_snapstore_t *self, const char *name, int wait_ms, const char *reason,
          char *err, size_t errlen)
{
    char trash [GW_SNAP_NAME_MAX + 64], hex [9], path [PATH_MAX];
    int fd = s_open_locked (self, name, LOCK_EX, wait_ms, err, errlen);
    if (fd == -EBADMSG && unlinkat (self->fd, name, 0) == 0) {  //  a file or symlink: junk
        gw_log (GW_LOG_INFO, "snapshot.removed", "name=%s bytes=0 kind=not_a_directory", name);
        return 0;
    }
    if (fd == -EBUSY)
        return s_fail (err, errlen, -EBUSY, "snapshot \"%s\" is in use by a session starting "
                       "from it; not removed (waited %d ms)", name, wait_ms);
    if (fd < 0)
        return fd;
    unsigned long long bytes = s_dir_bytes (fd, ".");
    s_random_hex (hex, 8);
    snprintf (trash, sizeof trash, S_TRASH "%s-%d-%s", name, (int) getpid (), hex);
    int rc = s_rename_noreplace (self->fd, name, trash);
    if (rc < 0) {
        s_fail (err, errlen, rc, "cannot remove snapshot \"%s\": %s", name, strerror (-rc));
        goto fail;
    }
    //  Its name is gone: the rest is cleanup, which gc retries if need be.
    snprintf (path, sizeof path, "%s/%s", self->dir, trash);
    if (gw_fs_remove_tree (path) < 0)
        gw_log (GW_LOG_WARN, "snapshot.trash_left", "dir=%s", path);
    if (reason)
        gw_log (GW_LOG_INFO, "snapshot.gc", "name=%s reason=%s bytes=%llu", name, reason, bytes);
    else
        gw_log (GW_LOG_INFO, "snapshot.removed", "name=%s bytes=%llu", name, bytes);
fail:
    close (fd);
    return rc;
}

int
gw_snapstore_remove (gw_snapstore_t *self, const char *name, int wait_ms, char *err, size_t errlen)
{
    assert (self);
    return s_remove (self, name, wait_ms, NULL, err, errlen);
}

//  A staging or trash dir ".staging-<name>-<pid>-<8 hex>" of a process that
//  died (kill -9) over S_LEFTOVER_S ago. A live pid keeps it, even recycled.
static bool
s_is_leftover (int dfd, const char *entry, double now)
{
    struct stat st;
    size_t len = strlen (entry);
    if ((strncmp (entry, S_STAGING, strlen (S_STAGING)) && strncmp (entry, S_TRASH,
         strlen (S_TRASH))) || len < 20 || entry [len - 9] != '-'
    ||  strspn (entry + len - 8, S_HEX) != 8)
        return false;
    const char *end = entry + len - 9, *p = end;
    while (p > entry && p [-1] >= '0' && p [-1] <= '9')
        p--;
    pid_t pid = p < end && end - p <= 9 && p [-1] == '-' ? (pid_t) strtol (p, NULL, 10) : 0;
    return pid > 0 && pid != getpid ()
        && fstatat (dfd, entry, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR (st.st_mode)
        && now - (double) st.st_mtime > S_LEFTOVER_S
        && kill (pid, 0) < 0 && errno == ESRCH;
}

static void
s_sweep_leftovers (gw_snapstore_t *self, double now)
{
    DIR *d = s_opendir_at (self->fd, ".");
    struct dirent *de;
    char path [PATH_MAX];
    while (d && (de = readdir (d))) {
        if (!s_is_leftover (self->fd, de->d_name, now))
            continue;
        unsigned long long bytes = s_dir_bytes (self->fd, de->d_name);
        snprintf (path, sizeof path, "%s/%s", self->dir, de->d_name);
        if (gw_fs_remove_tree (path) == 0)
            gw_log (GW_LOG_INFO, "snapshot.gc", "name=%s reason=leftover bytes=%llu",
                    de->d_name, bytes);
    }
    if (d)
        closedir (d);
}

int
gw_snapstore_gc (gw_snapstore_t *self, double max_age_s, uint64_t max_bytes, double now)
{
    assert (self);
    s_sweep_leftovers (self, now);
    gw_snapinfo_t *items = NULL;
    int n = gw_snapstore_list (self, &items), removed = 0;
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
        total += items [i].bytes;
    //  Oldest first: those over the age come first, then the byte limit
    //  takes the oldest that remain. One being read is skipped, not waited for.
    for (int i = 0; i < n; i++) {
        bool old = max_age_s > 0 && now - items [i].created > max_age_s;
        if (!old && (max_bytes == 0 || total <= max_bytes))
            continue;
        int rc = s_remove (self, items [i].name, 0, old ? "age" : "bytes", NULL, 0);
        total -= rc == 0 ? items [i].bytes : 0;
        removed += rc == 0;
        if (rc < 0 && rc != -ENOENT)
            gw_log (rc == -EBUSY ? GW_LOG_INFO : GW_LOG_WARN, "snapshot.gc_skipped",
                    "name=%s reason=\"%s\"", items [i].name, rc == -EBUSY ? "being read"
                    : strerror (-rc));
    }
    gw_snapstore_list_free (&items, n);
    return n < 0 ? n : removed;
}
