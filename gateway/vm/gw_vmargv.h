/*  gw_vmargv - QEMU's command line for one microVM, and its run dir's names.

    Pure: the argv is a fixed function of the config and the run dir, so a
    VM restored from a snapshot gets exactly the template's device model
    (docs/vm.md). The argv is part of the snapshot-template contract: change
    it only together with the template key.

    The names of the files QEMU makes in the run dir live here too, because
    the command line is what tells QEMU where they are; gw_vm connects to
    the sockets and reads the console log by the same names.
*/
#ifndef GW_VMARGV_H
#define GW_VMARGV_H

#include <stddef.h>

#include "vm/gw_vm_config.h"

#define GW_VMARGV_CONSOLE "console.log"         //  the guest's serial console
#define GW_VMARGV_DISK "workspace.qcow2"        //  the session's /workspace disk

//  QEMU's argv for cfg with run_dir as the run directory. cfg->accel must be
//  KVM or TCG (resolved). Returns 0 and a NULL-terminated argv the caller
//  frees with gw_vmargv_destroy, or -EINVAL with the reason in err.
int gw_vmargv_build (const gw_vm_config_t *cfg, const char *run_dir, char ***argv_p,
                     char *err, size_t errlen);

//  Free an argv from gw_vmargv_build; nulls *argv_p. NULL-safe.
void gw_vmargv_destroy (char ***argv_p);

//  The socket file (in the run dir) QEMU listens on for port name:
//  "kernel", "init" or "qmp". NULL for any other name.
const char *gw_vmargv_port_file (const char *name);

//  The -cpu QEMU gets: cfg->cpu, else "host" under KVM, "max,erms=off"
//  under TCG. Part of the template key (gw_tplmeta).
const char *gw_vmargv_cpu (const gw_vm_config_t *cfg);

#endif
