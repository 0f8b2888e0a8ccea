/*  test_gw_proxyreq - the heads real clients send their proxy (curl 7.88,
    Python 3.11's and 3.13's urllib and http.client, requests 2.32, pip
    24.2: captured once from a listening socket into the fuzz seeds, and
    written out here as they sent them), read for where to connect, with
    the exact head sent upstream; every prefix of each asks for more; the
    caps; hop-by-hop headers dropped; each refusal with its status and
    words; and the refusal's response byte for byte.
*/
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/gw_proxyreq.h"

#define CURL_UA "User-Agent: curl/7.88.1\r\n"
#define PIP_UA "User-Agent: pip/24.2 {\"ci\":null,\"cpu\":\"x86_64\",\"distro\":{\"id\":" \
    "\"bookworm\",\"libc\":{\"lib\":\"glibc\",\"version\":\"2.36\"},\"name\":\"Debian " \
    "GNU/Linux\",\"version\":\"12\"},\"implementation\":{\"name\":\"CPython\",\"version\":" \
    "\"3.13.0\"},\"installer\":{\"name\":\"pip\",\"version\":\"24.2\"},\"openssl_version\":" \
    "\"OpenSSL 3.0.19 27 Jan 2026\",\"python\":\"3.13.0\",\"rustc_version\":\"1.95.0\"," \
    "\"system\":{\"name\":\"Linux\",\"release\":\"6.18.44-fc-v1300\"}}\r\n"
#define PIP_ACCEPT "Accept: application/vnd.pypi.simple.v1+json, " \
    "application/vnd.pypi.simple.v1+html; q=0.1, text/html; q=0.01\r\n"

typedef struct {
    const char *seed;                           //  its file in the fuzz seeds, or NULL
    const char *head;                           //  what the client sent (a body after it)
    size_t body;                                //  bytes of body after the head
    const char *host;
    unsigned port;
    int family;                                 //  0: a name; 4 or 6: a literal
    const char *forward;                        //  NULL: a CONNECT
} real_t;

static const real_t s_real [] = {
    { "curl-connect", "CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n" CURL_UA
      "Proxy-Connection: Keep-Alive\r\n\r\n", 0, "pypi.org", 443, 0, NULL },
    { "curl-connect-ipv6", "CONNECT [2001:db8::7]:443 HTTP/1.1\r\nHost: [2001:db8::7]:443\r\n"
      CURL_UA "Proxy-Connection: Keep-Alive\r\n\r\n", 0, "2001:db8::7", 443, 6, NULL },
    //  Python 3.11's http.client tunnel (urllib, requests, pip 23): no headers.
    { "urllib-connect-py311", "CONNECT pypi.org:443 HTTP/1.0\r\n\r\n", 0, "pypi.org", 443, 0,
      NULL },
    //  Python 3.13's (urllib, and pip 24.2 through it) adds Host.
    { "pip-connect", "CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n", 0,
      "pypi.org", 443, 0, NULL },
    { "curl-get", "GET http://example.org/path HTTP/1.1\r\nHost: example.org\r\n" CURL_UA
      "Accept: */*\r\nProxy-Connection: Keep-Alive\r\n\r\n", 0, "example.org", 80, 0,
      "GET /path HTTP/1.1\r\nHost: example.org\r\n" CURL_UA "Accept: */*\r\n"
      "Connection: close\r\n\r\n" },
    { "curl-get-ipv6", "GET http://[2001:db8::7]:8080/ HTTP/1.1\r\nHost: [2001:db8::7]:8080\r\n"
      CURL_UA "Accept: */*\r\nProxy-Connection: Keep-Alive\r\n\r\n", 0, "2001:db8::7", 8080, 6,
      "GET / HTTP/1.1\r\nHost: [2001:db8::7]:8080\r\n" CURL_UA "Accept: */*\r\n"
      "Connection: close\r\n\r\n" },
    { "curl-post", "POST http://example.org:8080/form?x=y HTTP/1.1\r\nHost: example.org:8080\r\n"
      CURL_UA "Accept: */*\r\nProxy-Connection: Keep-Alive\r\nContent-Length: 7\r\n"
      "Content-Type: application/x-www-form-urlencoded\r\n\r\na=1&b=2", 7, "example.org", 8080, 0,
      "POST /form?x=y HTTP/1.1\r\nHost: example.org:8080\r\n" CURL_UA "Accept: */*\r\n"
      "Content-Length: 7\r\nContent-Type: application/x-www-form-urlencoded\r\n"
      "Connection: close\r\n\r\n" },
    { "urllib-get", "GET http://example.org/path HTTP/1.1\r\nAccept-Encoding: identity\r\n"
      "Host: example.org\r\nUser-Agent: Python-urllib/3.13\r\nConnection: close\r\n\r\n", 0,
      "example.org", 80, 0,
      "GET /path HTTP/1.1\r\nHost: example.org\r\nAccept-Encoding: identity\r\n"
      "User-Agent: Python-urllib/3.13\r\nConnection: close\r\n\r\n" },
    { "requests-get", "GET http://example.org/path HTTP/1.1\r\nHost: example.org\r\n"
      "User-Agent: python-requests/2.32.3\r\nAccept-Encoding: gzip, deflate\r\nAccept: */*\r\n"
      "Connection: keep-alive\r\n\r\n", 0, "example.org", 80, 0,
      "GET /path HTTP/1.1\r\nHost: example.org\r\nUser-Agent: python-requests/2.32.3\r\n"
      "Accept-Encoding: gzip, deflate\r\nAccept: */*\r\nConnection: close\r\n\r\n" },
    { "pip-get", "GET http://example.org/simple/six/ HTTP/1.1\r\nHost: example.org\r\n" PIP_UA
      "Accept-Encoding: gzip, deflate\r\n" PIP_ACCEPT "Connection: keep-alive\r\n"
      "Cache-Control: max-age=0\r\n\r\n", 0, "example.org", 80, 0,
      "GET /simple/six/ HTTP/1.1\r\nHost: example.org\r\n" PIP_UA
      "Accept-Encoding: gzip, deflate\r\n" PIP_ACCEPT "Cache-Control: max-age=0\r\n"
      "Connection: close\r\n\r\n" },
};

static int
s_parse (const char *head, size_t len, gw_proxyreq_t *r, int *status, char *why)
{
    return gw_proxyreq_parse ((const uint8_t *) head, len, r, status, why, 512);
}

//  head parses, naming host:port, and (http) forward is exactly want.
static void
s_parsed (const char *head, size_t len, const char *host, unsigned port, const char *want)
{
    gw_proxyreq_t r;
    int status = -1;
    char why [512] = "";
    int rc = s_parse (head, len, &r, &status, why);
    if (rc != 0)
        fail_msg ("%s: refused %d %d \"%s\"", head, rc, status, why);
    assert_int_equal (r.connect, want == NULL);
    assert_string_equal (r.host, host);
    assert_int_equal (r.port, port);
    if (want) {
        assert_non_null (r.forward);
        assert_int_equal (r.forward_len, strlen (want));
        assert_memory_equal (r.forward, want, r.forward_len);
        assert_int_equal (r.forward [r.forward_len], '\0');
    } else
        assert_null (r.forward);
    gw_proxyreq_clear (&r);
    assert_null (r.forward);
}

static void
s_seed_holds (const char *name, const char *head)
{
    char path [600], got [4096];
    snprintf (path, sizeof path, "%s", __FILE__);
    *(strrchr (path, '/') ? strrchr (path, '/') : path) = '\0';
    strcat (path, "/../fuzz/seeds/fuzz_gw_proxyreq/");
    strcat (path, name);
    FILE *f = fopen (path, "rb");
    assert_non_null (f);
    size_t n = fread (got, 1, sizeof got, f);
    fclose (f);
    assert_int_equal (n, strlen (head));
    assert_memory_equal (got, head, n);
}

static void
test_real_clients_heads_name_where_to_connect (void **state)
{
    (void) state;
    for (size_t i = 0; i < sizeof s_real / sizeof s_real [0]; i++) {
        const real_t *t = &s_real [i];
        size_t len = strlen (t->head);
        s_seed_holds (t->seed, t->head);
        s_parsed (t->head, len, t->host, t->port, t->forward);
        gw_proxyreq_t r;
        int status;
        char why [512];
        assert_int_equal (s_parse (t->head, len, &r, &status, why), 0);
        assert_int_equal (r.head_len, len - t->body);
        assert_int_equal (r.literal, t->family != 0);
        assert_int_equal (r.addr.family, t->family);
        gw_proxyreq_clear (&r);
    }
}

static void
test_every_prefix_of_a_head_asks_for_more (void **state)
{
    (void) state;
    for (size_t i = 0; i < sizeof s_real / sizeof s_real [0]; i++) {
        const char *head = s_real [i].head;
        size_t whole = strlen (head) - s_real [i].body;
        for (size_t cut = 0; cut < whole; cut++) {
            gw_proxyreq_t r;
            int status = -1;
            char why [512] = "x";
            int rc = s_parse (head, cut, &r, &status, why);
            if (rc != -EAGAIN)
                fail_msg ("%s cut at %zu: %d %d \"%s\"", s_real [i].seed, cut, rc, status, why);
            assert_int_equal (status, 0);
            assert_string_equal (why, "");
            assert_null (r.forward);
        }
    }
    gw_proxyreq_t r;
    int status;
    char why [64];
    assert_int_equal (gw_proxyreq_parse (NULL, 0, &r, &status, why, sizeof why), -EAGAIN);
}

static void
test_a_forwarded_head_drops_what_was_for_the_proxy (void **state)
{
    (void) state;
    //  Named in Connection, or hop-by-hop by name; Host rewritten first;
    //  values trimmed; the host lowercased without its root's dot.
    const char *head = "GET http://Example.ORG./a?b=1 HTTP/1.1\r\nX-First: 1\r\n"
        "Host: example.org\r\nConnection: keep-alive, X-Secret\r\nKeep-Alive: timeout=5\r\n"
        "x-secret: s\r\nProxy-Authorization: Basic Zm9vOmJhcg==\r\n"
        "Proxy-Connection: keep-alive\r\nTE: trailers\r\nUpgrade: h2c\r\n"
        "x-keep:   spaced value \t\r\nTransfer-Encoding: chunked\r\n\r\n";
    s_parsed (head, strlen (head), "example.org", 80,
              "GET /a?b=1 HTTP/1.1\r\nHost: example.org\r\nX-First: 1\r\n"
              "x-keep: spaced value\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
}

static void
test_heads_a_proxy_takes (void **state)
{
    (void) state;
    struct { const char *head, *host; unsigned port; const char *forward; } ok [] = {
        //  bare LF line ends, HTTP/1.0, no path, no Host
        { "GET http://example.org HTTP/1.0\nUser-Agent: x\n\n", "example.org", 80,
          "GET / HTTP/1.0\r\nHost: example.org\r\nUser-Agent: x\r\nConnection: close\r\n\r\n" },
        { "HEAD HTTP://EXAMPLE.org:80?q=1 HTTP/1.1\r\nhost: Example.org:80\r\n\r\n",
          "example.org", 80, "HEAD /?q=1 HTTP/1.1\r\nHost: example.org\r\nConnection: close\r\n\r\n" },
        { "PROPFIND http://203.0.113.7:8080/dav/ HTTP/1.1\r\nHost: 203.0.113.7:8080\r\n\r\n",
          "203.0.113.7", 8080, "PROPFIND /dav/ HTTP/1.1\r\nHost: 203.0.113.7:8080\r\n"
          "Connection: close\r\n\r\n" },
        { "GET http://[::FFFF:127.0.0.1]/ HTTP/1.1\r\n\r\n", "::ffff:127.0.0.1", 80,
          "GET / HTTP/1.1\r\nHost: [::ffff:127.0.0.1]\r\nConnection: close\r\n\r\n" },
        { "GET http://0.0.0.0/ HTTP/1.1\r\n\r\n", "0.0.0.0", 80,
          "GET / HTTP/1.1\r\nHost: 0.0.0.0\r\nConnection: close\r\n\r\n" },
        { "GET http://a.b_c-d.example/@x HTTP/1.1\r\nHost: a.b_c-d.example.\r\n\r\n",
          "a.b_c-d.example", 80, "GET /@x HTTP/1.1\r\nHost: a.b_c-d.example\r\n"
          "Connection: close\r\n\r\n" },
        //  CONNECT's Host without a port; a name with a root's dot; tunnel bytes after
        { "CONNECT PyPI.org.:443 HTTP/1.1\r\nHost: pypi.org\r\n\r\n\x16\x03\x01", "pypi.org",
          443, NULL },
        { "CONNECT 1.2.3.4:65535 HTTP/1.1\r\n\r\n", "1.2.3.4", 65535, NULL },
        { "CONNECT 1.2.3.4.:1 HTTP/1.1\r\n\r\n", "1.2.3.4", 1, NULL },
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok [0]; i++)
        s_parsed (ok [i].head, strlen (ok [i].head), ok [i].host, ok [i].port, ok [i].forward);
    gw_proxyreq_t r;
    int status;
    char why [512];
    const char *tunnel = "CONNECT pypi.org:443 HTTP/1.1\r\n\r\n\x16\x03\x01";
    assert_int_equal (s_parse (tunnel, strlen (tunnel), &r, &status, why), 0);
    assert_int_equal (r.head_len, strlen (tunnel) - 3);
    uint8_t want [4] = { 1, 2, 3, 4 };
    assert_int_equal (s_parse (ok [7].head, strlen (ok [7].head), &r, &status, why), 0);
    assert_true (r.literal && r.addr.family == 4);
    assert_memory_equal (r.addr.bytes, want, 4);
    assert_string_equal (GW_PROXYREQ_ESTABLISHED, "HTTP/1.1 200 Connection established\r\n\r\n");
}

typedef struct {
    const char *head;
    size_t len;                                 //  0: strlen
    int status;
    const char *words;
} refusal_t;

#define NUL_HEAD "GET http://example.org/\0 HTTP/1.1\r\n\r\n"

static const refusal_t s_refusals [] = {
    //  not HTTP at all, refused before a blank line comes
    { "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 0, 400, "not https://" },
    { "\x05\x01\x00", 0, 400, "SOCKS" },
    { NUL_HEAD, sizeof NUL_HEAD - 1, 400, "a NUL byte" },
    { "GET http://example.org/ HTTP/1.1\r\nX: a\x01" "b\r\n\r\n", 0, 400, "control byte (0x01)" },
    { "GET http://example.org/ HTTP/1.1\rHost: example.org\r\n\r\n", 0, 400, "a bare CR" },
    { "GET http://example.org/ HTTP/1.1\r\nX: a\rb\r\n\r\n", 0, 400, "a bare CR" },
    { "\r\n", 0, 400, "an empty line where the request line" },
    //  the request line
    { "GET http://example.org/\r\n\r\n", 0, 400, "not an HTTP request line" },
    { "GET http://example.org/a b HTTP/1.1\r\n\r\n", 0, 400, "percent-encode it as %20" },
    { "GET  http://example.org/ HTTP/1.1\r\n\r\n", 0, 400, "a space inside the request target" },
    { "GET\thttp://example.org/ HTTP/1.1\r\n\r\n", 0, 400, "a tab" },
    { "GET http://example.org/\xc3\xa9 HTTP/1.1\r\n\r\n", 0, 400, "not ASCII" },
    { "G(T http://example.org/ HTTP/1.1\r\n\r\n", 0, 400, "is not a token" },
    { "GET http://example.org/ HTTP/2.0\r\n\r\n", 0, 505, "HTTP/2.0 is not spoken here" },
    { "GET http://example.org/ HTTP/1.2\r\n\r\n", 0, 505, "send HTTP/1.1" },
    { "GET http://example.org/ http/1.1\r\n\r\n", 0, 400, "not an HTTP version" },
    { "TRACE http://example.org/ HTTP/1.1\r\n\r\n", 0, 405, "does not carry TRACE" },
    { "get http://example.org/ HTTP/1.1\r\n\r\n", 0, 501, "case-sensitive (GET)" },
    { "Connect pypi.org:443 HTTP/1.1\r\n\r\n", 0, 501, "case-sensitive (CONNECT)" },
    //  targets: a client ignoring its proxy settings, https, other schemes
    { "GET / HTTP/1.1\r\n", 0, 400, "is the client ignoring its proxy settings?" },
    { "OPTIONS * HTTP/1.1\r\n\r\n", 0, 400, "or CONNECT host:port, not \"*\"" },
    { "GET pypi.org:443 HTTP/1.1\r\n\r\n", 0, 400, "a full URL (GET http://host/path)" },
    { "GET https://pypi.org/simple/ HTTP/1.1\r\n\r\n", 0, 501, "as CONNECT host:443" },
    { "GET ftp://example.org/x HTTP/1.1\r\n\r\n", 0, 501, "the scheme \"ftp\" is not carried" },
    { "GET http://example.org/#top HTTP/1.1\r\n\r\n", 0, 400, "a fragment" },
    { "GET http:///path HTTP/1.1\r\n\r\n", 0, 400, "the URL has no host" },
    { "GET http://user:pw@example.org/ HTTP/1.1\r\n\r\n", 0, 400, "credentials (user@host)" },
    { "CONNECT user@pypi.org:443 HTTP/1.1\r\n\r\n", 0, 400, "credentials (user@host)" },
    { "CONNECT http://pypi.org:443/ HTTP/1.1\r\n\r\n", 0, 400, "CONNECT takes host:port" },
    { "CONNECT /pypi.org:443 HTTP/1.1\r\n\r\n", 0, 400, "CONNECT takes host:port" },
    //  hosts and ports
    { "CONNECT pypi.org HTTP/1.1\r\n\r\n", 0, 400, "has no port: CONNECT host:port" },
    { "CONNECT pypi.org: HTTP/1.1\r\n\r\n", 0, 400, "a number from 1 to 65535" },
    { "CONNECT pypi.org:0 HTTP/1.1\r\n\r\n", 0, 400, "a number from 1 to 65535" },
    { "CONNECT pypi.org:65536 HTTP/1.1\r\n\r\n", 0, 400, "a number from 1 to 65535" },
    { "CONNECT pypi.org:443x HTTP/1.1\r\n\r\n", 0, 400, "the port \"443x\"" },
    { "CONNECT pypi.org:000443 HTTP/1.1\r\n\r\n", 0, 400, "a number from 1 to 65535" },
    { "CONNECT 2001:db8::7:443 HTTP/1.1\r\n\r\n", 0, 400, "without brackets" },
    { "CONNECT [2001:db8::7:443 HTTP/1.1\r\n\r\n", 0, 400, "is not [IPv6]:port" },
    { "CONNECT [2001:db8::7]443 HTTP/1.1\r\n\r\n", 0, 400, "is not [IPv6]:port" },
    { "CONNECT [1.2.3.4]:443 HTTP/1.1\r\n\r\n", 0, 400, "not an IPv6 address" },
    { "CONNECT [fe80::1%25eth0]:443 HTTP/1.1\r\n\r\n", 0, 400, "percent-encoding" },
    { "GET http://ex%61mple.org/ HTTP/1.1\r\n\r\n", 0, 400, "percent-encoding in its host" },
    { "CONNECT exa$mple.org:443 HTTP/1.1\r\n\r\n", 0, 400, "neither a DNS name" },
    { "CONNECT a..b:443 HTTP/1.1\r\n\r\n", 0, 400, "neither a DNS name" },
    //  loose IPv4 forms, read by resolvers as other addresses
    { "CONNECT 127.1:443 HTTP/1.1\r\n\r\n", 0, 400, "not one in dotted-quad form" },
    { "CONNECT 0x7f.0.0.1:443 HTTP/1.1\r\n\r\n", 0, 400, "127.1, 0x7f.0.0.1 and 017.0.0.1" },
    { "CONNECT 0x7f000001:443 HTTP/1.1\r\n\r\n", 0, 400, "dotted-quad" },
    { "CONNECT 0177.0.0.1:443 HTTP/1.1\r\n\r\n", 0, 400, "dotted-quad" },
    { "CONNECT 2130706433:443 HTTP/1.1\r\n\r\n", 0, 400, "dotted-quad" },
    { "CONNECT 127.0.0.01:443 HTTP/1.1\r\n\r\n", 0, 400, "dotted-quad" },
    { "CONNECT 1.2.3.256:443 HTTP/1.1\r\n\r\n", 0, 400, "dotted-quad" },
    { "CONNECT 1.2.3.4.5:443 HTTP/1.1\r\n\r\n", 0, 400, "dotted-quad" },
    { "CONNECT example.0x:443 HTTP/1.1\r\n\r\n", 0, 400, "dotted-quad" },
    { "GET http://127.1/ HTTP/1.1\r\n\r\n", 0, 400, "the URL names \"127.1\"" },
    //  header lines
    { "GET http://example.org/ HTTP/1.1\r\nA: b\r\n  c\r\n\r\n", 0, 400, "(obs-fold)" },
    { "GET http://example.org/ HTTP/1.1\r\nNoColon\r\n\r\n", 0, 400, "has no colon" },
    { "GET http://example.org/ HTTP/1.1\r\nHost : example.org\r\n\r\n", 0, 400,
      "no space before the colon" },
    { "GET http://example.org/ HTTP/1.1\r\n: x\r\n\r\n", 0, 400, "is not a token" },
    //  Host against the target
    { "GET http://example.org/ HTTP/1.1\r\nHost: evil.example\r\n\r\n", 0, 400,
      "names \"evil.example\" but the request is for example.org" },
    { "GET http://example.org/ HTTP/1.1\r\nHost: example.org:8080\r\n\r\n", 0, 400,
      "names \"example.org:8080\" but the request is for example.org" },
    { "CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:8443\r\n\r\n", 0, 400,
      "names \"pypi.org:8443\" but the request is for pypi.org:443" },
    { "CONNECT 1.2.3.4:443 HTTP/1.1\r\nHost: [::ffff:1.2.3.4]:443\r\n\r\n", 0, 400,
      "but the request is for 1.2.3.4:443" },
    { "GET http://example.org/ HTTP/1.1\r\nHost:\r\n\r\n", 0, 400, "the Host header has no host" },
    { "GET http://example.org/ HTTP/1.1\r\nHost: 0x7f.1\r\n\r\n", 0, 400,
      "the Host header names \"0x7f.1\"" },
    { "GET http://example.org/ HTTP/1.1\r\nHost: u@example.org\r\n\r\n", 0, 400, "credentials" },
    //  request smuggling
    { "GET http://example.org/ HTTP/1.1\r\nHost: example.org\r\nhost: example.org\r\n\r\n", 0,
      400, "two Host headers" },
    { "POST http://example.org/ HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", 0,
      400, "two Content-Length headers" },
    { "POST http://example.org/ HTTP/1.1\r\nContent-Length: 3\r\n"
      "Transfer-Encoding: chunked\r\n\r\n", 0, 400, "Content-Length together with Transfer" },
    { "POST http://example.org/ HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 0, 400,
      "does not end in chunked" },
    { "POST http://example.org/ HTTP/1.1\r\nContent-Length: 1, 1\r\n\r\n", 0, 400,
      "not one number" },
    { "POST http://example.org/ HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 0, 400,
      "not one number" },
    { "POST http://example.org/ HTTP/1.1\r\nConnection: close, content-length\r\n"
      "Content-Length: 3\r\n\r\n", 0, 400, "names content-length, which must reach the server" },
    { "GET http://example.org/ HTTP/1.1\r\nConnection: Host\r\n\r\n", 0, 400, "names Host" },
    { "GET http://example.org/ HTTP/1.1\r\nConnection: a b\r\n\r\n", 0, 400,
      "is not a list of names" },
};

static void
test_every_refusal_has_its_status_and_words (void **state)
{
    (void) state;
    for (size_t i = 0; i < sizeof s_refusals / sizeof s_refusals [0]; i++) {
        const refusal_t *t = &s_refusals [i];
        gw_proxyreq_t r;
        int status = 0;
        char why [512] = "";
        int rc = s_parse (t->head, t->len ? t->len : strlen (t->head), &r, &status, why);
        if (rc != -EPROTO || status != t->status || !strstr (why, t->words))
            fail_msg ("%zu %s: got %d %d \"%s\", want %d with \"%s\"", i, t->head, rc, status,
                      why, t->status, t->words);
        assert_null (r.forward);
    }
}

//  "GET http://example.org/aaa... HTTP/1.1" of n bytes, then more.
static char *
s_long_line (size_t n, const char *more)
{
    char *b = malloc (n + strlen (more) + 1);
    assert_non_null (b);
    memset (b, 'a', n);
    memcpy (b, "GET http://example.org/", 23);
    memcpy (b + n - 9, " HTTP/1.1", 9);
    strcpy (b + n, more);
    return b;
}

static void
s_expect (const char *head, size_t len, int want_rc, int want_status)
{
    gw_proxyreq_t r;
    int status = 0;
    char why [512] = "";
    int rc = s_parse (head, len, &r, &status, why);
    if (rc != want_rc || status != want_status)
        fail_msg ("%zu bytes: got %d %d \"%s\", want %d %d", len, rc, status, why, want_rc,
                  want_status);
    gw_proxyreq_clear (&r);
}

static void
test_the_caps_on_a_head (void **state)
{
    (void) state;
    char *b = s_long_line (GW_PROXYREQ_LINE_MAX, "\r\n\r\n");
    s_expect (b, strlen (b), 0, 0);
    s_expect (b, GW_PROXYREQ_LINE_MAX + 1, -EAGAIN, 0);     //  its CR: the LF may follow
    free (b);
    b = s_long_line (GW_PROXYREQ_LINE_MAX + 1, "\r\n\r\n");
    s_expect (b, strlen (b), -EPROTO, 414);
    s_expect (b, GW_PROXYREQ_LINE_MAX + 1, -EPROTO, 414);   //  too long before it ends
    free (b);
    //  A head of exactly HEAD_MAX bytes, padded in one header; one byte more is too long.
    static char head [GW_PROXYREQ_HEAD_MAX + 2];
    const char *line = "GET http://example.org/ HTTP/1.1\r\nX-Pad: ";
    size_t n = strlen (line);
    memset (head, 'p', sizeof head - 1);
    memcpy (head, line, n);
    memcpy (head + GW_PROXYREQ_HEAD_MAX - 4, "\r\n\r\n", 5);
    s_expect (head, GW_PROXYREQ_HEAD_MAX, 0, 0);
    s_expect (head, GW_PROXYREQ_HEAD_MAX - 1, -EAGAIN, 0);
    memset (head, 'p', sizeof head - 1);
    memcpy (head, line, n);
    memcpy (head + GW_PROXYREQ_HEAD_MAX - 3, "\r\n\r\n", 5);
    s_expect (head, GW_PROXYREQ_HEAD_MAX + 1, -EPROTO, 431);
    s_expect (head, GW_PROXYREQ_HEAD_MAX, -EPROTO, 431);
    s_expect (head, GW_PROXYREQ_HEAD_MAX - 1, -EAGAIN, 0);
    //  100 header lines, then 101.
    n = 0;
    n += (size_t) sprintf (head + n, "GET http://example.org/ HTTP/1.1\r\n");
    for (int i = 0; i < GW_PROXYREQ_FIELDS_MAX; i++)
        n += (size_t) sprintf (head + n, "X-%d: %d\r\n", i, i);
    strcpy (head + n, "\r\n");
    s_expect (head, n + 2, 0, 0);
    strcpy (head + n, "X-Last: 1\r\n\r\n");
    s_expect (head, n + 13, -EPROTO, 431);
    s_expect (head, n + 11, -EPROTO, 431);                  //  as soon as the line is in
}

static void
test_a_refusal_is_one_complete_response (void **state)
{
    (void) state;
    size_t len = 0;
    char *r = gw_proxyreq_response (403, "egress to evil.example:443 is refused:\r\n"
                                    "no rule allows it\x01 \xc3\xa9", &len);
    const char *want = "HTTP/1.1 403 Forbidden - egress to evil.example:443 is refused:  no "
                       "rule allows it  ??\r\n"
                       "Content-Type: text/plain; charset=utf-8\r\n"
                       "Content-Length: 62\r\n"
                       "Connection: close\r\n"
                       "X-Cellvm-Egress: refused\r\n"
                       "\r\n"
                       "egress to evil.example:443 is refused:  no rule allows it  ??\n";
    assert_non_null (r);
    assert_int_equal (len, strlen (want));
    assert_memory_equal (r, want, len);
    assert_int_equal (strlen (strstr (want, "\r\n\r\n") + 4), 62);
    free (r);
    struct { int status; const char *words, *want; } more [] = {
        { 431, "x", "HTTP/1.1 431 Request Header Fields Too Large - x\r\n" },
        { 505, "x", "HTTP/1.1 505 HTTP Version Not Supported - x\r\n" },
        { 502, "x", "HTTP/1.1 502 Bad Gateway - x\r\n" },
        { 599, "x", "HTTP/1.1 599 Server Error - x\r\n" },
        { 42, "x", "HTTP/1.1 500 Internal Server Error - x\r\n" },
        { 400, NULL, "HTTP/1.1 400 Bad Request\r\n" },
    };
    for (size_t i = 0; i < sizeof more / sizeof more [0]; i++) {
        r = gw_proxyreq_response (more [i].status, more [i].words, &len);
        assert_non_null (r);
        assert_memory_equal (r, more [i].want, strlen (more [i].want));
        const char *body = strstr (r, "\r\n\r\n") + 4;
        assert_string_equal (body, more [i].words ? "x\n" : "\n");
        assert_int_equal (len, (size_t) (body - r) + strlen (body));
        free (r);
    }
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_real_clients_heads_name_where_to_connect),
        cmocka_unit_test (test_every_prefix_of_a_head_asks_for_more),
        cmocka_unit_test (test_a_forwarded_head_drops_what_was_for_the_proxy),
        cmocka_unit_test (test_heads_a_proxy_takes),
        cmocka_unit_test (test_every_refusal_has_its_status_and_words),
        cmocka_unit_test (test_the_caps_on_a_head),
        cmocka_unit_test (test_a_refusal_is_one_complete_response),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
