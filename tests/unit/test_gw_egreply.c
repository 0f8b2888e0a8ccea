/*  test_gw_egreply - Enterprise Gateway's version-1 reply, decrypted here with the private
    half of a known key as EG's ResponseManager does; the keys refused; the comm requests. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include "wire/gw_egreply.h"
#include "egreply_keys.h"

static const uint8_t s_aes [GW_EGREPLY_AES_KEY] = {
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15
};
static const char s_info [] = "{\"shell_port\":5000,\"key\":\"k\"}";
//  base64 (AES-128-ECB (PKCS#7 (s_info), s_aes)), computed with Cryptodome.
static const char s_info_sealed [] = "97y3tW8Ncfn+OXYmHld2dC49DP7hcBhIipXqFAVPWew=";

static uint8_t *
s_unb64 (const char *text, int *len)
{
    size_t n = strlen (text);
    uint8_t *out = malloc (n);
    assert_non_null (out);
    *len = EVP_DecodeBlock (out, (const unsigned char *) text, (int) n);
    assert_true (*len >= 0);
    *len -= (n && text [n - 1] == '=') + (n > 1 && text [n - 2] == '=');
    return out;
}

//  What EG does with the key field: RSA-PKCS#1-v1.5 decrypt with its private key.
static void
s_unwrap (const char *b64, uint8_t *out, size_t *outlen)
{
    BIO *bio = BIO_new_mem_buf (s_private_pem, -1);
    EVP_PKEY *priv = PEM_read_bio_PrivateKey (bio, NULL, NULL, NULL);
    assert_non_null (priv);
    int len = 0;
    uint8_t *wrapped = s_unb64 (b64, &len);
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new (priv, NULL);
    assert_int_equal (EVP_PKEY_decrypt_init (ctx), 1);
    assert_int_equal (EVP_PKEY_CTX_set_rsa_padding (ctx, RSA_PKCS1_PADDING), 1);
    assert_int_equal (len, 128);                //  one 1024-bit block
    assert_int_equal (EVP_PKEY_decrypt (ctx, out, outlen, wrapped, (size_t) len), 1);
    EVP_PKEY_CTX_free (ctx);
    EVP_PKEY_free (priv);
    BIO_free (bio);
    free (wrapped);
}

//  The outer layer: base64 of {"version": 1, "key": ..., "conn_info": ...}, nothing else.
static json_t *
s_outer (const char *payload)
{
    int len = 0;
    uint8_t *text = s_unb64 (payload, &len);
    json_t *root = json_loadb ((const char *) text, (size_t) len, 0, NULL);
    free (text);
    assert_non_null (root);
    assert_int_equal (json_object_size (root), 3);
    assert_int_equal (json_integer_value (json_object_get (root, "version")), 1);
    assert_true (json_is_string (json_object_get (root, "key")));
    assert_true (json_is_string (json_object_get (root, "conn_info")));
    return root;
}

static void
test_gw_egreply_round_trips_against_a_known_key (void **state)
{
    (void) state;
    char err [256] = "";
    gw_egreply_t *reply = gw_egreply_new (s_public_1024, err, sizeof err);
    assert_non_null (reply);
    assert_int_equal (gw_egreply_bits (reply), 1024);
    char *payload = gw_egreply_build (reply, s_info, s_aes, err, sizeof err);
    assert_non_null (payload);
    json_t *root = s_outer (payload);
    uint8_t aes [256];
    size_t aes_len = sizeof aes;
    s_unwrap (json_string_value (json_object_get (root, "key")), aes, &aes_len);
    assert_int_equal (aes_len, GW_EGREPLY_AES_KEY);     //  the raw bytes, not base64'd first
    assert_memory_equal (aes, s_aes, GW_EGREPLY_AES_KEY);
    assert_string_equal (json_string_value (json_object_get (root, "conn_info")), s_info_sealed);
    json_decref (root);
    free (payload);
    gw_egreply_destroy (&reply);
    assert_null (reply);
    gw_egreply_destroy (&reply);
}

static void
test_gw_egreply_pads_a_whole_block (void **state)
{
    (void) state;
    char err [256];
    gw_egreply_t *reply = gw_egreply_new (s_public_2048, err, sizeof err);
    assert_non_null (reply);
    assert_int_equal (gw_egreply_bits (reply), 2048);
    char *payload = gw_egreply_build (reply, "0123456789abcdef", s_aes, err, sizeof err);
    json_t *root = s_outer (payload);
    int len = 0;
    uint8_t *sealed = s_unb64 (json_string_value (json_object_get (root, "conn_info")), &len);
    assert_int_equal (len, 32);                 //  PKCS#7: 16 bytes of text, 16 of padding
    free (sealed);
    json_decref (root);
    free (payload);
    gw_egreply_destroy (&reply);
}

static void
s_refused (const char *key, const char *words)
{
    char err [256] = "";
    gw_egreply_t *reply = gw_egreply_new (key, err, sizeof err);
    if (reply || !strstr (err, words))
        fail_msg ("key '%.40s...': got %s '%s', wanted '%s'", key, reply ? "accepted" : "refused",
                  err, words);
}

static void
test_gw_egreply_refuses_bad_keys (void **state)
{
    (void) state;
    char buf [GW_EGREPLY_KEY_MAX + 8];
    s_refused ("", "empty");
    s_refused ("not base64!", "not base64");
    s_refused ("MIGfMA0G CSqGSIb3", "not base64");
    s_refused ("-----BEGIN PUBLIC KEY-----", "not base64");
    s_refused ("eHh4eHh4eHh4eHh4", "not a DER");
    snprintf (buf, sizeof buf, "%.*s", (int) (sizeof s_public_1024 - 9), s_public_1024);
    s_refused (buf, "public key");              //  cut short
    snprintf (buf, sizeof buf, "%sAAAA", s_public_1024);
    s_refused (buf, "not");                     //  more after the key
    s_refused (s_public_ec, "not an RSA key");
    s_refused (s_public_bad_modulus, "not a valid RSA public key");
    s_refused (s_public_512, "RSA key of 512 bits; 1024 to 4096");
    memset (buf, 'A', sizeof buf - 1);
    buf [sizeof buf - 1] = 0;
    s_refused (buf, "longer than 4096");
}

static void
s_req_ok (const char *text, int signum, bool shutdown)
{
    gw_egreq_t req;
    char err [128] = "";
    assert_int_equal (gw_egreply_request (text, strlen (text), &req, err, sizeof err), 0);
    assert_int_equal (req.signum, signum);
    assert_int_equal (req.shutdown, shutdown);
}

static void
s_req_bad (const char *text, size_t len, int rc, const char *words)
{
    gw_egreq_t req;
    char err [128] = "";
    assert_int_equal (gw_egreply_request (text, len, &req, err, sizeof err), rc);
    if (!strstr (err, words))
        fail_msg ("'%.40s': '%s', wanted '%s'", text, err, words);
}

static void
test_gw_egreply_parses_comm_requests (void **state)
{
    (void) state;
    s_req_ok ("{\"signum\": 0}", 0, false);
    s_req_ok ("{\"signum\": 2}", 2, false);
    s_req_ok ("{\"signum\": 15, \"other\": []}", 15, false);
    s_req_ok ("{\"shutdown\": 1}", -1, true);
    s_req_ok ("{\"shutdown\": true}", -1, true);
    s_req_ok ("{\"shutdown\": 0}", -1, false);
    s_req_ok ("{\"signum\": 9, \"shutdown\": 1}", 9, true);
    s_req_bad ("", 0, -EBADMSG, "not a JSON object");
    s_req_bad ("[1]", 3, -EBADMSG, "not a JSON object");
    s_req_bad ("{\"sig", 5, -EBADMSG, "not a JSON object");
    s_req_bad ("{}", 2, -EBADMSG, "neither");
    s_req_bad ("{\"signum\": \"2\"}", 15, -EBADMSG, "not a signal number");
    s_req_bad ("{\"signum\": 65}", 14, -EBADMSG, "not a signal number");
    s_req_bad ("{\"signum\": -1}", 14, -EBADMSG, "not a signal number");
    s_req_bad ("{\"signum\": 2.0}", 15, -EBADMSG, "not a signal number");
    s_req_bad ("{\"signum\": 2, \"signum\": 9}", 26, -EBADMSG, "not a JSON object");
    char big [GW_EGREPLY_REQ_MAX + 2];
    memset (big, ' ', sizeof big);
    s_req_bad (big, sizeof big, -EMSGSIZE, "over 1024 bytes");
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_gw_egreply_round_trips_against_a_known_key),
        cmocka_unit_test (test_gw_egreply_pads_a_whole_block),
        cmocka_unit_test (test_gw_egreply_refuses_bad_keys),
        cmocka_unit_test (test_gw_egreply_parses_comm_requests),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
