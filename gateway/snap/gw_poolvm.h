/*  gw_poolvm - the pool's real VM operations (the gw_poold_ops_t seam):
    clones restored from the template for one VM config, reseeded, and
    warmed through gw_drive; killed, reaped and measured (PSS from
    /proc/PID/smaps_rollup).

    The warm-up runs a kernel_info and a silent `pass` through the kernel,
    each waited for, so that QEMU has translated the paths a session's
    first requests take (under TCG the first of each costs ~0.1 s and
    ~0.3 s after a restore). Nothing is counted, stored or printed, and init
    is watched meanwhile: a kernel that dies fails the clone at once.
*/
#ifndef GW_POOLVM_H
#define GW_POOLVM_H

#include "snap/gw_poold.h"
#include "vm/gw_vm_config.h"

typedef struct _gw_poolvm_t gw_poolvm_t;

//  Operations on clones of the template for cfg (accel resolved) under
//  template_dir. Both are borrowed and must outlive the pool.
gw_poolvm_t *gw_poolvm_new (const gw_vm_config_t *cfg, const char *template_dir);
void gw_poolvm_destroy (gw_poolvm_t **self_p);

//  The seam, with self as its ctx.
gw_poold_ops_t gw_poolvm_ops (gw_poolvm_t *self);

#endif
