/*  gw_jail - the jailer every QEMU the gateway starts runs in
    (docs/security.md).

    Per VM: its own unprivileged uid and gid (a slot of a range, held by a
    lock file for the VM's life; one dedicated uid when no slot is free),
    no supplementary groups, no capabilities, no_new_privs; new mount, pid,
    ipc, uts and network namespaces (QEMU is pid 1 of its own, and the
    gateway's child: the pid it kills and reaps is QEMU's); pivot_root
    into a tmpfs that holds only what that VM opens (gw_jail_mount); a host
    cgroup (gw_cgroup). QEMU's own seccomp -sandbox stays.

    As root the jail uses a uid of the range. Otherwise, where the kernel
    allows user namespaces, QEMU keeps the gateway's uid inside one (no
    capabilities there either). Else, with --jail auto, the VM runs
    unjailed and one log line says why; --jail on refuses to start it.

    Everything is prepared in the parent (gw_jail_new): the child, between
    clone and exec, only makes syscalls (gw_jail_enter).
*/
#ifndef GW_JAIL_H
#define GW_JAIL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

#define GW_JAIL_UID_BASE 64000u                 //  default range: 64000..65023
#define GW_JAIL_UID_COUNT 1024u
#define GW_JAIL_UID_FALLBACK 65534u             //  no slot free: "nobody"
#define GW_JAIL_PIDS_MAX 256u                   //  QEMU's threads: vCPUs, I/O pool, RCU

typedef enum { GW_JAIL_OFF, GW_JAIL_AUTO, GW_JAIL_ON } gw_jail_mode_t;

//  What a vet hook is asked about a path: exposed read-only in the jail,
//  made readable by others, or given to the VM's group (gw_privd).
typedef enum { GW_JAIL_VET_READ, GW_JAIL_VET_CHMOD, GW_JAIL_VET_OWN } gw_jail_vet_t;

typedef struct {
    int mode;                                   //  gw_jail_mode_t
    unsigned uid_base;                          //  first uid of the range; 0: the default
    double cpus;                                //  cgroup cpu.max in CPUs; 0: none
    unsigned long long disk_bps, disk_iops;     //  cgroup io.max per direction; 0: none
    //  Set by a privileged helper that jails for an unprivileged gateway:
    //  every path this jail exposes or changes is shown to vet first, and
    //  one it refuses (-errno) fails the jail. A file to change comes with
    //  the stat of the descriptor it is then changed through (NULL for READ).
    int (*vet) (void *arg, const char *path, const struct stat *st, gw_jail_vet_t how);
    void *vet_arg;
    unsigned file_uid, file_gid;                //  owner of what the jail makes in the run dir,
                                                //  and of a built template's RAM after; 0: ours
} gw_jail_opts_t;

//  "auto", "on", "off" to a gw_jail_mode_t; -EINVAL otherwise.
int gw_jail_mode_parse (const char *text);

//  What one VM opens: every path here is made visible in its jail.
typedef struct {
    const char *qemu;                           //  absolute path of the binary
    const char *run_dir;                        //  read-write: sockets, logs, disk layers
    const char *disk;                           //  the top layer's name in run_dir
    const char *files [3];                      //  kernel, initrd, rootfs: read-only
    const char *mem_path;                       //  guest RAM file, NULL: none
    bool mem_share;                             //  a template's RAM (QEMU creates it)
    bool kvm;                                   //  /dev/kvm
    unsigned mem_mib;                           //  guest RAM, for the memory limit
} gw_jail_vm_t;

typedef struct _gw_jail_t gw_jail_t;

//  Prepare the jail of one VM whose disk exists in run_dir. NULL with *rc_p
//  0 when the VM runs unjailed (--jail off, or auto without a way: logged
//  once per process); NULL with *rc_p < 0 and the reason in err when it
//  must be jailed and cannot be.
gw_jail_t *gw_jail_new (const gw_jail_opts_t *opts, const gw_jail_vm_t *vm, int *rc_p,
                        char *err, size_t errlen);

//  A jail for qemu-img run on a VM's files (which a compromised QEMU may
//  have written): the same namespaces and minimal root, no capabilities,
//  no_new_privs, but the gateway's own uid (what it writes is the
//  gateway's) and no cgroup. Visible: exe, run_dir and rw_dir (NULL: none)
//  read-write; the backing chain below run_dir/disk (NULL: none)
//  read-only. NULL with *rc_p 0 when tools run unjailed.
gw_jail_t *gw_jail_tool_new (const gw_jail_opts_t *opts, const char *exe, const char *run_dir,
                             const char *disk, const char *rw_dir, int *rc_p, char *err,
                             size_t errlen);

//  Release the uid slot and remove the cgroup (QEMU must be gone); nulls.
void gw_jail_destroy (gw_jail_t **self_p);

//  Parent: clone a child running fn (arg) in the jail's namespaces. Its
//  pid, or -errno. fn must call gw_jail_enter before anything else counts.
pid_t gw_jail_clone (gw_jail_t *self, int (*fn) (void *), void *arg);

//  Parent, right after clone: the user namespace's maps, then the child
//  may go on. 0 or -errno with the reason in err. The child's lifeline
//  (a pipe it watches) stays open until gw_jail_destroy.
int gw_jail_release (gw_jail_t *self, pid_t pid, char *err, size_t errlen);

//  Child: wait for the parent's release, build the root and pivot into
//  it. 0, or -errno and *step (what failed, for gw_jail_step_name).
int gw_jail_enter (const gw_jail_t *self, int *step);

//  Child, after gw_jail_enter: join the cgroup, drop every privilege.
//  The parent need not wait for this part (gw_vm does not).
int gw_jail_finish (const gw_jail_t *self, int *step);
const char *gw_jail_step_name (const gw_jail_t *self, int step, char *buf, size_t cap);

//  Parent, after reaping QEMU: the explanation of its death when the jail
//  has one (the cgroup's OOM killer) into why (true), else false. The
//  cgroup goes: QEMU is gone.
bool gw_jail_reaped (gw_jail_t *self, int wstatus, char *why, size_t cap);

//  The preload shim beside this executable (jailshim.c), or NULL, logged
//  once. A clone's QEMU needs it to map its template's RAM read-only, and
//  with free page reporting to leave that file whole.
const char *gw_jail_shim (void);

//  QEMU's whole environment (NULL-terminated): empty, or the preload shim
//  that lets a clone map its template's RAM from a read-only file.
char *const *gw_jail_env (const gw_jail_t *self);

//  "root" (a uid of the range) or "userns"; the uid and gid QEMU runs as.
const char *gw_jail_kind (const gw_jail_t *self);
unsigned gw_jail_uid (const gw_jail_t *self);
//  The VM's cgroup dir, NULL when it has none.
const char *gw_jail_cgroup (const gw_jail_t *self);

#endif
