/*  test_gw_egproxy - the host side of egress, driven as the guest's proxy
    drives it: a socketpair is the cellvm.net port, a forked echo server on
    loopback is the destination, a table is the resolver, and a route seam
    dials "public" test addresses on loopback. The hello after stale bytes;
    a tunnel and a plain request (the head the destination got); refusals in
    words before any lookup, after it (a private address behind a name), and
    inside a tunnel (a TLS server name that is not the CONNECT's host); flow
    control both ways; the caps; and every protocol violation ending in
    -EPROTO with its words.
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
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "net/gw_egproxy.h"
#include "ch_bytes.h"
#include "ch_frame.h"
#include "ch_mux.h"

#define NONCE "0123456789abcdef0123456789abcdef"
#define PUBLIC "45.0.0.1"                       //  the test's "public" address, dialed on loopback

typedef struct {
    int type;
    uint32_t stream, len, credit;
    uint8_t *data;
} frame_t;

typedef struct {
    gw_egproxy_t *px;
    gw_egress_t *policy;
    int guest;                                  //  the guest's end of the port
    ch_mux_dec_t *dec;
    ch_bytes_t *out;                            //  the guest's frames, not yet written
    frame_t got [512];
    size_t ngot, seen;
    pid_t server;
    unsigned port;                              //  the echo server's
    char err [400];
    int rc;                                     //  on_event's last failure
} fx_t;

static int s_lookups;

static int
s_resolve (const char *name, gw_egress_addr_t *out, size_t cap, char *err, size_t errlen)
{
    (void) cap;
    s_lookups++;
    if (strcmp (name, "slow.ok.test") == 0)
        usleep (500 * 1000);                    //  its stream waits in the lookup meanwhile
    const char *addr = strcmp (name, "inside.ok.test") == 0 ? "10.0.0.5"
                     : strcmp (name, "local.test") == 0 ? "127.0.0.1"
                     : strncmp (name, "sni", 3) == 0 ? PUBLIC : NULL;
    if (!addr) {
        snprintf (err, errlen, "no such name");
        return -ENOENT;
    }
    out [0].family = 4;
    inet_pton (AF_INET, addr, out [0].bytes);
    return 1;
}

static void
s_route (gw_egress_addr_t *addr, unsigned *port)
{
    (void) port;
    uint8_t pub [4];
    inet_pton (AF_INET, PUBLIC, pub);
    if (addr->family == 4 && memcmp (addr->bytes, pub, 4) == 0)
        inet_pton (AF_INET, "127.0.0.1", addr->bytes);
}

//  The destination: one connection at a time; "BIG" gets 1 MiB, anything
//  else comes back as it was sent, until EOF.
static void
s_serve (int lfd)
{
    static char buf [65536];
    for (;;) {
        int c = accept (lfd, NULL, NULL);
        if (c < 0)
            _exit (1);
        ssize_t n = read (c, buf, sizeof buf);
        if (n >= 3 && memcmp (buf, "BIG", 3) == 0) {
            memset (buf, 'x', sizeof buf);
            for (int i = 0; i < 16; i++)
                if (write (c, buf, sizeof buf) < 0)
                    break;
        }
        else
            while (n > 0 && write (c, buf, (size_t) n) == n)
                n = read (c, buf, sizeof buf);
        close (c);
    }
}

static void
s_start_server (fx_t *f)
{
    int lfd = socket (AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
    socklen_t sl = sizeof sa;
    assert_int_equal (bind (lfd, (struct sockaddr *) &sa, sizeof sa), 0);
    assert_int_equal (listen (lfd, 16), 0);
    getsockname (lfd, (struct sockaddr *) &sa, &sl);
    f->port = ntohs (sa.sin_port);
    f->server = fork ();
    assert_true (f->server >= 0);
    if (f->server == 0)
        s_serve (lfd);
    close (lfd);
}

static void
s_make (fx_t *f, const char *extra_allow, unsigned streams, unsigned per_min, uint64_t bytes)
{
    char allow [300], err [300];
    snprintf (allow, sizeof allow, "127.0.0.1:%u,local.test,*.ok.test,sni.test,sni2.test%s",
              f->port, extra_allow);
    f->policy = gw_egress_new (allow, "evil.test", err, sizeof err);
    assert_non_null (f->policy);
    int sv [2];
    assert_int_equal (socketpair (AF_UNIX, SOCK_STREAM, 0, sv), 0);     //  the port blocks,
    fcntl (sv [1], F_SETFL, O_NONBLOCK);        //  as gw_vm_connect_port's does; ours does not
    f->guest = sv [1];
    gw_egproxy_cfg_t cfg = { .policy = f->policy, .nonce = NONCE, .max_streams = streams,
                             .max_conns_per_min = per_min, .max_bytes = bytes,
                             .resolve = s_resolve,
                             .route = s_route };
    f->px = gw_egproxy_new (&cfg, &sv [0], err, sizeof err);
    assert_non_null (f->px);
    assert_int_equal (sv [0], -1);
    f->dec = ch_mux_dec_new ();
    ch_mux_dec_hunt (f->dec);
    f->out = ch_bytes_new (8u << 20);
}

//  A fresh proxy (and guest end) for the rest of a test.
static void
s_remake (fx_t *f, unsigned streams, unsigned per_min, uint64_t bytes)
{
    gw_egproxy_destroy (&f->px);
    gw_egress_destroy (&f->policy);
    close (f->guest);
    ch_mux_dec_destroy (&f->dec);
    ch_bytes_destroy (&f->out);
    f->rc = 0;
    f->err [0] = '\0';
    s_make (f, "", streams, per_min, bytes);
}

static int
s_setup (void **state)
{
    fx_t *f = calloc (1, sizeof *f);
    s_start_server (f);
    s_make (f, "", 0, 0, 0);
    s_lookups = 0;
    *state = f;
    return 0;
}

static int
s_teardown (void **state)
{
    fx_t *f = *state;
    gw_egproxy_destroy (&f->px);
    gw_egress_destroy (&f->policy);
    close (f->guest);
    ch_mux_dec_destroy (&f->dec);
    ch_bytes_destroy (&f->out);
    for (size_t i = 0; i < f->ngot; i++)
        free (f->got [i].data);
    kill (f->server, SIGKILL);
    waitpid (f->server, NULL, 0);
    free (f);
    return 0;
}

//  The guest writes a frame (or raw bytes).
static void
s_raw (fx_t *f, const void *data, size_t len)
{
    assert_int_equal (ch_bytes_put (f->out, data, len), 0);
}

static void
s_frame (fx_t *f, int type, uint32_t id, const void *data, size_t len)
{
    uint8_t hdr [CH_MUX_HDR];
    assert_int_equal (ch_mux_encode_header (hdr, (ch_mux_type_t) type, id, (uint32_t) len), 0);
    s_raw (f, hdr, sizeof hdr);
    s_raw (f, data, len);
}

static void
s_credit (fx_t *f, uint32_t id, uint32_t amount)
{
    uint8_t fr [CH_MUX_HDR + 4];
    assert_int_equal (ch_mux_encode_credit (fr, id, amount), 0);
    s_raw (f, fr, sizeof fr);
}

//  One round: the guest's bytes out, the proxy's turn, its frames in.
static void
s_round (fx_t *f)
{
    ch_bytes_write (f->out, f->guest);
    struct pollfd pf = { gw_egproxy_fd (f->px), POLLIN, 0 };
    poll (&pf, 1, 5);
    if (!f->rc)
        f->rc = gw_egproxy_on_event (f->px, f->err, sizeof f->err);
    uint8_t buf [65536];
    ssize_t n;
    while ((n = read (f->guest, buf, sizeof buf)) > 0)
        for (size_t at = 0; at < (size_t) n;) {
            long used = ch_mux_dec_feed (f->dec, buf + at, (size_t) n - at);
            assert_true (used >= 0);
            at += (size_t) used;
            const ch_mux_frame_t *fr = ch_mux_dec_frame (f->dec);
            if (!fr)
                continue;
            assert_true (f->ngot < 512);
            frame_t *g = &f->got [f->ngot++];
            *g = (frame_t) { fr->type, fr->stream, fr->len, fr->credit, malloc (fr->len + 1) };
            memcpy (g->data, fr->data, fr->len + 1);
        }
}

//  The next frame of type on stream (after those already seen), pumping up to 5 s.
static const frame_t *
s_wait (fx_t *f, int type, uint32_t id)
{
    for (int i = 0; i < 1000; i++) {
        for (size_t k = f->seen; k < f->ngot; k++)
            if (f->got [k].type == type && f->got [k].stream == id) {
                f->seen = k + 1;
                return &f->got [k];
            }
        s_round (f);
    }
    fail_msg ("no %s frame on stream %u (rc %d: %s)", ch_mux_type_name (type), (unsigned) id,
              f->rc, f->err);
    return NULL;
}

static void
s_hello (fx_t *f)
{
    static const uint8_t sync [] = CH_FRAME_SYNC;
    s_raw (f, "stale\0\0junk", 11);
    s_raw (f, sync, CH_FRAME_SYNC_LEN);
    s_frame (f, CH_MUX_HELLO, 0, "ffffffffffffffff", 16);  //  a stale proxy's
    s_raw (f, sync, CH_FRAME_SYNC_LEN);
    s_frame (f, CH_MUX_HELLO, 0, NONCE, strlen (NONCE));
    const frame_t *h = s_wait (f, CH_MUX_HELLO, 0);
    assert_memory_equal (h->data, NONCE, strlen (NONCE));
    gw_egproxy_stats_t st;
    gw_egproxy_stats (f->px, &st);
    assert_true (st.ready);
}

//  Open stream id with a request; the first DATA back.
static const frame_t *
s_request (fx_t *f, uint32_t id, const char *req)
{
    s_frame (f, CH_MUX_OPEN, id, NULL, 0);
    if (req [0])
        s_frame (f, CH_MUX_DATA, id, req, strlen (req));
    return s_wait (f, CH_MUX_DATA, id);
}

static void
test_tunnel_to_an_address_relays_both_ways (void **state)
{
    fx_t *f = *state;
    s_hello (f);
    char req [200];
    snprintf (req, sizeof req, "CONNECT 127.0.0.1:%u HTTP/1.1\r\nHost: 127.0.0.1:%u\r\n\r\n",
              f->port, f->port);
    const frame_t *d = s_request (f, 1, req);
    assert_string_equal ((char *) d->data, "HTTP/1.1 200 Connection established\r\n\r\n");
    s_frame (f, CH_MUX_DATA, 1, "ping", 4);
    d = s_wait (f, CH_MUX_DATA, 1);
    assert_memory_equal (d->data, "ping", 4);
    s_frame (f, CH_MUX_EOF, 1, NULL, 0);        //  the echo server then closes
    s_wait (f, CH_MUX_EOF, 1);
    s_wait (f, CH_MUX_CLOSE, 1);
    gw_egproxy_stats_t st;
    gw_egproxy_stats (f->px, &st);
    assert_int_equal (st.allowed, 1);
    assert_int_equal (st.open, 0);
    assert_int_equal (st.bytes_out, 4);
    assert_int_equal (st.bytes_in, 4);
    assert_int_equal (s_lookups, 0);            //  an address needs no lookup
}

static void
test_plain_request_reaches_the_destination_rewritten (void **state)
{
    fx_t *f = *state;
    s_hello (f);
    char req [300], want [200];
    snprintf (req, sizeof req, "GET http://local.test:%u/x?y=1 HTTP/1.1\r\nHost: local.test:%u"
              "\r\nProxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n", f->port, f->port);
    const frame_t *d = s_request (f, 1, req);
    snprintf (want, sizeof want, "GET /x?y=1 HTTP/1.1\r\nHost: local.test:%u\r\n", f->port);
    assert_memory_equal (d->data, want, strlen (want));   //  the echo of what it got
    assert_non_null (strstr ((char *) d->data, "Connection: close\r\n"));
    assert_null (strstr ((char *) d->data, "Proxy-Connection"));
    assert_non_null (strstr ((char *) d->data, "Accept: */*\r\n"));
    assert_int_equal (s_lookups, 1);
}

static void
s_refused (fx_t *f, uint32_t id, const char *req, const char *status, const char *words)
{
    const frame_t *d = s_request (f, id, req);
    assert_memory_equal (d->data, status, strlen (status));
    if (!strstr ((char *) d->data, words))
        fail_msg ("'%s' not in: %s", words, (char *) d->data);
    s_wait (f, CH_MUX_EOF, id);
    const frame_t *c = s_wait (f, CH_MUX_CLOSE, id);
    assert_non_null (strstr ((char *) c->data, words));
}

static void
test_refusals_say_which_rule (void **state)
{
    fx_t *f = *state;
    s_hello (f);
    s_refused (f, 1, "CONNECT evil.test:443 HTTP/1.1\r\n\r\n", "HTTP/1.1 403", "deny rule evil.test");
    s_refused (f, 2, "CONNECT nowhere.test:443 HTTP/1.1\r\n\r\n", "HTTP/1.1 403", "matches no rule");
    assert_int_equal (s_lookups, 0);            //  refused before any lookup: no DNS leaks
    s_refused (f, 3, "CONNECT inside.ok.test:443 HTTP/1.1\r\n\r\n", "HTTP/1.1 403",
               "(10.0.0.5):443 is a loopback, private");
    s_refused (f, 4, "CONNECT gone.ok.test:443 HTTP/1.1\r\n\r\n", "HTTP/1.1 502",
               "does not resolve");
    s_refused (f, 5, "CONNECT 127.0.0.1:1 HTTP/1.1\r\n\r\n", "HTTP/1.1 403",
               "127.0.0.1:1: port 1 is not allowed (the rule 127.0.0.1:");
    s_refused (f, 6, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 400", "egress refused");
    gw_egproxy_stats_t st;
    gw_egproxy_stats (f->px, &st);
    assert_int_equal (st.refused, 6);
    assert_int_equal (f->rc, 0);                //  refusals are not violations
}

//  A ClientHello naming name (no other extension).
static size_t
s_client_hello (uint8_t *b, const char *name)
{
    size_t nl = strlen (name), ext = 9 + nl, body = 2 + 32 + 1 + 4 + 2 + 2 + ext;
    uint8_t *p = b;
    *p++ = 0x16, *p++ = 3, *p++ = 1, *p++ = (uint8_t) ((body + 4) >> 8), *p++ = (uint8_t) (body + 4);
    *p++ = 1, *p++ = 0, *p++ = (uint8_t) (body >> 8), *p++ = (uint8_t) body;
    *p++ = 3, *p++ = 3;
    memset (p, 7, 32), p += 32;
    *p++ = 0;                                   //  no session id
    *p++ = 0, *p++ = 2, *p++ = 0x13, *p++ = 0x01;     //  one cipher suite
    *p++ = 1, *p++ = 0;                         //  null compression
    *p++ = (uint8_t) (ext >> 8), *p++ = (uint8_t) ext;
    *p++ = 0, *p++ = 0, *p++ = (uint8_t) ((nl + 5) >> 8), *p++ = (uint8_t) (nl + 5);
    *p++ = (uint8_t) ((nl + 3) >> 8), *p++ = (uint8_t) (nl + 3), *p++ = 0;
    *p++ = (uint8_t) (nl >> 8), *p++ = (uint8_t) nl;
    memcpy (p, name, nl), p += nl;
    return (size_t) (p - b);
}

static void
test_a_tunnel_to_a_name_must_carry_tls_naming_it (void **state)
{
    fx_t *f = *state;
    s_hello (f);
    char req [200];
    uint8_t hello [512];
    snprintf (req, sizeof req, "CONNECT sni.test:%u HTTP/1.1\r\n\r\n", f->port);
    const frame_t *d = s_request (f, 1, req);
    assert_memory_equal (d->data, "HTTP/1.1 200", 12);
    size_t n = s_client_hello (hello, "sni.test");
    s_frame (f, CH_MUX_DATA, 1, hello, n);
    d = s_wait (f, CH_MUX_DATA, 1);             //  the destination echoes the hello
    assert_int_equal (d->len, n);
    assert_memory_equal (d->data, hello, n);
    snprintf (req, sizeof req, "CONNECT sni2.test:%u HTTP/1.1\r\n\r\n", f->port);
    d = s_request (f, 2, req);
    assert_memory_equal (d->data, "HTTP/1.1 200", 12);
    n = s_client_hello (hello, "sni.test");     //  an allowed name, fronting for another
    s_frame (f, CH_MUX_DATA, 2, hello, n);
    d = s_wait (f, CH_MUX_DATA, 2);
    static const uint8_t alert [] = { 0x15, 3, 3, 0, 2, 2, 0x31 };
    assert_int_equal (d->len, sizeof alert);
    assert_memory_equal (d->data, alert, sizeof alert);
    const frame_t *c = s_wait (f, CH_MUX_CLOSE, 2);
    assert_non_null (strstr ((char *) c->data, "differs from the tunnel's host sni2.test"));
    snprintf (req, sizeof req, "CONNECT 127.0.0.1:%u HTTP/1.1\r\n\r\n", f->port);
    d = s_request (f, 3, req);                  //  an address: a hello naming a server
    assert_memory_equal (d->data, "HTTP/1.1 200", 12);  //  must name that address
    n = s_client_hello (hello, "sni.test");
    s_frame (f, CH_MUX_DATA, 3, hello, n);
    d = s_wait (f, CH_MUX_DATA, 3);
    assert_int_equal (d->len, sizeof alert);
    c = s_wait (f, CH_MUX_CLOSE, 3);
    assert_non_null (strstr ((char *) c->data, "differs from the tunnel's host 127.0.0.1"));
    snprintf (req, sizeof req, "CONNECT sni.test:%u HTTP/1.1\r\n\r\n", f->port);
    s_request (f, 4, req);
    s_frame (f, CH_MUX_DATA, 4, "SSH-2.0-x\r\n", 11);   //  not TLS at all
    s_wait (f, CH_MUX_DATA, 4);
    c = s_wait (f, CH_MUX_CLOSE, 4);
    assert_non_null (strstr ((char *) c->data, "must carry TLS"));
}

static void
test_flow_control_both_ways (void **state)
{
    fx_t *f = *state;
    s_hello (f);
    char req [200];
    snprintf (req, sizeof req, "CONNECT 127.0.0.1:%u HTTP/1.1\r\n\r\n", f->port);
    s_request (f, 1, req);
    s_frame (f, CH_MUX_DATA, 1, "BIG", 3);
    size_t got = 0;
    for (int i = 0; i < 300; i++)               //  no credit: at most the window arrives
        s_round (f);
    for (size_t k = f->seen; k < f->ngot; k++)
        if (f->got [k].type == CH_MUX_DATA && f->got [k].stream == 1)
            got += f->got [k].len;
    size_t est = strlen ("HTTP/1.1 200 Connection established\r\n\r\n");
    assert_int_equal (got, CH_MUX_WINDOW - est);    //  the 200 line took its share
    f->seen = f->ngot;
    s_credit (f, 1, CH_MUX_WINDOW);
    size_t more = 0;
    while (more < CH_MUX_WINDOW)
        more += s_wait (f, CH_MUX_DATA, 1)->len;
    assert_int_equal (more, CH_MUX_WINDOW);
    s_credit (f, 1, CH_MUX_WINDOW);             //  the whole window back: not past it
    //  The guest's way: the destination echoes, the window comes back as credit.
    snprintf (req, sizeof req, "CONNECT 127.0.0.1:%u HTTP/1.1\r\n\r\n", f->port);
    s_request (f, 2, req);
    static uint8_t chunk [CH_MUX_DATA_MAX];
    memset (chunk, 'y', sizeof chunk);
    for (unsigned i = 0; i < CH_MUX_WINDOW / CH_MUX_DATA_MAX; i++)
        s_frame (f, CH_MUX_DATA, 2, chunk, sizeof chunk);
    size_t credited = 0;                        //  the request's bytes are credited too
    while (credited < CH_MUX_WINDOW + strlen (req))
        credited += s_wait (f, CH_MUX_CREDIT, 2)->credit;
    assert_int_equal (credited, CH_MUX_WINDOW + strlen (req));
    assert_int_equal (f->rc, 0);
}

static void
test_caps_refuse_connections_not_the_vm (void **state)
{
    fx_t *f = *state;
    s_remake (f, 2, 3, 0);                      //  2 at once, 3 a minute
    s_hello (f);
    s_frame (f, CH_MUX_OPEN, 1, NULL, 0);
    s_frame (f, CH_MUX_OPEN, 2, NULL, 0);
    s_refused (f, 3, "", "HTTP/1.1 503", "2 connections are open");
    s_frame (f, CH_MUX_CLOSE, 1, NULL, 0);
    s_frame (f, CH_MUX_CLOSE, 2, NULL, 0);
    s_frame (f, CH_MUX_OPEN, 4, NULL, 0);       //  the third this minute (3 was refused)
    s_frame (f, CH_MUX_CLOSE, 4, NULL, 0);
    s_refused (f, 5, "", "HTTP/1.1 429", "3 connections in the last minute");
    assert_int_equal (f->rc, 0);
    //  Bytes: once the session moved its share, new connections are refused.
    s_remake (f, 0, 0, 8);
    s_hello (f);
    char req [200];
    snprintf (req, sizeof req, "CONNECT 127.0.0.1:%u HTTP/1.1\r\n\r\n", f->port);
    s_request (f, 1, req);
    s_frame (f, CH_MUX_DATA, 1, "ping", 4);
    s_wait (f, CH_MUX_DATA, 1);                 //  4 out, 4 back: 8
    s_refused (f, 2, req, "HTTP/1.1 403", "this session moved 8 bytes in and out, its limit");
}

//  Each violation on a fresh proxy: -EPROTO, and the words.
static void
s_violation (fx_t *f, const void *bytes, size_t len, const char *words)
{
    s_remake (f, 0, 0, 0);
    s_hello (f);
    s_raw (f, bytes, len);
    for (int i = 0; i < 200 && !f->rc; i++)
        s_round (f);
    assert_int_equal (f->rc, -EPROTO);
    if (!strstr (f->err, words))
        fail_msg ("'%s' not in: %s", words, f->err);
}

static void
test_a_hostile_guest_is_a_violation (void **state)
{
    fx_t *f = *state;
    static uint8_t b [CH_MUX_WINDOW + 2 * CH_MUX_DATA_MAX];
    size_t n = 0;
    uint8_t hdr [CH_MUX_HDR];
    ch_mux_encode_header (hdr, CH_MUX_OPEN, 5, 0);
    memcpy (b, hdr, sizeof hdr), n = sizeof hdr;
    memcpy (b + n, hdr, sizeof hdr), n += sizeof hdr;
    s_violation (f, b, n, "opened egress stream 5 after 5");
    ch_mux_encode_header (hdr, CH_MUX_DATA, 9, 3);
    memcpy (b, hdr, sizeof hdr), memcpy (b + sizeof hdr, "abc", 3);
    s_violation (f, b, sizeof hdr + 3, "stream 9, which it never opened");
    ch_mux_encode_header (hdr, CH_MUX_HELLO, 0, 4);
    memcpy (b, hdr, sizeof hdr), memcpy (b + sizeof hdr, "abcd", 4);
    s_violation (f, b, sizeof hdr + 4, "said hello again, with another nonce");
    s_violation (f, "\x09\0\0\0\1\0\0\0\0", 9, "broke the egress stream protocol");
    n = 0;                                      //  DATA past the window, during a lookup
    static const char req [] = "CONNECT slow.ok.test:443 HTTP/1.1\r\n\r\n";
    ch_mux_encode_header (hdr, CH_MUX_OPEN, 1, 0);
    memcpy (b, hdr, sizeof hdr), n = sizeof hdr;
    ch_mux_encode_header (hdr, CH_MUX_DATA, 1, sizeof req - 1);
    memcpy (b + n, hdr, sizeof hdr), n += sizeof hdr;
    memcpy (b + n, req, sizeof req - 1), n += sizeof req - 1;
    for (unsigned i = 0; i <= CH_MUX_WINDOW / CH_MUX_DATA_MAX; i++) {
        ch_mux_encode_header (hdr, CH_MUX_DATA, 1, CH_MUX_DATA_MAX);
        memcpy (b + n, hdr, sizeof hdr), n += sizeof hdr;
        if (n + CH_MUX_DATA_MAX > sizeof b)
            break;
        memset (b + n, 'z', CH_MUX_DATA_MAX), n += CH_MUX_DATA_MAX;
    }
    s_violation (f, b, n, "past its window");
    uint8_t cr [CH_MUX_HDR + 4];
    ch_mux_encode_header (hdr, CH_MUX_OPEN, 1, 0);
    ch_mux_encode_credit (cr, 1, 1);
    memcpy (b, hdr, sizeof hdr), memcpy (b + sizeof hdr, cr, sizeof cr);
    s_violation (f, b, sizeof hdr + sizeof cr, "past the window");
}

int
main (void)
{
    signal (SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_setup_teardown (test_tunnel_to_an_address_relays_both_ways, s_setup,
                                         s_teardown),
        cmocka_unit_test_setup_teardown (test_plain_request_reaches_the_destination_rewritten,
                                         s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_refusals_say_which_rule, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_a_tunnel_to_a_name_must_carry_tls_naming_it,
                                         s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_flow_control_both_ways, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_caps_refuse_connections_not_the_vm, s_setup,
                                         s_teardown),
        cmocka_unit_test_setup_teardown (test_a_hostile_guest_is_a_violation, s_setup,
                                         s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
