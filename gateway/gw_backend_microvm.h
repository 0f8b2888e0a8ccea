/*  gw_backend_microvm - each session's kernel in its own QEMU microVM.

    The first start restores a snapshot template (gw_template) into a fresh
    clone, or, when there is none, boots a VM (gw_vm) from the guest image and connects its
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

//  How a VM starts (docs/snapshots.md). Strings are borrowed and must
//  outlive the backend.
typedef struct {
    const char *template_dir;                   //  restore from templates here; NULL: cold boot
    char *const *build_argv;                    //  builds a missing template in the
                                                //  background (gw_template_build_detached)
    const char *pool_socket;                    //  take clones from this pool daemon, NULL: no
    char *const *pool_argv;                     //  starts the daemon when none answers
} gw_microvm_opts_t;

//  cfg is copied; its strings are borrowed and must outlive the backend.
//  Probes the accelerator once (logged with its reason). NULL + err.
//  Every VM is cold-booted.
gw_backend_t *gw_backend_microvm_new (const gw_vm_config_t *cfg, char *err, size_t errlen);

//  The same, but a VM starts by restoring a template when opts name one, and
//  cold-boots (with a log line saying why) when that is not possible.
gw_backend_t *gw_backend_microvm_new_opts (const gw_vm_config_t *cfg,
                                           const gw_microvm_opts_t *opts,
                                           char *err, size_t errlen);

#endif
