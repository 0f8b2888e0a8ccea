/*  test_gw_mem - copies that cannot fail. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/gw_mem.h"

static void
test_gw_mem_strdup_copies_and_keeps_null (void **state)
{
    (void) state;
    const char *text = "a text";
    char *copy = gw_strdup (text);
    assert_non_null (copy);
    assert_ptr_not_equal (copy, text);
    assert_string_equal (copy, text);
    free (copy);
    assert_null (gw_strdup (NULL));
    copy = gw_strdup ("");
    assert_string_equal (copy, "");
    free (copy);
}

static void
test_gw_mem_memdup_copies_bytes_and_never_returns_null (void **state)
{
    (void) state;
    const unsigned char bytes [] = { 0, 1, 0xff, 0 };
    unsigned char *copy = gw_memdup (bytes, sizeof bytes);
    assert_memory_equal (copy, bytes, sizeof bytes);
    free (copy);
    copy = gw_memdup (NULL, 0);                 //  an empty part still has a block
    assert_non_null (copy);
    free (copy);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_gw_mem_strdup_copies_and_keeps_null),
        cmocka_unit_test (test_gw_mem_memdup_copies_bytes_and_never_returns_null),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
