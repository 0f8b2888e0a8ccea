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

#include "vm/gw_vm.h"

//  Stop vm (a running template) and write its device state to path
//  (created 0600, or truncated), waiting up to timeout_ms for the migration
//  to complete. The VM stays stopped. 0 or -errno with the reason in err.
int gw_snapshot_save (gw_vm_t *vm, const char *path, int timeout_ms, char *err, size_t errlen);

//  Feed vm (just started with incoming_defer and the template's RAM file)
//  the state at path, wait for the load to complete, and resume it. All
//  within timeout_ms. 0 or -errno with the reason in err.
int gw_snapshot_load (gw_vm_t *vm, const char *path, int timeout_ms, char *err, size_t errlen);

#endif
