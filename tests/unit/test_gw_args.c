/*  test_gw_args - the option table, --help printed from it, and the argv
    of the children the gateway starts (the template builder, the pool
    daemon): everything that keys a template reaches them as the user wrote
    it, and nothing of one session does.
*/
#include <errno.h>
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

#include "cli/gw_args.h"
#include "base/gw_log.h"
#include "snap/gw_tplmeta.h"
#include "tu.h"

#define S_VM (GW_ARGS_BUILDER | GW_ARGS_POOL)

typedef struct {
    char dir [TU_DIR_MAX];                      //  scratch
    char image [96], image2 [96];               //  two fake images
} fixture_t;

static int
s_setup (void **state)
{
    fixture_t *f = tu_fixture_new (sizeof *f, "test_gw_args");
    tu_fake_image (tu_path (f->image, sizeof f->image, f->dir, "image"), "aaaa");
    tu_fake_image (tu_path (f->image2, sizeof f->image2, f->dir, "image2"), "bbbb");
    *state = f;
    return 0;
}

static int
s_argc (char **argv)
{
    int n = 0;
    while (argv [n])
        n++;
    return n;
}

static void
s_key (gw_args_t *args, char key [GW_TPLMETA_KEY_LEN + 1])
{
    gw_vm_config_t cfg;
    char err [256];
    gw_args_vm_config (args, &cfg);
    assert_int_equal (gw_tplmeta_key (&cfg, key, GW_TPLMETA_KEY_LEN + 1, err, sizeof err), 0);
}

//  Every option the gateway takes, with a value unlike the base argv's.
static const char *
s_sample (const fixture_t *f, gw_opt_id_t id)
{
    static const char *values [GW_OPT_COUNT] = {
        [GW_OPT_CONNECTION_FILE] = "/c.json", [GW_OPT_BACKEND] = "microvm",
        [GW_OPT_KERNEL] = "/k", [GW_OPT_LOG_LEVEL] = "debug", [GW_OPT_MAX_MSG] = "1M",
        [GW_OPT_MAX_FRAME] = "2M", [GW_OPT_CELL_TIMEOUT] = "5", [GW_OPT_ARTIFACTS_DIR] = "/a",
        [GW_OPT_ARTIFACT_MAX_FILE] = "3M", [GW_OPT_ARTIFACT_MAX_SESSION] = "4M",
        [GW_OPT_QEMU] = "/opt/other-qemu", [GW_OPT_ACCEL] = "kvm", [GW_OPT_RUN_DIR] = "/r",
        [GW_OPT_MEMORY] = "1k", [GW_OPT_VCPUS] = "2", [GW_OPT_TCG_TB] = "16", [GW_OPT_DISK_SIZE] = "2G",
        [GW_OPT_TEMPLATE_DIR] = "/t2", [GW_OPT_NO_TEMPLATES] = "", [GW_OPT_POOL] = "3",
        [GW_OPT_POOL_BUDGET] = "1000", [GW_OPT_POOL_IDLE] = "60",
        [GW_OPT_LISTEN_FDS] = "3,4,5,6,7", [GW_OPT_IDLE_PAUSE] = "300",
        [GW_OPT_IDLE_TIMEOUT] = "3600", [GW_OPT_TTL] = "86400", [GW_OPT_SNAPSHOT_DIR] = "/s",
        [GW_OPT_FROM_SNAPSHOT] = "snap-1", [GW_OPT_SNAPSHOT_GC] = "",
        [GW_OPT_SNAPSHOT_MAX_AGE] = "604800", [GW_OPT_SNAPSHOT_MAX_BYTES] = "10G",
        [GW_OPT_JAIL] = "off", [GW_OPT_JAIL_UID_BASE] = "70000", [GW_OPT_CPUS] = "0.5",
        [GW_OPT_PROTOCOL] = "5.5", [GW_OPT_SHARE_CWD] = "", [GW_OPT_SHARE_MAX] = "64M",
        [GW_OPT_USER] = "cellvm", [GW_OPT_DISK_BPS] = "50M", [GW_OPT_DISK_IOPS] = "2000",
        [GW_OPT_SESSION_NAME] = "conv-1", [GW_OPT_LEASE_TTL] = "30",
        [GW_OPT_CHECKPOINT_EVERY] = "60", [GW_OPT_LEASE_WAIT] = "45", [GW_OPT_ADMIT] = "3",
        [GW_OPT_START_TIMEOUT] = "2", [GW_OPT_EGRESS_ALLOW] = "pypi.org,*.pythonhosted.org:443",
        [GW_OPT_EGRESS_DENY] = "evil.example", [GW_OPT_EGRESS_STREAMS] = "8",
        [GW_OPT_EGRESS_CONNS] = "100", [GW_OPT_EGRESS_MAX] = "1G", [GW_OPT_EGRESS_PORT] = "8128",
    };
    return id == GW_OPT_IMAGE ? f->image2 : values [id];
}

//  Whether the option changes the template key, from the base options.
static bool
s_changes_key (const fixture_t *f, gw_opt_id_t id)
{
    const gw_opt_t *o = &gw_args_table () [id];
    char name [64], k0 [32], k1 [32];
    snprintf (name, sizeof name, "--%s", o->name);
    char *base [] = { "gw", "--image", (char *) f->image, "--accel", "tcg", NULL };
    char *more [] = { "gw", "--image", (char *) f->image, "--accel", "tcg", name,
                      (char *) s_sample (f, id), NULL };
    if (o->kind == GW_OPTKIND_FLAG)
        more [6] = NULL;
    gw_args_t a, b;
    assert_int_equal (gw_args_parse (&a, s_argc (base), base), 0);
    assert_int_equal (gw_args_parse (&b, s_argc (more), more), 0);
    s_key (&a, k0);
    s_key (&b, k1);
    return strcmp (k0, k1) != 0;
}

//  Whatever changes the key reaches both children: found by trying every
//  option in the table, so a new one cannot be forgotten.
static void
test_every_option_that_keys_templates_reaches_both_children (void **state)
{
    fixture_t *f = *state;
    int keyed = 0;
    for (int id = 0; id < GW_OPT_COUNT; id++) {
        if (id == GW_OPT_HELP || id == GW_OPT_BUILD_TEMPLATE || id == GW_OPT_POOL_DAEMON
        ||  id == GW_OPT_SNAPSHOT_GC)
            continue;                           //  modes: they run something else
        assert_non_null (s_sample (f, (gw_opt_id_t) id));   //  the test knows every option
        if (s_changes_key (f, (gw_opt_id_t) id)) {
            keyed++;
            assert_int_equal (gw_args_table () [id].inherit & S_VM, S_VM);
        }
    }
    assert_int_equal (keyed, 6);                //  image qemu accel memory vcpus disk-size
}

//  argv with every option given (samples).
static char **
s_full_argv (const fixture_t *f)
{
    static char *argv [2 * GW_OPT_COUNT + 2], names [GW_OPT_COUNT][64];
    int n = 0;
    argv [n++] = "gw";
    for (int id = 0; id < GW_OPT_COUNT; id++) {
        if (id == GW_OPT_HELP || id == GW_OPT_BUILD_TEMPLATE || id == GW_OPT_POOL_DAEMON
        ||  id == GW_OPT_SNAPSHOT_GC)
            continue;
        snprintf (names [id], sizeof names [id], "--%s", gw_args_table () [id].name);
        argv [n++] = names [id];
        if (gw_args_table () [id].kind != GW_OPTKIND_FLAG)
            argv [n++] = (char *) s_sample (f, (gw_opt_id_t) id);
    }
    argv [n] = NULL;
    return argv;
}

static void
s_check_child (fixture_t *f, gw_args_t *parent, unsigned child)
{
    char **argv = gw_args_child_argv (parent, child, "/resolved/templates");
    gw_args_t c;
    assert_int_equal (gw_args_parse (&c, s_argc (argv), argv), 0);
    assert_true (gw_args_has (&c, child == GW_ARGS_POOL ? GW_OPT_POOL_DAEMON
                                                        : GW_OPT_BUILD_TEMPLATE));
    assert_string_equal (c.text [GW_OPT_TEMPLATE_DIR], "/resolved/templates");
    char k0 [32], k1 [32];
    s_key (parent, k0);
    s_key (&c, k1);
    assert_string_equal (k0, k1);
    for (int id = 0; id < GW_OPT_COUNT; id++) {
        bool passed = (gw_args_table () [id].inherit & child) && id != GW_OPT_TEMPLATE_DIR;
        if (passed)                             //  as the user wrote it
            assert_string_equal (c.text [id], parent->text [id]);
        else if (id != GW_OPT_TEMPLATE_DIR && id != GW_OPT_POOL_DAEMON
             &&  id != GW_OPT_BUILD_TEMPLATE)
            assert_null (c.text [id]);
    }
    assert_int_equal (c.memory_mib, 1024);
    assert_int_equal (c.vcpus, 2);
    assert_true (c.disk_bytes == 2ULL << 30);
    assert_int_equal (c.pool, child == GW_ARGS_POOL ? 3 : 0);
    assert_int_equal (c.pool_idle_s, child == GW_ARGS_POOL ? 60 : 0);
    (void) f;
    gw_args_free_argv (&argv);
    assert_null (argv);
}

static void
test_child_argv_round_trips_and_leaves_the_session_out (void **state)
{
    fixture_t *f = *state;
    char **argv = s_full_argv (f);
    gw_args_t args;
    assert_int_equal (gw_args_parse (&args, s_argc (argv), argv), 0);
    s_check_child (f, &args, GW_ARGS_BUILDER);
    s_check_child (f, &args, GW_ARGS_POOL);
    const gw_opt_id_t never [] = { GW_OPT_RUN_DIR, GW_OPT_CONNECTION_FILE, GW_OPT_LISTEN_FDS,
                                   GW_OPT_BACKEND, GW_OPT_KERNEL, GW_OPT_NO_TEMPLATES,
                                   GW_OPT_USER };   //  children of a separated gateway are it
    for (size_t i = 0; i < sizeof never / sizeof never [0]; i++)
        assert_int_equal (gw_args_table () [never [i]].inherit, 0);
    //  Nothing given: the children still get the template dir, and only that.
    char *bare [] = { "gw", NULL };
    assert_int_equal (gw_args_parse (&args, 1, bare), 0);
    argv = gw_args_child_argv (&args, GW_ARGS_BUILDER, "/t");
    assert_int_equal (s_argc (argv), 4);
    assert_string_equal (argv [1], "--build-template");
    assert_string_equal (argv [2], "--template-dir");
    gw_args_free_argv (&argv);
}

static int
s_parse (char **argv)
{
    gw_args_t args;
    return gw_args_parse (&args, s_argc (argv), argv);
}

static void
test_parse_checks_values (void **state)
{
    (void) state;
    char *ok [] = { "gw", "-f", "/c", "--pool", "0", "--memory", "128", "--cell-timeout", "0.5",
                    NULL };
    assert_int_equal (s_parse (ok), 0);
    char *help [] = { "gw", "--help", "--memory", "1", NULL };
    assert_int_equal (s_parse (help), 1);
    const char *bad [][2] = { { "--memory", "64" }, { "--vcpus", "0" }, { "--vcpus", "65" },
                              { "--accel", "xen" }, { "--disk-size", "1M" },
                              { "--cell-timeout", "-1" }, { "--max-msg", "-5" },
                              { "--max-frame", "8G" }, { "--pool", "x" } };
    for (size_t i = 0; i < sizeof bad / sizeof bad [0]; i++) {
        char *argv [] = { "gw", (char *) bad [i][0], (char *) bad [i][1], NULL };
        assert_int_equal (s_parse (argv), -EINVAL);
    }
    char *unknown [] = { "gw", "--no-such-option", NULL };
    assert_int_equal (s_parse (unknown), -EINVAL);
    char *extra [] = { "gw", "stray", NULL };
    assert_int_equal (s_parse (extra), -EINVAL);
}

//  IPython's options as runners pass them (KernelManager(extra_arguments=...)):
//  accepted and counted, not applied; anything else still refused.
static void
test_parse_accepts_traitlets_options (void **state)
{
    (void) state;
    gw_args_t a;
    char *argv [] = { "gw", "-f", "/c", "--HistoryManager.hist_file=:memory:", "--memory",
                      "256", "--IPKernelApp.x.y_2=1", "--InteractiveShell.colors=", NULL };
    assert_int_equal (gw_args_parse (&a, 8, argv), 0);
    assert_int_equal (a.traits, 3);
    assert_string_equal (a.first_trait, "--HistoryManager.hist_file=:memory:");
    assert_string_equal (a.text [GW_OPT_CONNECTION_FILE], "/c");
    assert_int_equal (a.memory_mib, 256);
    const char *bad [] = { "--NoDot=1", "--A.=1", "--.b=1", "--A.b", "--A.1b=2", "--A..b=1",
                           "--A.b c=1" };
    for (size_t i = 0; i < sizeof bad / sizeof bad [0]; i++) {
        char *one [] = { "gw", (char *) bad [i], NULL };
        assert_int_equal (gw_args_parse (&a, 2, one), -EINVAL);
    }
}

//  A value the parser takes for option id, by its kind; NULL for a flag.
static const char *
s_any_value (int id, char *buf, size_t cap)
{
    const gw_opt_t *o = &gw_args_table () [id];
    switch (o->kind) {
        case GW_OPTKIND_FLAG: return NULL;
        case GW_OPTKIND_SIZE: snprintf (buf, cap, "%llu", o->min); return buf;
        case GW_OPTKIND_SECONDS: return "1";
        case GW_OPTKIND_ACCEL: return "tcg";
        case GW_OPTKIND_JAIL: return "off";
        default: return id == GW_OPT_PROTOCOL ? "5.5" : "x";
    }
}

//  The table's id of the option --name (name len bytes long), or -1.
static int
s_lookup (const char *name, size_t len)
{
    for (int id = 0; id < GW_OPT_COUNT; id++)
        if (strlen (gw_args_table () [id].name) == len
        &&  strncmp (gw_args_table () [id].name, name, len) == 0)
            return id;
    return -1;
}

//  --help comes from the table: every option the parser takes has its line
//  (name, value, help), and every --option the text names is one it takes.
static void
test_help_lists_every_option_and_only_those (void **state)
{
    (void) state;
    char *text = NULL, name [64], line [128], buf [32];
    size_t len = 0;
    FILE *out = open_memstream (&text, &len);
    assert_non_null (out);
    gw_args_usage (out);
    fclose (out);
    gw_args_t a;
    for (int id = 0; id < GW_OPT_COUNT; id++) {
        const gw_opt_t *o = &gw_args_table () [id];
        const char *val = s_any_value (id, buf, sizeof buf);
        snprintf (name, sizeof name, "--%s", o->name);
        char *argv [] = { "gw", name, (char *) val, NULL };
        assert_int_equal (gw_args_parse (&a, val ? 3 : 2, argv), id == GW_OPT_HELP ? 1 : 0);
        snprintf (line, sizeof line, "\n  %s%s%s", name, o->arg ? " " : "", o->arg ? o->arg : "");
        const char *at = strstr (text, line);
        size_t end = at ? (size_t) (at - text) + strlen (line) : 0;
        if (!at || (text [end] != ' ' && text [end] != '\n'))
            fail_msg ("--help has no line for %s", name);
        assert_true (o->help && strlen (o->help) > 8);
        char first [24];                        //  the start of its help follows
        snprintf (first, sizeof first, "%.20s", o->help);
        assert_non_null (strstr (text + end, first));
    }
    for (const char *p = text; (p = strstr (p, "--")); ) {
        p += 2;
        size_t n = strspn (p, "abcdefghijklmnopqrstuvwxyz0123456789-");
        if (n && s_lookup (p, n) < 0)
            fail_msg ("--help names --%.*s, which the parser does not take", (int) n, p);
        p += n;
    }
    assert_non_null (strstr (text, "-f FILE"));     //  getopt's short form of --connection-file
    assert_non_null (strstr (text, "--Class.trait=value"));
    free (text);
}

int
main (void)
{
#define S_TEST(name) cmocka_unit_test_setup_teardown (name, s_setup, tu_fixture_teardown)
    gw_log_init (GW_LOG_ERROR, NULL);
    const struct CMUnitTest tests [] = {
        S_TEST (test_every_option_that_keys_templates_reaches_both_children),
        S_TEST (test_child_argv_round_trips_and_leaves_the_session_out),
        cmocka_unit_test (test_parse_checks_values),
        cmocka_unit_test (test_parse_accepts_traitlets_options),
        cmocka_unit_test (test_help_lists_every_option_and_only_those),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
