/*  gw_tplmeta - what a snapshot template is made of: its key and its
    meta.json. No QEMU, no sockets: only the files involved are read.

    The key is a hash of everything a clone must match: the image (its
    image.json hash and the files' size and mtime), memory, vCPUs, CPU
    model, accelerator, the kernel command line, the disk size, QEMU (the
    binary's path, size and mtime) and GW_TPLMETA_FORMAT. A stale template is
    never used: a new key simply names a different directory.

    meta.json, written last by a build:
        key             the key above
        inputs          what it was made of (gw_tplmeta_inputs; gw_tplsweep
                        compares these)
        state_bytes, state_sha256   the device state file, checked whole
                        before every restore (~70 KB: about 1 ms)
        tsc_khz         the template's TSC rate: clones use it, so their
                        kernel command line is exactly the template's
        build_ms, built_at
*/
#ifndef GW_TPLMETA_H
#define GW_TPLMETA_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "vm/gw_vm_config.h"

#define GW_TPLMETA_KEY_LEN 24                   //  hex characters
#define GW_TPLMETA_FORMAT 8                     //  bump when the layout or the warm-up changes

//  The files of a template directory.
#define GW_TPL_RAM "ram"                        //  guest RAM, mapped copy-on-write by clones
#define GW_TPL_STATE "state"                    //  device state (fd: migration)
#define GW_TPL_DISK "workspace.qcow2"           //  the template's /workspace disk
#define GW_TPL_LAYER "layer.qcow2"              //  a pristine clone layer over the disk
#define GW_TPL_META "meta.json"

typedef struct _gw_tplmeta_t gw_tplmeta_t;

//  Everything a clone of cfg must match, as a JSON object (canonical when
//  dumped with sorted keys). New reference.
json_t *gw_tplmeta_inputs (const gw_vm_config_t *cfg);

//  The key for cfg (accel resolved, image_dir set) into key (at least
//  GW_TPLMETA_KEY_LEN + 1 bytes). 0, or -EINVAL with the reason in err.
int gw_tplmeta_key (const gw_vm_config_t *cfg, char *key, size_t cap, char *err, size_t errlen);

//  Write dir/meta.json for a template built in dir for cfg: records dir's
//  state file (its size and SHA-256), tsc_khz and build_ms. 0 or -EIO.
int gw_tplmeta_write (const char *dir, const char *key, const gw_vm_config_t *cfg,
                      unsigned tsc_khz, int64_t build_ms);

//  dir/meta.json, or NULL when it is missing or not a JSON object.
gw_tplmeta_t *gw_tplmeta_load (const char *dir);
void gw_tplmeta_destroy (gw_tplmeta_t **self_p);

//  Why the template in dir cannot be restored for cfg under key (meta.json
//  missing or naming another key, RAM file not mem_mib, disk missing, state
//  file of another size or SHA-256), or NULL when it can. self may be NULL
//  (gw_tplmeta_load found nothing).
const char *gw_tplmeta_check (const gw_tplmeta_t *self, const char *dir,
                              const gw_vm_config_t *cfg, const char *key);

//  The template's TSC rate, 0 when not recorded or out of range.
unsigned gw_tplmeta_tsc_khz (const gw_tplmeta_t *self);

//  The inputs recorded by the build (borrowed), NULL when there are none.
json_t *gw_tplmeta_recorded (const gw_tplmeta_t *self);

//  How inputs record an image file: "PATH size=N mtime=S.NS", or
//  "PATH missing"; into out.
void gw_tplmeta_describe_file (const char *path, char *out, size_t cap);

#endif
