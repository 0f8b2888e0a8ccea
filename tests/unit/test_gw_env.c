/*  test_gw_env - the environment a client means for the kernel: only
    CELLVM_ENV_<NAME>, with sane names and UTF-8 values, within the caps. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "session/gw_env.h"

static void
test_gw_env_takes_the_prefixed_variables_only (void **state)
{
    (void) state;
    char *envp [] = {
        "PATH=/usr/bin", "HOME=/root", "CELLVM_ENV_FOO=bar baz", "CELLVM_ENV_=empty name",
        "CELLVM_ENV_9X=digit first", "CELLVM_ENV_A-B=dash", "CELLVM_ENV_EMPTY=",
        "CELLVM_ENV_BAD=\xff\xfe", "CELLVM_ENVX=no underscore", "CELLVM_ENV_NOEQ",
        "CELLVM_ENV_lower_1=ok", "CELLVM_FROM_SNAPSHOT=s", NULL
    };
    size_t skipped = 99;
    json_t *env = gw_env_passed (envp, &skipped);
    assert_int_equal (json_object_size (env), 3);
    assert_string_equal (json_string_value (json_object_get (env, "FOO")), "bar baz");
    assert_string_equal (json_string_value (json_object_get (env, "EMPTY")), "");
    assert_string_equal (json_string_value (json_object_get (env, "lower_1")), "ok");
    assert_int_equal (skipped, 5);              //  "", 9X, A-B, BAD (not UTF-8), NOEQ
    json_decref (env);
    env = gw_env_passed (NULL, NULL);
    assert_int_equal (json_object_size (env), 0);
    json_decref (env);
}

static void
test_gw_env_caps_count_and_bytes (void **state)
{
    (void) state;
    size_t n = GW_ENV_MAX_VARS + 10;
    char **envp = calloc (n + 2, sizeof *envp);
    for (size_t i = 0; i < n; i++) {
        envp [i] = malloc (64);
        snprintf (envp [i], 64, "CELLVM_ENV_V%zu=x", i);
    }
    size_t big = GW_ENV_MAX_BYTES + 10;
    envp [n] = malloc (big + 32);
    memcpy (envp [n], "CELLVM_ENV_BIG=", 15);
    memset (envp [n] + 15, 'y', big);
    envp [n][15 + big] = 0;
    size_t skipped = 0;
    json_t *env = gw_env_passed (envp, &skipped);
    assert_int_equal (json_object_size (env), GW_ENV_MAX_VARS);
    assert_int_equal (skipped, 11);
    assert_null (json_object_get (env, "BIG"));
    json_decref (env);
    for (size_t i = 0; i <= n; i++)
        free (envp [i]);
    free (envp);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_gw_env_takes_the_prefixed_variables_only),
        cmocka_unit_test (test_gw_env_caps_count_and_bytes),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
