/*  gw_wire - Jupyter multipart wire codec.

    Decoding is ordered so that an unauthenticated peer costs us as little as
    possible: size cap, delimiter, frame count, then the signature (constant
    time), then the replay history, and only then any JSON parsing.
*/
#include "wire/gw_wire.h"
#include "ch_jfast.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define S_HIST_KEY 16                           //  bytes of a signature kept
#define S_HIST_MAX (1u << 24)                   //  sanity cap on the history size
#define S_SIG_MAX 129                           //  sha512 hex + NUL

static void *
s_alloc (size_t size)
{
    void *p = malloc (size ? size : 1);
    if (!p)
        abort ();                               //  out of memory: nothing sane to do
    return p;
}

//  --------------------------------------------------------------------------
//  Replay history: the last max verified signatures, oldest evicted first.
//  Entries live in a ring in arrival order; an open-addressing index (linear
//  probing, backward-shift deletion) finds them. Only verified signatures
//  get in, and an HMAC is unpredictable without the key, so a 128-bit prefix
//  identifies a signature and its first bytes make a fair hash.

typedef struct {
    uint8_t (*ring) [S_HIST_KEY];               //  entries, in arrival order
    uint32_t *index;                            //  ring position + 1, 0 = empty
    size_t max;                                 //  ring capacity (0 = off)
    size_t mask;                                //  index slots - 1
    size_t head;                                //  oldest entry
    size_t count;                               //  entries in use
} s_history_t;

static void
s_history_reset (s_history_t *h, size_t max)
{
    free (h->ring);
    free (h->index);
    *h = (s_history_t) { .max = max < S_HIST_MAX ? max : S_HIST_MAX };
}

static size_t
s_history_home (const s_history_t *h, const uint8_t *key)
{
    uint64_t v;
    memcpy (&v, key, sizeof v);
    return (size_t) v & h->mask;
}

//  Index slot holding key, or the empty slot where it would go.
static size_t
s_history_slot (const s_history_t *h, const uint8_t *key)
{
    size_t i = s_history_home (h, key);
    while (h->index [i] && memcmp (h->ring [h->index [i] - 1], key, S_HIST_KEY) != 0)
        i = (i + 1) & h->mask;
    return i;
}

static bool
s_history_has (const s_history_t *h, const uint8_t *key)
{
    return h->index && h->index [s_history_slot (h, key)] != 0;
}

//  Empty slot i and shift later members of its probe run back into the gap.
static void
s_history_unindex (s_history_t *h, size_t i)
{
    for (size_t j = (i + 1) & h->mask; h->index [j]; j = (j + 1) & h->mask) {
        size_t k = s_history_home (h, h->ring [h->index [j] - 1]);
        //  j may move to i unless its home lies cyclically in (i, j].
        bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) {
            h->index [i] = h->index [j];
            i = j;
        }
    }
    h->index [i] = 0;
}

static void
s_history_add (s_history_t *h, const uint8_t *key)
{
    if (h->max == 0)
        return;
    if (!h->ring) {
        size_t slots = 2;
        while (slots < 2 * h->max)
            slots *= 2;
        h->ring = s_alloc (h->max * S_HIST_KEY);
        h->index = calloc (slots, sizeof *h->index);
        if (!h->index)
            abort ();
        h->mask = slots - 1;
    }
    if (h->count == h->max) {                   //  full: forget the oldest
        s_history_unindex (h, s_history_slot (h, h->ring [h->head]));
        h->head = (h->head + 1) % h->max;
        h->count--;
    }
    size_t pos = (h->head + h->count++) % h->max;
    memcpy (h->ring [pos], key, S_HIST_KEY);
    h->index [s_history_slot (h, key)] = (uint32_t) pos + 1;
}

//  History key of a verified (so well-formed, lowercase hex) signature.
static void
s_history_key (const uint8_t *hex, uint8_t key [S_HIST_KEY])
{
    for (size_t i = 0; i < S_HIST_KEY; i++) {
        uint8_t hi = hex [2 * i], lo = hex [2 * i + 1];
        hi = (uint8_t) (hi <= '9' ? hi - '0' : hi - 'a' + 10);
        lo = (uint8_t) (lo <= '9' ? lo - '0' : lo - 'a' + 10);
        key [i] = (uint8_t) (hi << 4 | (lo & 15));
    }
}

//  --------------------------------------------------------------------------
//  The codec.

struct _gw_wire_t {
    gw_hmac_t *hmac;                            //  signer, owned
    size_t max_bytes;                           //  cap on one incoming message
    s_history_t history;                        //  verified signatures seen
    ch_free_fn *adopt;                          //  releases adopted frames, NULL: copy
};

gw_wire_t *
gw_wire_new (gw_hmac_t **hmac_p, size_t max_bytes)
{
    assert (hmac_p && *hmac_p);
    gw_wire_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->hmac = *hmac_p;
    *hmac_p = NULL;
    self->max_bytes = max_bytes ? max_bytes : GW_WIRE_MAX_DEFAULT;
    s_history_reset (&self->history, GW_WIRE_HISTORY_DEFAULT);
    return self;
}

void
gw_wire_destroy (gw_wire_t **self_p)
{
    assert (self_p);
    gw_wire_t *self = *self_p;
    if (!self)
        return;
    gw_hmac_destroy (&self->hmac);
    s_history_reset (&self->history, 0);
    free (self);
    *self_p = NULL;
}

void
gw_wire_set_history (gw_wire_t *self, size_t max_entries)
{
    assert (self);
    s_history_reset (&self->history, max_entries);
}

gw_hmac_t *
gw_wire_hmac (gw_wire_t *self)
{
    assert (self);
    return self->hmac;
}

//  Size cap, delimiter and frame count. Returns the delimiter index or a
//  negative errno with *why set.
static long
s_find_delimiter (size_t max_bytes, const gw_frame_t *frames, size_t nframes,
                  const char **why)
{
    size_t total = 0;
    for (size_t i = 0; i < nframes; i++) {
        if (frames [i].size > max_bytes - total) {
            *why = "message too large";
            return -EMSGSIZE;
        }
        total += frames [i].size;
    }
    size_t d = 0;
    while (d < nframes && !(frames [d].size == GW_WIRE_DELIM_LEN
                            && memcmp (frames [d].data, GW_WIRE_DELIM, GW_WIRE_DELIM_LEN) == 0))
        d++;
    if (d == nframes) {
        *why = "missing <IDS|MSG> delimiter";
        return -EBADMSG;
    }
    if (nframes - d - 1 < 5) {
        *why = "too few frames";
        return -EBADMSG;
    }
    return (long) d;
}

//  Signature over the four JSON frames at f[1..4], then the replay check.
static int
s_check_signature (gw_wire_t *self, const gw_frame_t *f, const char **why)
{
    if (!gw_hmac_enabled (self->hmac))
        return 0;                               //  no key: jupyter_client checks nothing
    if (f [0].size == 0) {
        *why = "unsigned message";
        return -EACCES;
    }
    if (f [0].size != gw_hmac_hexlen (self->hmac)) {
        *why = "bad signature length";
        return -EACCES;
    }
    const uint8_t *parts [4] = { f [1].data, f [2].data, f [3].data, f [4].data };
    size_t lens [4] = { f [1].size, f [2].size, f [3].size, f [4].size };
    if (!gw_hmac_verify (self->hmac, parts, lens, 4, f [0].data, f [0].size)) {
        *why = "bad signature";
        return -EACCES;
    }
    uint8_t key [S_HIST_KEY];
    s_history_key (f [0].data, key);
    if (s_history_has (&self->history, key)) {
        *why = "replayed signature";
        return -EALREADY;
    }
    s_history_add (&self->history, key);
    return 0;
}

//  Parse one frame that must hold a JSON object.
static json_t *
s_parse_object (const gw_frame_t *f, const char *bad_json, const char *not_object,
                const char **why)
{
    json_error_t jerr;
    json_t *v = ch_jfast_loadb (f->data, f->size, JSON_DECODE_ANY, &jerr);
    if (!v)
        *why = bad_json;
    else if (!json_is_object (v)) {
        *why = not_object;
        json_decref (v);
        v = NULL;
    }
    return v;
}

//  Build the message from the four JSON frames at f[0..3].
static ch_msg_t *
s_build_msg (ch_channel_t ch, const gw_frame_t *f, const char **why)
{
    ch_msg_t *msg = NULL;
    json_t *parent = NULL, *metadata = NULL, *content = NULL;
    json_t *header = s_parse_object (&f [0], "header is not valid JSON",
                                     "header is not a JSON object", why);
    if (!header)
        goto fail;
    parent = s_parse_object (&f [1], "parent_header is not valid JSON",
                             "parent_header is not a JSON object", why);
    metadata = parent ? s_parse_object (&f [2], "metadata is not valid JSON",
                                        "metadata is not a JSON object", why) : NULL;
    content = metadata ? s_parse_object (&f [3], "content is not valid JSON",
                                         "content is not a JSON object", why) : NULL;
    if (!content)
        goto fail;
    if (!json_is_string (json_object_get (header, "msg_id"))) {
        *why = "header.msg_id is not a string";
        goto fail;
    }
    if (json_string_length (json_object_get (header, "msg_type")) == 0) {
        *why = "header.msg_type is not a non-empty string";
        goto fail;
    }
    msg = ch_msg_from_parts (ch, &header, &parent, &metadata, &content);
fail:
    json_decref (header);
    json_decref (parent);
    json_decref (metadata);
    json_decref (content);
    return msg;
}

void
gw_wire_set_adopt (gw_wire_t *self, ch_free_fn *free_fn)
{
    assert (self);
    self->adopt = free_fn;
}

static void
s_attach_buffers (gw_wire_t *self, ch_msg_t *msg, const gw_frame_t *f, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (self->adopt && f [i].owner && f [i].size) {
            ch_msg_add_buffer_owned (msg, f [i].data, f [i].size, self->adopt, f [i].owner);
            continue;
        }
        uint8_t *copy = s_alloc (f [i].size);
        if (f [i].size)
            memcpy (copy, f [i].data, f [i].size);
        int rc = ch_msg_add_buffer (msg, &copy, f [i].size);
        assert (rc == 0);                       //  the count was checked before
        (void) rc;
    }
}

int
gw_wire_decode (gw_wire_t *self, ch_channel_t ch, const gw_frame_t *frames,
                size_t nframes, ch_msg_t **msg_p, gw_frames_t **ids_p, const char **why)
{
    assert (self && msg_p && ids_p && ch < CH_COUNT);
    assert (frames || nframes == 0);
    const char *reason = NULL;
    *msg_p = NULL;
    *ids_p = NULL;
    long d = s_find_delimiter (self->max_bytes, frames, nframes, &reason);
    int rc = d < 0 ? (int) d : s_check_signature (self, &frames [d + 1], &reason);
    if (rc < 0)
        goto fail;
    size_t nbuf = nframes - (size_t) d - 6;
    if (nbuf > CH_MSG_MAX_BUFFERS) {
        reason = "too many buffers";
        rc = -EMSGSIZE;
        goto fail;
    }
    ch_msg_t *msg = s_build_msg (ch, &frames [d + 2], &reason);
    if (!msg) {
        rc = -EBADMSG;
        goto fail;
    }
    s_attach_buffers (self, msg, &frames [d + 6], nbuf);
    *ids_p = gw_frames_new ();
    for (long i = 0; i < d; i++)
        gw_frames_append (*ids_p, frames [i].data, frames [i].size);
    *msg_p = msg;
    return 0;
fail:
    if (why)
        *why = reason;
    return rc;
}

int
gw_wire_decode_envelope (gw_wire_t *self, ch_channel_t ch, const gw_frame_t *frames,
                         size_t nframes, ch_msg_t **msg_p, gw_frames_t **ids_p,
                         const char **why)
{
    assert (self && msg_p && ids_p && ch < CH_COUNT);
    const char *reason = NULL;
    *msg_p = NULL;
    *ids_p = NULL;
    size_t d = 0;
    while (d < nframes && !(frames [d].size == GW_WIRE_DELIM_LEN
                            && memcmp (frames [d].data, GW_WIRE_DELIM, GW_WIRE_DELIM_LEN) == 0))
        d++;
    //  Identities, delimiter, signature and the four JSON frames, capped.
    long rc = d + 6 <= nframes ? s_find_delimiter (GW_WIRE_ENVELOPE_MAX, frames, d + 6, &reason)
                               : -EBADMSG;
    if (rc >= 0)
        rc = s_check_signature (self, &frames [d + 1], &reason);
    ch_msg_t *msg = rc < 0 ? NULL : s_build_msg (ch, &frames [d + 2], &reason);
    if (!msg) {
        if (why)
            *why = reason ? reason : "malformed";
        return rc < 0 ? (int) rc : -EBADMSG;
    }
    *ids_p = gw_frames_new ();
    for (size_t i = 0; i < d; i++)
        gw_frames_append (*ids_p, frames [i].data, frames [i].size);
    *msg_p = msg;
    return 0;
}

size_t
gw_wire_size (const gw_frame_t *frames, size_t nframes)
{
    size_t total = 0;
    for (size_t i = 0; i < nframes; i++)
        total += frames [i].size;
    return total;
}

//  Compact UTF-8 JSON of one part; jansson cannot hold NaN, so it is strict.
static char *
s_dump (const json_t *v, size_t *len_p)
{
    char *text = ch_jfast_dump (v, JSON_COMPACT, len_p);
    if (!text)
        abort ();                               //  only fails out of memory
    return text;
}

gw_frames_t *
gw_wire_encode (gw_wire_t *self, const gw_frames_t *ids, const ch_msg_t *msg)
{
    gw_frames_t *out = gw_wire_encode_head (self, ids, msg);
    for (size_t i = 0; out && i < ch_msg_nbuffers (msg); i++) {
        size_t len = 0;
        const uint8_t *buf = ch_msg_buffer (msg, i, &len);
        gw_frames_append (out, buf, len);
    }
    return out;
}

//  Raw content (ch_msg_raw_content) goes out as it came in.
static uint8_t *
s_memdup (const uint8_t *data, size_t len)
{
    uint8_t *copy = malloc (len ? len : 1);
    if (!copy)
        abort ();
    memcpy (copy, data, len);
    return copy;
}

gw_frames_t *
gw_wire_encode_head (gw_wire_t *self, const gw_frames_t *ids, const ch_msg_t *msg)
{
    assert (self && msg);
    gw_frames_t *out = ids ? gw_frames_dup (ids) : gw_frames_new ();
    const json_t *parts_json [4] = {
        ch_msg_header (msg), ch_msg_parent (msg), ch_msg_metadata (msg), ch_msg_content (msg)
    };
    uint8_t *parts [4];
    size_t lens [4];
    for (int i = 0; i < 3; i++)
        parts [i] = (uint8_t *) s_dump (parts_json [i], &lens [i]);
    const uint8_t *raw = ch_msg_raw_content (msg, &lens [3]);
    parts [3] = raw ? s_memdup (raw, lens [3]) : (uint8_t *) s_dump (parts_json [3], &lens [3]);
    char sig [S_SIG_MAX];
    int siglen = gw_hmac_sign (self->hmac, (const uint8_t *const *) parts, lens, 4,
                               sig, sizeof sig);
    if (siglen < 0)
        goto fail;
    gw_frames_append (out, GW_WIRE_DELIM, GW_WIRE_DELIM_LEN);
    gw_frames_append (out, sig, (size_t) siglen);
    for (int i = 0; i < 4; i++)
        gw_frames_append_take (out, &parts [i], lens [i]);
    return out;
fail:
    for (int i = 0; i < 4; i++)
        free (parts [i]);
    gw_frames_destroy (&out);
    return NULL;
}
