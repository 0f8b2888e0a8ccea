/*  mc_b64 - base64 (RFC 4648, standard alphabet), only where MCP needs it. */
#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "mc_b64.h"

static const char s_alphabet [] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t
mc_b64_encoded_len (size_t len)
{
    return (len + 2) / 3 * 4;
}

//  Bytes that len characters of base64 decode to, at most.
static size_t
s_decoded_max (size_t len)
{
    return len / 4 * 3 + 3;
}

char *
mc_b64_encode (const uint8_t *data, size_t len)
{
    assert (data || len == 0);
    char *out = malloc (mc_b64_encoded_len (len) + 1);
    if (!out)
        abort ();
    char *o = out;
    size_t i = 0;
    for (; i + 3 <= len; i += 3) {
        uint32_t v = (uint32_t) data [i] << 16 | (uint32_t) data [i + 1] << 8 | data [i + 2];
        *o++ = s_alphabet [v >> 18 & 63];
        *o++ = s_alphabet [v >> 12 & 63];
        *o++ = s_alphabet [v >> 6 & 63];
        *o++ = s_alphabet [v & 63];
    }
    if (i < len) {
        uint32_t v = (uint32_t) data [i] << 16 | (i + 1 < len ? (uint32_t) data [i + 1] << 8 : 0);
        *o++ = s_alphabet [v >> 18 & 63];
        *o++ = s_alphabet [v >> 12 & 63];
        *o++ = i + 1 < len ? s_alphabet [v >> 6 & 63] : '=';
        *o++ = '=';
    }
    *o = 0;
    return out;
}

//  The 6-bit value of c, -1 for padding, -2 for whitespace, -3 otherwise.
static int
s_value (unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    if (c == '=')
        return -1;
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t')
        return -2;
    return -3;
}

//  The decoding state: bytes out, characters in the current quad, padding.
typedef struct {
    uint8_t *out;
    size_t n, quad, pads;
    uint32_t acc;
} dec_t;

//  One character; false when it cannot be there.
static bool
s_dec_char (dec_t *d, int v)
{
    if (v == -2)
        return true;
    if (v == -3 || (v >= 0 && d->pads > 0))
        return false;
    if (v == -1) {
        d->pads++;
        return d->quad + d->pads <= 4 && d->quad >= 2;
    }
    d->acc = d->acc << 6 | (uint32_t) v;
    if (++d->quad == 4) {
        d->out [d->n++] = (uint8_t) (d->acc >> 16);
        d->out [d->n++] = (uint8_t) (d->acc >> 8);
        d->out [d->n++] = (uint8_t) d->acc;
        d->quad = 0;
        d->acc = 0;
    }
    return true;
}

int
mc_b64_decode (const char *text, size_t len, uint8_t **out_p, size_t *len_p, size_t *bad_p)
{
    assert ((text || len == 0) && out_p && len_p && bad_p);
    dec_t d = { malloc (s_decoded_max (len) + 1), 0, 0, 0, 0 };
    if (!d.out)
        abort ();
    for (size_t i = 0; i < len; i++)
        if (!s_dec_char (&d, s_value ((unsigned char) text [i]))) {
            *bad_p = i;
            goto fail;
        }
    if (d.quad == 1 || (d.pads > 0 && d.quad + d.pads != 4)) {
        *bad_p = len;
        goto fail;
    }
    if (d.quad == 2)
        d.out [d.n++] = (uint8_t) (d.acc >> 4);
    else if (d.quad == 3) {
        d.out [d.n++] = (uint8_t) (d.acc >> 10);
        d.out [d.n++] = (uint8_t) (d.acc >> 2);
    }
    *out_p = d.out;
    *len_p = d.n;
    return 0;
fail:
    free (d.out);
    *out_p = NULL;
    *len_p = 0;
    return -EINVAL;
}
