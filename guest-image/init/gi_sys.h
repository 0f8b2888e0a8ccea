/*  gi_sys - one-time system set-up done by cellvm-init as PID 1: mounts,
 *  hostname, loopback, virtio port links, the kernel's cgroup and limits.
 *  Each call logs its own failures; see docs/init.md for the layout.
 */
#ifndef GI_SYS_H
#define GI_SYS_H

#include <stdint.h>
#include <sys/types.h>

#define GI_KERNEL_UID 1000
#define GI_KERNEL_GID 1000
#define GI_WORKSPACE "/workspace"
#define GI_CGROUP "/sys/fs/cgroup/kernel"
#define GI_PIDS_MAX 512

//  Mount proc, sys, dev (devtmpfs, pts, shm), tmp and cgroup2. 0 or -errno
//  (only /proc, /sys and /dev are fatal).
int gi_sys_mount_base (void);

//  Mount the session's disk (/dev/vdb, ext4; formatted here if blank) at
//  /workspace, or a tmpfs when there is none. Creates /workspace/out owned by
//  the kernel user. Writes "ext4" or "tmpfs" into kind. 0 or -errno.
int gi_sys_workspace (char *kind, size_t kindlen);

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
