/*  gw_snapshot - a VM's device state to and from a file, over QMP.

    QEMU runs under -sandbox spawn=deny, so there is no exec: migration: the
    state goes through a file descriptor handed over with getfd, as
    "fd:state". x-ignore-shared leaves the RAM out of it: RAM is already in
    its own file (share=on for a template), which clones map copy-on-write
    (share=off). The state file is ~70 KB. See docs/vm.md, docs/snapshots.md.
*/
#ifndef GW_SNAPSHOT_H
#define GW_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "base/gw_patience.h"
#include "vm/gw_qmp.h"
#include "vm/gw_vm.h"

//  Stop vm (a running template) and write its device state to path
//  (created 0600, or truncated), waiting up to timeout_ms for the migration
//  to complete. The VM stays stopped. 0 or -errno with the reason in err.
int gw_snapshot_save (gw_vm_t *vm, const char *path, int timeout_ms, char *err, size_t errlen);

//  Feed vm (just started with incoming_defer and the template's RAM file)
//  the state at path, wait for the load to complete, and resume it. All
//  within timeout_ms. 0 or -errno with the reason in err.
int gw_snapshot_load (gw_vm_t *vm, const char *path, int timeout_ms, char *err, size_t errlen);

//  The steps, for session snapshots (gw_vmsave) too. A QMP connection to
//  vm's QEMU, its port waited for up to wait_ms, the handshake done; NULL
//  with the reason in err.
gw_qmp_t *gw_snapshot_qmp (gw_vm_t *vm, int wait_ms, char *err, size_t errlen);

//  The same through run_dir/qmp.sock: a VM this process did not start.
gw_qmp_t *gw_snapshot_qmp_at (const char *run_dir, char *err, size_t errlen);

//  Open path with flags (no symlink), hand it to QEMU as fd "state" and run
//  cmd ("migrate" or "migrate-incoming") on it. 0 or -errno + err.
int gw_snapshot_migrate_fd (gw_qmp_t *qmp, const char *cmd, const char *path, int flags,
                            char *err, size_t errlen);

//  Poll query-migrate until its status is want ("completed",
//  "pre-switchover"). -EIO when it failed or was cancelled (QEMU's reason
//  in err), -ETIMEDOUT when patience (borrowed) runs out, or the QMP error.
int gw_snapshot_wait (gw_qmp_t *qmp, const char *want, gw_patience_t *patience, char *err,
                      size_t errlen);

#endif
