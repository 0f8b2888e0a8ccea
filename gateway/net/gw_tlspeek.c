/*  gw_tlspeek - the server name of a TLS ClientHello (see gw_tlspeek.h). */
#include "net/gw_tlspeek.h"
#include "net/gw_egress.h"

#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define S_RECORD_HEAD 5                         //  type, version, length
#define S_RECORD_MAX 16384                      //  TLSPlaintext.length, at most 2^14
#define S_HANDSHAKE 22
#define S_CLIENT_HELLO 1
#define S_EXT_SERVER_NAME 0
#define S_EXT_MAX 128                           //  real clients send about 20

typedef struct {
    const uint8_t *p;
    size_t n;
} s_rd_t;

static bool
s_take (s_rd_t *r, size_t k, s_rd_t *out)
{
    if (r->n < k)
        return false;
    *out = (s_rd_t) { r->p, k };
    r->p += k;
    r->n -= k;
    return true;
}

//  A big-endian integer of k bytes (1-3), or false when r is shorter.
static bool
s_uint (s_rd_t *r, size_t k, size_t *v)
{
    s_rd_t b;
    if (!s_take (r, k, &b))
        return false;
    *v = 0;
    for (size_t i = 0; i < k; i++)
        *v = *v << 8 | b.p [i];
    return true;
}

//  A vector with a k-byte length, of at least min and at most max bytes.
static bool
s_vector (s_rd_t *r, size_t k, size_t min, size_t max, s_rd_t *out)
{
    size_t n;
    return s_uint (r, k, &n) && n >= min && n <= max && s_take (r, n, out);
}

static int
s_refuse (char *why, size_t whylen, const char *text)
{
    snprintf (why, whylen, "%s", text);
    return -EPROTO;
}

//  The handshake bytes of the records at the start of data, up to the end
//  of the first handshake message (a ClientHello), into hs (*hs_len).
static int
s_gather (const uint8_t *data, size_t len, uint8_t *hs, size_t *hs_len, size_t *need,
          char *why, size_t whylen)
{
    size_t at = 0, have = 0, want = 0;         //  0: the message's length not read yet
    while (want == 0 || have < want) {
        if (len - at < S_RECORD_HEAD) {
            *need = at + S_RECORD_HEAD;
            return -EAGAIN;
        }
        const uint8_t *h = data + at;
        size_t body = (size_t) h [3] << 8 | h [4];
        if (h [0] != S_HANDSHAKE)
            return s_refuse (why, whylen, "not a TLS handshake record");
        if (h [1] != 3 || body == 0 || body > S_RECORD_MAX)
            return s_refuse (why, whylen, "a TLS record of a bad version or length");
        if (len - at - S_RECORD_HEAD < body) {
            *need = at + S_RECORD_HEAD + body;
            return -EAGAIN;
        }
        size_t room = (want ? want : 4 + GW_TLSPEEK_MAX) - have;
        size_t k = body < room ? body : room;
        memcpy (hs + have, h + S_RECORD_HEAD, k);
        have += k;
        at += S_RECORD_HEAD + body;
        if (want == 0 && have >= 4) {
            if (hs [0] != S_CLIENT_HELLO)
                return s_refuse (why, whylen, "the first TLS message is not a ClientHello");
            size_t n = (size_t) hs [1] << 16 | (size_t) hs [2] << 8 | hs [3];
            if (n > GW_TLSPEEK_MAX)
                return -E2BIG;
            want = 4 + n;
        }
    }
    *hs_len = want;
    return 0;
}

//  The one host_name of a server_name extension's body, into name.
static int
s_server_name (s_rd_t ext, char *name, size_t cap, char *why, size_t whylen)
{
    s_rd_t list, entry;
    int names = 0;
    if (!s_vector (&ext, 2, 1, 65535, &list) || ext.n)
        return s_refuse (why, whylen, "a malformed server_name extension");
    while (list.n) {
        size_t type;
        if (!s_uint (&list, 1, &type) || !s_vector (&list, 2, 1, 65535, &entry))
            return s_refuse (why, whylen, "a malformed server_name extension");
        if (type != 0)
            continue;                           //  only host_name is defined
        char text [GW_EGRESS_NAME_MAX + 2];
        if (++names > 1 || entry.n >= sizeof text || memchr (entry.p, 0, entry.n))
            return s_refuse (why, whylen, "a server_name that is not one DNS name");
        memcpy (text, entry.p, entry.n);
        text [entry.n] = '\0';
        if (gw_egress_name (text, name, cap) < 0)
            return s_refuse (why, whylen, "a server_name that is not a DNS name");
    }
    return names == 1 ? 0 : s_refuse (why, whylen, "a server_name extension without a host_name");
}

//  The extensions block: each type once; the server_name's name into name.
static int
s_extensions (s_rd_t r, char *name, size_t cap, char *why, size_t whylen)
{
    s_rd_t all, ext;
    size_t seen [S_EXT_MAX], n = 0, type;
    if (!s_vector (&r, 2, 0, 65535, &all) || r.n)
        return s_refuse (why, whylen, "a ClientHello whose extensions overrun it");
    while (all.n) {
        if (!s_uint (&all, 2, &type) || !s_vector (&all, 2, 0, 65535, &ext))
            return s_refuse (why, whylen, "a malformed ClientHello extension");
        for (size_t i = 0; i < n; i++)
            if (seen [i] == type)
                return s_refuse (why, whylen, "a ClientHello with an extension twice");
        if (n == S_EXT_MAX)
            return s_refuse (why, whylen, "a ClientHello with too many extensions");
        seen [n++] = type;
        int rc = type == S_EXT_SERVER_NAME ? s_server_name (ext, name, cap, why, whylen) : 0;
        if (rc < 0)
            return rc;
    }
    return 0;
}

int
gw_tlspeek_sni (const uint8_t *data, size_t len, char *name, size_t cap, size_t *need,
                char *why, size_t whylen)
{
    assert ((data || len == 0) && name && cap && need && why);
    uint8_t hs [4 + GW_TLSPEEK_MAX];
    size_t hs_len = 0;
    name [0] = '\0';
    why [0] = '\0';
    *need = 0;
    int rc = s_gather (data, len, hs, &hs_len, need, why, whylen);
    if (rc < 0)
        return rc;
    s_rd_t r = { hs + 4, hs_len - 4 }, skip;
    size_t version;
    if (!s_uint (&r, 2, &version) || version >> 8 != 3 || !s_take (&r, 32, &skip)
    ||  !s_vector (&r, 1, 0, 32, &skip) || !s_vector (&r, 2, 2, 65534, &skip) || skip.n % 2
    ||  !s_vector (&r, 1, 1, 255, &skip))
        return s_refuse (why, whylen, "a malformed ClientHello");
    return r.n ? s_extensions (r, name, cap, why, whylen) : 0;
}
