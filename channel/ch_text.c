/*  ch_text - stream text: JSON escaping, UTF-8 cuts, printable ASCII. */
#include "ch_text.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t
s_seq_len (unsigned char c)
{
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) return 2;
    if (c >= 0xe0 && c <= 0xef) return 3;
    if (c >= 0xf0 && c <= 0xf4) return 4;
    return 0;
}

//  Is in[0..n) a well-formed sequence (no overlongs, surrogates, > U+10FFFF)?
static int
s_seq_ok (const unsigned char *in, size_t n)
{
    for (size_t i = 1; i < n; i++)
        if ((in [i] & 0xc0) != 0x80)
            return 0;
    if (n == 3 && in [0] == 0xe0 && in [1] < 0xa0) return 0;
    if (n == 3 && in [0] == 0xed && in [1] > 0x9f) return 0;
    if (n == 4 && in [0] == 0xf0 && in [1] < 0x90) return 0;
    if (n == 4 && in [0] == 0xf4 && in [1] > 0x8f) return 0;
    return 1;
}

//  True when none of the 8 bytes of w needs a second look: all are ASCII
//  from 0x20 up, and none is '"' or '\\'. (Exact for "any byte", which is
//  all this asks.)
static inline int
s_plain8 (uint64_t w)
{
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t ctrl = (w - ones * 0x20) & ~w & highs;
    uint64_t q = w ^ (ones * '"');
    uint64_t b = w ^ (ones * '\\');
    q = (q - ones) & ~q & highs;
    b = (b - ones) & ~b & highs;
    return !((w & highs) | ctrl | q | b);
}

//  Copy whole 8-byte words that need no escaping (the common case, fast).
static inline void
s_copy_plain (const unsigned char *in, size_t len, char *out, size_t room,
              size_t *i, size_t *o)
{
    while (*i + 8 <= len && *o + 8 <= room) {
        uint64_t w;
        memcpy (&w, in + *i, 8);
        if (!s_plain8 (w))
            break;
        memcpy (out + *o, &w, 8);
        *i += 8;
        *o += 8;
    }
}

//  One ASCII byte other than NUL, escaped if JSON wants it. Returns the
//  bytes written, 0 when they do not fit in room.
static inline size_t
s_escape_ascii (unsigned char c, char *out, size_t room)
{
    static const char hex [] = "0123456789abcdef";
    if (c >= 0x20 && c != '"' && c != '\\') {
        if (room < 1)
            return 0;
        out [0] = (char) c;
        return 1;
    }
    char e [6] = { '\\', 0, '0', '0', hex [c >> 4], hex [c & 15] };
    size_t n = 2;
    switch (c) {
        case '"':  e [1] = '"'; break;
        case '\\': e [1] = '\\'; break;
        case '\n': e [1] = 'n'; break;
        case '\r': e [1] = 'r'; break;
        case '\t': e [1] = 't'; break;
        case '\b': e [1] = 'b'; break;
        case '\f': e [1] = 'f'; break;
        default:   e [1] = 'u'; n = 6;
    }
    if (n > room)
        return 0;
    memcpy (out, e, n);
    return n;
}

//  Is in[0..have) the start of a sequence cut at the end of the input?
//  Then it is held back, not replaced, so the next write can finish it.
static inline int
s_cut_prefix (const unsigned char *in, size_t have)
{
    size_t j = 1;
    while (j < have && (in [j] & 0xc0) == 0x80)
        j++;
    return j == have;
}

//  One character from a non-ASCII byte (or NUL) at in[0..len): copied when
//  well-formed, else U+FFFD (for NUL too: JSON peers refuse \u0000). Sets
//  *used; returns the bytes written, 0 to stop (no room, or a cut sequence).
static inline size_t
s_escape_multi (const unsigned char *in, size_t len, char *out, size_t room, size_t *used)
{
    unsigned char c = in [0];
    size_t n = s_seq_len (c);
    if (n > 1 && n > len && s_cut_prefix (in, len))
        return 0;
    if (c == 0 || n == 0 || n > len || !s_seq_ok (in, n)) {
        if (room < 3)
            return 0;
        memcpy (out, "\xef\xbf\xbd", 3);
        *used = 1;
        return 3;
    }
    if (n > room)
        return 0;
    memcpy (out, in, n);
    *used = n;
    return n;
}

size_t
ch_json_escape (const unsigned char *in, size_t len, char *out, size_t room,
                size_t *used)
{
    size_t i = 0, o = 0;
    while (i < len) {
        s_copy_plain (in, len, out, room, &i, &o);
        if (i >= len)
            break;
        size_t took = 1, n;
        if (in [i] < 0x80 && in [i] != 0)
            n = s_escape_ascii (in [i], out + o, room - o);
        else
            n = s_escape_multi (in + i, len - i, out + o, room - o, &took);
        if (n == 0)
            break;
        o += n;
        i += took;
    }
    *used = i;
    return o;
}

size_t
ch_utf8_tail (const uint8_t *p, size_t len)
{
    for (size_t k = 1; k <= 3 && k <= len; k++) {
        unsigned char c = p [len - k];
        if ((c & 0xc0) == 0x80)
            continue;           //  a continuation byte: look further back
        size_t n = s_seq_len (c);
        return n > k && s_cut_prefix (p + len - k, k) ? k : 0;
    }
    return 0;
}

size_t
ch_utf8_cut (const uint8_t *p, size_t len, size_t cap)
{
    if (cap < 4 || len <= cap)
        return cap < len ? cap : len;
    for (size_t j = cap - 1; j >= cap - 3; j--) {
        if ((p [j] & 0xc0) == 0x80)
            continue;
        return s_seq_len (p [j]) > cap - j ? j : cap;
    }
    return cap;
}

//  Escape text into out (room bytes, 2 kept for the closing "}), growing
//  it up to cap. A cut sequence at the end becomes U+FFFD, byte by byte.
static int
s_escape_all (const uint8_t *text, size_t len, size_t cap, char **out, size_t *room,
              size_t *o)
{
    size_t i = 0;
    while (1) {
        size_t used;
        *o += ch_json_escape (text + i, len - i, *out + *o, *room - 2 - *o, &used);
        i += used;
        if (i == len)
            return 0;
        if (*room - 2 - *o >= 6) {          //  not for want of room: a cut sequence
            memcpy (*out + *o, "\xef\xbf\xbd", 3);
            *o += 3;
            i++;
            continue;
        }
        if (*room >= cap)
            return -EMSGSIZE;
        *room = *room > cap / 2 ? cap : 2 * *room;
        char *n = realloc (*out, *room);
        if (!n)
            abort ();
        *out = n;
    }
}

int
ch_text_stream_content (const char *name, const uint8_t *text, size_t len, size_t cap,
                        uint8_t **out_p, size_t *len_p)
{
    *out_p = NULL;
    *len_p = 0;
    if (strcmp (name, "stdout") != 0 && strcmp (name, "stderr") != 0)
        return -EINVAL;
    char head [32];
    size_t hn = (size_t) snprintf (head, sizeof head, "{\"name\":\"%s\",\"text\":\"", name);
    if (cap < hn + 2 + len)
        return -EMSGSIZE;       //  escaping never shortens a text
    size_t room = hn + 2 + len + len / 16 + 64, o = hn;
    room = room < cap ? room : cap;
    char *out = malloc (room);
    if (!out)
        abort ();
    memcpy (out, head, hn);
    if (s_escape_all (text, len, cap, &out, &room, &o) < 0) {
        free (out);
        return -EMSGSIZE;
    }
    memcpy (out + o, "\"}", 2);
    *out_p = (uint8_t *) out;
    *len_p = o + 2;
    return 0;
}

void
ch_text_printable (char *text, const char *also)
{
    for (unsigned char *p = (unsigned char *) text; *p; p++)
        if (*p < 0x20 || *p > 0x7e || (also && strchr (also, *p)))
            *p = '?';
}
