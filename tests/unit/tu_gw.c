/*  tu_gw - the gateway tests' share of the test helpers (tu_gw.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "tu_gw.h"

tu_gw_tpl_fixture_t *
tu_gw_tpl_fixture_new (const char *name, const char *tpl)
{
    tu_gw_tpl_fixture_t *f = tu_fixture_new (sizeof *f, name);
    tu_fake_image (tu_path (f->image, sizeof f->image, f->dir, "image"), "aaaa");
    assert_int_equal (mkdir (tu_path (f->tpl, sizeof f->tpl, f->dir, tpl), 0700), 0);
    gw_vm_config_defaults (&f->cfg);
    f->cfg.image_dir = f->image;
    f->cfg.accel = GW_ACCEL_TCG;
    f->cfg.mem_mib = 64;
    return f;
}

void
tu_gw_key (const gw_vm_config_t *cfg, char key [GW_TPLMETA_KEY_LEN + 1])
{
    char err [256];
    assert_int_equal (gw_tplmeta_key (cfg, key, GW_TPLMETA_KEY_LEN + 1, err, sizeof err), 0);
    assert_int_equal (strlen (key), GW_TPLMETA_KEY_LEN);
    assert_int_equal (strspn (key, "0123456789abcdef"), GW_TPLMETA_KEY_LEN);
}
