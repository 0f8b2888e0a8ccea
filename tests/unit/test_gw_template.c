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

#include "gw_log.h"
#include "gw_template.h"
#include "gw_tplmeta.h"

typedef struct {
    char dir [64];                              //  scratch
    char image [96], base [96];
    gw_vm_config_t cfg;
} fixture_t;

static void
s_write (const char *path, const char *text)
{
    FILE *f = fopen (path, "w");
    assert_non_null (f);
    fputs (text, f);
    fclose (f);
}

static void
s_image_file (fixture_t *f, const char *name, const char *text)
{
    char path [160];
    snprintf (path, sizeof path, "%s/%s", f->image, name);
    s_write (path, text);
}

static int
s_setup (void **state)
{
    fixture_t *f = calloc (1, sizeof *f);
    snprintf (f->dir, sizeof f->dir, "/tmp/test_gw_template_XXXXXX");
    assert_non_null (mkdtemp (f->dir));
    snprintf (f->image, sizeof f->image, "%s/image", f->dir);
    snprintf (f->base, sizeof f->base, "%s/templates", f->dir);
    mkdir (f->image, 0700);
    mkdir (f->base, 0700);
    s_image_file (f, "image.json", "{\"image_hash\": \"aaaa\"}");
    s_image_file (f, "vmlinux", "k");
    s_image_file (f, "initrd.img", "i");
    s_image_file (f, "rootfs.ext4", "r");
    gw_vm_config_defaults (&f->cfg);
    f->cfg.image_dir = f->image;
    f->cfg.accel = GW_ACCEL_TCG;
    f->cfg.mem_mib = 64;
    *state = f;
    return 0;
}

static int
s_teardown (void **state)
{
    fixture_t *f = *state;
    char cmd [128];
    snprintf (cmd, sizeof cmd, "rm -rf %s", f->dir);
    assert_int_equal (system (cmd), 0);
    free (f);
    return 0;
}

static void
s_key (const gw_vm_config_t *cfg, char key [GW_TPLMETA_KEY_LEN + 1])
{
    char err [256];
    assert_int_equal (gw_tplmeta_key (cfg, key, GW_TPLMETA_KEY_LEN + 1, err, sizeof err), 0);
    assert_int_equal (strlen (key), GW_TPLMETA_KEY_LEN);
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

//  A template that passes every check, in BASE/<key>.
static void
s_fake_template (fixture_t *f, char *tdir, size_t cap)
{
    char key [32], path [256], sha [65], meta [512];
    s_key (&f->cfg, key);
    snprintf (tdir, cap, "%s/%s", f->base, key);
    mkdir (tdir, 0700);
    const char *state = "QEVM fake device state";
    snprintf (path, sizeof path, "%s/state", tdir);
    s_write (path, state);
    unsigned char md [32];
    EVP_Digest (state, strlen (state), md, NULL, EVP_sha256 (), NULL);
    for (int i = 0; i < 32; i++)
        sprintf (sha + 2 * i, "%02x", md [i]);
    snprintf (path, sizeof path, "%s/ram", tdir);
    int fd = open (path, O_WRONLY | O_CREAT, 0600);
    assert_int_equal (ftruncate (fd, (off_t) f->cfg.mem_mib << 20), 0);
    close (fd);
    snprintf (path, sizeof path, "%s/workspace.qcow2", tdir);
    s_write (path, "qcow");
    snprintf (meta, sizeof meta, "{\"key\": \"%s\", \"state_bytes\": %zu, \"state_sha256\": "
              "\"%s\", \"tsc_khz\": 2000000}", key, strlen (state), sha);
    snprintf (path, sizeof path, "%s/meta.json", tdir);
    s_write (path, meta);
}

static int
s_open (fixture_t *f)
{
    char err [512];
    int rc = 1;
    gw_template_t *t = gw_template_open (f->base, &f->cfg, &rc, err, sizeof err);
    assert_true ((t != NULL) == (rc == 0));
    gw_template_destroy (&t);
    assert_null (t);
    return rc;
}

static void
test_open_accepts_an_intact_template_and_nothing_else (void **state)
{
    fixture_t *f = *state;
    char tdir [160], path [200];
    assert_int_equal (s_open (f), -ENOENT);
    //  Each way of breaking it: detected, and the template deleted.
    const char *breaks [] = { "truncate", "flip", "ram", "key", "meta", "disk" };
    for (size_t i = 0; i < sizeof breaks / sizeof breaks [0]; i++) {
        s_fake_template (f, tdir, sizeof tdir);
        assert_int_equal (s_open (f), 0);
        if (!strcmp (breaks [i], "truncate")) {
            snprintf (path, sizeof path, "%s/state", tdir);
            assert_int_equal (truncate (path, 4), 0);
        }
        else if (!strcmp (breaks [i], "flip")) {
            snprintf (path, sizeof path, "%s/state", tdir);
            s_write (path, "QEVM fake device statE");   //  same size, other bytes
        }
        else if (!strcmp (breaks [i], "ram")) {
            snprintf (path, sizeof path, "%s/ram", tdir);
            assert_int_equal (truncate (path, 4096), 0);
        }
        else if (!strcmp (breaks [i], "key") || !strcmp (breaks [i], "meta")) {
            snprintf (path, sizeof path, "%s/meta.json", tdir);
            s_write (path, !strcmp (breaks [i], "key") ? "{\"key\": \"other\"}" : "not json");
        }
        else {
            snprintf (path, sizeof path, "%s/workspace.qcow2", tdir);
            unlink (path);
        }
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
                                         s_setup, s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
