/*  gi_sys - system set-up done by cellvm-init as PID 1: mounts, hostname,
 *  loopback, virtio port links, the kernel's cgroup and limits; and the
 *  session disk unmounted and mounted again (workspace_detach, hello).
 *  Each call logs its own failures; see docs/init.md for the layout.
 */
#ifndef GI_SYS_H
#define GI_SYS_H

#include <stdint.h>
#include <sys/types.h>

#define GI_KERNEL_UID 1000
#define GI_KERNEL_GID 1000
#define GI_WORKSPACE "/workspace"
#define GI_NOTEBOOK "/notebook"     //  the host's notebook folder, copied in (root's)
#define GI_CGROUP "/sys/fs/cgroup/kernel"
#define GI_PIDS_MAX 512

//  Mount proc, sys, dev (devtmpfs, pts, shm), tmp and cgroup2. 0 or -errno
//  (only /proc, /sys and /dev are fatal).
int gi_sys_mount_base (void);

#define GI_DISK "/dev/vdb"

//  What mounting and unmounting the session disk go through: the system, or
//  a unit test's stand-ins (which then never touch a real disk). mount,
//  umount2 and chown return 0 or -1 with errno, as the calls do; flush and
//  freeze (FIFREEZE on the mounted dir) return 0 or -errno.
typedef struct {
    const char *disk;           //  the block device, GI_DISK
    const char *dir;            //  where it is mounted, GI_WORKSPACE
    int (*mount) (const char *src, const char *dst, const char *type,
                  unsigned long flags, const void *data);
    int (*umount2) (const char *dir, int flags);
    int (*chown) (const char *path, uid_t uid, gid_t gid);
    int (*flush) (const char *disk);
    int (*freeze) (const char *dir);
} gi_sys_disk_t;

//  Tests only: go through disk from now on (copied; NULL: the system).
void gi_sys_set_disk (const gi_sys_disk_t *disk);

//  Mount the session's disk (/dev/vdb, ext4; formatted here if blank) at
//  /workspace, or a tmpfs when there is none. Creates /workspace/out owned by
//  the kernel user. Writes "ext4" or "tmpfs" into kind. 0 or -errno.
int gi_sys_workspace (char *kind, size_t kindlen);

//  Mount the session disk at /workspace again after
//  gi_sys_workspace_unmount (it may be another disk by now: formatted only
//  if blank), with /workspace/out, both owned by the kernel user. 0 once
//  mounted, or -errno.
int gi_sys_workspace_attach (void);

//  sync, then unmount /workspace, retrying while it is busy for up to
//  wait_ms. 0 (also when it was not mounted) or -errno (-EBUSY: a process
//  still has its cwd or a file there).
int gi_sys_workspace_unmount (int wait_ms);
//  Freeze the kernel's cgroup, then sync and freeze /workspace (FIFREEZE):
//  on the disk, ext4 is then clean, as after an unmount. Nothing in the VM
//  writes to it again; only for a VM that is about to end.
int gi_sys_workspace_freeze (void);

//  fsync the session disk and drop every cached block of it (BLKFLSBUF):
//  the host's copy is then whole, and a disk swapped underneath is read
//  afresh. 0 or -errno.
int gi_sys_disk_flush (void);

//  Hostname "cellvm" and `lo` up. 0 or -errno.
int gi_sys_network (void);

//  /dev/virtio-ports/NAME -> ../vportNpM for every port; the kernel port is
//  handed to the kernel user. 0 or -errno.
int gi_sys_port_links (void);

//  Path of /dev/virtio-ports/name after waiting up to wait_ms for it.
//  0 or -ENOENT.
int gi_sys_wait_port (const char *name, int wait_ms);

//  The kernel's cgroup: memory.max below guest RAM, oom.group, pids.max.
//  init itself stays in the root cgroup with oom_score_adj -1000.
//  *limit_p gets memory.max in bytes (0 when unlimited). 0 or -errno.
int gi_sys_cgroup (uint64_t *limit_p);

//  Write a short string into a file (sysfs, procfs, cgroupfs). 0 or -errno.
int gi_sys_write_file (const char *path, const char *text);

//  Read a named counter ("oom_kill 3") from a flat-keyed file; -1 if absent.
long gi_sys_read_key (const char *path, const char *key);

#endif
