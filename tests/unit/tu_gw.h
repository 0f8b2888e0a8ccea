/*  tu_gw - the gateway tests' share of the test helpers (tu.h): what needs
    the gateway's types, kept out of tu.c so that links into every test.
*/
#ifndef TU_GW_H_INCLUDED
#define TU_GW_H_INCLUDED

#include "snap/gw_tplmeta.h"
#include "vm/gw_vm.h"
#include "tu.h"

//  A scratch fixture for the template tests, made as tu_fixture_new makes
//  one (so tu_fixture_teardown removes it).
typedef struct {
    char dir [TU_DIR_MAX];                      //  scratch
    char image [96];                            //  DIR/image: a fake image
    char tpl [96];                              //  DIR/<tpl>: empty, for templates
    gw_vm_config_t cfg;                         //  the defaults for the image: TCG, 64 MiB
} tu_gw_tpl_fixture_t;

tu_gw_tpl_fixture_t *tu_gw_tpl_fixture_new (const char *name, const char *tpl);

//  cfg's template key into key, checked: 24 lowercase hex digits.
void tu_gw_key (const gw_vm_config_t *cfg, char key [GW_TPLMETA_KEY_LEN + 1]);

#endif
