/*  gw_template - snapshot templates: build one, check one, restore clones.

    A template is a VM booted with its RAM in a file (share=on) whose kernel
    has imported numpy, pandas, matplotlib and IPython and waits on its
    channel, then stopped and its device state saved with x-ignore-shared:

        BASE/<key>/ram              guest RAM (the clones map it copy-on-write)
                   state            device state (~70 KB), through fd: migration
                   workspace.qcow2  the template's /workspace disk (init formatted it)
                   layer.qcow2      a pristine clone layer over that disk
                   meta.json        what the key was made of, sizes, state sha256

    The key and meta.json are gw_tplmeta's; saving and loading the state,
    gw_snapshot's; talking to the guest, gw_drive's. This module puts them
    together: gw_template_open checks a template (a corrupt one is deleted),
    gw_template_build makes one, gw_template_restore spawns a clone (same
    device list, RAM share=off, -incoming defer, its own /workspace layer
    over the template's disk) and gw_template_reseed pushes entropy and the
    host clock through init's hello and redoes the kernel's handshake with
    a driver hello carrying entropy, so Python's random and numpy's global
    generator are reseeded before any user cell. See docs/snapshots.md.
*/
#ifndef GW_TEMPLATE_H
#define GW_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

#include "guest/gw_init.h"
#include "vm/gw_vm.h"

typedef struct _gw_template_t gw_template_t;

//  $CELLVM_TEMPLATE_DIR, else /var/tmp/cellvm-<uid>/templates. 0 or -errno.
int gw_template_default_dir (char *out, size_t cap);

//  Open the template for cfg under base. NULL and *rc_p = -ENOENT when there
//  is none (yet), -ESTALE when there was a corrupt one (logged, deleted),
//  other -errno on errors; the reason is in err.
gw_template_t *gw_template_open (const char *base, const gw_vm_config_t *cfg, int *rc_p,
                                 char *err, size_t errlen);

void gw_template_destroy (gw_template_t **self_p);

const char *gw_template_path (const gw_template_t *self);

//  Build the template for cfg under base: boots a VM, warms the kernel up,
//  saves it. Blocks for the cold boot (10-30 s under TCG). -EBUSY when
//  another process is building the same key right now. 0 or -errno + err.
int gw_template_build (const char *base, const gw_vm_config_t *cfg, char *err, size_t errlen);

//  Run argv (argv [0] is ignored: this executable is run, e.g. with
//  --build-template) as a detached background process: double fork,
//  setsid, no death signal, output to log_path. The session that found no
//  template cold-boots meanwhile. 0 or -errno.
int gw_template_build_detached (char *const argv [], const char *log_path);

//  Spawn a clone of self with cfg's run base and settings, restore the state
//  and resume it. The clone's QEMU is a child of the calling thread (see
//  gw_vm.h). NULL with the reason in err; nothing is left behind.
gw_vm_t *gw_template_restore (gw_template_t *self, const gw_vm_config_t *cfg, int timeout_ms,
                              char *err, size_t errlen);

//  After a restore: connect init's and the kernel's ports, send init a
//  hello with the host time and 64 random bytes, and the kernel a driver
//  hello with 32 random bytes (base64), and wait for both answers. On
//  success 0, *init_p (owned) and *kernel_fd_p (connected, the
//  kernel's hello consumed). -errno + err on failure or timeout.
int gw_template_reseed (gw_vm_t *vm, int timeout_ms, gw_init_t **init_p, int *kernel_fd_p,
                        char *err, size_t errlen);

//  gw_template_reseed for a VM that resumes its own session (an idle
//  pause): the host clock and entropy for init, a plain hello for the
//  kernel, so Python's generators go on where they were.
int gw_template_rehello (gw_vm_t *vm, int timeout_ms, gw_init_t **init_p, int *kernel_fd_p,
                         char *err, size_t errlen);

#endif
