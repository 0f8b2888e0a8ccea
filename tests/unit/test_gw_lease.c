/*  test_gw_lease - a named session's lease: one holder at a time, taken
    over only once it expired, lost when another took it, released for the
    next taker. Two "hosts" are two lease objects with their own clocks. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "snap/gw_lease.h"
#include "tu.h"

#define S_T0 1000000.0
#define S_TTL 30.0

static void
s_store (char *dir, size_t cap)
{
    tu_tmpdir (dir, cap, "test_gw_lease");
}

static bool
s_exists (const char *store, const char *entry)
{
    char path [PATH_MAX];
    snprintf (path, sizeof path, "%s/" GW_LEASE_DIR "/%s", store, entry);
    return access (path, F_OK) == 0;
}

static void
s_write (const char *store, const char *entry, const char *text)
{
    char path [PATH_MAX];
    snprintf (path, sizeof path, "%s/" GW_LEASE_DIR, store);
    mkdir (path, 0700);
    snprintf (path, sizeof path, "%s/" GW_LEASE_DIR "/%s", store, entry);
    FILE *f = fopen (path, "w");
    assert_non_null (f);
    fputs (text, f);
    fclose (f);
}

static void
test_gw_lease_one_holder_and_words_for_the_second (void **state)
{
    (void) state;
    char store [TU_DIR_MAX], err [600] = "";
    s_store (store, sizeof store);
    int rc = 0;
    gw_lease_t *a = gw_lease_take (store, "sess-1", "host-a", S_TTL, S_T0, &rc, err, sizeof err);
    assert_non_null (a);
    assert_int_equal (gw_lease_epoch (a), 1);
    assert_true (s_exists (store, "sess-1.1"));
    gw_lease_t *b = gw_lease_take (store, "sess-1", "host-b", S_TTL, S_T0 + 10, &rc, err,
                                   sizeof err);
    assert_null (b);
    assert_int_equal (rc, -EBUSY);
    assert_non_null (strstr (err, "running on host host-a"));
    assert_non_null (strstr (err, "SIGTERM suspends it"));
    //  Another name is another lease.
    gw_lease_t *c = gw_lease_take (store, "sess-2", "host-b", S_TTL, S_T0, &rc, err, sizeof err);
    assert_non_null (c);
    gw_lease_destroy (&c);
    assert_null (c);
    //  Released: the next taker needs not wait, and takes the next epoch.
    gw_lease_destroy (&a);
    b = gw_lease_take (store, "sess-1", "host-b", S_TTL, S_T0 + 11, &rc, err, sizeof err);
    assert_non_null (b);
    assert_int_equal (gw_lease_epoch (b), 2);
    assert_false (s_exists (store, "sess-1.1"));                     //  older epochs go
    gw_lease_destroy (&b);
    tu_rmtree (store);
}

//  Not renewed: taken over only past expiry plus the skew; the old holder
//  then finds it lost, and its release leaves the new holder's lease alone.
static void
test_gw_lease_expires_and_the_old_holder_learns_it_lost (void **state)
{
    (void) state;
    char store [TU_DIR_MAX], err [600] = "";
    s_store (store, sizeof store);
    int rc = 0;
    gw_lease_t *a = gw_lease_take (store, "s", "host-a", S_TTL, S_T0, &rc, err, sizeof err);
    assert_non_null (a);
    double edge = S_T0 + S_TTL + GW_LEASE_SKEW_S;
    assert_null (gw_lease_take (store, "s", "host-b", S_TTL, edge - 1, &rc, err, sizeof err));
    assert_int_equal (rc, -EBUSY);
    assert_false (gw_lease_lapsed (a, S_T0 + S_TTL - GW_LEASE_SKEW_S - 1));
    assert_true (gw_lease_lapsed (a, S_T0 + S_TTL - GW_LEASE_SKEW_S));
    gw_lease_t *b = gw_lease_take (store, "s", "host-b", S_TTL, edge + 1, &rc, err, sizeof err);
    assert_non_null (b);
    assert_int_equal (gw_lease_epoch (b), 2);
    err [0] = '\0';
    assert_int_equal (gw_lease_renew (a, edge + 2, err, sizeof err), -ESTALE);
    assert_non_null (strstr (err, "taken over by host host-b"));
    assert_true (gw_lease_lapsed (a, S_T0));
    gw_lease_destroy (&a);
    assert_null (gw_lease_take (store, "s", "host-c", S_TTL, edge + 3, &rc, err, sizeof err));
    assert_int_equal (rc, -EBUSY);
    assert_non_null (strstr (err, "host host-b"));
    gw_lease_destroy (&b);
    tu_rmtree (store);
}

//  A renewal moves the expiry on; one before a third of the lifetime is not
//  written at all.
static void
test_gw_lease_renewal_keeps_it (void **state)
{
    (void) state;
    char store [TU_DIR_MAX], err [600] = "";
    s_store (store, sizeof store);
    int rc = 0;
    gw_lease_t *a = gw_lease_take (store, "s", "host-a", S_TTL, S_T0, &rc, err, sizeof err);
    assert_non_null (a);
    assert_int_equal (gw_lease_renew (a, S_T0 + 1, err, sizeof err), 0);
    double late = S_T0 + S_TTL + GW_LEASE_SKEW_S + 1;
    gw_lease_t *b = gw_lease_take (store, "s", "host-b", S_TTL, late, &rc, err, sizeof err);
    assert_non_null (b);                         //  the early renewal changed nothing
    gw_lease_destroy (&b);
    gw_lease_t *c = gw_lease_take (store, "s", "host-c", S_TTL, S_T0, &rc, err, sizeof err);
    assert_non_null (c);                         //  b released it
    assert_int_equal (gw_lease_renew (c, S_T0 + S_TTL / 2, err, sizeof err), 0);
    assert_false (gw_lease_lapsed (c, S_T0 + S_TTL));
    assert_null (gw_lease_take (store, "s", "host-d", S_TTL, late, &rc, err, sizeof err));
    assert_int_equal (rc, -EBUSY);
    gw_lease_destroy (&a);                       //  long taken over: c's lease stays live
    assert_null (gw_lease_take (store, "s", "host-d", S_TTL, late, &rc, err, sizeof err));
    gw_lease_destroy (&c);
    tu_rmtree (store);
}

//  What is not a lease of ours is left alone; a garbled one (written by
//  nobody: leases are linked into place whole) does not block for ever.
static void
test_gw_lease_reads_only_its_own_files (void **state)
{
    (void) state;
    char store [TU_DIR_MAX], err [600] = "";
    s_store (store, sizeof store);
    s_write (store, "s-x.7", "{}");
    s_write (store, "s.7x", "{}");
    s_write (store, "s.", "{}");
    int rc = 0;
    gw_lease_t *a = gw_lease_take (store, "s", "host-a", S_TTL, S_T0, &rc, err, sizeof err);
    assert_non_null (a);
    assert_int_equal (gw_lease_epoch (a), 1);
    assert_true (s_exists (store, "s-x.7") && s_exists (store, "s.7x") && s_exists (store, "s."));
    gw_lease_destroy (&a);
    s_write (store, "s.9", "not json");
    a = gw_lease_take (store, "s", "host-a", S_TTL, S_T0, &rc, err, sizeof err);
    assert_non_null (a);
    assert_int_equal (gw_lease_epoch (a), 10);
    gw_lease_destroy (&a);
    tu_rmtree (store);
}

static void
test_gw_lease_refuses_bad_names_and_times (void **state)
{
    (void) state;
    char store [TU_DIR_MAX], err [600] = "";
    s_store (store, sizeof store);
    int rc = 0;
    const char *bad [] = { "", "../x", "a/b", "a.1", "with space",
                           "x123456789012345678901234567890123456789012345678901234567", NULL };
    for (int i = 0; bad [i]; i++) {
        assert_null (gw_lease_take (store, bad [i], "h", S_TTL, S_T0, &rc, err, sizeof err));
        assert_int_equal (rc, -EINVAL);
        assert_non_null (strstr (err, "is not valid"));
    }
    assert_null (gw_lease_take (store, "ok", "h", 1, S_T0, &rc, err, sizeof err));
    assert_int_equal (rc, -EINVAL);
    assert_true (gw_lease_name_ok ("2f0c61a2-5b7e-4e58-9d39-4f1b8ad7c3e1"));
    char missing [PATH_MAX];
    snprintf (missing, sizeof missing, "%s/no/such", store);
    assert_null (gw_lease_take (missing, "ok", "h", S_TTL, S_T0, &rc, err, sizeof err));
    assert_int_equal (rc, -ENOENT);
    assert_non_null (strstr (err, "cannot make"));
    tu_rmtree (store);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_gw_lease_one_holder_and_words_for_the_second),
        cmocka_unit_test (test_gw_lease_expires_and_the_old_holder_learns_it_lost),
        cmocka_unit_test (test_gw_lease_renewal_keeps_it),
        cmocka_unit_test (test_gw_lease_reads_only_its_own_files),
        cmocka_unit_test (test_gw_lease_refuses_bad_names_and_times),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
