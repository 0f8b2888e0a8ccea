/*  gw_vmsave - a running session's VM saved into the snapshot store, and
    a VM started from a snapshot. Everything here blocks (QMP round trips,
    hundreds of MB written or read): it runs on gw_vmstart's thread.

    Saving (docs/sessions.md):
      live (cellvm_snapshot_request): RAM and devices pre-copied into the
        state file while the guest runs, with pause-before-switchover; in
        that pause the disk is frozen by a new top layer (blockdev-snapshot-
        sync over a layer made here, whose backing name is relative so the
        chain can move), then the migration ends and the guest runs on. The
        frozen layer chain is flattened into the snapshot (qemu-img convert)
        while the guest runs.
      pause (idle): the guest is stopped first, then saved the same way; it
        stays stopped, and the caller kills QEMU.
    Then meta.json and an atomic publish (gw_snapstore).

    Resuming: a VM with the snapshot's config, its RAM in a backend named
    like the source's, a fresh layer over the snapshot's disk, -incoming
    defer, the state fed over QMP (after QEMU's version is compared), cont.
*/
#ifndef GW_VMSAVE_H
#define GW_VMSAVE_H

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include "snap/gw_snapstore.h"
#include "vm/gw_vm.h"

typedef struct {
    const char *run_dir;                        //  the VM's: qmp.sock and its disk layers
    const char *disk_top;                       //  the current top layer's name there
    const gw_vm_config_t *cfg;                  //  the session's config (meta.json, qemu-img)
    int pid;                                    //  QEMU's: its command line says how its RAM
                                                //  and kernel command line were set up
    bool live;                                  //  false: pause (stop first, stay stopped)
    json_t *extra;                              //  more meta.json fields (borrowed), or NULL
} gw_vmsave_req_t;

typedef struct {
    char new_top [NAME_MAX + 1];                //  live: the disk's top layer from now on
    int64_t pause_ms;                           //  how long the guest was stopped
    int64_t ms;                                 //  the whole save
    int64_t split_ms;                           //  of it, the RAM put in its own file
    uint64_t bytes;                             //  the snapshot's files, on disk
} gw_vmsave_out_t;

//  Save the VM as name in store. 0, or -errno with the reason in err (the
//  guest runs on when live; nothing is left under the name).
int gw_vmsave_snapshot (gw_snapstore_t *store, const char *name, const gw_vmsave_req_t *req,
                        gw_vmsave_out_t *out, char *err, size_t errlen);

//  What a resume must match, as compared by gw_snapref_mismatch (new
//  reference): image_hash, mem_mib, vcpus, cpu, accel, disk_bytes, append,
//  machine, and on KVM the host's CPU model and TSC rate (a KVM guest runs
//  on the host's CPU and counts its TSC; TCG emulates both).
json_t *gw_vmsave_expected (const gw_vm_config_t *cfg);
#define GW_VMSAVE_MACHINE "microvm"

//  Start a VM from ref for cfg (run base, image, QEMU) and resume it; the
//  caller then reseeds it (gw_template_reseed). NULL with the reason in
//  err: a snapshot that does not match, a QEMU of another version, a state
//  QEMU refuses.
gw_vm_t *gw_vmsave_resume (const gw_snapref_t *ref, const gw_vm_config_t *cfg, int timeout_ms,
                           char *err, size_t errlen);

#endif
