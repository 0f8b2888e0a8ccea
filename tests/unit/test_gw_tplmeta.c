/*  test_gw_tplmeta - template keys, and meta.json written, read and checked
    (fake images and templates in a scratch dir; no VM).
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

#include "base/gw_log.h"
#include "snap/gw_tplmeta.h"
#include "tu.h"
#include "tu_gw.h"

typedef tu_gw_tpl_fixture_t fixture_t;

static int
s_setup (void **state)
{
    *state = tu_gw_tpl_fixture_new ("test_gw_tplmeta", "tpl");
    return 0;
}

//  The key of cfg changed by one field differs from k0.
static void
s_differs (const gw_vm_config_t *c, const char *k0)
{
    char k1 [32];
    tu_gw_key (c, k1);
    assert_string_not_equal (k0, k1);
}

static void
test_key_is_stable_and_covers_what_a_clone_must_match (void **state)
{
    fixture_t *f = *state;
    char k0 [32], k1 [32], err [128];
    tu_gw_key (&f->cfg, k0);
    tu_gw_key (&f->cfg, k1);
    assert_string_equal (k0, k1);
    gw_vm_config_t c [8];
    for (int i = 0; i < 8; i++)
        c [i] = f->cfg;
    c [0].mem_mib = 128;
    c [1].vcpus = 2;
    c [2].append = "foo=1";
    c [3].cpu = "host";
    c [4].accel = GW_ACCEL_KVM;
    c [5].disk_bytes *= 2;
    c [6].qemu = "/no/such/qemu";
    for (int i = 0; i < 7; i++)
        s_differs (&c [i], k0);
    c [7].run_base = "/elsewhere";              //  where clones run: not part of it
    tu_gw_key (&c [7], k1);
    assert_string_equal (k0, k1);
    tu_write_file (f->image, "image.json", "{\"image_hash\": \"bbbb\"}");  //  a new image
    s_differs (&f->cfg, k0);
    tu_write_file (f->image, "image.json", "{\"image_hash\": \"aaaa\"}");
    tu_write_file (f->image, "rootfs.ext4", "rr");    //  same hash, but the file changed
    s_differs (&f->cfg, k0);
    c [7].image_dir = NULL;
    assert_int_equal (gw_tplmeta_key (&c [7], k1, sizeof k1, err, sizeof err), -EINVAL);
}

//  A template that passes every check, in f->tpl; its key into key.
static void
s_fake_template (fixture_t *f, char key [32])
{
    char path [160];
    tu_gw_key (&f->cfg, key);
    tu_write_file (f->tpl, GW_TPL_STATE, "QEVM fake device state");
    tu_write_file (f->tpl, GW_TPL_DISK, "qcow");
    snprintf (path, sizeof path, "%s/" GW_TPL_RAM, f->tpl);
    int fd = open (path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_int_equal (ftruncate (fd, (off_t) f->cfg.mem_mib << 20), 0);
    close (fd);
    assert_int_equal (gw_tplmeta_write (f->tpl, key, &f->cfg, 2000000, 1234), 0);
}

static const char *
s_check (fixture_t *f, const char *key)
{
    static char why [128];
    gw_tplmeta_t *meta = gw_tplmeta_load (f->tpl);
    const char *w = gw_tplmeta_check (meta, f->tpl, &f->cfg, key);
    snprintf (why, sizeof why, "%s", w ? w : "");
    gw_tplmeta_destroy (&meta);
    assert_null (meta);
    return why;
}

static void
test_written_meta_reads_back_and_passes (void **state)
{
    fixture_t *f = *state;
    char key [32];
    assert_null (gw_tplmeta_load (f->tpl));     //  nothing written yet
    s_fake_template (f, key);
    assert_string_equal (s_check (f, key), "");
    gw_tplmeta_t *meta = gw_tplmeta_load (f->tpl);
    assert_int_equal (gw_tplmeta_tsc_khz (meta), 2000000);
    json_t *inputs = gw_tplmeta_inputs (&f->cfg);
    assert_true (json_equal (gw_tplmeta_recorded (meta), inputs));
    json_decref (inputs);
    gw_tplmeta_destroy (&meta);
    tu_write_file (f->tpl, GW_TPL_META, "{\"key\": \"k\", \"tsc_khz\": 99000000}");
    meta = gw_tplmeta_load (f->tpl);
    assert_int_equal (gw_tplmeta_tsc_khz (meta), 0);            //  out of range
    assert_null (gw_tplmeta_recorded (meta));
    gw_tplmeta_destroy (&meta);
    assert_int_equal (gw_tplmeta_tsc_khz (NULL), 0);
}

static void
test_check_names_what_is_wrong (void **state)
{
    fixture_t *f = *state;
    char key [32], path [160];
    s_fake_template (f, key);
    assert_string_equal (s_check (f, "0123456789abcdef01234567"), "meta.json names another key");
    tu_write_file (f->tpl, GW_TPL_STATE, "QEVM fake device statE");   //  same size, other bytes
    assert_string_equal (s_check (f, key), "state file checksum mismatch");
    tu_write_file (f->tpl, GW_TPL_STATE, "QEVM");
    assert_string_equal (s_check (f, key), "state file missing or truncated");
    s_fake_template (f, key);
    snprintf (path, sizeof path, "%s/" GW_TPL_DISK, f->tpl);
    unlink (path);
    assert_string_equal (s_check (f, key), "workspace disk missing");
    s_fake_template (f, key);
    snprintf (path, sizeof path, "%s/" GW_TPL_RAM, f->tpl);
    assert_int_equal (truncate (path, 4096), 0);
    assert_string_equal (s_check (f, key), "RAM file missing or of the wrong size");
    s_fake_template (f, key);
    tu_write_file (f->tpl, GW_TPL_META, "not json");
    assert_string_equal (s_check (f, key), "meta.json missing or not JSON");
    tu_write_file (f->tpl, GW_TPL_META, "[1, 2]");
    assert_string_equal (s_check (f, key), "meta.json missing or not JSON");
}

int
main (void)
{
#define S_TEST(name) cmocka_unit_test_setup_teardown (name, s_setup, tu_fixture_teardown)
    gw_log_init (GW_LOG_ERROR, NULL);
    const struct CMUnitTest tests [] = {
        S_TEST (test_key_is_stable_and_covers_what_a_clone_must_match),
        S_TEST (test_written_meta_reads_back_and_passes),
        S_TEST (test_check_names_what_is_wrong),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
