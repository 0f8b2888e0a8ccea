/*  test_gw_template - where templates live, and gw_template_open keeping a
    stale or corrupt template from ever being restored (no VM needed: the
    image and the template are fakes in a scratch dir; keys and meta.json
    are test_gw_tplmeta's; restores are covered by
    tests/integration/test_snapshot.py).
*/
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include <openssl/evp.h>

#include "base/gw_log.h"
#include "snap/gw_template.h"
#include "snap/gw_tplmeta.h"
#include "tu.h"
#include "tu_gw.h"

typedef tu_gw_tpl_fixture_t fixture_t;

static int
s_setup (void **state)
{
    *state = tu_gw_tpl_fixture_new ("test_gw_template", "templates");
    return 0;
}

static void
test_default_dir_is_outside_the_tree_and_configurable (void **state)
{
    (void) state;
    char dir [256], want [64];
    unsetenv ("CELLVM_TEMPLATE_DIR");
    assert_int_equal (gw_template_default_dir (dir, sizeof dir), 0);
    snprintf (want, sizeof want, "/var/tmp/cellvm-%u/templates", (unsigned) getuid ());
    assert_string_equal (dir, want);
    setenv ("CELLVM_TEMPLATE_DIR", "/srv/t", 1);
    assert_int_equal (gw_template_default_dir (dir, sizeof dir), 0);
    assert_string_equal (dir, "/srv/t");
    setenv ("CELLVM_TEMPLATE_DIR", "relative", 1);  //  ignored: must be absolute
    assert_int_equal (gw_template_default_dir (dir, sizeof dir), 0);
    assert_string_equal (dir, want);
    unsetenv ("CELLVM_TEMPLATE_DIR");
}

//  A template that passes every check, in f->tpl/<key> (f->tpl is the base).
static void
s_fake_template (fixture_t *f, char *tdir, size_t cap)
{
    char key [32], path [256], sha [65], meta [512];
    tu_gw_key (&f->cfg, key);
    tu_path (tdir, cap, f->tpl, key);
    mkdir (tdir, 0700);
    const char *state = "QEVM fake device state";
    tu_write_file (tdir, "state", state);
    unsigned char md [32];
    EVP_Digest (state, strlen (state), md, NULL, EVP_sha256 (), NULL);
    for (int i = 0; i < 32; i++)
        sprintf (sha + 2 * i, "%02x", md [i]);
    int fd = open (tu_path (path, sizeof path, tdir, "ram"), O_WRONLY | O_CREAT, 0600);
    assert_int_equal (ftruncate (fd, (off_t) f->cfg.mem_mib << 20), 0);
    close (fd);
    tu_write_file (tdir, "workspace.qcow2", "qcow");
    snprintf (meta, sizeof meta, "{\"key\": \"%s\", \"state_bytes\": %zu, \"state_sha256\": "
              "\"%s\", \"tsc_khz\": 2000000}", key, strlen (state), sha);
    tu_write_file (tdir, "meta.json", meta);
}

//  The template in tdir broken the way how names.
static void
s_break (const char *tdir, const char *how)
{
    char path [256];
    if (!strcmp (how, "truncate"))
        assert_int_equal (truncate (tu_path (path, sizeof path, tdir, "state"), 4), 0);
    else if (!strcmp (how, "flip"))                 //  same size, other bytes
        tu_write_file (tdir, "state", "QEVM fake device statE");
    else if (!strcmp (how, "ram"))
        assert_int_equal (truncate (tu_path (path, sizeof path, tdir, "ram"), 4096), 0);
    else if (!strcmp (how, "key") || !strcmp (how, "meta"))
        tu_write_file (tdir, "meta.json", !strcmp (how, "key") ? "{\"key\": \"other\"}"
                                                               : "not json");
    else
        unlink (tu_path (path, sizeof path, tdir, "workspace.qcow2"));
}

static int
s_open (fixture_t *f)
{
    char err [512];
    int rc = 1;
    gw_template_t *t = gw_template_open (f->tpl, &f->cfg, &rc, err, sizeof err);
    assert_true ((t != NULL) == (rc == 0));
    gw_template_destroy (&t);
    assert_null (t);
    return rc;
}

static void
test_open_accepts_an_intact_template_and_nothing_else (void **state)
{
    fixture_t *f = *state;
    char tdir [160];
    assert_int_equal (s_open (f), -ENOENT);
    //  Each way of breaking it: detected, and the template deleted.
    const char *breaks [] = { "truncate", "flip", "ram", "key", "meta", "disk" };
    for (size_t i = 0; i < sizeof breaks / sizeof breaks [0]; i++) {
        s_fake_template (f, tdir, sizeof tdir);
        assert_int_equal (s_open (f), 0);
        s_break (tdir, breaks [i]);
        assert_int_equal (s_open (f), -ESTALE);
        assert_int_equal (access (tdir, F_OK), -1);     //  deleted, to be rebuilt
        assert_int_equal (s_open (f), -ENOENT);
    }
}

int
main (void)
{
    gw_log_init (GW_LOG_ERROR, NULL);
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_default_dir_is_outside_the_tree_and_configurable),
        cmocka_unit_test_setup_teardown (test_open_accepts_an_intact_template_and_nothing_else,
                                         s_setup, tu_fixture_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
