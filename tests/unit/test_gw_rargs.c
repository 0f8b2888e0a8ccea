/*  test_gw_rargs - cellvm-remote's inputs: every spelling EG's and GP's kernelspecs use, the
    pod's environment behind them, and the one-line reason for each bad input. */
#include <errno.h>
#include <stdbool.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "cli/gw_rargs.h"

#define S_KEY "MIGfMA0GCSqGSIb3"                //  not checked here (gw_egreply does)

static int
s_parse (gw_rargs_t *a, char *const *env, char *err, const char *first, ...)
{
    char *argv [40] = { "cellvm-remote" };
    int argc = 1;
    va_list ap;
    va_start (ap, first);
    for (const char *s = first; s && argc < 39; s = va_arg (ap, const char *))
        argv [argc++] = (char *) s;
    va_end (ap);
    err [0] = 0;
    return gw_rargs_parse (a, argc, argv, env, err, 256);
}

static void
s_check_good (const gw_rargs_t *a)
{
    assert_string_equal (a->kernel_id, "3f1c2b9e-0a4d-4e57-9d9b-2c7a1f0e8b11");
    assert_string_equal (a->response_host, "10.0.0.7");
    assert_int_equal (a->response_port, 8877);
    assert_string_equal (a->public_key, S_KEY);
    assert_int_equal (a->port_lo, 40000);
    assert_int_equal (a->port_hi, 41000);
}

static void
test_gw_rargs_takes_every_spelling (void **state)
{
    (void) state;
    gw_rargs_t a;
    char err [256];
    assert_int_equal (s_parse (&a, NULL, err, "--kernel-id", "3f1c2b9e-0a4d-4e57-9d9b-2c7a1f0e8b11",
                               "--response-address", "10.0.0.7:8877", "--public-key", S_KEY,
                               "--port-range", "40000..41000", NULL), 0);
    s_check_good (&a);
    assert_string_equal (a.ip, "0.0.0.0");
    assert_true (a.launch_timeout == 30.0);
    assert_int_equal (a.npass, 0);
    gw_rargs_release (&a);
    assert_int_equal (s_parse (&a, NULL, err,
                               "--RemoteProcessProxy.kernel-id", "3f1c2b9e-0a4d-4e57-9d9b-2c7a1f0e8b11",
                               "--RemoteProcessProxy.response-address=10.0.0.7:8877",
                               "--RemoteProcessProxy.public-key=" S_KEY,
                               "--RemoteProcessProxy.port-range", "40000..41000",
                               "--RemoteProcessProxy.spark-context-initialization-mode", "none",
                               "--kernel-class-name", "ipykernel.ipkernel.IPythonKernel",
                               "--ip=127.0.0.1", "--launch-timeout", "2.5", NULL), 0);
    s_check_good (&a);
    assert_string_equal (a.ip, "127.0.0.1");
    assert_true (a.launch_timeout == 2.5);
    assert_int_equal (a.npass, 0);
    gw_rargs_release (&a);
    gw_rargs_release (&a);                      //  idempotent
}

static void
test_gw_rargs_passes_the_rest_to_the_gateway (void **state)
{
    (void) state;
    gw_rargs_t a;
    char err [256];
    assert_int_equal (s_parse (&a, NULL, err, "--cell-timeout", "60", "--kernel-id", "k1",
                               "--response-address", "front.example:9",
                               "--public-key", S_KEY, "--", "--backend", "microvm",
                               "--kernel-id", "not-mine", NULL), 0);
    assert_string_equal (a.kernel_id, "k1");
    assert_string_equal (a.response_host, "front.example");
    assert_int_equal (a.port_lo, 0);
    assert_int_equal (a.port_hi, 0);
    assert_int_equal (a.npass, 6);
    const char *want [] = { "--cell-timeout", "60", "--backend", "microvm", "--kernel-id",
                            "not-mine" };
    for (int i = 0; i < 6; i++)
        assert_string_equal (a.pass [i], want [i]);
    assert_null (a.pass [6]);
    gw_rargs_release (&a);
}

static void
test_gw_rargs_falls_back_to_the_environment (void **state)
{
    (void) state;
    gw_rargs_t a;
    char err [256];
    char *env [] = { "KERNEL_ID=3f1c2b9e-0a4d-4e57-9d9b-2c7a1f0e8b11", "KERNEL_IDX=no",
                     "RESPONSE_ADDRESS=10.0.0.7:8877", "PUBLIC_KEY=" S_KEY,
                     "PORT_RANGE=40000..41000", "CELLVM_REMOTE_IP=10.1.2.3",
                     "KERNEL_LAUNCH_TIMEOUT=45", NULL };
    assert_int_equal (s_parse (&a, env, err, NULL), 0);
    s_check_good (&a);
    assert_string_equal (a.ip, "10.1.2.3");
    assert_true (a.launch_timeout == 45.0);
    gw_rargs_release (&a);
    //  Flags win over the environment.
    assert_int_equal (s_parse (&a, env, err, "--kernel-id", "flag-id", "--port-range", "0..0",
                               NULL), 0);
    assert_string_equal (a.kernel_id, "flag-id");
    assert_int_equal (a.port_hi, 0);
    assert_string_equal (a.response_host, "10.0.0.7");
    gw_rargs_release (&a);
    //  An empty PORT_RANGE is EG's "no range".
    char *env2 [] = { "KERNEL_ID=k", "RESPONSE_ADDRESS=h:1", "PUBLIC_KEY=" S_KEY, "PORT_RANGE=",
                      NULL };
    assert_int_equal (s_parse (&a, env2, err, NULL), 0);
    assert_int_equal (a.port_lo, 0);
    gw_rargs_release (&a);
}

//  argv with one flag's value replaced (NULL: the flag left out) must fail with words.
static void
s_bad (const char *flag, const char *value, const char *words)
{
    const char *good [] = { "--kernel-id", "k", "--response-address", "10.0.0.7:8877",
                            "--public-key", S_KEY, "--port-range", "40000..41000" };
    char *argv [12] = { "cellvm-remote" };
    int argc = 1;
    bool replaced = false;
    for (int i = 0; i < 8; i += 2) {
        bool mine = flag && strcmp (good [i], flag) == 0;
        replaced |= mine;
        if (mine && !value)
            continue;
        argv [argc++] = (char *) good [i];
        argv [argc++] = (char *) (mine ? value : good [i + 1]);
    }
    if (!replaced) {                            //  an option the good argv leaves out
        argv [argc++] = (char *) flag;
        argv [argc++] = (char *) value;
    }
    gw_rargs_t a;
    char err [256] = "";
    assert_int_equal (gw_rargs_parse (&a, argc, argv, NULL, err, sizeof err), -EINVAL);
    if (!strstr (err, words) || strchr (err, '\n'))
        fail_msg ("%s %s: '%s', wanted '%s'", flag, value ? value : "(none)", err, words);
    assert_null (a.pass);
}

static void
test_gw_rargs_names_each_bad_input (void **state)
{
    (void) state;
    static const struct { const char *flag, *value, *words; } cases [] = {
        { "--kernel-id", NULL, "no kernel id: give --kernel-id ID (or KERNEL_ID)" },
        { "--kernel-id", "", "no kernel id" },
        { "--kernel-id", "../etc/passwd", "kernel id '../etc/passwd' is not a safe name" },
        { "--kernel-id", "-x", "not a safe name" },
        { "--kernel-id", "a b", "not a safe name" },
        { "--response-address", NULL, "no response address" },
        { "--response-address", "10.0.0.7", "response address '10.0.0.7' is not HOST:PORT" },
        { "--response-address", "10.0.0.7:0", "is not HOST:PORT" },
        { "--response-address", "10.0.0.7:65536", "is not HOST:PORT" },
        { "--response-address", ":8877", "is not HOST:PORT" },
        { "--response-address", "a;b:1", "is not HOST:PORT" },
        { "--public-key", NULL, "no public key: give --public-key KEY (or PUBLIC_KEY)" },
        { "--port-range", "41000..40000", "port range '41000..40000' is not LO..HI" },
        { "--port-range", "40000-41000", "is not LO..HI" },
        { "--port-range", "0..41000", "is not LO..HI" },
        { "--port-range", "40000..70000", "is not LO..HI" },
        { "--port-range", "40000..40004", "port range '40000..40004' is too narrow" },
        { "--port-range", "x..y", "is not LO..HI" },
        { "--ip", "not-an-ip", "listen address 'not-an-ip' is not an IPv4 address" },
        { "--launch-timeout", "0", "launch timeout '0' is not a number of seconds" },
        { "--launch-timeout", "soon", "is not a number of seconds" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases [0]; i++)
        s_bad (cases [i].flag, cases [i].value, cases [i].words);
}

static void
test_gw_rargs_wants_a_value (void **state)
{
    (void) state;
    gw_rargs_t a;
    char err [256];
    assert_int_equal (s_parse (&a, NULL, err, "--public-key", NULL), -EINVAL);
    assert_string_equal (err, "--public-key wants a value");
    assert_int_equal (s_parse (&a, NULL, err, "--kernel-id", "--", "x", NULL), -EINVAL);
    assert_string_equal (err, "--kernel-id wants a value");
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_gw_rargs_takes_every_spelling),
        cmocka_unit_test (test_gw_rargs_passes_the_rest_to_the_gateway),
        cmocka_unit_test (test_gw_rargs_falls_back_to_the_environment),
        cmocka_unit_test (test_gw_rargs_names_each_bad_input),
        cmocka_unit_test (test_gw_rargs_wants_a_value),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
