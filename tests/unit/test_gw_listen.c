/*  test_gw_listen - the listening sockets cellvm-launch makes before the
    gateway runs, and the gateway's check of the fds it is handed. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "wire/gw_listen.h"

//  Five ports free right now: bound to 0, read back, closed.
static void
s_free_ports (int ports [GW_PORT_COUNT])
{
    int socks [GW_PORT_COUNT];
    for (int i = 0; i < GW_PORT_COUNT; i++) {
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
        socklen_t len = sizeof sa;
        socks [i] = socket (AF_INET, SOCK_STREAM, 0);
        assert_int_equal (bind (socks [i], (struct sockaddr *) &sa, sizeof sa), 0);
        assert_int_equal (getsockname (socks [i], (struct sockaddr *) &sa, &len), 0);
        ports [i] = ntohs (sa.sin_port);
    }
    for (int i = 0; i < GW_PORT_COUNT; i++)
        close (socks [i]);
}

static gw_conn_t *
s_conn (const char *transport, const char *ip, const int ports [GW_PORT_COUNT])
{
    char path [] = "/tmp/test_gw_listen_XXXXXX", text [512], err [256];
    int fd = mkstemp (path);
    assert_true (fd >= 0);
    int n = snprintf (text, sizeof text, "{\"shell_port\": %d, \"iopub_port\": %d, "
                      "\"stdin_port\": %d, \"control_port\": %d, \"hb_port\": %d, "
                      "\"ip\": \"%s\", \"key\": \"k\", \"transport\": \"%s\", "
                      "\"signature_scheme\": \"hmac-sha256\"}", ports [0], ports [1],
                      ports [2], ports [3], ports [4], ip, transport);
    assert_int_equal (write (fd, text, (size_t) n), n);
    close (fd);
    gw_conn_t *conn = gw_conn_load (path, err, sizeof err);
    unlink (path);
    assert_non_null (conn);
    return conn;
}

static void
test_gw_listen_opens_checks_and_accepts (void **state)
{
    (void) state;
    int ports [GW_PORT_COUNT], fds [GW_PORT_COUNT];
    char err [256] = "";
    s_free_ports (ports);
    gw_conn_t *conn = s_conn ("tcp", "127.0.0.1", ports);
    assert_int_equal (gw_conn_listen_fd (conn, GW_PORT_SHELL), -1);
    assert_int_equal (gw_listen_open (conn, fds, err, sizeof err), 0);
    assert_int_equal (gw_listen_check (conn, fds, err, sizeof err), 0);
    //  A client's connect succeeds before anyone accepts: the kernel queues it.
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) ports [0]),
                              .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
    int c = socket (AF_INET, SOCK_STREAM, 0);
    assert_int_equal (connect (c, (struct sockaddr *) &sa, sizeof sa), 0);
    close (c);
    gw_conn_set_listen_fds (conn, fds);
    assert_int_equal (gw_conn_listen_fd (conn, GW_PORT_HB), fds [GW_PORT_HB]);
    for (int i = 0; i < GW_PORT_COUNT; i++)
        close (fds [i]);
    gw_conn_destroy (&conn);
}

static void
test_gw_listen_check_names_a_wrong_fd (void **state)
{
    (void) state;
    int ports [GW_PORT_COUNT], fds [GW_PORT_COUNT], other [GW_PORT_COUNT];
    char err [256] = "";
    s_free_ports (ports);
    gw_conn_t *conn = s_conn ("tcp", "127.0.0.1", ports);
    assert_int_equal (gw_listen_open (conn, fds, err, sizeof err), 0);
    //  Swapped: iopub's fd listens on the shell port.
    memcpy (other, fds, sizeof other);
    other [GW_PORT_IOPUB] = fds [GW_PORT_SHELL];
    assert_int_equal (gw_listen_check (conn, other, err, sizeof err), -EINVAL);
    assert_non_null (strstr (err, "iopub_port"));
    //  Not a socket at all.
    other [GW_PORT_IOPUB] = fds [GW_PORT_IOPUB];
    other [GW_PORT_HB] = 0;
    assert_int_equal (gw_listen_check (conn, other, err, sizeof err), -EINVAL);
    assert_non_null (strstr (err, "hb_port"));
    //  A socket that is not listening.
    other [GW_PORT_HB] = socket (AF_INET, SOCK_STREAM, 0);
    assert_int_equal (gw_listen_check (conn, other, err, sizeof err), -EINVAL);
    close (other [GW_PORT_HB]);
    for (int i = 0; i < GW_PORT_COUNT; i++)
        close (fds [i]);
    gw_conn_destroy (&conn);
}

static void
test_gw_listen_refuses_what_it_cannot_prebind (void **state)
{
    (void) state;
    int ports [GW_PORT_COUNT], fds [GW_PORT_COUNT], taken;
    char err [256] = "";
    s_free_ports (ports);
    gw_conn_t *conn = s_conn ("ipc", "/tmp/cellvm-test-ipc", ports);
    assert_int_equal (gw_listen_open (conn, fds, err, sizeof err), -ENOTSUP);
    gw_conn_destroy (&conn);
    conn = s_conn ("tcp", "::1", ports);
    assert_int_equal (gw_listen_open (conn, fds, err, sizeof err), -ENOTSUP);
    gw_conn_destroy (&conn);
    //  A port someone else listens on: an error, and nothing left open.
    conn = s_conn ("tcp", "127.0.0.1", ports);
    int first [GW_PORT_COUNT];
    assert_int_equal (gw_listen_open (conn, first, err, sizeof err), 0);
    taken = first [GW_PORT_STDIN];
    for (int i = 0; i < GW_PORT_COUNT; i++)
        if (i != GW_PORT_STDIN)
            close (first [i]);
    int before = dup (0);
    close (before);
    assert_int_equal (gw_listen_open (conn, fds, err, sizeof err), -EADDRINUSE);
    assert_non_null (strstr (err, "cannot listen"));
    int after = dup (0);
    assert_int_equal (after, before);           //  no fd leaked
    close (after);
    close (taken);
    gw_conn_destroy (&conn);
}

static void
test_gw_listen_parses_five_fds (void **state)
{
    (void) state;
    int fds [GW_PORT_COUNT];
    assert_int_equal (gw_listen_parse ("3,4,5,6,7", fds), 0);
    assert_int_equal (fds [0], 3);
    assert_int_equal (fds [4], 7);
    const char *bad [] = { "", "3,4,5,6", "3,4,5,6,7,8", "3,4,x,6,7", "2,4,5,6,7",
                           "3,4,5,6,7 ", "-3,4,5,6,7", "3,,5,6,7", "99999999999,4,5,6,7" };
    for (size_t i = 0; i < sizeof bad / sizeof bad [0]; i++)
        assert_int_equal (gw_listen_parse (bad [i], fds), -EINVAL);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_gw_listen_opens_checks_and_accepts),
        cmocka_unit_test (test_gw_listen_check_names_a_wrong_fd),
        cmocka_unit_test (test_gw_listen_refuses_what_it_cannot_prebind),
        cmocka_unit_test (test_gw_listen_parses_five_fds),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
