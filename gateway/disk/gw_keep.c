/*  gw_keep - a session's /workspace across a client restart (see gw_keep.h).

    The kept/ directory is opened once per call (O_NOFOLLOW, owner checked)
    and entries are reached relative to that fd, so a symlink planted in
    place of kept/ leads nowhere.
*/
#include "disk/gw_keep.h"
#include "base/gw_log.h"
#include "base/gw_fs.h"
#include "base/gw_owndir.h"
#include "base/gw_runbase.h"
#include "ch_util.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_KEPT "kept"
#define S_STAGE ".stage-"
#define S_SYNC_DEPTH 64                         //  deeper is left to writeback: no loss over it

static bool
s_is_identity (const char *s)
{
    return s && strlen (s) == GW_KEEP_ID_LEN
        && strspn (s, "0123456789abcdef") == GW_KEEP_ID_LEN;
}

//  Identities name paths: nothing but our hex gets in.
static int
s_check_identity (const char *identity, char *err, size_t errlen)
{
    if (s_is_identity (identity))
        return 0;
    snprintf (err, errlen, "invalid workspace identity (want %d hex digits)", GW_KEEP_ID_LEN);
    return -EINVAL;
}

static bool
s_own_dir (const struct stat *st)
{
    return S_ISDIR (st->st_mode) && st->st_uid == geteuid ();
}

int
gw_keep_identity (const char *connection_file, const char *key, char *out, size_t cap)
{
    assert (connection_file && key && out);
    char real [PATH_MAX], hex [65];
    if (cap <= GW_KEEP_ID_LEN)
        return -ENOSPC;
    //  The real path: a relative and an absolute spelling are one session.
    if (!realpath (connection_file, real))
        return -errno;
    size_t rlen = strlen (real), klen = strlen (key);
    uint8_t *text = malloc (rlen + 1 + klen);
    if (!text)
        abort ();
    memcpy (text, real, rlen);
    text [rlen] = '\n';
    memcpy (text + rlen + 1, key, klen);
    ch_sha256_hex (text, rlen + 1 + klen, hex);
    free (text);
    snprintf (out, cap, "%.*s", GW_KEEP_ID_LEN, hex);
    return 0;
}

int
gw_keep_move (const char *src, const char *dst)
{
    assert (src && dst);
    if (renameat2 (AT_FDCWD, src, AT_FDCWD, dst, RENAME_NOREPLACE) == 0)
        return 0;
    if (errno != EINVAL && errno != ENOSYS)
        return -errno;
    //  A filesystem without renameat2 flags: check, then rename (racy, but
    //  only we write below BASE).
    struct stat st;
    if (lstat (dst, &st) == 0)
        return -EEXIST;
    return rename (src, dst) == 0 ? 0 : -errno;
}

//  --------------------------------------------------------------------------
//  BASE and kept/.

//  Open path, a directory we own, not through a symlink. fd or -errno + err.
static int
s_open_own_dir (const char *path, char *err, size_t errlen)
{
    struct stat st;
    int fd = open (path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), rc = 0;
    if (fd < 0)
        rc = errno == ELOOP ? -ENOTDIR : -errno;
    else if (fstat (fd, &st) < 0)
        rc = -errno;
    else if (!s_own_dir (&st))
        rc = -EACCES;
    if (rc == 0)
        return fd;
    if (fd >= 0)
        close (fd);
    snprintf (err, errlen, "%s: %s", path, rc == -EACCES ? "owned by another user"
              : rc == -ENOTDIR ? "not a directory (or a symlink)" : strerror (-rc));
    return rc;
}

//  BASE/kept into kept (made with BASE when create) and opened.
//  fd or -errno + err.
static int
s_open_kept (const char *base, bool create, char *kept, size_t cap, char *err, size_t errlen)
{
    char dflt [PATH_MAX];
    if (!base && gw_runbase_default (dflt, sizeof dflt) == 0)
        base = dflt;
    int n = base ? snprintf (kept, cap, "%s/" S_KEPT, base) : -1;
    if (n < 0 || (size_t) n >= cap) {
        snprintf (err, errlen, "keep base is missing or too long");
        return -ENAMETOOLONG;
    }
    int rc = create ? gw_owndir_make (base, geteuid (), err, errlen) : 0;
    if (rc == 0 && create)
        rc = gw_owndir_make (kept, geteuid (), err, errlen);
    return rc < 0 ? rc : s_open_own_dir (kept, err, errlen);
}

static int
s_join (char *out, size_t cap, const char *dir, const char *name)
{
    int n = snprintf (out, cap, "%s/%s", dir, name);
    return n < 0 || (size_t) n >= cap ? -ENAMETOOLONG : 0;
}

int
gw_keep_stage (const char *base, const char *identity, char *out, size_t cap, char *err,
               size_t errlen)
{
    assert (out && err);
    char kept [PATH_MAX], name [64];
    int kfd = -1, rc = s_check_identity (identity, err, errlen);
    if (rc < 0)
        goto fail;
    if ((rc = kfd = s_open_kept (base, true, kept, sizeof kept, err, errlen)) < 0)
        goto fail;
    snprintf (name, sizeof name, S_STAGE "%s-%d", identity, (int) getpid ());
    if ((rc = s_join (out, cap, kept, name)) < 0) {
        snprintf (err, errlen, "keep path too long");
        goto fail;
    }
    //  One an earlier stage of ours left (it never committed) goes first.
    if ((rc = gw_fs_remove_tree (out)) < 0
    ||  (rc = mkdirat (kfd, name, 0700) < 0 ? -errno : 0) < 0) {
        snprintf (err, errlen, "cannot create %s: %s", out, strerror (-rc));
        goto fail;
    }
    close (kfd);
    return 0;
fail:
    if (kfd >= 0)
        close (kfd);
    return rc;
}

//  --------------------------------------------------------------------------
//  Commit: durable first, then visible.

static int s_sync_tree (int dfd, int depth);

//  fsync one entry of dfd if it is a regular file or a directory. Only a
//  failed fsync fails: what we cannot open (mode 000, gone meanwhile) is
//  still moved, and the kernel's writeback saves it.
static int
s_sync_entry (int dfd, const char *name, int depth)
{
    struct stat st;
    if (!strcmp (name, ".") || !strcmp (name, "..")
    ||  fstatat (dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return 0;
    bool is_dir = S_ISDIR (st.st_mode);
    if (!S_ISREG (st.st_mode) && !(is_dir && depth < S_SYNC_DEPTH))
        return 0;
    int fd = openat (dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC
                     | (is_dir ? O_DIRECTORY : 0));
    if (fd < 0)
        return 0;
    int rc = 0;
    if (fstat (fd, &st) < 0 || (!S_ISREG (st.st_mode) && !S_ISDIR (st.st_mode)))
        rc = 0;                                 //  swapped meanwhile: not ours to sync
    else if (S_ISDIR (st.st_mode))
        rc = s_sync_tree (fd, depth + 1);
    else if (fsync (fd) < 0)
        rc = -errno;
    close (fd);
    return rc;
}

//  fsync everything below dfd, then dfd itself.
static int
s_sync_tree (int dfd, int depth)
{
    int rc = 0, fd = dup (dfd);
    DIR *dir = fd >= 0 ? fdopendir (fd) : NULL;
    if (!dir) {
        rc = -errno;
        goto fail;
    }
    struct dirent *de;
    while (rc == 0 && (de = readdir (dir)))
        rc = s_sync_entry (dirfd (dir), de->d_name, depth);
    closedir (dir);
    fd = -1;
    if (rc == 0 && fsync (dfd) < 0)
        rc = -errno;
    return rc;
fail:
    if (fd >= 0)
        close (fd);
    return rc;
}

//  Rename staged to kept/<identity>. An older one is swapped out in one
//  step (never a moment with neither), then removed from staged's name.
static int
s_install (int kfd, const char *kept, const char *identity, const char *staged)
{
    char target [PATH_MAX];
    if (renameat2 (AT_FDCWD, staged, kfd, identity, RENAME_NOREPLACE) == 0)
        return 0;
    if (errno == EEXIST && renameat2 (AT_FDCWD, staged, kfd, identity, RENAME_EXCHANGE) == 0) {
        int rc = gw_fs_remove_tree (staged);
        if (rc < 0)
            gw_log (GW_LOG_WARN, "keep.left", "dir=%s reason=\"%s\"", staged, strerror (-rc));
        return 0;
    }
    if (errno != EINVAL && errno != ENOSYS)
        return -errno;
    //  No renameat2 flags on this filesystem: the same result, not atomic.
    int rc = s_join (target, sizeof target, kept, identity);
    if (rc == 0)
        rc = gw_fs_remove_tree (target);
    if (rc == 0 && renameat (AT_FDCWD, staged, kfd, identity) < 0)
        rc = -errno;
    return rc;
}

int
gw_keep_commit (const char *base, const char *identity, const char *staged, char *err,
                size_t errlen)
{
    assert (staged && err);
    char kept [PATH_MAX];
    int kfd = -1, sfd = -1, rc = s_check_identity (identity, err, errlen);
    if (rc < 0 || (rc = kfd = s_open_kept (base, true, kept, sizeof kept, err, errlen)) < 0
    ||  (rc = sfd = s_open_own_dir (staged, err, errlen)) < 0)
        goto fail;
    //  Its mtime is when it was kept: the sweep's clock.
    if ((rc = futimens (sfd, NULL) < 0 ? -errno : 0) < 0
    ||  (rc = s_sync_tree (sfd, 0)) < 0
    ||  (rc = s_install (kfd, kept, identity, staged)) < 0) {
        snprintf (err, errlen, "cannot keep %s as %s/%s: %s", staged, kept, identity,
                  strerror (-rc));
        goto fail;
    }
    //  In place for the next gateway either way: a failed fsync here only
    //  risks it across a host crash.
    if (fsync (kfd) < 0)
        gw_log (GW_LOG_WARN, "keep.unsynced", "dir=%s reason=\"%s\"", kept, strerror (errno));
    close (sfd);
    close (kfd);
    return 0;
fail:
    if (sfd >= 0)
        close (sfd);
    if (kfd >= 0)
        close (kfd);
    gw_fs_remove_tree (staged);
    return rc;
}

//  --------------------------------------------------------------------------
//  Claim.

//  Delete what was found at path in place of a kept workspace. -EACCES + err.
static int
s_refuse (const char *path, const char *why, char *err, size_t errlen)
{
    int rc = gw_fs_remove_tree (path);
    gw_log (GW_LOG_WARN, "keep.refused", "dir=%s reason=\"%s\" removed=%s", path, why,
            rc == 0 ? "yes" : "no");
    snprintf (err, errlen, "kept workspace %s refused: %s", path, why);
    return -EACCES;
}

static const char *
s_why_not (const struct stat *st)
{
    return S_ISLNK (st->st_mode) ? "a symlink" : !S_ISDIR (st->st_mode) ? "not a directory"
         : "owned by another user";
}

int
gw_keep_claim (const char *base, const char *identity, const char *dst, char *err,
               size_t errlen)
{
    assert (dst && err);
    char kept [PATH_MAX], path [PATH_MAX];
    struct stat st;
    int kfd = -1, rc = s_check_identity (identity, err, errlen);
    if (rc < 0 || (rc = kfd = s_open_kept (base, true, kept, sizeof kept, err, errlen)) < 0)
        goto fail;
    if ((rc = s_join (path, sizeof path, kept, identity)) < 0
    ||  (rc = fstatat (kfd, identity, &st, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0) < 0) {
        snprintf (err, errlen, "no kept workspace %s: %s", path, strerror (-rc));
        goto fail;
    }
    if (!s_own_dir (&st)) {
        rc = s_refuse (path, s_why_not (&st), err, errlen);
        goto fail;
    }
    if ((rc = gw_keep_move (path, dst)) < 0) {
        snprintf (err, errlen, "cannot move %s to %s: %s", path, dst, strerror (-rc));
        goto fail;
    }
    //  Swapped between the check and the rename? Then it is at dst now.
    if (lstat (dst, &st) < 0 || !s_own_dir (&st)) {
        rc = s_refuse (dst, "changed while being claimed", err, errlen);
        goto fail;
    }
    close (kfd);
    return 0;
fail:
    if (kfd >= 0)
        close (kfd);
    return rc;
}

//  --------------------------------------------------------------------------
//  Sweep.

//  A stage dir whose gateway is gone ("<identity>-<pid>" after the prefix).
static bool
s_stage_is_dead (const char *name)
{
    const char *rest = name + strlen (S_STAGE);
    if (strlen (rest) < GW_KEEP_ID_LEN + 2 || rest [GW_KEEP_ID_LEN] != '-')
        return false;
    char *end = NULL;
    long pid = strtol (rest + GW_KEEP_ID_LEN + 1, &end, 10);
    if (*end || pid <= 0 || pid > INT32_MAX)
        return false;
    return pid != getpid () && kill ((pid_t) pid, 0) < 0 && errno == ESRCH;
}

//  Age in seconds of dfd/name if it is a candidate for the sweep, else -1.
static double
s_sweep_age (int dfd, const char *name, double now)
{
    struct stat st;
    bool stage = strncmp (name, S_STAGE, strlen (S_STAGE)) == 0;
    if (!(stage ? s_stage_is_dead (name) : s_is_identity (name))
    ||  fstatat (dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return -1;
    double age = now - ((double) st.st_mtim.tv_sec + st.st_mtim.tv_nsec / 1e9);
    return age < 0 ? 0 : age;
}

int
gw_keep_sweep (const char *base, double max_age_s, double now)
{
    char kept [PATH_MAX], path [PATH_MAX], err [256];
    int rc = 0, kfd = s_open_kept (base, false, kept, sizeof kept, err, sizeof err);
    DIR *dir = kfd >= 0 ? fdopendir (kfd) : NULL;
    if (!dir) {
        rc = kfd == -ENOENT ? 0 : kfd < 0 ? kfd : -errno;
        goto fail;
    }
    struct dirent *de;
    while ((de = readdir (dir))) {
        double age = s_sweep_age (dirfd (dir), de->d_name, now);
        if (age < 0 || age <= max_age_s || s_join (path, sizeof path, kept, de->d_name) < 0)
            continue;
        int gone = gw_fs_remove_tree (path);
        if (gone == 0)
            rc++;
        gw_log (gone == 0 ? GW_LOG_INFO : GW_LOG_WARN, gone == 0 ? "keep.swept" : "keep.left",
                "dir=%s age_s=%.0f reason=\"%s\"", path, age,
                gone == 0 ? "not taken in time" : strerror (-gone));
    }
    closedir (dir);
    return rc;
fail:
    if (kfd >= 0)
        close (kfd);
    return rc;
}
