/*  gw_vm_config - a microVM's config (see gw_vm_config.h). */
#include "vm/gw_vm_config.h"

#include <assert.h>
#include <string.h>

#define S_MIB (1024ull * 1024)

void
gw_vm_config_defaults (gw_vm_config_t *cfg)
{
    assert (cfg);
    memset (cfg, 0, sizeof *cfg);
    cfg->qemu = "qemu-system-x86_64";
    cfg->qemu_img = "qemu-img";
    cfg->accel = GW_ACCEL_AUTO;
    cfg->mem_mib = 512;
    cfg->vcpus = 1;
    cfg->tcg_tb_mib = 32;
    cfg->disk_bytes = 1024 * S_MIB;
    cfg->port_timeout_ms = 10000;
    cfg->page_reporting = true;
}
