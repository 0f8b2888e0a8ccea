/*  gw_egreply - the remote-kernel protocol of Jupyter Enterprise Gateway and
    Gateway Provisioners, launcher side, as a pure codec (no sockets).

    The front gives the launcher an RSA public key (base64 of the DER
    SubjectPublicKeyInfo, the PEM body without its lines). The launcher
    answers with one TCP connection to the response address carrying

        base64 (JSON {"version": 1, "key": K, "conn_info": C})
        C = base64 (AES-128-ECB (PKCS#7 (connection info JSON), aes_key))
        K = base64 (RSA-PKCS#1-v1.5-encrypt (aes_key))

    where aes_key is 16 random bytes, wrapped as they are (not base64'd
    first). Then the front sends, one JSON object per connection to the
    launcher's comm port, {"signum": N} or {"shutdown": 1}, and reads
    nothing back. See docs/cluster.md.
*/
#ifndef GW_EGREPLY_H
#define GW_EGREPLY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct _gw_egreply_t gw_egreply_t;

#define GW_EGREPLY_AES_KEY 16                   //  bytes of the AES-128 key
#define GW_EGREPLY_MIN_BITS 1024                //  EG and GP make 1024-bit keys
#define GW_EGREPLY_MAX_BITS 4096
#define GW_EGREPLY_KEY_MAX 4096                 //  longest public key text accepted
#define GW_EGREPLY_REQ_MAX 1024                 //  longest comm request accepted

//  The encryptor for the front's public key: base64 (no whitespace) of a
//  DER SubjectPublicKeyInfo holding an RSA key of MIN_BITS..MAX_BITS. NULL
//  with the reason in err (not base64, not a public key, not RSA, N bits).
gw_egreply_t *gw_egreply_new (const char *public_key, char *err, size_t errlen);

void gw_egreply_destroy (gw_egreply_t **self_p);

//  The key's size in bits.
int gw_egreply_bits (const gw_egreply_t *self);

//  The version-1 payload for conn_info (a JSON text, sent as it is), with
//  aes_key as the AES key (the caller draws it: tests choose theirs). A new
//  NUL-terminated base64 string the caller frees, or NULL with err.
char *gw_egreply_build (gw_egreply_t *self, const char *conn_info,
                        const uint8_t aes_key [GW_EGREPLY_AES_KEY], char *err, size_t errlen);

//  One comm-port request, as the front sends it.
typedef struct {
    int signum;                                 //  0..64, -1 when absent
    bool shutdown;                              //  "shutdown" present and true or non-zero
} gw_egreq_t;

//  Parse the bytes of one comm connection: a JSON object with "signum" (an
//  integer 0..64) and/or "shutdown"; other keys are ignored. 0, or -EMSGSIZE
//  (over GW_EGREPLY_REQ_MAX) / -EBADMSG with the reason in err.
int gw_egreply_request (const char *data, size_t len, gw_egreq_t *req, char *err,
                        size_t errlen);

#endif
