/*  test_gw_tlspeek - the server name of ClientHellos that real clients sent
    (OpenSSL's s_client, curl, Python's ssl: captured once into the fuzz
    seeds), every prefix of one asking for more, hellos built byte by byte
    and split over records of any size, and each way a hello is refused.
*/
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/gw_tlspeek.h"

typedef struct {
    uint8_t b [3 * GW_TLSPEEK_MAX];
    size_t n;
} buf_t;

static void
s_put (buf_t *b, const void *p, size_t n)
{
    assert_true (b->n + n <= sizeof b->b);
    memcpy (b->b + b->n, p, n);
    b->n += n;
}

static void
s_int (buf_t *b, size_t v, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--) {
        uint8_t c = (uint8_t) (v >> (8 * i));
        s_put (b, &c, 1);
    }
}

//  An extension: type, then its body with a 2-byte length.
static void
s_ext (buf_t *b, unsigned type, const buf_t *body)
{
    s_int (b, type, 2);
    s_int (b, body->n, 2);
    s_put (b, body->b, body->n);
}

//  A server_name extension's body holding one entry of type for name.
static void
s_sni_body (buf_t *b, unsigned type, const char *name, size_t len)
{
    s_int (b, 3 + len, 2);
    s_int (b, type, 1);
    s_int (b, len, 2);
    s_put (b, name, len);
}

//  A ClientHello handshake message around the extensions block exts (NULL: none).
static void
s_hello (buf_t *hs, const buf_t *exts)
{
    static buf_t body;
    body.n = 0;
    s_int (&body, 0x0303, 2);
    uint8_t random [32] = { 0 };
    s_put (&body, random, sizeof random);
    s_int (&body, 0, 1);                        //  no session id
    s_int (&body, 2, 2);
    s_int (&body, 0x1301, 2);                   //  TLS_AES_128_GCM_SHA256
    s_int (&body, 1, 1);
    s_int (&body, 0, 1);                        //  no compression
    if (exts) {
        s_int (&body, exts->n, 2);
        s_put (&body, exts->b, exts->n);
    }
    s_int (hs, 1, 1);
    s_int (hs, body.n, 3);
    s_put (hs, body.b, body.n);
}

//  hs in handshake records of at most chunk bytes each.
static void
s_records (buf_t *out, const buf_t *hs, size_t chunk)
{
    for (size_t at = 0; at < hs->n; at += chunk) {
        size_t k = hs->n - at < chunk ? hs->n - at : chunk;
        s_int (out, 0x160301, 3);
        s_int (out, k, 2);
        s_put (out, hs->b + at, k);
    }
}

static int
s_peek (const buf_t *b, char *name, size_t *need, char *why)
{
    return gw_tlspeek_sni (b->b, b->n, name, 256, need, why, 200);
}

//  A one-record hello for name, with an extra extension first.
static void
s_named (buf_t *out, const char *name)
{
    static buf_t exts, sni, alpn;
    exts.n = sni.n = alpn.n = 0;
    s_put (&alpn, "\x00\x03\x02h2", 5);
    s_ext (&exts, 16, &alpn);
    s_sni_body (&sni, 0, name, strlen (name));
    s_ext (&exts, 0, &sni);
    static buf_t hs;
    hs.n = 0;
    s_hello (&hs, &exts);
    out->n = 0;
    s_records (out, &hs, GW_TLSPEEK_MAX);
}

static void
test_real_clients_hellos_name_their_server (void **state)
{
    (void) state;
    const char *files [][2] = { { "openssl", "pypi.org" }, { "curl", "files.pythonhosted.org" },
                                { "python", "api.example.com" } };
    char dir [512], path [600], name [256], why [200];
    snprintf (dir, sizeof dir, "%s", __FILE__);
    *(strrchr (dir, '/') ? strrchr (dir, '/') : dir) = '\0';
    for (size_t i = 0; i < 3; i++) {
        static buf_t b;
        snprintf (path, sizeof path, "%s/../fuzz/seeds/fuzz_gw_tlspeek/%s", dir, files [i][0]);
        FILE *f = fopen (path, "rb");
        assert_non_null (f);
        b.n = fread (b.b, 1, sizeof b.b, f);
        fclose (f);
        size_t need = 0;
        assert_int_equal (s_peek (&b, name, &need, why), 0);
        assert_string_equal (name, files [i][1]);
        for (size_t cut = 0; cut < b.n; cut++) {    //  every prefix asks for more
            size_t whole = b.n;
            b.n = cut;
            assert_int_equal (s_peek (&b, name, &need, why), -EAGAIN);
            assert_true (need > cut && need <= whole);
            b.n = whole;
        }
    }
}

static void
test_a_hello_over_many_records_and_with_bytes_after_it (void **state)
{
    (void) state;
    static buf_t exts, sni, hs, out;
    s_sni_body (&sni, 0, "Files.PythonHosted.org.", 23);
    s_ext (&exts, 0, &sni);
    s_hello (&hs, &exts);
    const size_t chunks [] = { 1, 3, 7, 100, 5000 };
    char name [256], why [200];
    size_t need;
    for (size_t i = 0; i < sizeof chunks / sizeof chunks [0]; i++) {
        out.n = 0;
        s_records (&out, &hs, chunks [i]);
        s_put (&out, "\x17\x03\x03\x00\x01x", 6);   //  what follows is not looked at
        assert_int_equal (s_peek (&out, name, &need, why), 0);
        assert_string_equal (name, "files.pythonhosted.org");
    }
    hs.n = 0;
    s_hello (&hs, NULL);                        //  no extensions at all: no name
    out.n = 0;
    s_records (&out, &hs, 16384);
    assert_int_equal (s_peek (&out, name, &need, why), 0);
    assert_string_equal (name, "");
}

//  b refused as not TLS, with words.
static void
s_refused (const buf_t *b, const char *want)
{
    char name [256], why [200];
    size_t need;
    int rc = s_peek (b, name, &need, why);
    if (rc != -EPROTO || !strstr (why, want))
        fail_msg ("rc %d why \"%s\", want -EPROTO with \"%s\"", rc, why, want);
}

static void
test_every_malformed_hello_is_refused (void **state)
{
    (void) state;
    static buf_t b, hs, exts, sni, two, body;
    s_named (&b, "pypi.org");
    b.b [0] = 23;                               //  application data first
    s_refused (&b, "not a TLS handshake record");
    s_named (&b, "pypi.org");
    b.b [1] = 2;
    s_refused (&b, "bad version or length");
    b.n = 0;
    s_put (&b, "\x16\x03\x01\x00\x00", 5);
    s_refused (&b, "bad version or length");
    b.n = 0;
    s_put (&b, "\x16\x03\x01\x40\x01", 5);      //  16385 bytes
    s_refused (&b, "bad version or length");
    s_named (&b, "pypi.org");
    b.b [5] = 2;                                //  a ServerHello
    s_refused (&b, "not a ClientHello");
    s_named (&b, "a b.org");
    s_refused (&b, "not a DNS name");
    s_named (&b, "pypi.org");
    b.b [5 + 4 + 2 + 32] = 33;                  //  session id longer than 32
    s_refused (&b, "malformed ClientHello");
    //  Two host_names; a NUL inside one; no host_name; an extension twice.
    s_sni_body (&sni, 0, "pypi.org", 8);
    memcpy (two.b, sni.b, sni.n);
    two.n = sni.n;
    s_int (&two, 0, 1);
    s_int (&two, 8, 2);
    s_put (&two, "evil.org", 8);
    two.b [0] = 0;
    two.b [1] = (uint8_t) (two.n - 2);
    exts.n = 0;
    s_ext (&exts, 0, &two);
    hs.n = b.n = 0;
    s_hello (&hs, &exts);
    s_records (&b, &hs, 16384);
    s_refused (&b, "not one DNS name");
    const struct { unsigned type; const char *name; size_t len; const char *want; } one [] = {
        { 0, "pypi\0.org", 9, "not one DNS name" }, { 1, "pypi.org", 8, "without a host_name" },
    };
    for (size_t i = 0; i < 2; i++) {
        sni.n = exts.n = hs.n = b.n = 0;
        s_sni_body (&sni, one [i].type, one [i].name, one [i].len);
        s_ext (&exts, 0, &sni);
        s_hello (&hs, &exts);
        s_records (&b, &hs, 16384);
        s_refused (&b, one [i].want);
    }
    body.n = exts.n = hs.n = b.n = 0;
    s_ext (&exts, 16, &body);
    s_ext (&exts, 16, &body);
    s_hello (&hs, &exts);
    s_records (&b, &hs, 16384);
    s_refused (&b, "an extension twice");
    s_named (&b, "pypi.org");
    b.b [b.n - 12] = 0xff;                      //  the name's entry overruns its list
    s_refused (&b, "malformed");
}

static void
test_a_hello_longer_than_the_cap_is_too_big (void **state)
{
    (void) state;
    static buf_t b;
    s_put (&b, "\x16\x03\x01\x00\x04\x01\x00\x50\x00", 9);   //  a 20480-byte ClientHello
    char name [256], why [200];
    size_t need;
    assert_int_equal (s_peek (&b, name, &need, why), -E2BIG);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_real_clients_hellos_name_their_server),
        cmocka_unit_test (test_a_hello_over_many_records_and_with_bytes_after_it),
        cmocka_unit_test (test_every_malformed_hello_is_refused),
        cmocka_unit_test (test_a_hello_longer_than_the_cap_is_too_big),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
