/*  fuzz_gw_egreply - what cellvm-remote parses from outside: the front's public key
    (gw_egreply_new, then a payload built with it) and a comm-port request
    (gw_egreply_request), both on the same bytes.

    Every refusal must explain itself; an accepted key must be RSA of the
    sizes allowed and must be able to wrap a key; a parsed request must be
    in range.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/gw_egreply.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static void
s_key (const uint8_t *data, size_t size)
{
    char *text = malloc (size + 1), err [256] = "";
    if (!text)
        return;
    memcpy (text, data, size);
    text [size] = 0;
    gw_egreply_t *reply = gw_egreply_new (text, err, sizeof err);
    free (text);
    if (!reply) {
        if (!err [0])
            abort ();
        return;
    }
    int bits = gw_egreply_bits (reply);
    if (bits < GW_EGREPLY_MIN_BITS || bits > GW_EGREPLY_MAX_BITS)
        abort ();
    static const uint8_t aes [GW_EGREPLY_AES_KEY] = { 1 };
    char *payload = gw_egreply_build (reply, "{\"kernel_id\":\"k\"}", aes, err, sizeof err);
    if (!payload) {
        fprintf (stderr, "fuzz_gw_egreply: an accepted key cannot wrap: %s\n", err);
        abort ();
    }
    free (payload);
    gw_egreply_destroy (&reply);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    gw_egreq_t req;
    char err [256] = "";
    if (gw_egreply_request ((const char *) data, size, &req, err, sizeof err) == 0) {
        if (req.signum < -1 || req.signum > 64 || (req.signum < 0 && !memchr (data, 's', size)))
            abort ();
    } else if (!err [0])
        abort ();
    if (size <= GW_EGREPLY_KEY_MAX + 1)
        s_key (data, size);
    return 0;
}
