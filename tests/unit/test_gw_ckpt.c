/*  test_gw_ckpt - a named session's checkpoints: their names, the newest
    whole one, and the pruning of the others (nothing else in the store is
    touched). Also the two probes a resume compares: the QEMU build from
    `--version` (gw_qemuver) and the host CPU model (gw_accel), and the
    runner under the first (gw_runout). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "snap/gw_ckpt.h"
#include "snap/gw_snapstore.h"
#include "vm/gw_qemuver.h"
#include "vm/gw_accel.h"
#include "base/gw_runout.h"
#include "tu.h"

//  A published snapshot of name (only meta.json: enough to be listed).
static void
s_snap (gw_snapstore_t *ss, const char *name)
{
    char staging [PATH_MAX], err [600];
    assert_int_equal (gw_snapstore_stage (ss, name, staging, sizeof staging, err, sizeof err), 0);
    json_t *meta = json_pack ("{s:f}", "created", 1.0);
    assert_int_equal (gw_snapstore_publish (ss, staging, name, meta, err, sizeof err), 0);
    json_decref (meta);
}

static bool
s_has (const char *store, const char *name)
{
    char path [PATH_MAX];
    snprintf (path, sizeof path, "%s/%s", store, name);
    return access (path, F_OK) == 0;
}

static void
test_gw_ckpt_names_newest_and_prune (void **state)
{
    (void) state;
    char dir [TU_DIR_MAX], store [TU_DIR_MAX + 8], name [GW_SNAP_NAME_MAX + 1], err [600];
    tu_tmpdir (dir, sizeof dir, "test_gw_ckpt");
    snprintf (store, sizeof store, "%s/store", dir);
    gw_snapstore_t *ss = gw_snapstore_new (store, err, sizeof err);
    assert_non_null (ss);
    assert_int_equal (gw_ckpt_name ("conv-1", 1700000000.7, name, sizeof name), 0);
    assert_string_equal (name, "ckpt-conv-1-1700000000");
    assert_true (gw_snapstore_name_ok (name));
    char longest [49];
    memset (longest, 'x', 48);
    longest [48] = '\0';
    assert_int_equal (gw_ckpt_name (longest, 1700000000, name, sizeof name), 0);
    assert_true (gw_snapstore_name_ok (name));
    assert_int_equal (gw_ckpt_newest (store, "conv-1", name, sizeof name), -ENOENT);
    s_snap (ss, "ckpt-conv-1-1700000100");
    s_snap (ss, "ckpt-conv-1-1700000200");
    s_snap (ss, "ckpt-conv-1-1700000050");
    s_snap (ss, "ckpt-conv-10-1700000900");             //  another session's
    s_snap (ss, "ckpt-conv-1-170000090");               //  not ten digits: not one
    s_snap (ss, "session-conv-1");
    assert_int_equal (gw_ckpt_newest (store, "conv-1", name, sizeof name), 0);
    assert_string_equal (name, "ckpt-conv-1-1700000200");
    assert_int_equal (gw_ckpt_prune (store, "conv-1", name), 2);
    assert_true (s_has (store, "ckpt-conv-1-1700000200"));
    assert_false (s_has (store, "ckpt-conv-1-1700000100") || s_has (store, "ckpt-conv-1-1700000050"));
    assert_true (s_has (store, "ckpt-conv-10-1700000900") && s_has (store, "session-conv-1")
                 && s_has (store, "ckpt-conv-1-170000090"));
    assert_int_equal (gw_ckpt_prune (store, "conv-1", NULL), 1);
    assert_int_equal (gw_ckpt_newest (store, "conv-1", name, sizeof name), -ENOENT);
    assert_true (s_has (store, "ckpt-conv-10-1700000900"));
    gw_snapstore_destroy (&ss);
    tu_rmtree (dir);
}

static void
test_gw_qemuver_reads_the_words_of_query_version (void **state)
{
    (void) state;
    char out [160];
    assert_int_equal (gw_qemuver_parse ("QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+"
                                        "deb12u18+b3)\nCopyright (c) 2003-2022\n", out,
                                        sizeof out), 0);
    assert_string_equal (out, "7.2.22 Debian 1:7.2+dfsg-7+deb12u18+b3");
    assert_int_equal (gw_qemuver_parse ("QEMU emulator version 8.2.0\n(c) x)\n", out,
                                        sizeof out), 0);
    assert_string_equal (out, "8.2.0 ");              //  no package: as query-version says
    assert_int_equal (gw_qemuver_parse ("qemu-img version 7.2.22\n", out, sizeof out), -EINVAL);
    assert_int_equal (gw_qemuver_parse ("xQEMU emulator version 1.0\n", out, sizeof out),
                      -EINVAL);
    assert_int_equal (gw_qemuver_parse ("QEMU emulator version \n", out, sizeof out), -EINVAL);
    assert_int_equal (gw_qemuver_parse (NULL, out, sizeof out), -EINVAL);
    assert_int_equal (gw_qemuver_of ("/nonexistent/qemu", 2000, out, sizeof out), -ENOENT);
    assert_int_equal (gw_qemuver_of ("/bin/false", 2000, out, sizeof out), -ENOEXEC);
}

static void
test_gw_runout_output_status_and_time_limit (void **state)
{
    (void) state;
    char out [8];
    char *echo [] = { "sh", "-c", "printf 'hello world'; exit 3", NULL };
    assert_int_equal (gw_runout (echo, NULL, out, sizeof out, 5000), 3);
    assert_string_equal (out, "hello w");                      //  cut at cap - 1
    char *sleeper [] = { "sleep", "30", NULL };
    assert_int_equal (gw_runout (sleeper, NULL, out, sizeof out, 100), -ETIMEDOUT);
    char *env [] = { "sh", "-c", "printf %s \"$X\"", NULL }, *envp [] = { "X=yes", NULL };
    assert_int_equal (gw_runout (env, envp, out, sizeof out, 5000), 0);
    assert_string_equal (out, "yes");
}

static void
test_gw_accel_cpu_model_from_cpuinfo (void **state)
{
    (void) state;
    char out [128];
    gw_accel_cpu_model_parse ("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n"
                              "model name\t: Intel(R) Xeon(R) CPU @ 2.60GHz  \nflags\t: fpu\n"
                              "processor\t: 1\nmodel name\t: Other\n", out, sizeof out);
    assert_string_equal (out, "GenuineIntel Intel(R) Xeon(R) CPU @ 2.60GHz");
    gw_accel_cpu_model_parse ("processor: 0\n", out, sizeof out);
    assert_string_equal (out, "");
    gw_accel_cpu_model_parse (NULL, out, sizeof out);
    assert_string_equal (out, "");
    gw_accel_cpu_model (out, sizeof out);                      //  this host has one
    assert_true (strlen (out) > 0);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_gw_ckpt_names_newest_and_prune),
        cmocka_unit_test (test_gw_qemuver_reads_the_words_of_query_version),
        cmocka_unit_test (test_gw_runout_output_status_and_time_limit),
        cmocka_unit_test (test_gw_accel_cpu_model_from_cpuinfo),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
