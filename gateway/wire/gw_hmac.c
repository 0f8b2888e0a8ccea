/*  gw_hmac - Jupyter message signatures with OpenSSL 3 EVP_MAC.

    The MAC context is keyed once in gw_hmac_new; each signature works on a
    duplicate of it, so the key schedule is not redone per message.
*/
#include "wire/gw_hmac.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#define S_MAX_DIGEST 64                         //  sha512

struct _gw_hmac_t {
    EVP_MAC *mac;                               //  the HMAC algorithm
    EVP_MAC_CTX *keyed;                         //  initialised with the key
    size_t digest_len;                          //  raw digest bytes, 0 when disabled
};

//  Python hashlib names jupyter_client accepts, with their OpenSSL names.
static const struct { const char *name; const char *ossl; size_t len; } s_schemes [] = {
    { "md5", "MD5", 16 }, { "sha1", "SHA1", 20 }, { "sha224", "SHA224", 28 },
    { "sha256", "SHA256", 32 }, { "sha384", "SHA384", 48 }, { "sha512", "SHA512", 64 }
};
#define S_NSCHEMES (sizeof s_schemes / sizeof s_schemes [0])

static int
s_scheme_index (const char *scheme)
{
    if (!scheme || strncmp (scheme, "hmac-", 5) != 0)
        return -1;
    for (size_t i = 0; i < S_NSCHEMES; i++)
        if (strcmp (scheme + 5, s_schemes [i].name) == 0)
            return (int) i;
    return -1;
}

bool
gw_hmac_scheme_supported (const char *scheme)
{
    return s_scheme_index (scheme) >= 0;
}

gw_hmac_t *
gw_hmac_new (const char *scheme, const uint8_t *key, size_t keylen)
{
    int idx = s_scheme_index (scheme);
    if (idx < 0 || (keylen && !key))
        return NULL;
    gw_hmac_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    if (keylen == 0)
        return self;                            //  signing disabled
    OSSL_PARAM params [] = {
        OSSL_PARAM_construct_utf8_string (OSSL_MAC_PARAM_DIGEST,
                                          (char *) s_schemes [idx].ossl, 0),
        OSSL_PARAM_construct_end ()
    };
    self->mac = EVP_MAC_fetch (NULL, "HMAC", NULL);
    self->keyed = self->mac ? EVP_MAC_CTX_new (self->mac) : NULL;
    if (!self->keyed || !EVP_MAC_init (self->keyed, key, keylen, params))
        goto fail;
    self->digest_len = EVP_MAC_CTX_get_mac_size (self->keyed);
    if (self->digest_len != s_schemes [idx].len)
        goto fail;
    return self;
fail:
    gw_hmac_destroy (&self);
    return NULL;
}

void
gw_hmac_destroy (gw_hmac_t **self_p)
{
    assert (self_p);
    gw_hmac_t *self = *self_p;
    if (!self)
        return;
    EVP_MAC_CTX_free (self->keyed);             //  OpenSSL cleanses the key
    EVP_MAC_free (self->mac);
    free (self);
    *self_p = NULL;
}

bool
gw_hmac_enabled (const gw_hmac_t *self)
{
    assert (self);
    return self->digest_len > 0;
}

size_t
gw_hmac_hexlen (const gw_hmac_t *self)
{
    assert (self);
    return self->digest_len * 2;
}

//  Raw digest of the concatenated parts into out (digest_len bytes).
static int
s_digest (gw_hmac_t *self, const uint8_t *const *parts, const size_t *lens, size_t n,
          uint8_t *out)
{
    int rc = -EIO;
    size_t outlen = 0;
    EVP_MAC_CTX *ctx = EVP_MAC_CTX_dup (self->keyed);
    if (!ctx)
        goto fail;
    for (size_t i = 0; i < n; i++)
        if (lens [i] && !EVP_MAC_update (ctx, parts [i], lens [i]))
            goto fail;
    if (!EVP_MAC_final (ctx, out, &outlen, S_MAX_DIGEST) || outlen != self->digest_len)
        goto fail;
    rc = 0;
fail:
    EVP_MAC_CTX_free (ctx);
    return rc;
}

static void
s_hex (const uint8_t *raw, size_t len, char *out)
{
    static const char digits [] = "0123456789abcdef";
    for (size_t i = 0; i < len; i++) {
        out [2 * i] = digits [raw [i] >> 4];
        out [2 * i + 1] = digits [raw [i] & 15];
    }
    out [2 * len] = 0;
}

int
gw_hmac_sign (gw_hmac_t *self, const uint8_t *const *parts, const size_t *lens,
              size_t n, char *out, size_t cap)
{
    assert (self && out);
    assert (n == 0 || (parts && lens));
    size_t hexlen = gw_hmac_hexlen (self);
    if (cap < hexlen + 1)
        return -ENOSPC;
    out [0] = 0;
    if (hexlen == 0)
        return 0;
    uint8_t raw [S_MAX_DIGEST];
    int rc = s_digest (self, parts, lens, n, raw);
    if (rc == 0)
        s_hex (raw, self->digest_len, out);
    OPENSSL_cleanse (raw, sizeof raw);
    return rc < 0 ? rc : (int) hexlen;
}

bool
gw_hmac_verify (gw_hmac_t *self, const uint8_t *const *parts, const size_t *lens,
                size_t n, const uint8_t *sig, size_t siglen)
{
    assert (self);
    if (!gw_hmac_enabled (self))
        return true;
    char expect [2 * S_MAX_DIGEST + 1];
    size_t hexlen = gw_hmac_hexlen (self);
    if (siglen != hexlen || !sig)               //  length first: memcmp needs equal sizes
        return false;
    if (gw_hmac_sign (self, parts, lens, n, expect, sizeof expect) != (int) hexlen)
        return false;
    return CRYPTO_memcmp (expect, sig, hexlen) == 0;
}
