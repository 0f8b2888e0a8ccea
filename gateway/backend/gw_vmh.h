/*  gw_vmh - one handle on a session's VM, whoever holds its QEMU.

    A session's VM is either one this gateway started (gw_vm: a cold boot
    or a restore, QEMU is our child) or a clone the pool handed out
    (gw_pool_lease: QEMU is the pool holder's child, we hold its
    lifeline). The microvm backend asks the same few things of both
    through this seam, and tests plug in a mock VM whose ports are
    socketpairs (test_gw_backend_microvm).
*/
#ifndef GW_VMH_H
#define GW_VMH_H

#include "snap/gw_pool.h"
#include "vm/gw_vm.h"

typedef struct {
    int (*pid) (void *vm);                      //  QEMU's pid
    int (*kill) (void *vm);                     //  SIGKILL QEMU; 0 or -errno
    //  0 and *wstatus once QEMU is gone, -EAGAIN while it runs.
    int (*reap) (void *vm, int *wstatus);
    const char *(*run_dir) (void *vm);
    const char *(*console) (void *vm);          //  its console log
    void (*destroy) (void *vm);                 //  kill, reap, remove the run dir
    //  Connect a port ("kernel", "init") of a VM this process started,
    //  as gw_vm_connect_port (a cold boot's come up later): 0 and a
    //  connected fd the caller owns, -EAGAIN while QEMU is not listening
    //  yet, another -errno when it never will. -ENOTSUP when another
    //  process holds its ports (a pool clone). NULL: -ENOTSUP.
    int (*connect_port) (void *vm, const char *name, int *fd_p);
    //  Why QEMU died, in words, when the host knows more than its wait
    //  status (its cgroup's OOM killer); "" or NULL otherwise. NULL: none.
    const char *(*death) (void *vm);
} gw_vmh_ops_t;

typedef struct _gw_vmh_t gw_vmh_t;

//  A handle on a VM this process started; takes *vm_p.
gw_vmh_t *gw_vmh_from_vm (gw_vm_t **vm_p);

//  A handle on a pool clone; takes *lease_p.
gw_vmh_t *gw_vmh_from_lease (gw_pool_lease_t **lease_p);

//  A handle over any implementation (tests); vm is owned by the handle.
gw_vmh_t *gw_vmh_new (const gw_vmh_ops_t *ops, void *vm);

//  Destroy the VM behind it (ops->destroy) and the handle; nulls *self_p.
void gw_vmh_destroy (gw_vmh_t **self_p);

int gw_vmh_pid (const gw_vmh_t *self);
int gw_vmh_kill (gw_vmh_t *self);
int gw_vmh_reap (gw_vmh_t *self, int *wstatus);
const char *gw_vmh_run_dir (const gw_vmh_t *self);
const char *gw_vmh_console (const gw_vmh_t *self);
int gw_vmh_connect_port (gw_vmh_t *self, const char *name, int *fd_p);
//  ops->death's words after a reap, "" when it has none.
const char *gw_vmh_death (const gw_vmh_t *self);

#endif
