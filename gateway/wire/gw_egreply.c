/*  gw_egreply - Enterprise Gateway's remote-kernel payload and comm requests
    (see gw_egreply.h). OpenSSL 3 EVP for RSA and AES, jansson for JSON.
*/
#include "wire/gw_egreply.h"

#include <assert.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/objects.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>

struct _gw_egreply_t {
    EVP_PKEY *pkey;                             //  the front's RSA public key
    int bits;                                   //  its modulus size
};

//  Strict base64 (the alphabet, '=' only at the end, a multiple of 4) into
//  a new buffer; its length in *len_p. NULL when text is not that.
static uint8_t *
s_unbase64 (const char *text, size_t n, size_t *len_p)
{
    if (n == 0 || n % 4 || n > INT_MAX)
        return NULL;
    size_t pad = text [n - 1] == '=' ? (text [n - 2] == '=' ? 2 : 1) : 0;
    for (size_t i = 0; i < n - pad; i++) {
        unsigned char c = (unsigned char) text [i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
              || c == '+' || c == '/'))
            return NULL;
    }
    uint8_t *out = malloc (n / 4 * 3 + 1);
    if (!out)
        abort ();
    int got = EVP_DecodeBlock (out, (const unsigned char *) text, (int) n);
    if (got < 0 || (size_t) got < pad) {
        free (out);
        return NULL;
    }
    *len_p = (size_t) got - pad;                //  DecodeBlock counts the padding as zeros
    return out;
}

//  base64 of len bytes, no newlines: a new NUL-terminated string.
static char *
s_base64 (const uint8_t *data, size_t len)
{
    assert (len < INT_MAX / 2);
    char *out = malloc ((len + 2) / 3 * 4 + 1);
    if (!out)
        abort ();
    EVP_EncodeBlock ((unsigned char *) out, data, (int) len);
    return out;
}

//  The RSA key in der, or NULL with err.
static EVP_PKEY *
s_rsa_key (const uint8_t *der, size_t len, int *bits_p, char *err, size_t errlen)
{
    const unsigned char *p = der;
    EVP_PKEY *pkey = len < LONG_MAX ? d2i_PUBKEY (NULL, &p, (long) len) : NULL;
    if (!pkey || p != der + len) {
        snprintf (err, errlen, "public key: not a DER SubjectPublicKeyInfo (the base64 body "
                  "of a PEM \"PUBLIC KEY\")");
        goto fail;
    }
    if (EVP_PKEY_get_base_id (pkey) != EVP_PKEY_RSA) {
        snprintf (err, errlen, "public key: not an RSA key (%s)", OBJ_nid2sn (
                  EVP_PKEY_get_base_id (pkey)));
        goto fail;
    }
    //  d2i takes any modulus; an even one, or one with small factors, fails
    //  only at encryption time. SP 800-56B's checks of a public key, now.
    EVP_PKEY_CTX *check = EVP_PKEY_CTX_new (pkey, NULL);
    int valid = check ? EVP_PKEY_public_check (check) : 0;
    EVP_PKEY_CTX_free (check);
    ERR_clear_error ();
    if (valid != 1) {
        snprintf (err, errlen, "public key: not a valid RSA public key (its modulus or "
                  "exponent fails the checks)");
        goto fail;
    }
    *bits_p = EVP_PKEY_get_bits (pkey);
    if (*bits_p < GW_EGREPLY_MIN_BITS || *bits_p > GW_EGREPLY_MAX_BITS) {
        snprintf (err, errlen, "public key: RSA key of %d bits; %d to %d are accepted",
                  *bits_p, GW_EGREPLY_MIN_BITS, GW_EGREPLY_MAX_BITS);
        goto fail;
    }
    return pkey;
fail:
    EVP_PKEY_free (pkey);
    return NULL;
}

gw_egreply_t *
gw_egreply_new (const char *public_key, char *err, size_t errlen)
{
    assert (public_key && err);
    size_t n = strnlen (public_key, GW_EGREPLY_KEY_MAX + 1), len = 0;
    if (n == 0 || n > GW_EGREPLY_KEY_MAX) {
        snprintf (err, errlen, "public key: %s", n ? "longer than 4096 characters" : "empty");
        return NULL;
    }
    uint8_t *der = s_unbase64 (public_key, n, &len);
    if (!der) {
        snprintf (err, errlen, "public key: not base64 (the PEM body without its BEGIN/END "
                  "lines and newlines)");
        return NULL;
    }
    int bits = 0;
    EVP_PKEY *pkey = s_rsa_key (der, len, &bits, err, errlen);
    free (der);
    if (!pkey)
        return NULL;
    gw_egreply_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->pkey = pkey;
    self->bits = bits;
    return self;
}

void
gw_egreply_destroy (gw_egreply_t **self_p)
{
    assert (self_p);
    gw_egreply_t *self = *self_p;
    if (!self)
        return;
    EVP_PKEY_free (self->pkey);
    free (self);
    *self_p = NULL;
}

int
gw_egreply_bits (const gw_egreply_t *self)
{
    assert (self);
    return self->bits;
}

//  base64 (RSA-PKCS#1-v1.5 (aes_key)), or NULL.
static char *
s_wrap_key (gw_egreply_t *self, const uint8_t *aes_key)
{
    char *out = NULL;
    size_t len = 0;
    uint8_t *buf = NULL;
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new (self->pkey, NULL);
    if (!ctx || EVP_PKEY_encrypt_init (ctx) <= 0
    ||  EVP_PKEY_CTX_set_rsa_padding (ctx, RSA_PKCS1_PADDING) <= 0
    ||  EVP_PKEY_encrypt (ctx, NULL, &len, aes_key, GW_EGREPLY_AES_KEY) <= 0)
        goto done;
    if (!(buf = malloc (len)))
        abort ();
    if (EVP_PKEY_encrypt (ctx, buf, &len, aes_key, GW_EGREPLY_AES_KEY) > 0)
        out = s_base64 (buf, len);
done:
    free (buf);
    EVP_PKEY_CTX_free (ctx);
    return out;
}

//  base64 (AES-128-ECB (PKCS#7 (text))), or NULL.
static char *
s_seal (const char *text, const uint8_t *aes_key)
{
    size_t n = strlen (text);
    if (n > INT_MAX / 4)
        return NULL;
    uint8_t *buf = malloc (n + 16);
    if (!buf)
        abort ();
    char *out = NULL;
    int len = 0, tail = 0;
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new ();
    if (ctx && EVP_EncryptInit_ex (ctx, EVP_aes_128_ecb (), NULL, aes_key, NULL) == 1
    &&  EVP_EncryptUpdate (ctx, buf, &len, (const uint8_t *) text, (int) n) == 1
    &&  EVP_EncryptFinal_ex (ctx, buf + len, &tail) == 1)
        out = s_base64 (buf, (size_t) (len + tail));
    EVP_CIPHER_CTX_free (ctx);
    OPENSSL_cleanse (buf, n + 16);
    free (buf);
    return out;
}

char *
gw_egreply_build (gw_egreply_t *self, const char *conn_info,
                  const uint8_t aes_key [GW_EGREPLY_AES_KEY], char *err, size_t errlen)
{
    assert (self && conn_info && aes_key && err);
    char *key = s_wrap_key (self, aes_key), *sealed = s_seal (conn_info, aes_key);
    char *text = NULL, *out = NULL;
    json_t *payload = key && sealed ? json_pack ("{s:i, s:s, s:s}", "version", 1, "key", key,
                                                 "conn_info", sealed) : NULL;
    if (payload)
        text = json_dumps (payload, JSON_COMPACT);
    if (text)
        out = s_base64 ((const uint8_t *) text, strlen (text));
    else
        snprintf (err, errlen, "cannot encrypt the connection info (OpenSSL)");
    json_decref (payload);
    free (text);
    free (sealed);
    free (key);
    return out;
}

//  "signum" of root into req, or -EBADMSG with err.
static int
s_signum (json_t *root, gw_egreq_t *req, char *err, size_t errlen)
{
    json_t *v = json_object_get (root, "signum");
    if (!v)
        return 0;
    if (!json_is_integer (v) || json_integer_value (v) < 0 || json_integer_value (v) > 64) {
        snprintf (err, errlen, "\"signum\" is not a signal number (an integer 0..64)");
        return -EBADMSG;
    }
    req->signum = (int) json_integer_value (v);
    return 0;
}

int
gw_egreply_request (const char *data, size_t len, gw_egreq_t *req, char *err, size_t errlen)
{
    assert ((data || !len) && req && err);
    req->signum = -1;
    req->shutdown = false;
    if (len > GW_EGREPLY_REQ_MAX) {
        snprintf (err, errlen, "request of over %d bytes", GW_EGREPLY_REQ_MAX);
        return -EMSGSIZE;
    }
    json_error_t jerr;
    json_t *root = len ? json_loadb (data, len, JSON_REJECT_DUPLICATES, &jerr) : NULL;
    int rc = -EBADMSG;
    if (!json_is_object (root))
        snprintf (err, errlen, "request is not a JSON object");
    else if ((rc = s_signum (root, req, err, errlen)) == 0) {
        json_t *s = json_object_get (root, "shutdown");
        req->shutdown = json_is_true (s) || (json_is_integer (s) && json_integer_value (s));
        if (req->signum < 0 && !s) {
            snprintf (err, errlen, "request has neither \"signum\" nor \"shutdown\"");
            rc = -EBADMSG;
        }
    }
    json_decref (root);
    return rc;
}
