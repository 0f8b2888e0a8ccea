/*  gi_sys - one-time system set-up for cellvm-init. */
#include "gi_sys.h"
#include "gi_log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define S_FLAGS (MS_NOSUID | MS_NODEV | MS_NOATIME)     //  the session disk's
#define S_MIB (1024ull * 1024ull)

typedef struct {
    const char *src, *dst, *type;
    unsigned long flags;
    const char *data;
    int fatal;
} s_mount_t;

static int
s_mount (const s_mount_t *m)
{
    mkdir (m->dst, 0755);
    if (mount (m->src, m->dst, m->type, m->flags, m->data) == 0 || errno == EBUSY)
        return 0;
    int rc = -errno;
    gi_log (m->fatal ? CH_LOG_ERROR : CH_LOG_WARN, "sys.mount_failed",
            "type=%s dst=%s reason=\"%s\"", m->type, m->dst, strerror (-rc));
    return m->fatal ? rc : 0;
}

int
gi_sys_mount_base (void)
{
    const unsigned long safe = MS_NOSUID | MS_NODEV | MS_NOEXEC;
    static const char *ptmx = "/dev/ptmx";
    const s_mount_t table [] = {
        { "proc", "/proc", "proc", safe, NULL, 1 },
        { "sysfs", "/sys", "sysfs", safe, NULL, 1 },
        { "devtmpfs", "/dev", "devtmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755", 1 },
        { "devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
          "newinstance,gid=5,mode=0620,ptmxmode=0666", 0 },
        { "shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=25%", 0 },
        { "tmp", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=25%", 0 },
        //  cellvm-notebook's copy of the launch folder: root's, so the kernel reads only.
        { "notebook", GI_NOTEBOOK, "tmpfs", safe, "mode=0755,size=25%", 0 },
        { "cgroup2", "/sys/fs/cgroup", "cgroup2", safe, NULL, 0 },
    };
    for (size_t i = 0; i < sizeof table / sizeof table [0]; i++) {
        int rc = s_mount (&table [i]);
        if (rc < 0)
            return rc;
    }
    //  Pseudo-terminals (IPython's `!cmd`) through this devpts instance.
    unlink (ptmx);
    if (symlink ("pts/ptmx", ptmx) < 0)
        gi_log (CH_LOG_WARN, "sys.ptmx_link", "reason=\"%s\"", strerror (errno));
    return 0;
}

static int s_flush (const char *disk);
static int s_freeze (const char *dir);

//  The system, unless a test stands in for it (gi_sys_set_disk).
static const gi_sys_disk_t s_system = { GI_DISK, GI_WORKSPACE, mount, umount2, chown, s_flush,
                                        s_freeze };
static gi_sys_disk_t s_disk = { GI_DISK, GI_WORKSPACE, mount, umount2, chown, s_flush,
                                s_freeze };

void
gi_sys_set_disk (const gi_sys_disk_t *disk)
{
    s_disk = disk ? *disk : s_system;
}

//  A disk whose first 64 KiB are all zero has never been formatted.
static int
s_disk_blank (const char *dev)
{
    static unsigned char buf [65536];
    int fd = open (dev, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read (fd, buf, sizeof buf);
    close (fd);
    if (n != (ssize_t) sizeof buf)
        return 0;
    for (size_t i = 0; i < sizeof buf; i++)
        if (buf [i])
            return 0;
    return 1;
}

static int
s_run (char *const argv [])
{
    pid_t pid = fork ();
    if (pid == 0) {
        char *envp [] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL };
        execve (argv [0], argv, envp);
        _exit (127);
    }
    if (pid < 0)
        return -errno;
    int status;
    while (waitpid (pid, &status, 0) < 0)
        if (errno != EINTR)
            return -errno;
    return WIFEXITED (status) && WEXITSTATUS (status) == 0 ? 0 : -EIO;
}

static int
s_mount_disk (void)
{
    const char *disk = s_disk.disk;
    if (s_disk.mount (disk, s_disk.dir, "ext4", S_FLAGS, NULL) == 0)
        return 0;
    int rc = -errno;
    if (!s_disk_blank (disk)) {
        gi_log (CH_LOG_ERROR, "sys.disk_unmountable", "disk=%s reason=\"%s\" "
                "action=keep_unformatted", disk, strerror (-rc));
        return rc;
    }
    gi_log (CH_LOG_INFO, "sys.disk_format", "disk=%s fs=ext4", disk);
    char *argv [] = { "/sbin/mkfs.ext4", "-q", "-F", "-m", "0", "-L", "workspace",
                      (char *) disk, NULL };
    if ((rc = s_run (argv)) < 0)
        return rc;
    return s_disk.mount (disk, s_disk.dir, "ext4", S_FLAGS, NULL) == 0 ? 0 : -errno;
}

//  /workspace/out, and both belong to the kernel user; a mounted disk keeps
//  whatever else it holds.
static int
s_prepare (void)
{
    char out [PATH_MAX];
    snprintf (out, sizeof out, "%s/out", s_disk.dir);
    mkdir (out, 0755);
    if (s_disk.chown (s_disk.dir, GI_KERNEL_UID, GI_KERNEL_GID) < 0
    ||  s_disk.chown (out, GI_KERNEL_UID, GI_KERNEL_GID) < 0)
        return -errno;
    return 0;
}

int
gi_sys_workspace (char *kind, size_t kindlen)
{
    mkdir (s_disk.dir, 0755);
    struct stat st;
    int rc = stat (s_disk.disk, &st) == 0 && S_ISBLK (st.st_mode) ? s_mount_disk () : -ENODEV;
    snprintf (kind, kindlen, "%s", rc == 0 ? "ext4" : "tmpfs");
    if (rc < 0) {
        gi_log (CH_LOG_WARN, "sys.no_disk", "reason=\"%s\" workspace=tmpfs", strerror (-rc));
        if (s_disk.mount ("workspace", s_disk.dir, "tmpfs", MS_NOSUID | MS_NODEV,
                          "mode=0755,size=25%") < 0)
            return -errno;
    }
    return s_prepare ();
}

int
gi_sys_workspace_attach (void)
{
    //  Blocks cached before a snapshot restore may be another disk's.
    gi_sys_disk_flush ();
    int rc = s_mount_disk ();
    if (rc < 0)
        return rc;
    //  Mounted is what counts: a failed chown is logged, not fatal.
    if ((rc = s_prepare ()) < 0)
        gi_log (CH_LOG_WARN, "sys.remounted_unprepared", "dir=%s reason=\"%s\"", s_disk.dir,
                strerror (-rc));
    else
        gi_log (CH_LOG_INFO, "sys.remounted", "dir=%s", s_disk.dir);
    return 0;
}

int
gi_sys_workspace_unmount (int wait_ms)
{
    sync ();
    for (int waited = 0; ; waited += 10) {
        if (s_disk.umount2 (s_disk.dir, 0) == 0)
            return 0;
        int rc = -errno;
        if (rc == -EINVAL) {
            gi_log (CH_LOG_INFO, "sys.not_mounted", "dir=%s", s_disk.dir);
            return 0;
        }
        if (rc != -EBUSY || waited >= wait_ms)
            return rc;
        nanosleep (&(struct timespec) { 0, 10 * 1000 * 1000 }, NULL);
    }
}

int
gi_sys_workspace_freeze (void)
{
    //  Stopped where they are: the kernel's processes use no more CPU and
    //  write nothing more (cgroup v2's freezer, the kernel's own cgroup).
    int rc = gi_sys_write_file (GI_CGROUP "/cgroup.freeze", "1");
    if (rc < 0)
        gi_log (CH_LOG_WARN, "sys.freeze_failed", "reason=\"%s\"", strerror (-rc));
    sync ();
    return s_disk.freeze (s_disk.dir);
}

static int
s_freeze (const char *dir)
{
    int fd = open (dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = ioctl (fd, FIFREEZE, 0) < 0 ? -errno : 0;
    close (fd);
    return rc;
}

static int
s_flush (const char *disk)
{
    int fd = open (disk, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fsync (fd) < 0 || ioctl (fd, BLKFLSBUF, 0) < 0 ? -errno : 0;
    close (fd);
    return rc;
}

int
gi_sys_disk_flush (void)
{
    int rc = s_disk.flush (s_disk.disk);
    if (rc < 0)
        gi_log (CH_LOG_WARN, "sys.flush_failed", "disk=%s reason=\"%s\"", s_disk.disk,
                strerror (-rc));
    return rc;
}

int
gi_sys_network (void)
{
    if (sethostname ("cellvm", 6) < 0)
        gi_log (CH_LOG_WARN, "sys.sethostname", "reason=\"%s\"", strerror (errno));
    int fd = socket (AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct ifreq ifr;
    memset (&ifr, 0, sizeof ifr);
    snprintf (ifr.ifr_name, sizeof ifr.ifr_name, "lo");
    int rc = ioctl (fd, SIOCGIFFLAGS, &ifr);
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    if (rc == 0)
        rc = ioctl (fd, SIOCSIFFLAGS, &ifr);
    rc = rc < 0 ? -errno : 0;
    close (fd);
    if (rc < 0)
        gi_log (CH_LOG_WARN, "sys.lo_down", "reason=\"%s\"", strerror (-rc));
    return rc;
}

//  Read /sys/class/virtio-ports/<port>/name into name. 0 or -errno.
static int
s_port_name (const char *port, char *name, size_t len)
{
    char path [320];
    snprintf (path, sizeof path, "/sys/class/virtio-ports/%s/name", port);
    FILE *f = fopen (path, "re");
    if (!f)
        return -errno;
    int ok = fgets (name, (int) len, f) != NULL;
    fclose (f);
    name [strcspn (name, "\n")] = 0;
    //  The name becomes a path component: refuse anything odd.
    if (!ok || !name [0] || strchr (name, '/') || strcmp (name, ".") == 0
    ||  strcmp (name, "..") == 0)
        return -EINVAL;
    return 0;
}

int
gi_sys_port_links (void)
{
    DIR *dir = opendir ("/sys/class/virtio-ports");
    if (!dir)
        return -errno;
    mkdir ("/dev/virtio-ports", 0755);
    struct dirent *de;
    while ((de = readdir (dir))) {
        char name [128], link [256], target [300];
        if (de->d_name [0] == '.' || s_port_name (de->d_name, name, sizeof name) < 0)
            continue;
        snprintf (link, sizeof link, "/dev/virtio-ports/%s", name);
        snprintf (target, sizeof target, "../%s", de->d_name);
        unlink (link);
        if (symlink (target, link) < 0)
            gi_log (CH_LOG_WARN, "sys.port_link", "link=%s reason=\"%s\"", link, strerror (errno));
        //  Only the kernel's own port is opened by the kernel user.
        snprintf (target, sizeof target, "/dev/%s", de->d_name);
        if (strcmp (name, "cellvm.kernel") == 0
        &&  chown (target, GI_KERNEL_UID, GI_KERNEL_GID) < 0)
            gi_log (CH_LOG_WARN, "sys.port_chown", "path=%s reason=\"%s\"", target,
                    strerror (errno));
        chmod (target, 0600);
    }
    closedir (dir);
    return 0;
}

int
gi_sys_wait_port (const char *name, int wait_ms)
{
    char path [256];
    snprintf (path, sizeof path, "/dev/virtio-ports/%s", name);
    for (int waited = 0; ; waited += 10) {
        if (access (path, F_OK) == 0)
            return 0;
        if (waited >= wait_ms)
            return -ENOENT;
        nanosleep (&(struct timespec) { 0, 10 * 1000 * 1000 }, NULL);
        gi_sys_port_links ();
    }
}

int
gi_sys_write_file (const char *path, const char *text)
{
    int fd = open (path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = write (fd, text, strlen (text));
    int rc = n < 0 ? -errno : 0;
    close (fd);
    return rc;
}

long
gi_sys_read_key (const char *path, const char *key)
{
    FILE *f = fopen (path, "re");
    if (!f)
        return -1;
    char line [256];
    long value = -1;
    size_t klen = strlen (key);
    while (fgets (line, sizeof line, f))
        if (strncmp (line, key, klen) == 0 && line [klen] == ' ')
            value = strtol (line + klen + 1, NULL, 10);
    fclose (f);
    return value;
}

//  Leave room for the guest kernel and init: 10% of RAM, at least 48 MiB.
static uint64_t
s_memory_limit (void)
{
    long kib = gi_sys_read_key ("/proc/meminfo", "MemTotal:");
    if (kib <= 0)
        return 0;
    uint64_t total = (uint64_t) kib * 1024u;
    uint64_t reserve = total / 10 > 48 * S_MIB ? total / 10 : 48 * S_MIB;
    return total > 2 * reserve ? total - reserve : total / 2;
}

int
gi_sys_cgroup (uint64_t *limit_p)
{
    *limit_p = 0;
    if (gi_sys_write_file ("/proc/self/oom_score_adj", "-1000") < 0)
        gi_log (CH_LOG_WARN, "sys.oom_unprotected", NULL);
    //  cpu: the kernel's processes share one CPU entity, so a fork bomb cannot
    //  starve init (which stays in the root cgroup and competes with that entity).
    int rc = gi_sys_write_file ("/sys/fs/cgroup/cgroup.subtree_control", "+memory +pids +cpu");
    if (rc < 0)
        rc = gi_sys_write_file ("/sys/fs/cgroup/cgroup.subtree_control", "+memory +pids");
    if (rc < 0 || (mkdir (GI_CGROUP, 0755) < 0 && errno != EEXIST)) {
        rc = rc < 0 ? rc : -errno;
        gi_log (CH_LOG_ERROR, "sys.no_cgroup", "reason=\"%s\"", strerror (-rc));
        return rc;
    }
    char text [32];
    uint64_t limit = s_memory_limit ();
    snprintf (text, sizeof text, "%llu", (unsigned long long) limit);
    if (limit && gi_sys_write_file (GI_CGROUP "/memory.max", text) == 0)
        *limit_p = limit;
    //  An OOM kill takes the whole kernel with its children: no half-dead kernel.
    gi_sys_write_file (GI_CGROUP "/memory.oom.group", "1");
    snprintf (text, sizeof text, "%d", GI_PIDS_MAX);
    gi_sys_write_file (GI_CGROUP "/pids.max", text);
    gi_sys_write_file (GI_CGROUP "/cpu.weight", "100");
    gi_log (CH_LOG_INFO, "sys.cgroup", "memory_max_mib=%llu pids_max=%d",
            (unsigned long long) (limit / S_MIB), GI_PIDS_MAX);
    return 0;
}
