/*  gw_vm_config - what a microVM is made of: QEMU's binaries, the image,
    memory, CPUs, the /workspace disk, the snapshot hooks and the jail.

    Its own header because the layers below gw_vm read it too: QEMU's
    command line (gw_vmargv) and a template's key (gw_tplmeta) are pure
    functions of it, and need none of gw_vm's processes.
*/
#ifndef GW_VM_CONFIG_H
#define GW_VM_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "vm/gw_accel.h"
#include "jail/gw_jail.h"

//  Strings are borrowed: gw_vm_new copies what it keeps.
typedef struct {
    const char *qemu;                           //  QEMU binary, path or name on PATH
    const char *qemu_img;                       //  qemu-img, path or name on PATH
    const char *image_dir;                      //  holds vmlinux, initrd.img, rootfs.ext4
    const char *kernel;                         //  NULL: image_dir/vmlinux
    const char *initrd;                         //  NULL: image_dir/initrd.img
    const char *rootfs;                         //  NULL: image_dir/rootfs.ext4
    const char *run_base;                       //  NULL: gw_runbase_default
    const char *append;                         //  more kernel command line, NULL: none
    gw_accel_t accel;                           //  AUTO: probed by gw_vm_new
    const char *cpu;                            //  NULL: "max" (tcg) / "host" (kvm)
    unsigned mem_mib;                           //  guest RAM in MiB
    unsigned vcpus;                             //  virtual CPUs
    unsigned tcg_tb_mib;                        //  TCG's code buffer cap, 0: QEMU's (1 GiB)
    uint64_t disk_bytes;                        //  /workspace disk, virtual size
    unsigned tsc_khz;                           //  host TSC rate, 0: read by gw_vm_new
    unsigned port_timeout_ms;                   //  connect_port gives up after this
    //  Snapshot hooks (restore needs the template's exact device model).
    const char *mem_path;                       //  RAM in this file; NULL: anonymous
    bool mem_share;                             //  share=on (template) / off (clone, CoW)
    bool mem_named;                             //  no mem_path: anonymous RAM, but in a
                                                //  backend named "mem" (a clone's snapshot)
    bool incoming_defer;                        //  -incoming defer (restore over QMP)
    bool page_reporting;                        //  a virtio-balloon that hands freed guest
                                                //  pages back (docs/snapshots.md); default on
    const char *disk_backing;                   //  /workspace qcow2 backing file, NULL: blank
    const char *disk_seed;                      //  a pristine layer to copy instead of
                                                //  making one, NULL: none
    //  A session's own disk (docs/sessions.md). At most one of the two:
    const char *disk_chain_dir;                 //  adopt this layer chain (gw_chain), moved
                                                //  into the run dir; disk_name is its top
    const char *disk_base;                      //  a standalone disk (a snapshot's): linked
                                                //  in as base.qcow2 under a fresh layer
    const char *disk_name;                      //  the top layer's file name in the run dir,
                                                //  NULL: GW_VMARGV_DISK
    gw_jail_opts_t jail;                        //  QEMU's jail (gw_jail); defaults: off
} gw_vm_config_t;

//  Defaults: qemu-system-x86_64, qemu-img, accel auto, 512 MiB, 1 vCPU, a
//  32 MiB TCG code buffer,
//  1 GiB disk, 10 s port timeout, free page reporting; image_dir NULL (must
//  be set).
void gw_vm_config_defaults (gw_vm_config_t *cfg);

#endif
