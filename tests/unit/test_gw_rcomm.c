/*  test_gw_rcomm - cellvm-remote's comm port on a loopback socket: requests as EG sends them,
    and what must never stop it (garbage, too long, never finished, a flood). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "cli/gw_rcomm.h"
#include "ch_clock.h"

typedef struct {
    gw_rcomm_t *comm;
    int port;
} fixture_t;

static int
s_setup (void **state)
{
    static fixture_t f;
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
    socklen_t len = sizeof sa;
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    assert_int_equal (bind (fd, (struct sockaddr *) &sa, sizeof sa), 0);
    assert_int_equal (listen (fd, 64), 0);
    assert_int_equal (getsockname (fd, (struct sockaddr *) &sa, &len), 0);
    f.port = ntohs (sa.sin_port);
    f.comm = gw_rcomm_new (fd);
    *state = &f;
    return 0;
}

static int
s_teardown (void **state)
{
    fixture_t *f = *state;
    gw_rcomm_destroy (&f->comm);
    assert_null (f->comm);
    return 0;
}

//  A client connection; with text, send it (and close when done).
static int
s_connect (int port, const char *text, size_t len, bool done)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) port),
                              .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    if (connect (fd, (struct sockaddr *) &sa, sizeof sa) < 0) {
        int e = errno;
        close (fd);
        return -e;
    }
    if (text)
        assert_int_equal (send (fd, text, len, MSG_NOSIGNAL), (ssize_t) len);
    if (done) {
        close (fd);
        return 0;
    }
    return fd;
}

//  Poll and step for ms; the requests that came, into reqs (their count).
static int
s_run (gw_rcomm_t *comm, int ms, gw_egreq_t *reqs, int cap)
{
    int got = 0;
    for (int64_t until = ch_clock_mono_ms () + ms; ch_clock_mono_ms () < until; ) {
        struct pollfd pfds [GW_RCOMM_POLLFDS];
        int timeout = 20;
        int n = gw_rcomm_pollfds (comm, pfds, &timeout);
        poll (pfds, (nfds_t) n, timeout);
        got += gw_rcomm_step (comm, pfds, n, reqs + got, cap - got);
    }
    return got;
}

static void
test_gw_rcomm_reads_one_request_per_connection (void **state)
{
    fixture_t *f = *state;
    gw_egreq_t reqs [4];
    s_connect (f->port, "{\"signum\": 2}", 13, true);
    s_connect (f->port, "{\"shutdown\": 1}", 15, true);
    assert_int_equal (s_run (f->comm, 300, reqs, 4), 2);
    assert_true ((reqs [0].signum == 2 && reqs [1].shutdown)
                 || (reqs [1].signum == 2 && reqs [0].shutdown));
}

static void
test_gw_rcomm_drops_garbage_and_what_is_too_long (void **state)
{
    fixture_t *f = *state;
    gw_egreq_t reqs [4];
    char big [3000];
    memset (big, '{', sizeof big);
    s_connect (f->port, "\x00\xff junk", 7, true);
    s_connect (f->port, "[]", 2, true);
    int held = s_connect (f->port, big, sizeof big, false);       //  not even finished
    assert_int_equal (s_run (f->comm, 300, reqs, 4), 0);
    char c;
    assert_true (recv (held, &c, 1, 0) <= 0);   //  closed on us once past the cap
    close (held);
    s_connect (f->port, "{\"signum\": 0}", 13, true);
    assert_int_equal (s_run (f->comm, 300, reqs, 4), 1);
    assert_int_equal (reqs [0].signum, 0);
}

static void
test_gw_rcomm_closes_what_never_finishes (void **state)
{
    fixture_t *f = *state;
    gw_egreq_t reqs [2];
    int half = s_connect (f->port, "{\"sig", 5, false);
    assert_int_equal (s_run (f->comm, GW_RCOMM_READ_MS + 300, reqs, 2), 0);
    char c;
    assert_int_equal (recv (half, &c, 1, 0), 0);
    close (half);
}

static void
test_gw_rcomm_a_flood_pushes_out_the_oldest (void **state)
{
    fixture_t *f = *state;
    gw_egreq_t reqs [2];
    int fds [GW_RCOMM_CONNS + 1];
    for (int i = 0; i <= GW_RCOMM_CONNS; i++) {
        fds [i] = s_connect (f->port, NULL, 0, false);
        s_run (f->comm, 30, reqs, 2);           //  each accepted in turn
    }
    char c;
    assert_int_equal (recv (fds [0], &c, 1, 0), 0);                 //  the oldest: closed
    s_connect (f->port, "{\"signum\": 0}", 13, true);
    assert_int_equal (s_run (f->comm, 300, reqs, 2), 1);            //  and EG still gets in
    for (int i = 0; i <= GW_RCOMM_CONNS; i++)
        close (fds [i]);
}

static void
test_gw_rcomm_refuses_once_closed (void **state)
{
    fixture_t *f = *state;
    gw_rcomm_close (f->comm);
    assert_int_equal (s_connect (f->port, NULL, 0, true), -ECONNREFUSED);
    struct pollfd pfds [GW_RCOMM_POLLFDS];
    int timeout = -1;
    assert_int_equal (gw_rcomm_pollfds (f->comm, pfds, &timeout), 0);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_setup_teardown (test_gw_rcomm_reads_one_request_per_connection,
                                         s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_rcomm_drops_garbage_and_what_is_too_long,
                                         s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_rcomm_closes_what_never_finishes,
                                         s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_rcomm_a_flood_pushes_out_the_oldest,
                                         s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_rcomm_refuses_once_closed, s_setup, s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
