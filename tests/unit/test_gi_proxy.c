/*  test_gi_proxy - the guest's egress proxy, on the host.

    gi_proxy_run serves in a forked child, with one end of a socketpair as
    the cellvm.net port and a listener on an ephemeral loopback port; the
    test plays the gateway on the other end with the ch_mux decoder, and
    the cell with TCP clients. The spawn test (root only) runs the real
    child init starts, on a pseudo-terminal standing in for the port.
*/
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "ch_clock.h"
#include "ch_frame.h"
#include "ch_mux.h"
#include "gi_proxy.h"
#include "tu.h"

#define S_NONCE "0123456789abcdef0123456789abcdef"
#define S_WAIT_MS 5000                          //  for what must come
#define S_QUIET_MS 300                          //  for what must not
#define S_SENT (300u * 1024u)                   //  a client's upload: more than a window

//  A frame the proxy sent, copied out of the decoder.
typedef struct {
    ch_mux_type_t type;
    uint32_t stream, len, credit;
    uint8_t data [CH_MUX_DATA_MAX + 1];
} s_got_t;

typedef struct {
    pid_t pid;                                  //  the proxy
    int host;                                   //  the gateway's end of the port
    int stop;                                   //  closed: the proxy returns
    unsigned port;                              //  where it listens
    ch_mux_dec_t *dec;
    uint8_t buf [65536];                        //  read from the port, not yet fed
    size_t len, off;
    s_got_t got;
} s_fix_t;

//  ---------------------------------------------------------------------------
//  The proxy in a child, and the gateway's end

//  The child keeps the proxy's ends only: the test's stop end held open
//  here would never let stop_fd read EOF.
static void __attribute__ ((noreturn))
s_child (int port_fd, const int lfd [2], int stop_fd, int host_fd, int stop_wr)
{
    close (host_fd);
    close (stop_wr);
    signal (SIGPIPE, SIG_IGN);
    gi_proxy_cfg_t cfg = { .port_fd = port_fd, .listen_fds = { lfd [0], lfd [1] },
                           .nonce = S_NONCE, .stop_fd = stop_fd };
    _exit (gi_proxy_run (&cfg) == 0 ? 0 : 1);
}

//  The proxy's sockets with a small send buffer (accepted sockets inherit
//  the listener's): what a client does not take stays in the proxy, where
//  the kernel would otherwise take a few hundred KiB past POLLOUT's mark.
static bool s_small_sndbuf;

static int
s_setup (void **state)
{
    s_fix_t *f = calloc (1, sizeof *f);
    int sv [2], stop [2], lfd [2], small = 4096;
    assert_int_equal (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    assert_int_equal (fcntl (sv [0], F_SETFL, O_NONBLOCK), 0);
    assert_int_equal (pipe2 (stop, O_CLOEXEC), 0);
    assert_int_equal (gi_proxy_listen (0, lfd), 0);
    if (s_small_sndbuf)
        assert_int_equal (setsockopt (lfd [0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
    struct sockaddr_in a;
    socklen_t alen = sizeof a;
    assert_int_equal (getsockname (lfd [0], (struct sockaddr *) &a, &alen), 0);
    f->port = ntohs (a.sin_port);
    f->pid = fork ();
    assert_true (f->pid >= 0);
    if (f->pid == 0)
        s_child (sv [0], lfd, stop [0], sv [1], stop [1]);
    close (sv [0]);
    close (stop [0]);
    for (int i = 0; i < 2; i++)
        if (lfd [i] >= 0)
            close (lfd [i]);
    f->host = sv [1];
    f->stop = stop [1];
    f->dec = ch_mux_dec_new ();
    *state = f;
    return 0;
}

static int
s_setup_small_sndbuf (void **state)
{
    s_small_sndbuf = true;
    int rc = s_setup (state);
    s_small_sndbuf = false;
    return rc;
}

//  The proxy must still be there, and go when told: exit 0 within 2 s.
static int
s_teardown (void **state)
{
    s_fix_t *f = (s_fix_t *) *state;
    close (f->stop);
    int status = -1;
    pid_t pid = f->pid, got = 0;
    for (int i = 0; i < 200 && got == 0; i++, usleep (10 * 1000))
        got = waitpid (pid, &status, WNOHANG);
    if (got == 0) {
        kill (pid, SIGKILL);
        waitpid (pid, &status, 0);
    }
    close (f->host);
    ch_mux_dec_destroy (&f->dec);
    free (f);
    if (got != pid)
        fail_msg ("the proxy did not stop when told (killed)");
    assert_true (WIFEXITED (status) && WEXITSTATUS (status) == 0);
    return 0;
}

static void
s_send (int fd, const void *data, size_t len)
{
    const uint8_t *p = data;
    while (len) {
        ssize_t n = send (fd, p, len, MSG_NOSIGNAL);
        assert_true (n > 0);
        p += n;
        len -= (size_t) n;
    }
}

//  A frame as the gateway writes it (any header, even one the codec would
//  refuse) into out; its size.
static size_t
s_frame (uint8_t *out, int type, uint32_t stream, const void *data, uint32_t len)
{
    const uint8_t hdr [CH_MUX_HDR] = { (uint8_t) type,
        (uint8_t) (stream >> 24), (uint8_t) (stream >> 16), (uint8_t) (stream >> 8),
        (uint8_t) stream, (uint8_t) (len >> 24), (uint8_t) (len >> 16), (uint8_t) (len >> 8),
        (uint8_t) len };
    memcpy (out, hdr, sizeof hdr);
    if (len)
        memcpy (out + CH_MUX_HDR, data, len);
    return CH_MUX_HDR + len;
}

static void
s_host_frame (s_fix_t *f, int type, uint32_t stream, const void *data, uint32_t len)
{
    uint8_t frame [CH_MUX_HDR + CH_MUX_DATA_MAX + 64];
    assert_true (len <= sizeof frame - CH_MUX_HDR);
    s_send (f->host, frame, s_frame (frame, type, stream, data, len));
}

static void
s_host_credit (s_fix_t *f, uint32_t stream, uint32_t amount)
{
    uint8_t be [4] = { (uint8_t) (amount >> 24), (uint8_t) (amount >> 16),
                       (uint8_t) (amount >> 8), (uint8_t) amount };
    s_host_frame (f, CH_MUX_CREDIT, stream, be, 4);
}

//  The next frame the proxy sends, into f->got; false after ms without one.
static bool
s_next (s_fix_t *f, int ms)
{
    int64_t end = ch_clock_mono_ms () + ms;
    for (;;) {
        while (f->off < f->len) {
            long n = ch_mux_dec_feed (f->dec, f->buf + f->off, f->len - f->off);
            if (n < 0)
                fail_msg ("the proxy sent a broken frame: %s", ch_mux_dec_error (f->dec));
            f->off += (size_t) n;
            const ch_mux_frame_t *fr = ch_mux_dec_frame (f->dec);
            if (!fr)
                continue;
            f->got = (s_got_t) { fr->type, fr->stream, fr->len, fr->credit, { 0 } };
            memcpy (f->got.data, fr->data, fr->len);
            return true;
        }
        f->off = f->len = 0;
        struct pollfd p = { f->host, POLLIN, 0 };
        int left = (int) (end - ch_clock_mono_ms ());
        if (left <= 0 || poll (&p, 1, left) <= 0)
            return false;
        ssize_t n = read (f->host, f->buf, sizeof f->buf);
        assert_true (n > 0);
        f->len = (size_t) n;
    }
}

//  f->got is a frame of that type on that stream.
static const s_got_t *
s_expect_same (s_fix_t *f, ch_mux_type_t type, uint32_t stream)
{
    if (f->got.type != type || f->got.stream != stream)
        fail_msg ("wanted %s on stream %u, got %s on %u", ch_mux_type_name (type), stream,
                  ch_mux_type_name (f->got.type), f->got.stream);
    return &f->got;
}

static const s_got_t *
s_expect (s_fix_t *f, ch_mux_type_t type, uint32_t stream)
{
    if (!s_next (f, S_WAIT_MS))
        fail_msg ("no %s on stream %u from the proxy", ch_mux_type_name (type), stream);
    return s_expect_same (f, type, stream);
}

//  The next DATA on stream, past any CREDIT the proxy sends meanwhile.
static const s_got_t *
s_expect_data (s_fix_t *f, uint32_t stream)
{
    while (s_next (f, S_WAIT_MS))
        if (f->got.type != CH_MUX_CREDIT || f->got.stream != stream)
            return s_expect_same (f, CH_MUX_DATA, stream);
    fail_msg ("no DATA on stream %u from the proxy", stream);
    return NULL;
}

static void
s_expect_quiet (s_fix_t *f, int ms)
{
    if (s_next (f, ms))
        fail_msg ("the proxy sent %s on stream %u", ch_mux_type_name (f->got.type),
                  f->got.stream);
}

//  What the proxy writes first, byte for byte: the marker, then its HELLO.
static void
s_expect_hello (int fd)
{
    uint8_t want [CH_FRAME_SYNC_LEN + CH_MUX_HDR + sizeof S_NONCE - 1], got [sizeof want];
    memcpy (want, CH_FRAME_SYNC, CH_FRAME_SYNC_LEN);
    assert_int_equal (ch_mux_encode_header (want + CH_FRAME_SYNC_LEN, CH_MUX_HELLO, 0,
                                            sizeof S_NONCE - 1), 0);
    memcpy (want + CH_FRAME_SYNC_LEN + CH_MUX_HDR, S_NONCE, sizeof S_NONCE - 1);
    for (size_t have = 0; have < sizeof got; ) {
        struct pollfd p = { fd, POLLIN, 0 };
        assert_int_equal (poll (&p, 1, S_WAIT_MS), 1);
        ssize_t n = read (fd, got + have, sizeof got - have);
        assert_true (n > 0);
        have += (size_t) n;
    }
    assert_memory_equal (got, want, sizeof want);
}

//  The proxy's hello seen, the gateway's answered.
static void
s_handshake (s_fix_t *f)
{
    s_expect_hello (f->host);
    s_send (f->host, CH_FRAME_SYNC, CH_FRAME_SYNC_LEN);
    s_host_frame (f, CH_MUX_HELLO, 0, S_NONCE, sizeof S_NONCE - 1);
}

//  ---------------------------------------------------------------------------
//  The cell's side

//  A connection to the proxy; rcvbuf: its SO_RCVBUF (0: the default).
static int
s_client_sized (unsigned port, int rcvbuf)
{
    int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) port),
                             .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
    assert_true (fd >= 0);
    if (rcvbuf)
        assert_int_equal (setsockopt (fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf), 0);
    assert_int_equal (connect (fd, (struct sockaddr *) &a, sizeof a), 0);
    return fd;
}

static int
s_client (unsigned port)
{
    return s_client_sized (port, 0);
}

//  Up to len bytes within ms (fewer at EOF or at the deadline): how many,
//  or -errno.
static ssize_t
s_client_read (int fd, uint8_t *buf, size_t len, int ms)
{
    int64_t end = ch_clock_mono_ms () + ms;
    size_t have = 0;
    while (have < len) {
        struct pollfd p = { fd, POLLIN, 0 };
        int left = (int) (end - ch_clock_mono_ms ());
        if (left <= 0 || poll (&p, 1, left) <= 0)
            break;
        ssize_t n = recv (fd, buf + have, len - have, 0);
        if (n < 0)
            return have ? (ssize_t) have : -errno;
        if (n == 0)
            break;
        have += (size_t) n;
    }
    return (ssize_t) have;
}

//  The client's socket ends within S_WAIT_MS: EOF (a FIN), or a reset
//  when reset_too.
static void
s_client_end (int fd, bool reset_too)
{
    uint8_t b;
    struct pollfd p = { fd, POLLIN, 0 };
    assert_int_equal (poll (&p, 1, S_WAIT_MS), 1);
    ssize_t n = recv (fd, &b, 1, 0);
    assert_true (n == 0 || (reset_too && n < 0 && errno == ECONNRESET));
}

static uint8_t
s_pattern (size_t i)
{
    return (uint8_t) (i * 7 + i / 251);
}

typedef struct {
    int fd;
    size_t sent;
} s_writer_t;

//  The client's upload on a thread: it blocks once the window is used up.
static void *
s_writer (void *arg)
{
    s_writer_t *w = arg;
    uint8_t *data = malloc (S_SENT);
    for (size_t i = 0; i < S_SENT; i++)
        data [i] = s_pattern (i);
    while (w->sent < S_SENT) {
        ssize_t n = send (w->fd, data + w->sent, S_SENT - w->sent, MSG_NOSIGNAL);
        if (n <= 0)
            break;
        w->sent += (size_t) n;
    }
    free (data);
    return NULL;
}

//  ---------------------------------------------------------------------------
//  Tests

//  Clients wait until the gateway's HELLO carries the proxy's own nonce;
//  stale bytes before the gateway's marker are skipped.
static void
test_gi_proxy_waits_for_the_hello_with_its_nonce (void **state)
{
    s_fix_t *f = (s_fix_t *) *state;
    s_expect_hello (f->host);
    int c = s_client (f->port);
    s_expect_quiet (f, S_QUIET_MS);             //  no OPEN before the gateway's HELLO
    s_send (f->host, "stale\x03\x00\x00", 8);
    s_send (f->host, CH_FRAME_SYNC, CH_FRAME_SYNC_LEN);
    s_host_frame (f, CH_MUX_HELLO, 0, "fedcba9876543210fedcba9876543210", 32);
    s_host_frame (f, CH_MUX_HELLO, 0, S_NONCE, sizeof S_NONCE - 2);     //  a prefix of it
    s_expect_quiet (f, S_QUIET_MS);
    s_host_frame (f, CH_MUX_HELLO, 0, S_NONCE, sizeof S_NONCE - 1);
    s_expect (f, CH_MUX_OPEN, 1);
    int c2 = s_client (f->port);                //  once ready, at once
    s_expect (f, CH_MUX_OPEN, 2);
    close (c);
    s_expect (f, CH_MUX_EOF, 1);
    close (c2);
    s_expect (f, CH_MUX_EOF, 2);
}

//  The upload's DATA frames: each at most CH_MUX_DATA_MAX, the bytes as
//  sent, until want of them have come; *got counts them all.
static void
s_expect_upload (s_fix_t *f, size_t *got, size_t want)
{
    while (*got < want) {
        const s_got_t *d = s_expect (f, CH_MUX_DATA, 1);
        assert_true (d->len >= 1 && d->len <= CH_MUX_DATA_MAX);
        assert_true (*got + d->len <= want);
        for (uint32_t i = 0; i < d->len; i++)
            if (d->data [i] != s_pattern (*got + i))
                fail_msg ("byte %zu of the upload differs", *got + i);
        *got += d->len;
    }
}

//  The proxy sends no more than the window until the gateway credits it.
static void
test_gi_proxy_sends_within_the_window (void **state)
{
    s_fix_t *f = (s_fix_t *) *state;
    s_handshake (f);
    s_writer_t w = { s_client (f->port), 0 };
    s_expect (f, CH_MUX_OPEN, 1);
    pthread_t writer;
    assert_int_equal (pthread_create (&writer, NULL, s_writer, &w), 0);
    size_t got = 0;
    s_expect_upload (f, &got, CH_MUX_WINDOW);
    s_expect_quiet (f, 2 * S_QUIET_MS);         //  the window is used up
    s_host_credit (f, 1, 20000);
    s_expect_upload (f, &got, CH_MUX_WINDOW + 20000);
    s_expect_quiet (f, S_QUIET_MS);
    s_host_credit (f, 1, CH_MUX_WINDOW);
    s_expect_upload (f, &got, S_SENT);
    assert_int_equal (pthread_join (writer, NULL), 0);
    assert_int_equal (w.sent, S_SENT);
    shutdown (w.fd, SHUT_WR);
    s_expect (f, CH_MUX_EOF, 1);                //  and nothing past the bytes sent
    close (w.fd);
}

//  Gateway DATA reaches the client and is credited back in full; the
//  gateway's EOF half-closes the client, whose own EOF then ends the
//  stream with an empty CLOSE.
static void
test_gi_proxy_delivers_and_credits_host_data (void **state)
{
    s_fix_t *f = (s_fix_t *) *state;
    s_handshake (f);
    int c = s_client (f->port);
    s_expect (f, CH_MUX_OPEN, 1);
    static uint8_t data [40960], back [sizeof data];
    for (size_t i = 0; i < sizeof data; i++)
        data [i] = s_pattern (i + 5);
    for (size_t off = 0; off < sizeof data; off += CH_MUX_DATA_MAX) {
        size_t n = sizeof data - off < CH_MUX_DATA_MAX ? sizeof data - off : CH_MUX_DATA_MAX;
        s_host_frame (f, CH_MUX_DATA, 1, data + off, (uint32_t) n);
    }
    assert_int_equal (s_client_read (c, back, sizeof back, S_WAIT_MS), sizeof back);
    assert_memory_equal (back, data, sizeof data);
    uint32_t credited = 0;
    while (credited < sizeof data) {
        const s_got_t *g = s_expect (f, CH_MUX_CREDIT, 1);
        assert_true (g->credit >= 1 && g->credit <= sizeof data - credited);
        credited += g->credit;
    }
    s_host_frame (f, CH_MUX_EOF, 1, NULL, 0);
    s_client_end (c, false);
    s_expect_quiet (f, S_QUIET_MS);             //  half open: the client may still send
    s_send (c, "late", 4);
    assert_memory_equal (s_expect (f, CH_MUX_DATA, 1)->data, "late", 4);
    shutdown (c, SHUT_WR);
    s_expect (f, CH_MUX_EOF, 1);
    assert_int_equal (s_expect (f, CH_MUX_CLOSE, 1)->len, 0);
    close (c);
}

//  The gateway's CLOSE closes the client; frames for an id the proxy has
//  forgotten, or never had, change nothing; ids only grow; a client's
//  reset is a CLOSE with words.
static void
test_gi_proxy_closes_and_ignores_forgotten_ids (void **state)
{
    s_fix_t *f = (s_fix_t *) *state;
    s_handshake (f);
    int a = s_client (f->port);
    s_expect (f, CH_MUX_OPEN, 1);
    s_host_frame (f, CH_MUX_CLOSE, 1, "refused: example.com", 20);
    s_client_end (a, true);
    close (a);
    s_host_frame (f, CH_MUX_DATA, 1, "x", 1);
    s_host_credit (f, 1, 100);
    s_host_frame (f, CH_MUX_EOF, 1, NULL, 0);
    s_host_frame (f, CH_MUX_CLOSE, 1, NULL, 0);
    s_host_frame (f, CH_MUX_DATA, 7, "y", 1);
    s_host_frame (f, CH_MUX_OPEN, 9, NULL, 0);  //  guest to host only
    s_expect_quiet (f, S_QUIET_MS);
    int b = s_client (f->port);
    s_expect (f, CH_MUX_OPEN, 2);
    s_send (b, "ping", 4);
    assert_memory_equal (s_expect (f, CH_MUX_DATA, 2)->data, "ping", 4);
    s_host_frame (f, CH_MUX_DATA, 2, "pong", 4);
    uint8_t buf [8];
    assert_int_equal (s_client_read (b, buf, 4, S_WAIT_MS), 4);
    assert_memory_equal (buf, "pong", 4);
    s_expect (f, CH_MUX_CREDIT, 2);
    struct linger reset = { 1, 0 };
    assert_int_equal (setsockopt (b, SOL_SOCKET, SO_LINGER, &reset, sizeof reset), 0);
    close (b);
    const s_got_t *g = s_expect (f, CH_MUX_CLOSE, 2);
    if (!strstr ((const char *) g->data, "reset"))
        fail_msg ("CLOSE words: \"%s\"", (const char *) g->data);
}

//  The gateway's DATA until the client's socket is full and the proxy holds
//  a window's worth (no CREDIT comes back): the bytes sent.
static size_t
s_fill_client (s_fix_t *f, uint32_t stream, size_t cap)
{
    static uint8_t chunk [CH_MUX_DATA_MAX];
    size_t sent = 0, credited = 0;
    for (;;) {
        while (sent - credited + sizeof chunk <= CH_MUX_WINDOW && sent + sizeof chunk <= cap) {
            for (size_t i = 0; i < sizeof chunk; i++)
                chunk [i] = s_pattern (sent + i);
            s_host_frame (f, CH_MUX_DATA, stream, chunk, sizeof chunk);
            sent += sizeof chunk;
        }
        if (!s_next (f, S_QUIET_MS))
            break;
        credited += s_expect_same (f, CH_MUX_CREDIT, stream)->credit;
    }
    assert_true (sent - credited >= CH_MUX_WINDOW - 32 * 1024);     //  held by the proxy
    return sent;
}

//  What the gateway sent before its CLOSE still reaches a client that reads
//  slowly (a refusal is DATA, EOF and CLOSE at once), then the client is
//  closed, and nothing more about the stream goes to the gateway.
static void
test_gi_proxy_delivers_what_came_before_a_close (void **state)
{
    s_fix_t *f = (s_fix_t *) *state;
    s_handshake (f);
    //  A small receive buffer too, and a client that does not read: the
    //  kernel holds little on either side, so the proxy holds the rest.
    int c = s_client_sized (f->port, 4096);
    s_expect (f, CH_MUX_OPEN, 1);
    size_t cap = 64u << 20, sent = s_fill_client (f, 1, cap);
    assert_true (sent < cap);
    uint8_t end [2 * CH_MUX_HDR + 4];           //  in one write: read before the client drains
    size_t n = s_frame (end, CH_MUX_EOF, 1, NULL, 0);
    s_send (f->host, end, n + s_frame (end + n, CH_MUX_CLOSE, 1, "done", 4));
    uint8_t *back = malloc (sent + 1);
    assert_int_equal (s_client_read (c, back, sent + 1, S_WAIT_MS), sent);
    for (size_t i = 0; i < sent; i++)
        if (back [i] != s_pattern (i))
            fail_msg ("byte %zu of %zu differs", i, sent);
    free (back);
    s_client_end (c, false);
    //  A CREDIT for what the client took before the CLOSE was read may
    //  follow, nothing else: no EOF, no CLOSE of the proxy's own.
    while (s_next (f, S_QUIET_MS))
        s_expect_same (f, CH_MUX_CREDIT, 1);
    close (c);
}

//  A broken frame: the proxy logs it, skips to the next marker and goes
//  on, whether the marker comes in the same read or a later one.
static void
test_gi_proxy_hunts_after_a_broken_frame (void **state)
{
    s_fix_t *f = (s_fix_t *) *state;
    s_handshake (f);
    int c = s_client (f->port);
    s_expect (f, CH_MUX_OPEN, 1);
    uint8_t all [128];                          //  one write: the proxy reads it at once
    size_t n = s_frame (all, 9, 1, "bad", 3);   //  no such type
    n += s_frame (all + n, CH_MUX_DATA, 1, "lost", 4);  //  skipped while hunting
    memcpy (all + n, CH_FRAME_SYNC, CH_FRAME_SYNC_LEN);
    n += CH_FRAME_SYNC_LEN;
    n += s_frame (all + n, CH_MUX_DATA, 1, "found", 5);
    s_send (f->host, all, n);
    uint8_t buf [16] = "";
    assert_int_equal (s_client_read (c, buf, 5, S_WAIT_MS), 5);
    assert_memory_equal (buf, "found", 5);
    s_host_credit (f, 1, 0);                    //  a CREDIT of nothing
    s_host_frame (f, CH_MUX_DATA, 1, "gone", 4);
    usleep (100 * 1000);                        //  the marker in a later read
    s_send (f->host, CH_FRAME_SYNC, CH_FRAME_SYNC_LEN);
    s_host_frame (f, CH_MUX_DATA, 1, "again", 5);
    assert_int_equal (s_client_read (c, buf, 5, S_WAIT_MS), 5);
    assert_memory_equal (buf, "again", 5);
    assert_int_equal (s_client_read (c, buf, 1, S_QUIET_MS), 0);       //  nothing lost came
    s_send (c, "still", 5);
    assert_memory_equal (s_expect_data (f, 1)->data, "still", 5);
    close (c);
}

//  At most GI_PROXY_STREAMS at once: one more is closed at accept, and a
//  freed slot takes the next.
static void
test_gi_proxy_caps_streams (void **state)
{
    s_fix_t *f = (s_fix_t *) *state;
    s_handshake (f);
    static int c [GI_PROXY_STREAMS];
    for (int i = 0; i < GI_PROXY_STREAMS; i++) {
        c [i] = s_client (f->port);
        s_expect (f, CH_MUX_OPEN, (uint32_t) i + 1);
    }
    int over = s_client (f->port);
    s_client_end (over, true);
    close (over);
    s_expect_quiet (f, S_QUIET_MS);
    close (c [0]);
    s_expect (f, CH_MUX_EOF, 1);
    s_host_frame (f, CH_MUX_CLOSE, 1, NULL, 0);
    c [0] = s_client (f->port);
    s_expect (f, CH_MUX_OPEN, GI_PROXY_STREAMS + 1);
    for (int i = 0; i < GI_PROXY_STREAMS; i++)
        close (c [i]);
}

//  utime + stime of pid, in clock ticks.
static long
s_cpu_ticks (pid_t pid)
{
    char path [64];
    long utime = 0, stime = 0;
    snprintf (path, sizeof path, "/proc/%d/stat", (int) pid);
    FILE *fp = fopen (path, "re");
    assert_non_null (fp);
    //  Its comm, "(test_gi_proxy)", holds no space.
    assert_int_equal (fscanf (fp, "%*d %*s %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %ld %ld",
                              &utime, &stime), 2);
    fclose (fp);
    return utime + stime;
}

//  The gateway gone: the streams are closed, and the proxy idles (a
//  socketpair's hang-up never clears) instead of spinning on it.
static void
test_gi_proxy_without_a_host_closes_streams_and_idles (void **state)
{
    s_fix_t *f = (s_fix_t *) *state;
    s_handshake (f);
    int c = s_client (f->port);
    s_expect (f, CH_MUX_OPEN, 1);
    shutdown (f->host, SHUT_RDWR);
    s_client_end (c, true);
    close (c);
    int waiting = s_client (f->port);           //  accepted, and left to wait
    long before = s_cpu_ticks (f->pid);
    usleep (1000 * 1000);
    long spent = s_cpu_ticks (f->pid) - before;
    if (spent > sysconf (_SC_CLK_TCK) / 5)
        fail_msg ("the proxy spent %ld ticks in 1 s without a host", spent);
    struct pollfd p = { waiting, POLLIN, 0 };
    assert_int_equal (poll (&p, 1, 50), 0);     //  neither data nor an end
    close (waiting);
}

//  The child init starts: nobody, no groups, no capabilities, no new
//  privileges, only its own fds; it says HELLO on the port and listens.
static void
s_check_status (pid_t pid)
{
    char path [64], line [256];
    snprintf (path, sizeof path, "/proc/%d/status", (int) pid);
    FILE *fp = fopen (path, "re");
    assert_non_null (fp);
    int seen = 0;
    while (fgets (line, sizeof line, fp)) {
        const char *want [] = { "Uid:\t65534\t65534\t65534\t65534\n",
            "Gid:\t65534\t65534\t65534\t65534\n", "Groups:\t \n", "NoNewPrivs:\t1\n",
            "CapEff:\t0000000000000000\n", "CapPrm:\t0000000000000000\n",
            "CapBnd:\t0000000000000000\n" };
        for (size_t i = 0; i < sizeof want / sizeof want [0]; i++)
            if (strncmp (line, want [i], strcspn (want [i], "\t")) == 0) {
                if (i == 2)                     //  no group at all, however it is spaced
                    assert_int_equal (strcspn (line, "0123456789"), strlen (line));
                else
                    assert_string_equal (line, want [i]);
                seen++;
            }
    }
    fclose (fp);
    assert_int_equal (seen, 7);
}

static void
s_check_fds (pid_t pid)
{
    char path [64];
    snprintf (path, sizeof path, "/proc/%d/fd/%d", (int) pid, 5);
    bool v6 = access (path, F_OK) == 0;
    for (int fd = 0; fd < 64; fd++) {
        snprintf (path, sizeof path, "/proc/%d/fd/%d", (int) pid, fd);
        if ((access (path, F_OK) == 0) != (fd <= (v6 ? 5 : 4)))
            fail_msg ("fd %d of the proxy is %s", fd, fd <= 5 ? "missing" : "open");
    }
}

//  A free loopback port, for a moment.
static unsigned
s_free_port (void)
{
    int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    assert_int_equal (bind (fd, (struct sockaddr *) &a, sizeof a), 0);
    assert_int_equal (getsockname (fd, (struct sockaddr *) &a, &len), 0);
    close (fd);
    return ntohs (a.sin_port);
}

static pid_t s_spawned;                         //  killed and reaped whatever happens

static int
s_kill_spawned (void **state)
{
    (void) state;
    if (s_spawned > 0) {
        kill (s_spawned, SIGKILL);
        waitpid (s_spawned, NULL, 0);
    }
    s_spawned = 0;
    return 0;
}

static void
test_gi_proxy_spawn_runs_as_nobody (void **state)
{
    (void) state;
    if (geteuid () != 0)
        tu_skip ("dropping to nobody needs root");
    int master = posix_openpt (O_RDWR | O_NOCTTY | O_CLOEXEC);
    assert_true (master >= 0 && grantpt (master) == 0 && unlockpt (master) == 0);
    int slave = open (ptsname (master), O_RDWR | O_NOCTTY | O_CLOEXEC);
    struct termios raw;
    assert_int_equal (tcgetattr (slave, &raw), 0);
    cfmakeraw (&raw);                           //  bytes through as they are
    assert_int_equal (tcsetattr (slave, TCSANOW, &raw), 0);
    pid_t pid = 0;
    unsigned port = s_free_port ();
    assert_int_equal (gi_proxy_spawn ("/nonexistent/cellvm.net", S_NONCE, port, &pid), -ENOENT);
    assert_int_equal (gi_proxy_spawn (ptsname (master), S_NONCE, port, &pid), 0);
    s_spawned = pid;
    close (slave);
    s_expect_hello (master);
    s_check_status (pid);
    s_check_fds (pid);
    close (s_client (port));                    //  it listens
    kill (pid, SIGKILL);
    int status;
    assert_int_equal (waitpid (pid, &status, 0), pid);
    s_spawned = 0;
    assert_true (WIFSIGNALED (status) && WTERMSIG (status) == SIGKILL);
    close (master);
}

//  Both loopbacks on one port (::1 when the host has IPv6); no port past 65535.
static void
test_gi_proxy_listen_binds_both_loopbacks (void **state)
{
    (void) state;
    int fds [2];
    assert_int_equal (gi_proxy_listen (65536, fds), -EINVAL);
    assert_int_equal (gi_proxy_listen (0, fds), 0);
    struct sockaddr_in v4;
    struct sockaddr_in6 v6;
    socklen_t len4 = sizeof v4, len6 = sizeof v6;
    assert_int_equal (getsockname (fds [0], (struct sockaddr *) &v4, &len4), 0);
    assert_int_equal (v4.sin_addr.s_addr, htonl (INADDR_LOOPBACK));
    assert_true (fcntl (fds [0], F_GETFL) & O_NONBLOCK);
    if (fds [1] >= 0) {
        assert_int_equal (getsockname (fds [1], (struct sockaddr *) &v6, &len6), 0);
        assert_int_equal (v6.sin6_port, v4.sin_port);
        assert_true (IN6_IS_ADDR_LOOPBACK (&v6.sin6_addr));
        close (fds [1]);
    }
    int again [2];
    assert_int_equal (gi_proxy_listen (ntohs (v4.sin_port), again), -EADDRINUSE);
    close (fds [0]);
}

int
main (void)
{
#define S_TEST(name) cmocka_unit_test_setup_teardown (name, s_setup, s_teardown)
    const struct CMUnitTest tests [] = {
        S_TEST (test_gi_proxy_waits_for_the_hello_with_its_nonce),
        S_TEST (test_gi_proxy_sends_within_the_window),
        S_TEST (test_gi_proxy_delivers_and_credits_host_data),
        S_TEST (test_gi_proxy_closes_and_ignores_forgotten_ids),
        cmocka_unit_test_setup_teardown (test_gi_proxy_delivers_what_came_before_a_close,
                                         s_setup_small_sndbuf, s_teardown),
        S_TEST (test_gi_proxy_hunts_after_a_broken_frame),
        S_TEST (test_gi_proxy_caps_streams),
        S_TEST (test_gi_proxy_without_a_host_closes_streams_and_idles),
        cmocka_unit_test_teardown (test_gi_proxy_spawn_runs_as_nobody, s_kill_spawned),
        cmocka_unit_test (test_gi_proxy_listen_binds_both_loopbacks),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
