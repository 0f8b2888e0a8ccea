/*  test_gw_wsstore - a named session's /workspace kept in the snapshot
    store across a restart: the entry's name, its meta.json and what a VM
    can take, which of it and a snapshot is newer; then a real chain
    flattened into the store with qemu-img (unjailed), taken back as a chain
    under a fresh layer, refused for another disk size, replaced by a newer
    restart, and removed. A half-written entry (a staging dir) is never
    taken, and a truncated one is refused as corrupt. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "snap/gw_wsstore.h"
#include "snap/gw_snapstore.h"
#include "snap/gw_lease.h"
#include "disk/gw_chain.h"
#include "disk/gw_qcow2.h"
#include "vm/gw_vm_config.h"
#include "tu.h"

#define S_DISK (4u << 20)

typedef struct {
    char dir [TU_DIR_MAX], store [TU_DIR_MAX + 8], chain [TU_DIR_MAX + 8];
    gw_vm_config_t cfg;
} fixture_t;

static int
s_setup (void **state)
{
    fixture_t *f = tu_fixture_new (sizeof (fixture_t), "test_gw_wsstore");
    snprintf (f->store, sizeof f->store, "%s/store", f->dir);
    snprintf (f->chain, sizeof f->chain, "%s/chain", f->dir);
    gw_vm_config_defaults (&f->cfg);
    f->cfg.disk_bytes = S_DISK;
    f->cfg.jail.mode = GW_JAIL_OFF;
    *state = f;
    return 0;
}

static bool
s_has (const char *dir, const char *name)
{
    char path [PATH_MAX];
    return access (tu_path (path, sizeof path, dir, name), F_OK) == 0;
}

//  A one-layer chain in f->chain (made fresh), as a restart's keep leaves it.
static void
s_chain (fixture_t *f)
{
    char path [PATH_MAX];
    tu_rmtree (f->chain);
    assert_int_equal (mkdir (f->chain, 0700), 0);
    snprintf (path, sizeof path, "%s/ws-1.qcow2", f->chain);
    assert_int_equal (gw_qcow2_create (path, S_DISK, NULL, NULL), 0);
    assert_int_equal (gw_chain_write_top (f->chain, "ws-1.qcow2"), 0);
}

static bool
s_have_qemu_img (void)
{
    return system ("qemu-img --version >/dev/null 2>&1") == 0;
}

static void
test_gw_wsstore_names (void **state)
{
    (void) state;
    char out [GW_SNAP_NAME_MAX + 1], longest [GW_LEASE_NAME_MAX + 2];
    assert_int_equal (gw_wsstore_name ("conv-1", out, sizeof out), 0);
    assert_string_equal (out, "workspace-conv-1");
    memset (longest, 'x', sizeof longest - 2);
    longest [sizeof longest - 2] = '\0';
    assert_int_equal (gw_wsstore_name (longest, out, sizeof out), 0);
    assert_true (gw_snapstore_name_ok (out));
    longest [sizeof longest - 2] = 'x';
    longest [sizeof longest - 1] = '\0';
    assert_int_equal (gw_wsstore_name (longest, out, sizeof out), -EINVAL);
    assert_int_equal (gw_wsstore_name ("a/b", out, sizeof out), -EINVAL);
    assert_int_equal (gw_wsstore_name ("", out, sizeof out), -EINVAL);
    assert_int_equal (gw_wsstore_name (NULL, out, sizeof out), -EINVAL);
    assert_int_equal (gw_wsstore_name ("conv-1", out, 8), -ENAMETOOLONG);
}

static void
test_gw_wsstore_meta_fit_and_newer (void **state)
{
    (void) state;
    char why [400];
    json_t *meta = gw_wsstore_meta ("conv-1", S_DISK, 123, 1700000000.5);
    json_object_set_new (meta, "name", json_string ("workspace-conv-1"));
    assert_true (gw_wsstore_is_kept (meta));
    assert_string_equal (json_string_value (json_object_get (meta, "reason")), "restart");
    assert_int_equal (json_integer_value (json_object_get (meta, "disk_file_bytes")), 123);
    assert_null (gw_wsstore_unfit (meta, S_DISK, why, sizeof why));
    assert_non_null (gw_wsstore_unfit (meta, 2 * S_DISK, why, sizeof why));
    assert_non_null (strstr (why, "\"workspace-conv-1\" is a disk of 4194304 bytes; this "
                                  "gateway's is 8388608"));
    json_object_del (meta, "disk_bytes");
    assert_non_null (gw_wsstore_unfit (meta, S_DISK, why, sizeof why));
    assert_non_null (strstr (why, "does not record its disk size"));
    json_object_set_new (meta, "kind", json_string ("other"));
    assert_false (gw_wsstore_is_kept (meta));
    assert_non_null (gw_wsstore_unfit (meta, S_DISK, why, sizeof why));
    assert_non_null (strstr (why, "is not a kept /workspace"));
    json_object_del (meta, "kind");                     //  an ordinary snapshot's
    assert_false (gw_wsstore_is_kept (meta));
    assert_false (gw_wsstore_is_kept (NULL));
    json_decref (meta);
    assert_true (gw_wsstore_newer (10, -1));            //  nothing else: take it
    assert_true (gw_wsstore_newer (10, 9.5));
    assert_false (gw_wsstore_newer (10, 10));           //  a tie: the snapshot
    assert_false (gw_wsstore_newer (9, 10));
    assert_false (gw_wsstore_newer (-1, -1));           //  none kept
}

static void
test_gw_wsstore_save_take_remove (void **state)
{
    fixture_t *f = *state;
    if (!s_have_qemu_img ())
        tu_skip_expected ("no qemu-img on PATH");
    char err [600] = "", dst [TU_DIR_MAX + 8], name [NAME_MAX + 1], backing [256];
    s_chain (f);
    assert_int_equal (gw_wsstore_save (f->store, "conv-1", f->chain, &f->cfg, err, sizeof err),
                      0);
    assert_true (s_has (f->store, "workspace-conv-1/meta.json"));
    assert_true (s_has (f->store, "workspace-conv-1/" GW_SNAP_DISK));
    assert_false (s_has (f->store, "workspace-conv-1/" GW_SNAP_STATE));
    double first = gw_wsstore_created (f->store, "workspace-conv-1");
    assert_true (first > 0);
    assert_true (gw_wsstore_created (f->store, "session-conv-1") < 0);
    //  The store opens it (no state file needed) and says what it is.
    gw_snapstore_t *ss = gw_snapstore_new (f->store, err, sizeof err);
    int rc = 0;
    gw_snapref_t *ref = gw_snapstore_open (ss, "workspace-conv-1", &rc, err, sizeof err);
    assert_non_null (ref);
    assert_true (gw_wsstore_is_kept (gw_snapref_meta (ref)));
    gw_snapref_destroy (&ref);
    //  Taken: base.qcow2 (the store's disk, no backing) under a fresh top.
    snprintf (dst, sizeof dst, "%s/take", f->dir);
    assert_int_equal (mkdir (dst, 0700), 0);
    assert_int_equal (gw_wsstore_take (f->store, "conv-1", S_DISK, dst, err, sizeof err), 0);
    assert_int_equal (gw_chain_top (dst, name, sizeof name), 0);
    assert_string_equal (name, "workspace.qcow2");
    snprintf (backing, sizeof backing, "%s/workspace.qcow2", dst);
    assert_int_equal (gw_chain_backing (backing, name, sizeof name), 0);
    assert_string_equal (name, "base.qcow2");
    snprintf (backing, sizeof backing, "%s/base.qcow2", dst);
    assert_int_equal (gw_chain_backing (backing, name, sizeof name), 0);
    assert_string_equal (name, "");
    assert_true (s_has (f->store, "workspace-conv-1"));     //  taking is not consuming
    //  Another disk size: refused in words, the entry kept.
    tu_rmtree (dst);
    assert_int_equal (mkdir (dst, 0700), 0);
    assert_int_equal (gw_wsstore_take (f->store, "conv-1", 2 * S_DISK, dst, err, sizeof err),
                      -EPROTO);
    assert_non_null (strstr (err, "is a disk of"));
    assert_true (s_has (f->store, "workspace-conv-1"));
    //  A newer restart replaces it.
    usleep (20 * 1000);
    s_chain (f);
    assert_int_equal (gw_wsstore_save (f->store, "conv-1", f->chain, &f->cfg, err, sizeof err),
                      0);
    assert_true (gw_wsstore_created (f->store, "workspace-conv-1") > first);
    //  Removed: gone, and a second removal or take says there is none.
    assert_int_equal (gw_wsstore_remove (f->store, "conv-1", err, sizeof err), 0);
    assert_false (s_has (f->store, "workspace-conv-1"));
    assert_int_equal (gw_wsstore_remove (f->store, "conv-1", err, sizeof err), -ENOENT);
    tu_rmtree (dst);
    assert_int_equal (mkdir (dst, 0700), 0);
    assert_int_equal (gw_wsstore_take (f->store, "conv-1", S_DISK, dst, err, sizeof err),
                      -ENOENT);
    gw_snapstore_destroy (&ss);
}

static void
test_gw_wsstore_half_and_broken_entries_are_not_taken (void **state)
{
    fixture_t *f = *state;
    char err [600] = "", staging [PATH_MAX], dst [TU_DIR_MAX + 8], path [PATH_MAX + 32];
    gw_snapstore_t *ss = gw_snapstore_new (f->store, err, sizeof err);
    assert_non_null (ss);
    snprintf (dst, sizeof dst, "%s/take2", f->dir);
    assert_int_equal (mkdir (dst, 0700), 0);
    //  A writer that died mid-write leaves a staging dir: nothing to take.
    assert_int_equal (gw_snapstore_stage (ss, "workspace-conv-2", staging, sizeof staging, err,
                                          sizeof err), 0);
    tu_write_file (staging, GW_SNAP_DISK, "QFI\xfb half");
    assert_true (gw_wsstore_created (f->store, "workspace-conv-2") < 0);
    assert_int_equal (gw_wsstore_take (f->store, "conv-2", S_DISK, dst, err, sizeof err),
                      -ENOENT);
    //  Published, then truncated: corrupt, said so.
    snprintf (path, sizeof path, "%s/" GW_SNAP_DISK, staging);
    assert_int_equal (unlink (path), 0);
    assert_int_equal (gw_qcow2_create (path, S_DISK, NULL, NULL), 0);
    json_t *meta = gw_wsstore_meta ("conv-2", S_DISK, 1u << 30, 1.0);
    assert_int_equal (gw_snapstore_publish (ss, staging, "workspace-conv-2", meta, err,
                                            sizeof err), 0);
    json_decref (meta);
    assert_int_equal (gw_wsstore_take (f->store, "conv-2", S_DISK, dst, err, sizeof err),
                      -EBADMSG);
    assert_non_null (strstr (err, "truncated"));
    assert_false (s_has (dst, "top"));
    gw_snapstore_destroy (&ss);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_gw_wsstore_names),
        cmocka_unit_test (test_gw_wsstore_meta_fit_and_newer),
        cmocka_unit_test (test_gw_wsstore_save_take_remove),
        cmocka_unit_test (test_gw_wsstore_half_and_broken_entries_are_not_taken),
    };
    return cmocka_run_group_tests (tests, s_setup, tu_fixture_teardown);
}
