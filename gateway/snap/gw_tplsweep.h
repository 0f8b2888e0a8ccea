/*  gw_tplsweep - deleting snapshot templates nobody will restore again.

    Templates are keyed by everything a clone must match (gw_template.h), so
    a rebuilt image or an upgraded QEMU makes a new directory and the old
    one, ~250 MB, would stay forever. After a build (or a check that found
    the template intact), the gateway deletes under the same base:
    - superseded templates: the same VM settings (memory, vCPUs, CPU,
      accelerator, command line, disk size) and the same rootfs path, but
      another key, i.e. an older image or QEMU for the same kernelspec;
    - templates not restored for max_idle_s (gw_template_open touches their
      meta.json);
    - templates whose image is gone, or rebuilt (its rootfs not the file the
      build recorded): a deleted checkout's, or one an older CPU model made
      before the image changed. A path that cannot be checked (but ENOENT)
      keeps its template.
    A template whose build lock is held is never touched. A clone running
    from a deleted template keeps working: its RAM is mapped and its disk
    open. See docs/snapshots.md.
*/
#ifndef GW_TPLSWEEP_H
#define GW_TPLSWEEP_H

#include <stdint.h>

#define GW_TPLSWEEP_IDLE_S (30 * 86400)         //  default: unused for 30 days

//  Sweep base, keeping key. Returns the number deleted (each logged as
//  template.removed with its reason), or -errno when base cannot be read.
int gw_tplsweep (const char *base, const char *key, int64_t max_idle_s);

#endif
