/*  gw_backend_microvm - each session's kernel in its own QEMU microVM.

    The first start boots a VM (gw_vm) from the guest image and connects its
    two ports: the kernel channel and init's control port (gw_init). Later
    starts, after the kernel died, ask init to restart the kernel in the same
    VM, so /workspace survives. Init reports every kernel death in words;
    the VM itself dying is reported as such, and the next start boots a new
    VM. The VM is killed on destroy, and dies with the gateway anyway
    (PR_SET_PDEATHSIG).
*/
#ifndef GW_BACKEND_MICROVM_H
#define GW_BACKEND_MICROVM_H

#include "gw_backend.h"
#include "gw_vm.h"

//  cfg is copied; its strings are borrowed and must outlive the backend.
//  Probes the accelerator once (logged with its reason). NULL + err.
gw_backend_t *gw_backend_microvm_new (const gw_vm_config_t *cfg, char *err, size_t errlen);

#endif
