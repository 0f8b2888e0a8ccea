/*  test_ch_bytes - the bounded byte queue: order kept across drops and
    growth, the cap refusing a put whole, and writes to a full socket that
    keep what the peer did not take. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ch_bytes.h"

static void
test_order_drop_and_cap (void **state)
{
    (void) state;
    ch_bytes_t *q = ch_bytes_new (10000);
    size_t len = 1;
    ch_bytes_peek (q, &len);
    assert_int_equal (len, 0);
    char buf [6000];
    for (int i = 0; i < 6000; i++)
        buf [i] = (char) i;
    assert_int_equal (ch_bytes_put (q, buf, 6000), 0);
    assert_int_equal (ch_bytes_put (q, buf, 5000), -ENOBUFS);   //  whole or nothing
    assert_int_equal (ch_bytes_len (q), 6000);
    assert_int_equal (ch_bytes_room (q), 4000);
    ch_bytes_drop (q, 5000);
    assert_int_equal (ch_bytes_put (q, buf, 6000), 0);          //  moves to the front
    const uint8_t *p = ch_bytes_peek (q, &len);
    assert_int_equal (len, 7000);
    assert_memory_equal (p, buf + 5000, 1000);
    assert_memory_equal (p + 1000, buf, 6000);
    ch_bytes_drop (q, 99999);
    assert_int_equal (ch_bytes_len (q), 0);
    ch_bytes_destroy (&q);
    assert_null (q);
    ch_bytes_destroy (&q);
}

static void
test_write_keeps_what_the_peer_did_not_take (void **state)
{
    (void) state;
    int sv [2];
    assert_int_equal (socketpair (AF_UNIX, SOCK_STREAM, 0, sv), 0);
    fcntl (sv [0], F_SETFL, O_NONBLOCK);
    ch_bytes_t *q = ch_bytes_new (8u << 20);
    static char big [4u << 20];
    memset (big, 'a', sizeof big);
    assert_int_equal (ch_bytes_put (q, big, sizeof big), 0);
    ssize_t n = ch_bytes_write (q, sv [0]);
    assert_true (n > 0 && (size_t) n < sizeof big);            //  the socket filled up
    assert_int_equal (ch_bytes_len (q), sizeof big - (size_t) n);
    assert_int_equal (ch_bytes_write (q, sv [0]), 0);           //  still full
    close (sv [1]);
    assert_int_equal (ch_bytes_write (q, sv [0]), -EPIPE);      //  no SIGPIPE either
    close (sv [0]);
    ch_bytes_destroy (&q);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_order_drop_and_cap),
        cmocka_unit_test (test_write_keeps_what_the_peer_did_not_take),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
