/*  ch_jfast - jansson values from JSON text and back (see ch_jfast.h). */
#include "ch_jfast.h"
#include "ch_jscan.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

//  ---------------------------------------------------------------------------
//  Parsing. Every piece is first checked by ch_jscan, so the decoding below
//  may trust its escapes and UTF-8.

static json_t *s_value (const uint8_t *p, size_t len, size_t *i, int depth);

//  A code point as UTF-8 into out: the bytes written.
static size_t
s_put_utf8 (unsigned u, char *out)
{
    if (u < 0x80) {
        out [0] = (char) u;
        return 1;
    }
    if (u < 0x800) {
        out [0] = (char) (0xC0 | u >> 6);
        out [1] = (char) (0x80 | (u & 0x3F));
        return 2;
    }
    if (u < 0x10000) {
        out [0] = (char) (0xE0 | u >> 12);
        out [1] = (char) (0x80 | (u >> 6 & 0x3F));
        out [2] = (char) (0x80 | (u & 0x3F));
        return 3;
    }
    out [0] = (char) (0xF0 | u >> 18);
    out [1] = (char) (0x80 | (u >> 12 & 0x3F));
    out [2] = (char) (0x80 | (u >> 6 & 0x3F));
    out [3] = (char) (0x80 | (u & 0x3F));
    return 4;
}

//  The escape at s[k] ('\', checked by ch_jscan) decoded into out: the bytes
//  written; *k moves past it.
static size_t
s_unescape_one (const uint8_t *s, size_t n, size_t *k, char *out)
{
    static const char from [] = "\"\\/bfnrt", to [] = "\"\\/\b\f\n\r\t";
    uint8_t c = s [*k + 1];
    if (c != 'u') {
        *k += 2;
        out [0] = to [strchr (from, c) - from];
        return 1;
    }
    unsigned u = 0, lo = 0;
    ch_jscan_hex4 (s, n, *k + 2, &u);
    *k += 6;
    if (u >= 0xD800 && u <= 0xDBFF) {       //  a high surrogate: its low half follows
        ch_jscan_hex4 (s, n, *k + 2, &lo);
        *k += 6;
        u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
    }
    return s_put_utf8 (u, out);
}

//  The n bytes of a checked string's inside, escapes from s[k] on, decoded
//  into out (no longer than n): the length.
static size_t
s_unescape (const uint8_t *s, size_t n, size_t k, char *out)
{
    memcpy (out, s, k);
    size_t m = k;
    while (k < n) {
        m += s_unescape_one (s, n, &k, out + m);
        const uint8_t *bs = memchr (s + k, '\\', n - k);
        size_t run = (bs ? (size_t) (bs - s) : n) - k;
        memcpy (out + m, s + k, run);
        m += run;
        k += run;
    }
    return m;
}

//  The string at p[*i], checked and decoded: its bytes into *out (pointing
//  into p when it has no escapes, else into *buf, malloc'd) and *n.
static int
s_string (const uint8_t *p, size_t len, size_t *i, const char **out, size_t *n, char **buf)
{
    size_t end;
    if (ch_jscan_string (p, len, *i, &end) < 0)
        return -1;
    const uint8_t *s = p + *i + 1;
    size_t inner = end - *i - 2;
    *i = end;
    const uint8_t *bs = memchr (s, '\\', inner);
    if (!bs) {
        *out = (const char *) s;
        *n = inner;
        return 0;
    }
    *buf = malloc (inner);
    if (!*buf)
        return -1;
    *n = s_unescape (s, inner, (size_t) (bs - s), *buf);
    *out = *buf;
    return 0;
}

static json_t *
s_string_value (const uint8_t *p, size_t len, size_t *i)
{
    const char *s = NULL;
    char *buf = NULL;
    size_t n = 0;
    json_t *v = s_string (p, len, i, &s, &n, &buf) == 0 ? json_stringn_nocheck (s, n) : NULL;
    free (buf);
    return v;
}

//  A real as jansson reads one: strtod after its locale's decimal point
//  replaces '.'; a value that overflows is refused. Text strtod might read
//  otherwise here (another decimal point, too long to copy) goes to jansson.
static json_t *
s_real (const uint8_t *p, size_t n)
{
    char buf [64];
    if (n >= sizeof buf || localeconv ()->decimal_point [0] != '.')
        return json_loadb ((const char *) p, n, JSON_DECODE_ANY, NULL);
    memcpy (buf, p, n);
    buf [n] = 0;
    errno = 0;
    double d = strtod (buf, NULL);
    if ((d == HUGE_VAL || d == -HUGE_VAL) && errno == ERANGE)
        return NULL;
    return json_real (d);
}

//  A number at p[*i], an integer when it has no fraction or exponent, as
//  jansson does; an integer out of json_int_t's range is refused.
static json_t *
s_number (const uint8_t *p, size_t len, size_t *i)
{
    size_t at = *i, n;
    if (ch_jscan_value (p, len, at, i) < 0)
        return NULL;
    n = *i - at;
    for (size_t k = at; k < *i; k++)
        if (p [k] == '.' || p [k] == 'e' || p [k] == 'E')
            return s_real (p + at, n);
    char buf [24];                              //  "-" and 19 digits at most fit
    if (n >= sizeof buf)
        return NULL;
    memcpy (buf, p + at, n);
    buf [n] = 0;
    errno = 0;
    long long v = strtoll (buf, NULL, 10);
    return errno == ERANGE ? NULL : json_integer ((json_int_t) v);
}

//  One "key": value member of an object at p[*i], added to obj; a key it
//  already has is refused.
static int
s_member (const uint8_t *p, size_t len, size_t *i, json_t *obj, int depth)
{
    const char *key = NULL;
    char *buf = NULL;
    size_t n = 0, size = json_object_size (obj);
    json_t *v = NULL;
    int rc = -1;
    if (s_string (p, len, i, &key, &n, &buf) < 0)
        goto fail;
    *i = ch_jscan_ws (p, len, *i);
    if (*i >= len || p [*i] != ':')
        goto fail;
    *i = ch_jscan_ws (p, len, *i + 1);
    v = s_value (p, len, i, depth + 1);
    if (v && json_object_setn_new_nocheck (obj, key, n, v) == 0
    &&  json_object_size (obj) == size + 1)
        rc = 0;
fail:
    free (buf);
    return rc;
}

static int
s_item (const uint8_t *p, size_t len, size_t *i, json_t *arr, int depth)
{
    json_t *v = s_value (p, len, i, depth + 1);
    return v && json_array_append_new (arr, v) == 0 ? 0 : -1;
}

//  The object or array at p[*i], as ch_jscan nests them.
static json_t *
s_container (const uint8_t *p, size_t len, size_t *i, int depth)
{
    bool obj = p [*i] == '{';
    uint8_t close = obj ? '}' : ']';
    if (depth >= CH_JSCAN_DEPTH)
        return NULL;
    json_t *c = obj ? json_object () : json_array ();
    size_t k = ch_jscan_ws (p, len, *i + 1);
    if (!c || (k < len && p [k] == close))
        goto done;
    while (k < len) {
        if ((obj ? s_member (p, len, &k, c, depth) : s_item (p, len, &k, c, depth)) < 0)
            break;
        k = ch_jscan_ws (p, len, k);
        if (k < len && p [k] == close)
            goto done;
        if (k >= len || p [k] != ',')
            break;
        k = ch_jscan_ws (p, len, k + 1);
    }
    json_decref (c);
    return NULL;
done:
    *i = k + 1;
    return c;
}

static json_t *
s_value (const uint8_t *p, size_t len, size_t *i, int depth)
{
    if (*i >= len)
        return NULL;
    size_t at = *i;
    switch (p [at]) {
        case '"': return s_string_value (p, len, i);
        case '{':
        case '[': return s_container (p, len, i, depth);
        case 't':
        case 'f':
        case 'n':
            if (ch_jscan_value (p, len, at, i) < 0)
                return NULL;
            return p [at] == 't' ? json_true () : p [at] == 'f' ? json_false () : json_null ();
        default: return s_number (p, len, i);
    }
}

json_t *
ch_jfast_parse (const uint8_t *p, size_t len, size_t flags)
{
    if (!p || (flags & ~(size_t) (JSON_DECODE_ANY | JSON_REJECT_DUPLICATES)))
        return NULL;
    size_t i = ch_jscan_ws (p, len, 0);
    if (!(flags & JSON_DECODE_ANY) && (i >= len || (p [i] != '{' && p [i] != '[')))
        return NULL;
    json_t *v = s_value (p, len, &i, 0);
    if (v && ch_jscan_ws (p, len, i) != len) {
        json_decref (v);
        v = NULL;
    }
    return v;
}

json_t *
ch_jfast_loadb (const uint8_t *p, size_t len, size_t flags, json_error_t *error)
{
    json_t *v = ch_jfast_parse (p, len, flags);
    return v ? v : json_loadb ((const char *) p, len, flags, error);
}

//  ---------------------------------------------------------------------------
//  Dumping, as jansson's dump.c writes each value with no indent.

#define S_DUMP_FLAGS (JSON_COMPACT | JSON_ENSURE_ASCII | JSON_ENCODE_ANY \
                      | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION (31))
#define S_DUMP_DEPTH 512        //  deeper, or looping: json_dumps decides

typedef struct {
    char *buf;
    size_t len, cap;
    size_t flags;
} s_out_t;

//  Room for n more bytes.
static int
s_room (s_out_t *o, size_t n)
{
    if (o->cap - o->len >= n)
        return 0;
    size_t cap = o->cap ? o->cap : 256;
    while (cap - o->len < n)
        cap *= 2;
    char *buf = realloc (o->buf, cap);
    if (!buf)
        return -1;
    o->buf = buf;
    o->cap = cap;
    return 0;
}

static int
s_put (s_out_t *o, const void *src, size_t n)
{
    if (s_room (o, n) < 0)
        return -1;
    memcpy (o->buf + o->len, src, n);
    o->len += n;
    return 0;
}

//  The escape jansson writes for code point u.
static int
s_put_escape (s_out_t *o, unsigned u)
{
    static const char from [] = "\\\"\b\f\n\r\t", to [] = "\\\"bfnrt";
    const char *hit = u && u < 0x80 ? strchr (from, (int) u) : NULL;
    char seq [16];
    int n;
    if (hit)
        n = snprintf (seq, sizeof seq, "\\%c", to [hit - from]);
    else if (u < 0x10000)
        n = snprintf (seq, sizeof seq, "\\u%04X", u);
    else
        n = snprintf (seq, sizeof seq, "\\u%04X\\u%04X", 0xD800 | (u - 0x10000) >> 10,
                      0xDC00 | ((u - 0x10000) & 0x3FF));
    return s_put (o, seq, (size_t) n);
}

//  The code point of the checked UTF-8 sequence of w bytes at s.
static unsigned
s_code_point (const uint8_t *s, size_t w)
{
    if (w == 1)
        return s [0];
    unsigned u = s [0] & (0x7F >> w);
    for (size_t k = 1; k < w; k++)
        u = u << 6 | (s [k] & 0x3F);
    return u;
}

//  A string: runs that need no escape copied whole; -1 on invalid UTF-8.
static int
s_dump_string (s_out_t *o, const uint8_t *s, size_t n)
{
    bool ascii = o->flags & JSON_ENSURE_ASCII;
    size_t run = 0, k = 0;
    if (s_room (o, n + 2) < 0 || s_put (o, "\"", 1) < 0)
        return -1;                              //  at least its bytes and quotes
    while ((k = ch_jscan_plain_run (s, n, k)) < n) {
        uint8_t c = s [k];
        size_t w = c < 0x80 ? 1 : ch_jscan_utf8 (s, n, k);
        if (!w)
            return -1;
        if (c >= 0x80 && !ascii) {
            k += w;
            continue;
        }
        if (s_put (o, s + run, k - run) < 0 || s_put_escape (o, s_code_point (s + k, w)) < 0)
            return -1;
        run = k += w;
    }
    return s_put (o, s + run, n - run) < 0 || s_put (o, "\"", 1) < 0 ? -1 : 0;
}

//  A real in jansson's own words (its precision flag included).
static int
s_dump_real (s_out_t *o, const json_t *v)
{
    char *text = json_dumps (v, (o->flags & JSON_REAL_PRECISION (31)) | JSON_ENCODE_ANY);
    int rc = text ? s_put (o, text, strlen (text)) : -1;
    free (text);
    return rc;
}

static int s_dump_value (s_out_t *o, const json_t *v, int depth);

static int
s_dump_array (s_out_t *o, const json_t *v, int depth)
{
    bool compact = o->flags & JSON_COMPACT;
    if (s_put (o, "[", 1) < 0)
        return -1;
    for (size_t i = 0; i < json_array_size (v); i++)
        if ((i && s_put (o, ", ", compact ? 1 : 2) < 0)
        ||  s_dump_value (o, json_array_get (v, i), depth + 1) < 0)
            return -1;
    return s_put (o, "]", 1);
}

static int
s_dump_object (s_out_t *o, const json_t *v, int depth)
{
    bool compact = o->flags & JSON_COMPACT;
    void *first = json_object_iter ((json_t *) v);
    if (s_put (o, "{", 1) < 0)
        return -1;
    for (void *it = first; it; it = json_object_iter_next ((json_t *) v, it)) {
        if ((it != first && s_put (o, ", ", compact ? 1 : 2) < 0)
        ||  s_dump_string (o, (const uint8_t *) json_object_iter_key (it),
                           json_object_iter_key_len (it)) < 0
        ||  s_put (o, ": ", compact ? 1 : 2) < 0
        ||  s_dump_value (o, json_object_iter_value (it), depth + 1) < 0)
            return -1;
    }
    return s_put (o, "}", 1);
}

static int
s_dump_value (s_out_t *o, const json_t *v, int depth)
{
    char num [32];
    if (!v || depth > S_DUMP_DEPTH)
        return -1;
    switch (json_typeof (v)) {
        case JSON_OBJECT: return s_dump_object (o, v, depth);
        case JSON_ARRAY: return s_dump_array (o, v, depth);
        case JSON_STRING:
            return s_dump_string (o, (const uint8_t *) json_string_value (v),
                                  json_string_length (v));
        case JSON_INTEGER:
            snprintf (num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value (v));
            return s_put (o, num, strlen (num));
        case JSON_REAL: return s_dump_real (o, v);
        case JSON_TRUE: return s_put (o, "true", 4);
        case JSON_FALSE: return s_put (o, "false", 5);
        case JSON_NULL: return s_put (o, "null", 4);
    }
    return -1;
}

char *
ch_jfast_dump (const json_t *v, size_t flags, size_t *len_p)
{
    s_out_t o = { NULL, 0, 0, flags };
    if (v && !(flags & ~(size_t) S_DUMP_FLAGS)
    &&  ((flags & JSON_ENCODE_ANY) || json_is_object (v) || json_is_array (v))
    &&  s_dump_value (&o, v, 0) == 0 && s_put (&o, "", 1) == 0) {
        if (len_p)
            *len_p = o.len - 1;
        return o.buf;
    }
    //  Anything it does not handle, jansson's verdict included.
    free (o.buf);
    char *text = json_dumps (v, flags);
    if (text && len_p)
        *len_p = strlen (text);
    return text;
}
