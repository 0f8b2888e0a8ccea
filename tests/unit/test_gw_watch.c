/*  test_gw_watch - pings, unasked-for messages and the console cap of a
    session VM (docs/security.md, "Hostile and frozen guests").
    CELLVM_STALL_MS is 1000 and
    CELLVM_CONSOLE_MAX 65536 here (set before the first use).
*/
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "guest/gw_watch.h"
#include "ch_msg.h"

static char s_why [400];

//  A reply from init whose parent is msg_id.
static ch_msg_t *
s_reply (const char *type, const char *msg_id)
{
    json_t *parent = json_pack ("{s:s}", "msg_id", msg_id), *content = json_object ();
    json_t *header = json_pack ("{s:s, s:s}", "msg_type", type, "msg_id", "r");
    json_t *meta = json_object ();
    return ch_msg_from_parts (CH_CELLVM, &header, &parent, &meta, &content);
}

static void
test_gw_watch_pings_and_declares_a_silent_init_dead (void **state)
{
    (void) state;
    gw_watch_t *w = gw_watch_new (NULL, NULL);
    gw_watch_reset (w, 0, NULL);
    assert_int_equal (gw_watch_tick (w, 1000, true, s_why, sizeof s_why), GW_WATCH_OK);
    assert_int_equal (gw_watch_tick (w, 1300, true, s_why, sizeof s_why), GW_WATCH_PING);
    gw_watch_pinged (w, "p1", 1300);
    ch_msg_t *r = s_reply ("status_reply", "p1");
    assert_true (gw_watch_answer (w, r));               //  answered: no verdict
    assert_false (gw_watch_answer (w, r));              //  ... and only once
    ch_msg_destroy (&r);
    assert_int_equal (gw_watch_tick (w, 1600, true, s_why, sizeof s_why), GW_WATCH_PING);
    gw_watch_pinged (w, "p2", 1600);
    assert_int_equal (gw_watch_tick (w, 2000, true, s_why, sizeof s_why), GW_WATCH_OK);
    //  A save stops the VM: the ping in flight does not count.
    assert_int_equal (gw_watch_tick (w, 2700, false, s_why, sizeof s_why), GW_WATCH_OK);
    assert_int_equal (gw_watch_tick (w, 3000, true, s_why, sizeof s_why), GW_WATCH_PING);
    gw_watch_pinged (w, "p3", 3000);
    assert_int_equal (gw_watch_tick (w, 4000, true, s_why, sizeof s_why), GW_WATCH_DEAD);
    assert_non_null (strstr (s_why, "has not answered a status request for 1.0 s"));
    gw_watch_destroy (&w);
    assert_null (w);
}

static void
test_gw_watch_counts_what_nobody_asked_for (void **state)
{
    (void) state;
    gw_watch_t *w = gw_watch_new (NULL, NULL);
    gw_watch_reset (w, 0, NULL);
    gw_watch_sent (w, "restart-1");
    gw_watch_owed (w, "hello");
    ch_msg_t *a = s_reply ("restart_reply", "restart-1"), *h = s_reply ("hello", "old-hello");
    assert_true (gw_watch_answer (w, a));
    assert_false (gw_watch_answer (w, a));
    assert_true (gw_watch_answer (w, h));               //  one hello was owed
    assert_false (gw_watch_answer (w, h));
    ch_msg_destroy (&a);
    ch_msg_destroy (&h);
    for (int i = 1; i < GW_WATCH_FLOOD; i++)
        assert_int_equal (gw_watch_unasked (w, "x", i % 2, s_why, sizeof s_why), GW_WATCH_OK);
    assert_int_equal (gw_watch_unasked (w, "x", false, s_why, sizeof s_why), GW_WATCH_DEAD);
    assert_non_null (strstr (s_why, "1000 messages nobody asked for"));
    gw_watch_destroy (&w);
}

//  A child stands in for QEMU: it opens the console as QEMU does (no
//  O_APPEND) and writes a line whenever the test asks on its pipe.
static pid_t
s_writer (const char *path, int *go_p)
{
    int fds [2];
    assert_int_equal (pipe (fds), 0);
    pid_t pid = fork ();
    if (pid == 0) {
        close (fds [1]);
        int fd = open (path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        char line [4096], c;
        memset (line, 'x', sizeof line);
        while (read (fds [0], &c, 1) == 1)
            if (write (fd, line, (size_t) (c == 'b' ? sizeof line : 10)) < 0)
                _exit (1);
        _exit (0);
    }
    close (fds [0]);
    *go_p = fds [1];
    return pid;
}

static void
s_write (int go, char what, int times)
{
    for (int i = 0; i < times; i++)
        assert_int_equal (write (go, &what, 1), 1);
    usleep (100000);
}

static void
test_gw_watch_caps_the_console_in_place (void **state)
{
    (void) state;
    char dir [] = "/tmp/test_gw_watch.XXXXXX", path [64], old [80];
    assert_non_null (mkdtemp (dir));
    snprintf (path, sizeof path, "%s/console.log", dir);
    snprintf (old, sizeof old, "%s.1", path);
    int go;
    pid_t pid = s_writer (path, &go);
    s_write (go, 's', 1);                               //  the file exists
    gw_watch_t *w = gw_watch_new (NULL, NULL);
    gw_watch_reset (w, pid, path);
    assert_int_equal (gw_watch_tick (w, 1000, false, s_why, sizeof s_why), GW_WATCH_OK);
    s_write (go, 'b', 20);                              //  80 KiB: over the 64 KiB cap
    struct stat st;
    assert_int_equal (gw_watch_tick (w, 1300, false, s_why, sizeof s_why), GW_WATCH_OK);
    assert_int_equal (stat (path, &st), 0);
    assert_true (st.st_size < 1024);                    //  cut back, a line says so
    assert_int_equal (stat (old, &st), 0);
    assert_true (st.st_size > 60000);                   //  the tail kept
    s_write (go, 's', 1);                               //  QEMU's writes now go to the end
    assert_int_equal (stat (path, &st), 0);
    assert_true (st.st_size < 1024);
    s_write (go, 'b', 50);                              //  over 4 x 64 KiB in a minute
    assert_int_equal (gw_watch_tick (w, 1600, false, s_why, sizeof s_why), GW_WATCH_DEAD);
    assert_non_null (strstr (s_why, "to its console"));
    gw_watch_destroy (&w);
    close (go);
    waitpid (pid, NULL, 0);
    unlink (path);
    unlink (old);
    rmdir (dir);
}

//  A stand-in for the root helper behind the seam (gw_priv_console).
typedef struct {
    int calls, pid, rc;
    char path [80];
} s_borrow_t;

static int
s_borrow (void *ctx, int pid, const char *path, int *fd_p)
{
    s_borrow_t *b = (s_borrow_t *) ctx;
    b->calls++;
    b->pid = pid;
    snprintf (b->path, sizeof b->path, "%s", path);
    if (b->rc < 0)
        return b->rc;
    *fd_p = open (path, O_WRONLY | O_APPEND | O_CLOEXEC);
    return *fd_p < 0 ? -errno : 0;
}

static void
test_gw_watch_gets_the_console_through_its_seam (void **state)
{
    (void) state;
    char dir [] = "/tmp/test_gw_watch.XXXXXX", path [64], old [80], big [80000];
    assert_non_null (mkdtemp (dir));
    snprintf (path, sizeof path, "%s/console.log", dir);
    snprintf (old, sizeof old, "%s.1", path);
    int fd = open (path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);     //  closed: only the seam has it
    memset (big, 'b', sizeof big);
    assert_int_equal (write (fd, big, sizeof big), (ssize_t) sizeof big);
    close (fd);
    s_borrow_t b = { 0 };
    gw_watch_t *w = gw_watch_new (s_borrow, &b);
    gw_watch_reset (w, 4242, path);                     //  the seam keeps across a reset
    assert_int_equal (gw_watch_tick (w, 1000, false, s_why, sizeof s_why), GW_WATCH_OK);
    assert_int_equal (b.calls, 1);
    assert_int_equal (b.pid, 4242);
    assert_string_equal (b.path, path);
    struct stat st;
    assert_int_equal (stat (path, &st), 0);
    assert_true (st.st_size < 1024);                    //  cut back through the seam's fd
    //  A helper that refuses is asked a bounded number of times, then never.
    s_borrow_t no = { .rc = -EPERM };
    gw_watch_t *w2 = gw_watch_new (s_borrow, &no);
    gw_watch_reset (w2, 4242, path);
    for (int i = 0; i < 100; i++)
        assert_int_equal (gw_watch_tick (w2, 1000 + 300 * i, false, s_why, sizeof s_why),
                          GW_WATCH_OK);
    assert_true (no.calls > 1 && no.calls < 100);
    gw_watch_destroy (&w2);
    gw_watch_destroy (&w);
    unlink (path);
    unlink (old);
    rmdir (dir);
}

int
main (void)
{
    setenv ("CELLVM_STALL_MS", "1000", 1);
    setenv ("CELLVM_CONSOLE_MAX", "65536", 1);
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_gw_watch_pings_and_declares_a_silent_init_dead),
        cmocka_unit_test (test_gw_watch_counts_what_nobody_asked_for),
        cmocka_unit_test (test_gw_watch_caps_the_console_in_place),
        cmocka_unit_test (test_gw_watch_gets_the_console_through_its_seam),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
