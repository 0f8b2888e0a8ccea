/*  fuzz_ch_mux - the egress port's codec on arbitrary bytes in arbitrary pieces.

    What the gateway and the guest's proxy do with the bytes of the port:
    feed them to ch_mux in whatever pieces read() returns. The first input
    byte picks the largest piece (bits 0-2), whether the decoder hunts from
    the start (bit 3) and whether it hunts again after each refusal (bit 4),
    else stops there; the second seeds the piece sizes. The rest is decoded
    three times: a byte at a time, as much as there is at each feed, and in
    random pieces. Every frame must obey the table of ch_mux.h and be the
    input's own bytes at its place (its header re-encoded, its payload, a
    CREDIT re-encoded whole); the three runs must give the same frames, the
    same refusals at the same byte, in the same words, and end the same way.
*/
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ch_frame.h"
#include "ch_mux.h"

#define S_MAX 8192                              //  frames and refusals per run

typedef struct {
    uint8_t type;
    uint32_t stream, len, credit;
    size_t end;                                 //  the input offset just past it
} rec_t;

typedef struct {
    rec_t frames [S_MAX];
    size_t nframes;
    size_t errs [S_MAX];                        //  the byte each refusal came at
    uint32_t err_hash [S_MAX];                  //  ... and its words
    size_t nerrs;
    char last_err [256];
    bool hunting;                               //  how the decoder ended
    long last_rc;
} run_t;

static run_t s_runs [3];

static uint32_t
s_hash (const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (uint8_t) *s) * 16777619u;
    return h;
}

static uint32_t
s_get32 (const uint8_t *p)
{
    return (uint32_t) p [0] << 24 | (uint32_t) p [1] << 16 | (uint32_t) p [2] << 8 | p [3];
}

//  A frame obeys the table and is the input's bytes just before end.
static void
s_check_frame (const ch_mux_frame_t *f, const uint8_t *in, size_t end, size_t floor)
{
    static const uint32_t max [] = { 0, CH_MUX_TEXT_MAX, 0, CH_MUX_DATA_MAX, 0,
                                     CH_MUX_TEXT_MAX, 4 };
    static const uint32_t min [] = { 0, 1, 0, 1, 0, 0, 4 };
    if (f->type < CH_MUX_HELLO || f->type > CH_MUX_CREDIT
        || (f->stream == 0) != (f->type == CH_MUX_HELLO)
        || f->len < min [f->type] || f->len > max [f->type] || f->data [f->len] != 0)
        abort ();
    if (end < floor + CH_MUX_HDR + f->len)
        abort ();                               //  not all of it came since the last
    const uint8_t *at = in + end - CH_MUX_HDR - f->len;
    uint8_t hdr [CH_MUX_HDR + 4];
    if (ch_mux_encode_header (hdr, f->type, f->stream, f->len) != 0
        || memcmp (hdr, at, CH_MUX_HDR) != 0
        || memcmp (f->data, at + CH_MUX_HDR, f->len) != 0)
        abort ();
    if (f->type == CH_MUX_CREDIT
        && (f->credit != s_get32 (f->data) || f->credit < 1 || f->credit > CH_MUX_WINDOW
            || ch_mux_encode_credit (hdr, f->stream, f->credit) != 0
            || memcmp (hdr, at, sizeof hdr) != 0))
        abort ();
    if (f->type != CH_MUX_CREDIT && f->credit != 0)
        abort ();
}

//  A refusal: words that say where, the decoder dead until hunted.
static void
s_check_refusal (ch_mux_dec_t *dec)
{
    const char *err = ch_mux_dec_error (dec);
    if (!err [0] || (!strstr (err, "stream") && !strstr (err, "sync marker")))
        abort ();
    if (ch_mux_dec_feed (dec, (const uint8_t *) "\1", 1) != -EPROTO
        || ch_mux_dec_frame (dec) || ch_mux_dec_hunting (dec))
        abort ();
}

//  Byte by byte, a hunt that began at from ends exactly at the end of the
//  first marker since, at (SIZE_MAX: still hunting at the end, n).
static void
s_check_hunt (const uint8_t *in, size_t n, size_t from, size_t at)
{
    const uint8_t *m = memmem (in + from, n - from, CH_FRAME_SYNC, CH_FRAME_SYNC_LEN);
    if (at == SIZE_MAX ? m != NULL : !m || (size_t) (m - in) + CH_FRAME_SYNC_LEN != at)
        abort ();
}

static uint32_t s_seed;

//  The next piece: all that is left (piece 0), else 1..piece bytes of it.
static size_t
s_piece (size_t piece, size_t left)
{
    if (piece == 0)
        return left;
    s_seed = s_seed * 1103515245u + 12345u;
    size_t k = 1 + (s_seed >> 8) % piece;
    return k < left ? k : left;
}

static bool
s_frame_taken (run_t *r, ch_mux_dec_t *dec, const uint8_t *in, size_t at, size_t *floor)
{
    const ch_mux_frame_t *f = ch_mux_dec_frame (dec);
    if (!f)
        return false;
    if (ch_mux_dec_frame (dec) || r->nframes == S_MAX)
        abort ();
    s_check_frame (f, in, at, *floor);
    r->frames [r->nframes++] = (rec_t) { (uint8_t) f->type, f->stream, f->len, f->credit, at };
    *floor = at;
    return true;
}

//  One run over in. ref: the byte-at-a-time run, whose refusals tell
//  where each refusal must come (NULL: this is that run).
static void
s_run (run_t *r, const run_t *ref, const uint8_t *in, size_t n, size_t piece, int flags)
{
    ch_mux_dec_t *dec = ch_mux_dec_new ();
    if (!dec)
        abort ();
    if (flags & 8)
        ch_mux_dec_hunt (dec);
    size_t at = 0, floor = 0, hunt_from = flags & 8 ? 0 : SIZE_MAX;
    r->nframes = r->nerrs = 0;
    r->last_err [0] = '\0';
    r->last_rc = 0;
    while (at < n) {
        size_t chunk = s_piece (piece, n - at);
        long used = ch_mux_dec_feed (dec, in + at, chunk);
        r->last_rc = used;
        if (used >= 0) {
            if ((size_t) used > chunk || ch_mux_dec_error (dec) [0])
                abort ();
            at += (size_t) used;
            if (!ref && hunt_from != SIZE_MAX && !ch_mux_dec_hunting (dec)) {
                s_check_hunt (in, n, hunt_from, at);
                hunt_from = SIZE_MAX;
            }
            if (!s_frame_taken (r, dec, in, at, &floor) && (size_t) used != chunk)
                abort ();                       //  stopped short with no frame
            continue;
        }
        if (used != -EPROTO || r->nerrs == S_MAX)
            abort ();
        size_t e = ref ? ref->errs [r->nerrs] : at;
        if (ref && (r->nerrs >= ref->nerrs || e < at || e >= at + chunk))
            abort ();                           //  refused elsewhere than byte by byte
        s_check_refusal (dec);
        r->errs [r->nerrs] = e;
        r->err_hash [r->nerrs++] = s_hash (ch_mux_dec_error (dec));
        snprintf (r->last_err, sizeof r->last_err, "%s", ch_mux_dec_error (dec));
        if (!(flags & 16))
            break;
        ch_mux_dec_hunt (dec);
        if (ch_mux_dec_error (dec) [0] || !ch_mux_dec_hunting (dec))
            abort ();
        at = floor = hunt_from = e + 1;
    }
    r->hunting = ch_mux_dec_hunting (dec);
    if (!ref && r->hunting)
        s_check_hunt (in, n, hunt_from, SIZE_MAX);
    ch_mux_dec_destroy (&dec);
    if (dec)
        abort ();
}

static void
s_compare (const run_t *a, const run_t *b)
{
    if (a->nframes != b->nframes || a->nerrs != b->nerrs || a->hunting != b->hunting
        || (a->last_rc < 0) != (b->last_rc < 0) || strcmp (a->last_err, b->last_err) != 0)
        abort ();
    for (size_t i = 0; i < a->nframes; i++) {
        const rec_t *x = &a->frames [i], *y = &b->frames [i];
        if (x->type != y->type || x->stream != y->stream || x->len != y->len
            || x->credit != y->credit || x->end != y->end)
            abort ();
    }
    for (size_t i = 0; i < a->nerrs; i++)
        if (a->errs [i] != b->errs [i] || a->err_hash [i] != b->err_hash [i])
            abort ();
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    static const size_t pieces [] = { 2, 3, 9, 10, 13, 64, 4096, 65536 };
    if (size < 2)
        return 0;
    size_t piece = pieces [data [0] & 7];
    int flags = data [0] & 24;
    s_seed = data [1];
    data += 2, size -= 2;
    s_run (&s_runs [0], NULL, data, size, 1, flags);
    s_run (&s_runs [1], &s_runs [0], data, size, 0, flags);
    s_run (&s_runs [2], &s_runs [0], data, size, piece, flags);
    s_compare (&s_runs [0], &s_runs [1]);
    s_compare (&s_runs [0], &s_runs [2]);
    return 0;
}
