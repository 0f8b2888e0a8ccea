/*  gw_tplsweep - deleting snapshot templates nobody will restore again
    (see gw_tplsweep.h).
*/
#include "snap/gw_tplsweep.h"
#include "base/gw_log.h"
#include "base/gw_fs.h"
#include "snap/gw_tplmeta.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

//  The settings that make two templates interchangeable but for the image.
static const char *s_same [] = { "mem_mib", "vcpus", "accel", "cpu", "append", "disk_bytes",
                                 "format" };

static bool
s_is_key (const char *name)
{
    return strlen (name) == GW_TPLMETA_KEY_LEN
        && strspn (name, "0123456789abcdef") == GW_TPLMETA_KEY_LEN;
}

//  The rootfs path of inputs ("PATH size=... mtime=..."), into out.
static void
s_rootfs_path (json_t *inputs, char *out, size_t cap)
{
    const char *v = json_string_value (json_object_get (inputs, "rootfs.ext4")) ?: "";
    const char *end = strstr (v, " size=");
    if (!end)
        end = strstr (v, " missing");
    snprintf (out, cap, "%.*s", end ? (int) (end - v) : (int) strlen (v), v);
}

//  The rootfs other was built from is gone, or another file is at its path
//  now: no gateway can make its key again. (Not for a path that cannot be
//  checked: a mount that is away for a moment.)
static bool
s_image_gone (json_t *other)
{
    const char *was = json_string_value (json_object_get (other, "rootfs.ext4"));
    char path [PATH_MAX], now [PATH_MAX + 96];
    s_rootfs_path (other, path, sizeof path);
    if (!was || path [0] != '/')
        return false;
    struct stat st;
    if (stat (path, &st) < 0)
        return errno == ENOENT;
    gw_tplmeta_describe_file (path, now, sizeof now);
    return strcmp (now, was) != 0;
}

//  Why the template with inputs `other` (meta.json last written at mtime)
//  can go, given ours; NULL to keep it.
static const char *
s_why (json_t *ours, json_t *other, time_t mtime, int64_t max_idle_s)
{
    if (!json_is_object (other))
        return NULL;                            //  not ours to judge (or mid-build)
    if (max_idle_s >= 0 && time (NULL) - mtime > max_idle_s)
        return "not restored for longer than the idle limit";
    if (s_image_gone (other))
        return "its image is gone or was rebuilt";
    char a [PATH_MAX], b [PATH_MAX];
    s_rootfs_path (ours, a, sizeof a);
    s_rootfs_path (other, b, sizeof b);
    if (!a [0] || strcmp (a, b))
        return NULL;
    for (size_t i = 0; i < sizeof s_same / sizeof s_same [0]; i++)
        if (!json_equal (json_object_get (ours, s_same [i]), json_object_get (other, s_same [i])))
            return NULL;
    return "superseded by a newer image or QEMU for the same settings";
}

//  Consider base/name; 1 if deleted.
static int
s_consider (const char *base, const char *name, json_t *ours, int64_t max_idle_s)
{
    char dir [PATH_MAX], meta [PATH_MAX + 16], lock [PATH_MAX + 8];
    snprintf (dir, sizeof dir, "%s/%s", base, name);
    snprintf (meta, sizeof meta, "%s/" GW_TPL_META, dir);
    snprintf (lock, sizeof lock, "%s.lock", dir);
    struct stat st;
    if (stat (meta, &st) < 0)
        return 0;                               //  not a template (yet)
    int fd = open (lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 || flock (fd, LOCK_EX | LOCK_NB) < 0) {
        if (fd >= 0)
            close (fd);
        return 0;                               //  being built
    }
    gw_tplmeta_t *m = gw_tplmeta_load (dir);
    const char *why = s_why (ours, gw_tplmeta_recorded (m), st.st_mtime, max_idle_s);
    int removed = 0;
    if (why && gw_fs_remove_tree (dir) == 0) {
        unlink (lock);
        gw_log (GW_LOG_INFO, "template.removed", "dir=%s reason=\"%s\"", dir, why);
        removed = 1;
    }
    gw_tplmeta_destroy (&m);
    close (fd);
    return removed;
}

int
gw_tplsweep (const char *base, const char *key, int64_t max_idle_s)
{
    assert (base && key);
    char dir [PATH_MAX];
    snprintf (dir, sizeof dir, "%s/%s", base, key);
    gw_tplmeta_t *m = gw_tplmeta_load (dir);
    json_t *ours = gw_tplmeta_recorded (m);
    DIR *d = opendir (base);
    int n = d ? 0 : -errno;
    struct dirent *de;
    while (d && json_is_object (ours) && (de = readdir (d)))
        if (s_is_key (de->d_name) && strcmp (de->d_name, key))
            n += s_consider (base, de->d_name, ours, max_idle_s);
    if (d)
        closedir (d);
    gw_tplmeta_destroy (&m);
    return n;
}
