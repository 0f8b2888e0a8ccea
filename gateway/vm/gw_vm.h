/*  gw_vm - one QEMU microVM: its run directory, process and ports, from a
    config (gw_vm_config).

    A VM lives in a private run directory (mode 0700) under a base directory
    and leaves nothing behind: sockets, console log, QEMU's own log and the
    session's writable /workspace disk are all deleted by gw_vm_destroy.

        gw_vm_new      check the config, pick the accelerator, make the run dir
        gw_vm_start    create the /workspace disk, spawn QEMU (does not wait
                       for the guest: it boots in ~3 s under TCG)
        gw_vm_connect_port  -EAGAIN until QEMU listens on that port, then a
                       connected fd ("kernel", "init" or "qmp")
        gw_vm_reap     -EAGAIN while QEMU runs, then its wait status
        gw_vm_kill     SIGKILL QEMU's process group
        gw_vm_destroy  kill, reap, delete the run dir

    QEMU runs in its own process group with PR_SET_PDEATHSIG(SIGKILL), so it
    dies with the gateway, even when the gateway is SIGKILLed. Linux ties
    that signal to the *thread* that forked: call gw_vm_start from a thread
    that outlives the VM (the reactor thread), not from a short-lived one.

    QEMU's command line is gw_vmargv's (pure, and part of the snapshot
    contract: docs/vm.md). Run dirs of dead gateways: gw_rundir_sweep.
*/
#ifndef GW_VM_H
#define GW_VM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/gw_readlease.h"
#include "vm/gw_vm_config.h"

typedef struct _gw_vm_t gw_vm_t;

//  Check cfg and the image files, choose the accelerator (logged with its
//  reason) and read the TSC rate if not given, then create the run dir.
//  NULL with the reason in err on failure; nothing is left behind.
gw_vm_t *gw_vm_new (const gw_vm_config_t *cfg, char *err, size_t errlen);

//  Kill QEMU if it runs, reap it, delete the run dir, free; nulls *self_p.
//  NULL-safe. Blocks only for the few ms a SIGKILLed QEMU takes to die.
void gw_vm_destroy (gw_vm_t **self_p);

//  Create the /workspace disk (a copy of disk_seed, else gw_qcow2, < 1 ms)
//  and spawn QEMU, in its jail when cfg.jail asks (gw_jail). Returns once
//  QEMU has exec'd, or once a jailed QEMU is in its jail's root (its cgroup
//  and exec follow: a failure there is an early exit for reap);
//  -EALREADY if started before. 0 or -errno + err.
int gw_vm_start (gw_vm_t *self, char *err, size_t errlen);

//  Make a pristine /workspace layer at path over backing (which need not
//  exist yet), as a disk_seed for later VMs. 0 or -errno + err.
int gw_vm_make_layer (gw_vm_t *self, const char *path, const char *backing, char *err,
                      size_t errlen);

//  A new empty layer dir/name (a file name) of cfg's disk size over backing
//  (not opened), writable by the jailed VM whose run dir dir is: a
//  snapshot's new top (gw_vmsave). In-process, < 1 ms. 0 or -errno + err.
int gw_vm_new_layer (const gw_vm_config_t *cfg, const char *dir, const char *name,
                     const char *backing, char *err, size_t errlen);

//  Run qemu_img with args (after the program name; NULL-terminated) in dir,
//  its output appended to dir/qemu.log, in a tool jail when jail allows
//  (gw_jail_tool_new): dir and rw_dir (NULL: none) writable, the chain
//  below dir/disk (NULL: none) readable, nothing else of the host. Blocks.
//  0 or -errno + err.
int gw_vm_run_qemu_img (const char *qemu_img, const gw_jail_opts_t *jail, const char *dir,
                        const char *disk, const char *rw_dir, const char *const *args,
                        char *err, size_t errlen);
//  Connect to a port: "kernel", "init" or "qmp". 0 and a connected,
//  blocking, close-on-exec fd the caller owns; -EAGAIN while QEMU is not yet
//  listening; -ESRCH once QEMU has exited; -ETIMEDOUT after
//  port_timeout_ms from start; -ECHILD before start; -EINVAL bad name.
//  QEMU serves one client per port: connect once and keep the fd.
int gw_vm_connect_port (gw_vm_t *self, const char *name, int *fd_p);

//  gw_vm_connect_port, retrying every few ms for up to timeout_ms. Blocks:
//  for tests and tools, not for the reactor.
int gw_vm_wait_port (gw_vm_t *self, const char *name, int timeout_ms, int *fd_p);

//  QEMU's pid, 0 when not running (never started, or reaped).
int gw_vm_pid (gw_vm_t *self);

//  0 and *wstatus (waitpid status) once QEMU has exited; -EAGAIN while it
//  runs; -ECHILD when there is nothing to reap.
int gw_vm_reap (gw_vm_t *self, int *wstatus);

//  SIGKILL QEMU's process group. 0, or -ESRCH when it is not running.
int gw_vm_kill (gw_vm_t *self);

//  Why QEMU died when the host knows better than its wait status (its
//  cgroup's OOM killer), after gw_vm_reap; "" otherwise.
const char *gw_vm_death (gw_vm_t *self);

//  The VM keeps *lease_p (a read lease on its mem_path, which it maps
//  privately): a writer's open or a truncate stops QEMU, and gw_vm_death
//  says why; the lease is let go once QEMU is reaped. Ownership moves.
void gw_vm_hold_lease (gw_vm_t *self, gw_readlease_t **lease_p);

//  The run dir, and the guest's serial console log inside it.
const char *gw_vm_run_dir (gw_vm_t *self);
const char *gw_vm_console_log (gw_vm_t *self);

//  The accelerator in use (KVM or TCG) and the line that says why.
gw_accel_t gw_vm_accel (gw_vm_t *self);
const char *gw_vm_accel_reason (gw_vm_t *self);

//  The full path execv would run for name (as PATH finds it), or NULL;
//  the caller frees it.
char *gw_vm_which (const char *name);

#endif
