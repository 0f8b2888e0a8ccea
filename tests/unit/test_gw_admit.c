/*  test_gw_admit - the host's admission queue: slots, places in line, the
    dead freeing theirs, a wait that ends. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/gw_admit.h"

static char s_dir [64];

static int
s_setup (void **state)
{
    (void) state;
    snprintf (s_dir, sizeof s_dir, "/tmp/test_gw_admit-XXXXXX");
    return mkdtemp (s_dir) ? 0 : -1;
}

static int
s_teardown (void **state)
{
    (void) state;
    char cmd [128];
    snprintf (cmd, sizeof cmd, "rm -rf '%s'", s_dir);
    return system (cmd) == 0 ? 0 : -1;
}

static gw_admit_t *
s_new (int slots)
{
    char err [256] = "";
    gw_admit_t *a = gw_admit_new (s_dir, slots, err, sizeof err);
    assert_non_null (a);
    return a;
}

static void
test_gw_admit_holds_as_many_as_its_slots (void **state)
{
    (void) state;
    gw_admit_t *a = s_new (2), *b = s_new (2), *c = s_new (2);
    assert_int_equal (gw_admit_enter (a, -1, NULL, NULL), 0);
    assert_int_equal (gw_admit_enter (b, -1, NULL, NULL), 0);
    assert_int_not_equal (gw_admit_slot (a), gw_admit_slot (b));
    assert_int_equal (gw_admit_enter (c, 100, NULL, NULL), -ETIMEDOUT);
    assert_int_equal (gw_admit_slot (c), -1);
    gw_admit_leave (a);
    assert_int_equal (gw_admit_slot (a), -1);
    assert_int_equal (gw_admit_enter (c, 1000, NULL, NULL), 0);
    gw_admit_destroy (&a);
    gw_admit_destroy (&b);
    gw_admit_destroy (&c);
    assert_null (a);
}

typedef struct {
    gw_admit_t *admit;
    int places [8];                 //  the distinct places it heard, in order
    int heard;
    int rc;
} s_waiter_t;

static bool
s_heard (void *arg, int place, int slots)
{
    s_waiter_t *w = arg;
    assert_int_equal (slots, 1);
    if ((w->heard == 0 || w->places [w->heard - 1] != place) && w->heard < 8)
        w->places [w->heard++] = place;
    return true;
}

static void *
s_wait_thread (void *arg)
{
    s_waiter_t *w = arg;
    w->rc = gw_admit_enter (w->admit, 10000, s_heard, w);
    return NULL;
}

//  Two wait behind a holder: each is told its place, and they go in in
//  the order they came.
static void
test_gw_admit_tells_each_its_place_and_keeps_the_order (void **state)
{
    (void) state;
    gw_admit_t *holder = s_new (1);
    assert_int_equal (gw_admit_enter (holder, -1, NULL, NULL), 0);
    s_waiter_t first = { .admit = s_new (1) }, second = { .admit = s_new (1) };
    pthread_t t1, t2;
    pthread_create (&t1, NULL, s_wait_thread, &first);
    usleep (200 * 1000);
    pthread_create (&t2, NULL, s_wait_thread, &second);
    usleep (300 * 1000);
    gw_admit_leave (holder);
    pthread_join (t1, NULL);
    assert_int_equal (first.rc, 0);
    usleep (300 * 1000);
    assert_int_equal (gw_admit_slot (second.admit), -1);    //  still behind the first
    gw_admit_leave (first.admit);
    pthread_join (t2, NULL);
    assert_int_equal (second.rc, 0);
    assert_int_equal (first.heard, 1);
    assert_int_equal (first.places [0], 1);
    assert_int_equal (second.heard, 2);
    assert_int_equal (second.places [0], 2);
    assert_int_equal (second.places [1], 1);
    gw_admit_destroy (&holder);
    gw_admit_destroy (&first.admit);
    gw_admit_destroy (&second.admit);
}

//  A holder killed without leaving frees its slot; a waiter's file left
//  behind by a dead waiter is not counted, and is removed.
static void
test_gw_admit_the_dead_free_their_places (void **state)
{
    (void) state;
    pid_t pid = fork ();
    if (pid == 0) {
        gw_admit_t *a = s_new (1);
        _exit (gw_admit_enter (a, -1, NULL, NULL) == 0 ? 0 : 1);
    }
    int status = 0;
    assert_int_equal (waitpid (pid, &status, 0), pid);
    assert_int_equal (WEXITSTATUS (status), 0);
    char stale [128];
    snprintf (stale, sizeof stale, "%s/w-000000000000.000000000-1-0", s_dir);
    int fd = open (stale, O_CREAT | O_WRONLY, 0600);
    assert_true (fd >= 0);
    close (fd);
    s_waiter_t w = { .admit = s_new (1) };
    assert_int_equal (gw_admit_enter (w.admit, 1000, s_heard, &w), 0);
    assert_int_equal (w.heard, 0);                          //  went in at once
    assert_int_equal (access (stale, F_OK), -1);
    gw_admit_destroy (&w.admit);
}

static bool
s_give_up (void *arg, int place, int slots)
{
    (void) place, (void) slots;
    return --*(int *) arg > 0;
}

static void
test_gw_admit_a_wait_ends_when_asked_and_leaves_no_place (void **state)
{
    (void) state;
    gw_admit_t *holder = s_new (1), *w = s_new (1);
    assert_int_equal (gw_admit_enter (holder, -1, NULL, NULL), 0);
    int rounds = 3;
    assert_int_equal (gw_admit_enter (w, -1, s_give_up, &rounds), -ECANCELED);
    assert_int_equal (rounds, 0);
    char cmd [160];
    snprintf (cmd, sizeof cmd, "ls -A '%s' | grep -q '^w-'", s_dir);
    assert_int_not_equal (system (cmd), 0);                 //  no place left behind
    gw_admit_destroy (&holder);
    gw_admit_destroy (&w);
}

static void
test_gw_admit_refuses_bad_slots_and_a_file_for_a_dir (void **state)
{
    (void) state;
    char err [256] = "", file [128];
    assert_null (gw_admit_new (s_dir, 0, err, sizeof err));
    assert_non_null (strstr (err, "1 to"));
    snprintf (file, sizeof file, "%s/plain", s_dir);
    int fd = open (file, O_CREAT | O_WRONLY, 0600);
    close (fd);
    assert_null (gw_admit_new (file, 2, err, sizeof err));
    assert_non_null (strstr (err, "plain"));
    assert_true (gw_admit_default_slots () >= 1);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_setup_teardown (test_gw_admit_holds_as_many_as_its_slots, s_setup,
                                         s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_admit_tells_each_its_place_and_keeps_the_order,
                                         s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_admit_the_dead_free_their_places, s_setup,
                                         s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_admit_a_wait_ends_when_asked_and_leaves_no_place,
                                         s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_admit_refuses_bad_slots_and_a_file_for_a_dir,
                                         s_setup, s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
