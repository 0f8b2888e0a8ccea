/*  fuzz_gw_wire - gw_wire_decode on arbitrary multipart messages.

    Input layout: a sequence of frames, each a 2-byte big-endian length and
    that many bytes (a short last frame takes what is left). The frames are
    decoded twice: by a keyed codec (what a peer without the key faces; the
    seeds carry some validly signed messages) and by a keyless one, so the
    JSON checks are reachable from any input. Whatever either accepts must
    survive encode -> decode through a third codec unchanged.
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/gw_wire.h"

#define KEY "e8bd966f-188aaf0fb9d983f3cf49159a"

static gw_wire_t *
s_wire (const char *key, size_t history)
{
    gw_hmac_t *hmac = gw_hmac_new ("hmac-sha256", (const uint8_t *) key, strlen (key));
    gw_wire_t *wire = gw_wire_new (&hmac, 1u << 20);
    gw_wire_set_history (wire, history);
    return wire;
}

static gw_frames_t *
s_split (const uint8_t *data, size_t size)
{
    gw_frames_t *frames = gw_frames_new ();
    while (size >= 2) {
        size_t len = (size_t) data [0] << 8 | data [1];
        data += 2;
        size -= 2;
        if (len > size)
            len = size;
        gw_frames_append (frames, data, len);
        data += len;
        size -= len;
    }
    return frames;
}

//  Accepted messages must come back identical through our own encoder.
static void
s_round_trip (gw_wire_t *wire, ch_msg_t *msg, gw_frames_t *ids)
{
    gw_frames_t *sent = gw_wire_encode (wire, ids, msg);
    if (!sent)
        abort ();
    ch_msg_t *back = NULL;
    gw_frames_t *back_ids = NULL;
    const char *why = NULL;
    if (gw_wire_decode (wire, ch_msg_channel (msg), gw_frames_array (sent),
                        gw_frames_size (sent), &back, &back_ids, &why) != 0
        || !json_equal (ch_msg_header (back), ch_msg_header (msg))
        || !json_equal (ch_msg_content (back), ch_msg_content (msg))
        || ch_msg_nbuffers (back) != ch_msg_nbuffers (msg)
        || gw_frames_size (back_ids) != gw_frames_size (ids))
        abort ();
    ch_msg_destroy (&back);
    gw_frames_destroy (&back_ids);
    gw_frames_destroy (&sent);
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    static gw_wire_t *keyed, *keyless, *rt;
    if (!keyed) {
        keyed = s_wire (KEY, 64);
        keyless = s_wire ("", 0);
        rt = s_wire (KEY, 0);                   //  no history: re-encoding repeats sigs
    }
    gw_frames_t *frames = s_split (data, size);
    ch_msg_t *msg = NULL;
    gw_frames_t *ids = NULL;
    const char *why = NULL;
    gw_wire_t *codecs [2] = { keyed, keyless };
    for (int i = 0; i < 2; i++) {
        if (gw_wire_decode (codecs [i], CH_SHELL, gw_frames_array (frames),
                            gw_frames_size (frames), &msg, &ids, &why) == 0)
            s_round_trip (rt, msg, ids);
        else if (!why || msg || ids)
            abort ();                           //  failures say why and leave nothing
        ch_msg_destroy (&msg);
        gw_frames_destroy (&ids);
        //  What the gateway reads of a message that is too large, to answer it.
        why = NULL;
        if (gw_wire_decode_envelope (codecs [i], CH_CONTROL, gw_frames_array (frames),
                                     gw_frames_size (frames), &msg, &ids, &why) == 0) {
            if (!msg || !ids || ch_msg_nbuffers (msg) != 0)
                abort ();                       //  an envelope never carries buffers
        }
        else if (!why || msg || ids)
            abort ();
        ch_msg_destroy (&msg);
        gw_frames_destroy (&ids);
    }
    gw_frames_destroy (&frames);
    return 0;
}
