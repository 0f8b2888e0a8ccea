/*  gw_snapstamp - a snapshot's verification stamp (see gw_snapstamp.h). */
#include "snap/gw_snapstamp.h"

#include <assert.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

//  What identifies the file at state now, with the hash it is said to have.
static json_t *
s_fingerprint (const char *state, const char *sha)
{
    struct stat st;
    if (lstat (state, &st) < 0 || !S_ISREG (st.st_mode))
        return NULL;
    return json_pack ("{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "state_sha256", sha,
                      "dev", (json_int_t) st.st_dev, "ino", (json_int_t) st.st_ino,
                      "size", (json_int_t) st.st_size, "nlink", (json_int_t) st.st_nlink,
                      "mtime_s", (json_int_t) st.st_mtim.tv_sec,
                      "mtime_ns", (json_int_t) st.st_mtim.tv_nsec,
                      "ctime_s", (json_int_t) st.st_ctim.tv_sec,
                      "ctime_ns", (json_int_t) st.st_ctim.tv_nsec);
}

//  The stamp of state: verified.json for the state file, verified-NAME.json
//  for another file of the snapshot (its RAM).
static int
s_stamp_path (const char *dir, const char *state, char *path, size_t cap)
{
    const char *slash = strrchr (state, '/'), *base = slash ? slash + 1 : state;
    int n = strcmp (base, "state") == 0
          ? snprintf (path, cap, "%s/" GW_SNAPSTAMP_FILE, dir)
          : snprintf (path, cap, "%s/verified-%s.json", dir, base);
    return n > 0 && (size_t) n < cap ? 0 : -ENAMETOOLONG;
}

bool
gw_snapstamp_matches (const char *dir, const char *state, const char *sha)
{
    assert (dir && state && sha);
    char path [PATH_MAX];
    if (s_stamp_path (dir, state, path, sizeof path) < 0)
        return false;
    json_t *now = s_fingerprint (state, sha);
    json_t *stamp = now ? json_load_file (path, JSON_REJECT_DUPLICATES, NULL) : NULL;
    bool same = stamp && json_equal (stamp, now);
    json_decref (stamp);
    json_decref (now);
    return same;
}

int
gw_snapstamp_write (const char *dir, const char *state, const char *sha)
{
    assert (dir && state && sha);
    char path [PATH_MAX], tmp [PATH_MAX];
    if (s_stamp_path (dir, state, path, sizeof path) < 0
    ||  snprintf (tmp, sizeof tmp, "%s/.verified-%d.tmp", dir, (int) getpid ())
        >= (int) sizeof tmp)
        return -ENAMETOOLONG;
    json_t *now = s_fingerprint (state, sha);
    if (!now)
        return -ENOENT;
    int rc = json_dump_file (now, tmp, JSON_COMPACT | JSON_SORT_KEYS) == 0 ? 0 : -EIO;
    json_decref (now);
    if (rc == 0 && rename (tmp, path) < 0)
        rc = -errno;
    if (rc < 0)
        unlink (tmp);
    return rc;
}
