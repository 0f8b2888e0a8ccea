/*  gw_cgroup - one host cgroup per VM (see gw_cgroup.h). */
#include "jail/gw_cgroup.h"
#include "base/gw_log.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/statfs.h>
#include <unistd.h>

#define S_MIB (1024ull * 1024)
#define S_ROOT "/sys/fs/cgroup"
#define S_PREFIX "cellvm-vm-"
#define S_QEMU_MIB 256ull                       //  QEMU itself: heap, threads, libraries
#define S_TCG_MIB 1024ull                       //  QEMU 7.2's default TCG code buffer
#define S_CGROUP_MAGIC 0x27e0eb
#define S_CGROUP2_MAGIC 0x63677270
#define S_NCTL 4

//  v1 controllers, in the order gw_cgroup_values names them.
static const char *s_v1 [S_NCTL] = { "memory", "pids", "cpu", "blkio" };

struct _gw_cgroup_t {
    int version;
    char dir [S_NCTL][PATH_MAX];                //  v2: dir [0] only; "" where absent
    gw_cgroup_limits_t lim;
};

uint64_t
gw_cgroup_vm_memory (unsigned mem_mib, bool tcg, uint64_t host_bytes)
{
    uint64_t tb = S_TCG_MIB * S_MIB;
    if (host_bytes && host_bytes / 8 < tb)
        tb = host_bytes / 8;
    return (uint64_t) mem_mib * S_MIB + S_QEMU_MIB * S_MIB + (tcg ? tb : 0);
}

//  "n", or "n m" when m is not 0 (cpu.max's quota and period).
static void
s_value (gw_cgroup_value_t *v, const char *ctl, const char *file, unsigned long long n,
         unsigned long long m)
{
    v->controller = ctl;
    v->file = file;
    if (m)
        snprintf (v->value, sizeof v->value, "%llu %llu", n, m);
    else
        snprintf (v->value, sizeof v->value, "%llu", n);
}

//  The disks' throughput and IOPS, each direction: one io.max line (v2),
//  or the four blkio.throttle files (v1).
static size_t
s_io_values (const gw_cgroup_limits_t *lim, bool v2, gw_cgroup_value_t *out)
{
    if (!lim->io_dev [0] || (!lim->io_bps && !lim->io_iops))
        return 0;
    if (v2) {
        char bps [64] = "", iops [64] = "";
        if (lim->io_bps)
            snprintf (bps, sizeof bps, " rbps=%llu wbps=%llu", (unsigned long long) lim->io_bps,
                      (unsigned long long) lim->io_bps);
        if (lim->io_iops)
            snprintf (iops, sizeof iops, " riops=%llu wiops=%llu",
                      (unsigned long long) lim->io_iops, (unsigned long long) lim->io_iops);
        *out = (gw_cgroup_value_t) { .controller = "", .file = "io.max" };
        snprintf (out->value, sizeof out->value, "%s%s%s", lim->io_dev, bps, iops);
        return 1;
    }
    const char *files [4] = { "blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device",
                              "blkio.throttle.read_iops_device",
                              "blkio.throttle.write_iops_device" };
    size_t n = 0;
    for (int i = 0; i < 4; i++) {
        uint64_t v = i < 2 ? lim->io_bps : lim->io_iops;
        if (!v)
            continue;
        out [n] = (gw_cgroup_value_t) { .controller = "blkio", .file = files [i] };
        snprintf (out [n++].value, sizeof out->value, "%s %llu", lim->io_dev,
                  (unsigned long long) v);
    }
    return n;
}

int
gw_cgroup_block_device (const char *path, char *out, size_t cap)
{
    assert (path && out);
    struct stat st;
    char sys [96], part [128];
    if (stat (path, &st) < 0)
        return -errno;
    unsigned maj = major (st.st_dev), min = minor (st.st_dev);
    snprintf (sys, sizeof sys, "/sys/dev/block/%u:%u", maj, min);
    if (maj == 0 || access (sys, F_OK) < 0)
        return -ENODEV;                         //  no block device below it
    snprintf (part, sizeof part, "%s/partition", sys);
    if (access (part, F_OK) == 0) {             //  a partition: its disk's dev
        char dev [32] = "";
        snprintf (part, sizeof part, "%s/../dev", sys);
        int fd = open (part, O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read (fd, dev, sizeof dev - 1) : -1;
        if (fd >= 0)
            close (fd);
        if (n <= 0 || sscanf (dev, "%u:%u", &maj, &min) != 2)
            return -ENODEV;
    }
    int n = snprintf (out, cap, "%u:%u", maj, min);
    return n < 0 || (size_t) n >= cap ? -ENAMETOOLONG : 0;
}

size_t
gw_cgroup_values (const gw_cgroup_limits_t *lim, int version, gw_cgroup_value_t *out)
{
    assert (lim && out && (version == 1 || version == 2));
    size_t n = 0;
    bool v2 = version == 2;
    unsigned long long quota = (unsigned long long) (lim->cpus * 100000 + 0.5);
    if (lim->mem_bytes) {
        s_value (&out [n++], v2 ? "" : "memory", v2 ? "memory.max" : "memory.limit_in_bytes",
                 lim->mem_bytes, 0);
        if (v2)                                 //  over the limit means the OOM killer, not swap
            s_value (&out [n++], "", "memory.swap.max", 0, 0);
    }
    if (lim->pids)
        s_value (&out [n++], v2 ? "" : "pids", "pids.max", lim->pids, 0);
    if (lim->cpu_weight)                        //  v1 shares: 1024 is weight 100
        s_value (&out [n++], v2 ? "" : "cpu", v2 ? "cpu.weight" : "cpu.shares",
                 v2 ? lim->cpu_weight : lim->cpu_weight * 1024ull / 100, 0);
    if (quota && v2)
        s_value (&out [n++], "", "cpu.max", quota, 100000);
    else if (quota) {
        s_value (&out [n++], "cpu", "cpu.cfs_period_us", 100000, 0);
        s_value (&out [n++], "cpu", "cpu.cfs_quota_us", quota, 0);
    }
    return n + s_io_values (lim, v2, out + n);
}

uint64_t
gw_cgroup_parse_key (const char *text, const char *key)
{
    assert (text && key);
    size_t len = strlen (key);
    for (const char *line = text; line; ) {
        if (strncmp (line, key, len) == 0 && line [len] == ' ')
            return strtoull (line + len + 1, NULL, 10);
        line = strchr (line, '\n');
        if (line)
            line++;
    }
    return 0;
}

//  1 (v1), 2 (v2) or 0 (no usable cgroup fs) for the mount at root.
static int
s_version (const char *root)
{
    struct statfs fs;
    char mem [PATH_MAX];
    if (statfs (root, &fs) == 0 && (unsigned long) fs.f_type == S_CGROUP2_MAGIC)
        return 2;
    snprintf (mem, sizeof mem, "%s/memory", root);
    if (statfs (mem, &fs) == 0 && (unsigned long) fs.f_type == S_CGROUP_MAGIC)
        return 1;
    return 0;
}

//  ==========================================================================
//  Files.

static int
s_write (const char *dir, const char *file, const char *value)
{
    char path [PATH_MAX + 64];
    snprintf (path, sizeof path, "%s/%s", dir, file);
    int fd = open (path, O_WRONLY | O_CLOEXEC), rc = 0;
    if (fd < 0)
        return -errno;
    if (write (fd, value, strlen (value)) < 0)
        rc = -errno;
    close (fd);
    return rc;
}

static int
s_read (const char *dir, const char *file, char *buf, size_t cap)
{
    char path [PATH_MAX + 64];
    snprintf (path, sizeof path, "%s/%s", dir, file);
    int fd = open (path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read (fd, buf, cap - 1) : -1;
    int rc = n < 0 ? -errno : 0;
    if (fd >= 0)
        close (fd);
    buf [n > 0 ? n : 0] = '\0';
    return rc;
}

//  Does the hierarchy list ("cpu,cpuacct"; "" for v2) hold ctl ("" = v2)?
static bool
s_has_ctl (const char *list, const char *ctl)
{
    size_t n = strlen (ctl);
    if (!n)
        return !*list;
    for (const char *p = list; p; ) {
        if (strncmp (p, ctl, n) == 0 && (p [n] == ',' || !p [n]))
            return true;
        p = strchr (p, ',');
        if (p)
            p++;
    }
    return false;
}

//  Our own cgroup's path in hierarchy ctl ("" for v2's "0::") from
//  /proc/self/cgroup ("id:controllers:path" lines), into out; "/" when absent.
static void
s_own_path (const char *ctl, char *out, size_t cap)
{
    char buf [4096];
    snprintf (out, cap, "/");
    if (s_read ("/proc/self", "cgroup", buf, sizeof buf) < 0)
        return;
    for (char *save = NULL, *line = strtok_r (buf, "\n", &save); line;
         line = strtok_r (NULL, "\n", &save)) {
        char *ctls = strchr (line, ':'), *path = ctls ? strchr (ctls + 1, ':') : NULL;
        if (!path)
            continue;
        *path = '\0';
        if (s_has_ctl (ctls + 1, ctl)) {
            snprintf (out, cap, "%s", path + 1);
            return;
        }
    }
}

//  Remove the cgroups of gateways that are gone (empty ones only: rmdir).
static void
s_sweep (const char *parent)
{
    DIR *d = opendir (parent);
    struct dirent *e;
    while (d && (e = readdir (d))) {
        int pid = 0;
        if (strncmp (e->d_name, S_PREFIX, strlen (S_PREFIX)) != 0
        ||  sscanf (e->d_name + strlen (S_PREFIX), "%d-", &pid) != 1 || pid <= 0
        ||  pid == getpid () || kill (pid, 0) == 0 || errno != ESRCH)
            continue;
        char path [PATH_MAX + 256];
        snprintf (path, sizeof path, "%s/%s", parent, e->d_name);
        if (rmdir (path) == 0)
            gw_log (GW_LOG_DEBUG, "vm.cgroup_swept", "path=%s", path);
    }
    if (d)
        closedir (d);
}

//  ==========================================================================
//  The VM's cgroup.

static unsigned
s_next_serial (void)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static unsigned serial;
    pthread_mutex_lock (&lock);
    unsigned n = ++serial;
    pthread_mutex_unlock (&lock);
    return n;
}

//  The parent dir for hierarchy ctl ("" = v2) into out; swept of dead
//  gateways' cgroups the first time.
static void
s_parent_dir (int version, const char *ctl, char *out, size_t cap)
{
    char own [PATH_MAX / 2];
    s_own_path (version == 2 ? "" : ctl, own, sizeof own);
    if (version == 2 && strcmp (own, "/") != 0) {
        char *slash = strrchr (own, '/');
        *(slash == own ? slash + 1 : slash) = '\0';
    }
    snprintf (out, cap, "%s%s%s%s", S_ROOT, *ctl ? "/" : "", ctl,
              strcmp (own, "/") == 0 ? "" : own);
    s_sweep (out);
}

//  Make dir under hierarchy ctl; v2 turns on the controllers below parent.
static int
s_make (gw_cgroup_t *self, int i, unsigned serial)
{
    const char *ctl = self->version == 2 ? "" : s_v1 [i];
    char parent [PATH_MAX - 64];
    s_parent_dir (self->version, ctl, parent, sizeof parent);
    if (self->version == 2)
        s_write (parent, "cgroup.subtree_control", "+memory +pids +cpu +io");
    snprintf (self->dir [i], sizeof self->dir [i], "%s/" S_PREFIX "%d-%u", parent,
              (int) getpid (), serial);
    return mkdir (self->dir [i], 0755) < 0 && errno != EEXIST ? -errno : 0;
}

static int
s_write_limits (gw_cgroup_t *self)
{
    gw_cgroup_value_t v [GW_CGROUP_VALUES_MAX];
    size_t n = gw_cgroup_values (&self->lim, self->version, v);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        int c = 0;
        while (self->version == 1 && c < S_NCTL && strcmp (s_v1 [c], v [i].controller) != 0)
            c++;
        if (c >= S_NCTL || !self->dir [c][0])
            continue;                           //  that v1 controller is not mounted
        int r = s_write (self->dir [c], v [i].file, v [i].value);
        //  Without swap accounting memory.swap.max is absent: not an error.
        if (r < 0 && !(r == -ENOENT && strstr (v [i].file, "swap")) && rc == 0)
            rc = r;
    }
    return rc;
}

gw_cgroup_t *
gw_cgroup_new (const gw_cgroup_limits_t *lim, char *err, size_t errlen)
{
    assert (lim && err);
    gw_cgroup_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->lim = *lim;
    self->version = s_version (S_ROOT);
    int rc = self->version ? 0 : -ENOTSUP;
    unsigned serial = s_next_serial ();
    for (int i = 0; rc == 0 && i < (self->version == 2 ? 1 : S_NCTL); i++) {
        char mount [PATH_MAX];
        snprintf (mount, sizeof mount, S_ROOT "/%s", s_v1 [i]);
        if (self->version == 1 && access (mount, F_OK) < 0)
            continue;
        rc = s_make (self, i, serial);
    }
    if (rc == 0 && !self->dir [0][0])
        rc = -ENOTSUP;                          //  no memory controller: no point
    if (rc == 0)
        rc = s_write_limits (self);
    if (rc < 0) {
        snprintf (err, errlen, "%s", rc == -ENOTSUP ? "no cgroup memory controller under "
                  S_ROOT : strerror (-rc));
        gw_cgroup_destroy (&self);
    }
    return self;
}

void
gw_cgroup_destroy (gw_cgroup_t **self_p)
{
    assert (self_p);
    gw_cgroup_t *self = *self_p;
    if (!self)
        return;
    for (int i = 0; i < S_NCTL; i++)
        if (self->dir [i][0] && rmdir (self->dir [i]) < 0 && errno != ENOENT)
            gw_log (GW_LOG_WARN, "vm.cgroup_left", "path=%s reason=\"%s\"", self->dir [i],
                    strerror (errno));
    free (self);
    *self_p = NULL;
}

void
gw_cgroup_procs_fds (gw_cgroup_t *self, int fds [GW_CGROUP_PROCS_MAX])
{
    assert (self && S_NCTL == GW_CGROUP_PROCS_MAX);
    for (int i = 0; i < S_NCTL; i++) {
        char path [PATH_MAX + 16];
        snprintf (path, sizeof path, "%s/cgroup.procs", self->dir [i]);
        fds [i] = self->dir [i][0] ? open (path, O_WRONLY | O_CLOEXEC) : -1;
    }
}

uint64_t
gw_cgroup_oom_kills (gw_cgroup_t *self)
{
    assert (self);
    char buf [2048];
    if (s_read (self->dir [0], self->version == 2 ? "memory.events" : "memory.oom_control",
                buf, sizeof buf) < 0)
        return 0;
    return gw_cgroup_parse_key (buf, "oom_kill");
}

uint64_t
gw_cgroup_mem_limit (gw_cgroup_t *self)
{
    assert (self);
    char buf [64];
    if (s_read (self->dir [0], self->version == 2 ? "memory.max" : "memory.limit_in_bytes",
                buf, sizeof buf) < 0)
        return 0;
    return strtoull (buf, NULL, 10);
}

const char *
gw_cgroup_path (gw_cgroup_t *self)
{
    assert (self);
    return self->dir [0];
}
