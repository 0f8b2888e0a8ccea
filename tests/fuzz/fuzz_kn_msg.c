/*  fuzz_kn_msg - the cellvm channel decoder on an arbitrary byte stream.

    This is what the gateway does with bytes from the (untrusted) guest: feed
    them to kn_frame_dec in arbitrary chunk sizes, decode each frame with
    kn_msg_decode, and attach the announced number of buffer frames. The
    first input byte picks the chunk size. Decoded messages must survive
    kn_msg_encode -> kn_msg_decode unchanged.
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kn_frame.h"
#include "kn_msg.h"

static void
s_round_trip (const kn_msg_t *msg)
{
    size_t len = 0;
    char *text = kn_msg_encode (msg, &len);
    kn_msg_t *back = NULL;
    char err [128];
    if (kn_msg_decode ((const uint8_t *) text, len, &back, err, sizeof err) != 0
        || !json_equal (kn_msg_header (back), kn_msg_header (msg))
        || !json_equal (kn_msg_content (back), kn_msg_content (msg))
        || kn_msg_channel (back) != kn_msg_channel (msg)
        || kn_msg_nbuffers_expected (back) != kn_msg_nbuffers (msg))
        abort ();
    kn_msg_destroy (&back);
    free (text);
}

//  One complete frame: a new message, or the next buffer of *pending.
static void
s_on_frame (uint8_t *frame, size_t len, kn_msg_t **pending)
{
    if (*pending) {
        if (kn_msg_add_buffer (*pending, &frame, len) != 0)
            abort ();                           //  count was capped by decode
    }
    else {
        char err [128];
        if (kn_msg_decode (frame, len, pending, err, sizeof err) != 0 && !err [0])
            abort ();                           //  every failure says why
    }
    free (frame);
    if (*pending && kn_msg_nbuffers (*pending) == kn_msg_nbuffers_expected (*pending)) {
        s_round_trip (*pending);
        kn_msg_destroy (pending);
    }
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t chunk = (size_t) data [0] + 1;
    data++, size--;
    kn_frame_dec_t *dec = kn_frame_dec_new (1u << 16);
    kn_msg_t *pending = NULL;
    while (size > 0) {
        long n = kn_frame_dec_feed (dec, data, size < chunk ? size : chunk);
        if (n < 0)
            break;                              //  bad length: the channel is dead
        data += n;
        size -= (size_t) n;
        if (kn_frame_dec_ready (dec)) {
            size_t len = 0;
            uint8_t *frame = kn_frame_dec_take (dec, &len);
            s_on_frame (frame, len, &pending);
        }
        else if (n == 0)
            abort ();                           //  no progress and nothing ready
    }
    kn_msg_destroy (&pending);
    kn_frame_dec_destroy (&dec);
    return 0;
}
