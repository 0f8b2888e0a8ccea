/*  test_gw_runbase - the default state directory. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/gw_runbase.h"

static void
test_gw_runbase_default_is_on_disk (void **state)
{
    (void) state;
    char base [64];
    assert_int_equal (gw_runbase_default (base, sizeof base), 0);
    char want [64];
    snprintf (want, sizeof want, "/var/tmp/cellvm-%u", (unsigned) geteuid ());
    assert_string_equal (base, want);
    assert_int_equal (gw_runbase_default (base, 8), -ENAMETOOLONG);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_gw_runbase_default_is_on_disk),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
