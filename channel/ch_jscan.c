/*  ch_jscan - validate JSON text without building it (see ch_jscan.h). */
#include "ch_jscan.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

//  A byte a string may hold as it is: printable ASCII but '"' and '\'.
static inline bool
s_plain (uint8_t c)
{
    return c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
}

size_t
ch_jscan_plain_run (const uint8_t *p, size_t len, size_t i)
{
    //  Eight bytes at a time while none is high, below 0x20, '"' or '\\'
    //  (the classic "has a zero byte" test; exact as a yes or no).
    const uint64_t ones = 0x0101010101010101u, highs = 0x8080808080808080u;
    while (i < len && len - i >= 8) {
        uint64_t w, q, b;
        memcpy (&w, p + i, 8);
        q = w ^ (ones * '"');
        b = w ^ (ones * '\\');
        if ((w | ((w - ones * 0x20) & ~w) | ((q - ones) & ~q) | ((b - ones) & ~b)) & highs)
            break;
        i += 8;
    }
    while (i < len && s_plain (p [i]))
        i++;
    return i;
}

size_t
ch_jscan_ws (const uint8_t *p, size_t len, size_t i)
{
    while (i < len && (p [i] == ' ' || p [i] == '\t' || p [i] == '\n' || p [i] == '\r'))
        i++;
    return i;
}

int
ch_jscan_hex4 (const uint8_t *p, size_t len, size_t i, unsigned *out)
{
    if (len < 4 || i > len - 4)
        return -EBADMSG;
    unsigned v = 0;
    for (size_t k = i; k < i + 4; k++) {
        unsigned c = p [k], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return -EBADMSG;
        v = v << 4 | d;
    }
    *out = v;
    return 0;
}

//  The escape at p[i] ('\'): 0 and *next past it, or -EBADMSG.
static int
s_escape (const uint8_t *p, size_t len, size_t i, size_t *next)
{
    if (i + 1 >= len)
        return -EBADMSG;
    uint8_t c = p [i + 1];
    if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n'
    ||  c == 'r' || c == 't') {
        *next = i + 2;
        return 0;
    }
    unsigned u = 0, lo = 0;
    if (c != 'u' || ch_jscan_hex4 (p, len, i + 2, &u) < 0 || u == 0
    ||  (u >= 0xDC00 && u <= 0xDFFF))
        return -EBADMSG;
    if (u < 0xD800 || u > 0xDBFF) {
        *next = i + 6;
        return 0;
    }
    //  A high surrogate: only with its low half.
    if (i + 7 >= len || p [i + 6] != '\\' || p [i + 7] != 'u'
    ||  ch_jscan_hex4 (p, len, i + 8, &lo) < 0 || lo < 0xDC00 || lo > 0xDFFF)
        return -EBADMSG;
    *next = i + 12;
    return 0;
}

size_t
ch_jscan_utf8 (const uint8_t *p, size_t len, size_t i)
{
    uint8_t c = p [i];
    size_t n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
             : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!n || len - i < n)
        return 0;
    uint8_t lo = 0x80, hi = 0xBF;           //  the second byte's range
    if (c == 0xE0) lo = 0xA0;               //  no overlong forms
    else if (c == 0xED) hi = 0x9F;          //  no surrogates
    else if (c == 0xF0) lo = 0x90;
    else if (c == 0xF4) hi = 0x8F;          //  nothing past U+10FFFF
    if (p [i + 1] < lo || p [i + 1] > hi)
        return 0;
    for (size_t k = 2; k < n; k++)
        if ((p [i + k] & 0xC0) != 0x80)
            return 0;
    return n;
}

int
ch_jscan_string (const uint8_t *p, size_t len, size_t i, size_t *end)
{
    if (i >= len || p [i] != '"')
        return -EBADMSG;
    i++;
    while (i < len) {
        i = ch_jscan_plain_run (p, len, i);
        if (i >= len)
            break;
        uint8_t c = p [i];
        if (c == '"') {
            *end = i + 1;
            return 0;
        }
        if (c == '\\') {
            if (s_escape (p, len, i, &i) < 0)
                return -EBADMSG;
            continue;
        }
        size_t n = c >= 0x80 ? ch_jscan_utf8 (p, len, i) : 0;
        if (!n)
            return -EBADMSG;                //  a control character or bad UTF-8
        i += n;
    }
    return -EBADMSG;
}

int
ch_jscan_plain (const uint8_t *p, size_t i, size_t end)
{
    for (size_t k = i + 1; k + 1 < end; k++)
        if (p [k] == '\\')
            return 0;
    return 1;
}

static int
s_number (const uint8_t *p, size_t len, size_t i, size_t *end)
{
    size_t start;
    if (i < len && p [i] == '-')
        i++;
    if (i < len && p [i] == '0')
        i++;
    else {
        for (start = i; i < len && p [i] >= '0' && p [i] <= '9'; i++)
            ;
        if (i == start)
            return -EBADMSG;
    }
    if (i < len && p [i] == '.') {
        for (start = ++i; i < len && p [i] >= '0' && p [i] <= '9'; i++)
            ;
        if (i == start)
            return -EBADMSG;
    }
    if (i < len && (p [i] == 'e' || p [i] == 'E')) {
        if (++i < len && (p [i] == '+' || p [i] == '-'))
            i++;
        for (start = i; i < len && p [i] >= '0' && p [i] <= '9'; i++)
            ;
        if (i == start)
            return -EBADMSG;
    }
    *end = i;
    return 0;
}

static int
s_literal (const uint8_t *p, size_t len, size_t i, size_t *end)
{
    static const char *words [] = { "true", "false", "null" };
    for (int w = 0; w < 3; w++) {
        size_t n = 0;
        while (words [w][n] && i + n < len && p [i + n] == (uint8_t) words [w][n])
            n++;
        if (!words [w][n]) {
            *end = i + n;
            return 0;
        }
    }
    return -EBADMSG;
}

static int s_value (const uint8_t *p, size_t len, size_t i, size_t *end, int depth);

//  An object or array at p[i]: members (or items) and separators.
static int
s_container (const uint8_t *p, size_t len, size_t i, size_t *end, int depth)
{
    bool obj = p [i] == '{';
    uint8_t close = obj ? '}' : ']';
    if (depth >= CH_JSCAN_DEPTH)
        return -EBADMSG;
    i = ch_jscan_ws (p, len, i + 1);
    if (i < len && p [i] == close) {
        *end = i + 1;
        return 0;
    }
    while (i < len) {
        if (obj) {
            if (ch_jscan_string (p, len, i, &i) < 0)
                return -EBADMSG;
            i = ch_jscan_ws (p, len, i);
            if (i >= len || p [i] != ':')
                return -EBADMSG;
            i = ch_jscan_ws (p, len, i + 1);
        }
        if (s_value (p, len, i, &i, depth + 1) < 0)
            return -EBADMSG;
        i = ch_jscan_ws (p, len, i);
        if (i < len && p [i] == close) {
            *end = i + 1;
            return 0;
        }
        if (i >= len || p [i] != ',')
            return -EBADMSG;
        i = ch_jscan_ws (p, len, i + 1);
    }
    return -EBADMSG;
}

static int
s_value (const uint8_t *p, size_t len, size_t i, size_t *end, int depth)
{
    if (i >= len)
        return -EBADMSG;
    switch (p [i]) {
        case '"': return ch_jscan_string (p, len, i, end);
        case '{':
        case '[': return s_container (p, len, i, end, depth);
        case 't':
        case 'f':
        case 'n': return s_literal (p, len, i, end);
        default: return s_number (p, len, i, end);
    }
}

int
ch_jscan_value (const uint8_t *p, size_t len, size_t i, size_t *end)
{
    return s_value (p, len, i, end, 0);
}
