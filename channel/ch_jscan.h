/*  ch_jscan - validate JSON text without building it.

    The gateway passes a kernel's large stream texts on without parsing
    them into a tree and dumping them again (docs/channel.md "Stream texts
    travel as they are"). What it does not parse it must still validate,
    at least as strictly as jansson, which it replaces there: UTF-8 without
    overlong forms, surrogates or code points past U+10FFFF; no control
    character unescaped; only JSON's escapes; \u0000 refused (jansson
    without JSON_ALLOW_NUL) and \u surrogates only as a proper pair.
    Pure: bytes in, a verdict out. Part of the channel library.
*/
#ifndef CH_JSCAN_H
#define CH_JSCAN_H
#include <stddef.h>
#include <stdint.h>

#define CH_JSCAN_DEPTH 64       //  objects and arrays nested deeper are refused

//  Index of the first byte at or after i that a string may not hold as it
//  is (a quote, a backslash, a control character, any byte past ASCII).
size_t ch_jscan_plain_run (const uint8_t *p, size_t len, size_t i);

//  Index of the first byte at or after i that is not JSON white space.
size_t ch_jscan_ws (const uint8_t *p, size_t len, size_t i);

//  The string starting at p[i] ('"'): 0 and *end just past its closing
//  quote, or -EBADMSG.
int ch_jscan_string (const uint8_t *p, size_t len, size_t i, size_t *end);

//  Any JSON value starting at p[i] (no leading white space): 0 and *end
//  just past it, or -EBADMSG.
int ch_jscan_value (const uint8_t *p, size_t len, size_t i, size_t *end);

//  True when the string at p[i..end) (quotes included) has no escapes, so
//  its bytes between the quotes are its value.
int ch_jscan_plain (const uint8_t *p, size_t i, size_t end);

//  The four hex digits at p[i] as a number into *out: 0, or -EBADMSG.
int ch_jscan_hex4 (const uint8_t *p, size_t len, size_t i, unsigned *out);

//  The length of the one UTF-8 sequence of two to four bytes at p[i] (i < len),
//  by the rules above (jansson's too), or 0 when it is not one.
size_t ch_jscan_utf8 (const uint8_t *p, size_t len, size_t i);

#endif
