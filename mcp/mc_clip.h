/*  mc_clip - text for a model: capped head and tail, no terminal codes.

    A clip keeps the first and the last cap/2 bytes of everything added and
    counts the rest. Its text is the whole when it fits, else

        <head>
        [... 1,234,567 bytes omitted ...]
        <tail>

    Cuts fall on UTF-8 character boundaries, and on a line break when one is
    near. Pure.
*/
#ifndef MC_CLIP_H
#define MC_CLIP_H

#include <stdbool.h>
#include <stddef.h>

typedef struct _mc_clip_t mc_clip_t;

//  New clip keeping at most cap bytes of text (at least 64).
mc_clip_t *mc_clip_new (size_t cap);
void mc_clip_destroy (mc_clip_t **self_p);

//  Append len bytes of UTF-8 text.
void mc_clip_add (mc_clip_t *self, const char *text, size_t len);

//  Bytes added in all.
size_t mc_clip_total (const mc_clip_t *self);

//  Bytes the text leaves out (0 when everything fits).
size_t mc_clip_omitted (const mc_clip_t *self);

//  The text as above, new and NUL-terminated; the caller frees it.
char *mc_clip_text (const mc_clip_t *self);

//  n with thousands separators ("1,234,567") into out; returns out.
char *mc_clip_fmt_bytes (size_t n, char out [32]);

//  A copy of text without ANSI escape sequences (CSI such as colours, OSC,
//  two-byte escapes), and with carriage-return overwrites resolved: in each
//  line only what follows its last lone "\r" is kept, as a terminal would
//  show it. New and NUL-terminated; *len_p (may be NULL) gets its length.
char *mc_clip_clean (const char *text, size_t len, size_t *len_p);

#endif
