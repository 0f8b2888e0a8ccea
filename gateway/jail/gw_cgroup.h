/*  gw_cgroup - one host cgroup per VM: memory, pids and CPU limits for its
    QEMU, and whether the host's OOM killer ended it.

    cgroup v2 when /sys/fs/cgroup is cgroup2, else the v1 controllers
    mounted under it (memory, pids, cpu, blkio). The VM's cgroup is made
    beside (v2: its processes forbid controllers below it) or below (v1)
    the gateway's own, so a gateway that is itself limited stays limited:

        v2  <mount>/<parent of ours>/cellvm-vm-<gateway pid>-<n>
        v1  <mount>/<controller>/<ours>/cellvm-vm-<gateway pid>-<n>

    The values written are gw_cgroup_values' (pure, unit tested). A dir
    left by a gateway that died is removed by the next gw_cgroup_new of
    any gateway (rmdir only succeeds on an empty cgroup).
*/
#ifndef GW_CGROUP_H
#define GW_CGROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct _gw_cgroup_t gw_cgroup_t;

typedef struct {
    uint64_t mem_bytes;                         //  memory.max; 0: none
    unsigned pids;                              //  pids.max; 0: none
    unsigned cpu_weight;                        //  cpu.weight 1..10000 (v1: shares); 0: none
    double cpus;                                //  cpu.max in CPUs; 0: none
    char io_dev [24];                           //  "MAJ:MIN" of the disks' block device; "": none
    uint64_t io_bps, io_iops;                   //  io.max per direction; 0: none
} gw_cgroup_limits_t;

//  The whole disk ("MAJ:MIN") under the filesystem of path, for io.max: a
//  partition's parent. -ENODEV when it has none (tmpfs, overlay, NFS).
int gw_cgroup_block_device (const char *path, char *out, size_t cap);

//  The memory a VM's QEMU may use: guest RAM plus QEMU's own (256 MiB),
//  plus under TCG its translation cache (QEMU 7.2: 1 GiB, at most 1/8 of
//  the host's RAM). host_bytes 0: unknown (the full 1 GiB).
uint64_t gw_cgroup_vm_memory (unsigned mem_mib, bool tcg, uint64_t host_bytes);

//  One file to write: its controller dir ("" for v2's single tree) and name.
typedef struct {
    const char *controller;
    const char *file;
    char value [128];
} gw_cgroup_value_t;

//  The files and values lim gives for cgroup version 1 or 2, into out (at
//  least GW_CGROUP_VALUES_MAX). Returns how many.
#define GW_CGROUP_VALUES_MAX 12
size_t gw_cgroup_values (const gw_cgroup_limits_t *lim, int version, gw_cgroup_value_t *out);

//  The number after key on its own line of text ("oom_kill 3"), 0 when absent.
uint64_t gw_cgroup_parse_key (const char *text, const char *key);

//  Make the cgroup and write its limits. NULL with the reason in err when
//  the host has no usable cgroups or we may not make one.
gw_cgroup_t *gw_cgroup_new (const gw_cgroup_limits_t *lim, char *err, size_t errlen);

//  Remove it (QEMU must have exited), free; nulls *self_p. NULL-safe.
void gw_cgroup_destroy (gw_cgroup_t **self_p);

//  Its cgroup.procs files opened for writing, into fds (-1 where none),
//  so a child can move itself in ("0") without a path, and without the
//  parent waiting: the first move after a while waits out an RCU grace
//  period (~15 ms).
#define GW_CGROUP_PROCS_MAX 4
void gw_cgroup_procs_fds (gw_cgroup_t *self, int fds [GW_CGROUP_PROCS_MAX]);

//  How many times the OOM killer acted in it (memory.events oom_kill, v1
//  memory.oom_control oom_kill).
uint64_t gw_cgroup_oom_kills (gw_cgroup_t *self);

//  Its memory limit as the kernel has it now, in bytes (0: unknown).
uint64_t gw_cgroup_mem_limit (gw_cgroup_t *self);

//  The memory controller's dir (the v2 dir), for logs and tests.
const char *gw_cgroup_path (gw_cgroup_t *self);

#endif
