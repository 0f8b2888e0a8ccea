/*  gw_hmac - Jupyter message signatures (HMAC over the four JSON frames).

    The key is the connection file's "key" string, used as its bytes (it is
    NOT hex-decoded). An empty key disables signing, as in jupyter_client:
    sign gives "" and verify accepts anything. Uses OpenSSL 3 EVP_MAC.
    One object must not be used from two threads at once.
*/
#ifndef GW_HMAC_H
#define GW_HMAC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct _gw_hmac_t gw_hmac_t;

//  True when scheme is "hmac-" + one of md5 sha1 sha224 sha256 sha384 sha512.
bool gw_hmac_scheme_supported (const char *scheme);

//  New signer for scheme with a copy of the key. NULL if the scheme is not
//  supported (checked even when keylen is 0). keylen 0 => signing disabled.
gw_hmac_t *gw_hmac_new (const char *scheme, const uint8_t *key, size_t keylen);

//  Destroy, wiping the key; nulls *self_p. NULL-safe.
void gw_hmac_destroy (gw_hmac_t **self_p);

//  False when the key is empty (messages are neither signed nor checked).
bool gw_hmac_enabled (const gw_hmac_t *self);

//  Length of a hex signature: 64 for sha256, 128 for sha512, 0 when disabled.
size_t gw_hmac_hexlen (const gw_hmac_t *self);

//  Hex-sign the concatenation of n parts. Writes lowercase hex and a NUL into
//  out (cap >= hexlen + 1). Returns the hex length (0 when disabled), or
//  -ENOSPC when cap is too small, -EIO when OpenSSL fails.
int gw_hmac_sign (gw_hmac_t *self, const uint8_t *const *parts, const size_t *lens,
                  size_t n, char *out, size_t cap);

//  Constant-time check (CRYPTO_memcmp) of a hex signature over n parts; the
//  length is checked first. Always true when disabled.
bool gw_hmac_verify (gw_hmac_t *self, const uint8_t *const *parts, const size_t *lens,
                     size_t n, const uint8_t *sig, size_t siglen);

#endif
