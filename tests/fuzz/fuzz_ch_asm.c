/*  fuzz_ch_asm - the channel's message assembler on an arbitrary byte stream.

    This is what the gateway, the kernel and init do with bytes from their
    peer: feed them to ch_asm in arbitrary chunk sizes, under small caps so
    that the oversize paths run. The first input byte picks the chunk size,
    the second the caps and whether sync markers are allowed; the chunk
    size's low bit turns on the gateway's raw stream texts (ch_msg_decode_lazy).
    Every message that comes out must respect the caps and survive
    ch_msg_encode -> ch_msg_decode unchanged (a raw text: as jansson reads
    it); every failure must say why.
*/
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ch_asm.h"

static void
s_check (const ch_msg_t *msg, const ch_limits_t *lim)
{
    size_t len = 0, total = 0;
    char *text = ch_msg_encode (msg, &len);
    ch_msg_t *back = NULL;
    char err [128];
    if (ch_msg_decode ((const uint8_t *) text, len, &back, err, sizeof err) != 0
        || !json_equal (ch_msg_header (back), ch_msg_header (msg))
        || ch_msg_channel (back) != ch_msg_channel (msg)
        || ch_msg_nbuffers_expected (back) != ch_msg_nbuffers (msg))
        abort ();
    size_t rawlen = 0;
    const uint8_t *raw = ch_msg_raw_content (msg, &rawlen);
    json_t *content = raw ? json_loadb ((const char *) raw, rawlen, 0, NULL)
                          : json_incref (ch_msg_content (msg));
    if (!content || !json_equal (ch_msg_content (back), content))
        abort ();                               //  raw text jansson refuses, or lost
    json_decref (content);
    for (size_t i = 0; i < ch_msg_nbuffers (msg); i++) {
        size_t blen = 0;
        ch_msg_buffer (msg, i, &blen);
        if (blen > lim->max_buffer)
            abort ();
        total += blen;
    }
    if (total > lim->max_msg)
        abort ();
    ch_msg_destroy (&back);
    free (text);
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t chunk = (size_t) data [0] + 1;
    ch_limits_t lim = { .max_frame = 1u << (8 + (data [1] & 7)),
                        .max_msg = 1u << (8 + ((data [1] >> 3) & 7)),
                        .max_buffer = 64u << ((data [1] >> 6) & 1) };
    bool sync = data [1] & 0x80;
    data += 2, size -= 2;
    ch_asm_t *a = ch_asm_new (&lim);
    if (sync)
        ch_asm_allow_sync (a);
    if (chunk & 1)
        ch_asm_set_raw_stream (a, 1);
    while (size > 0) {
        size_t used = 0;
        ch_msg_t *msg = NULL;
        int rc = ch_asm_feed (a, data, size < chunk ? size : chunk, &used, &msg);
        if (rc < 0 && !ch_asm_why (a) [0])
            abort ();                           //  every failure says why
        if (rc == -EMSGSIZE && !ch_asm_dropped (a) && !ch_asm_why (a) [0])
            abort ();
        if (msg)
            s_check (msg, ch_asm_limits (a));
        ch_msg_destroy (&msg);
        if (rc == -EPROTO) {
            if (!ch_asm_broken (a))
                abort ();
            break;                              //  bad length: the stream is dead
        }
        if (used == 0 && !msg && rc == 0)
            abort ();                           //  no progress and nothing out
        data += used;
        size -= used;
    }
    ch_asm_destroy (&a);
    return 0;
}
