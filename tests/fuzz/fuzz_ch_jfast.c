/*  fuzz_ch_jfast - the fast JSON codec against jansson, byte for byte.

    ch_jfast_parse may give up on any text, but what it accepts jansson
    must accept too, with an equal value (members in the same order); and
    ch_jfast_dump must write exactly what json_dumps writes, for every value
    jansson reads and for the flag sets the hot paths use. The input is also
    taken as raw string and key bytes (json_stringn_nocheck), so invalid
    UTF-8 reaches the dumper as it can from a _nocheck caller.
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ch_jfast.h"

static const size_t s_dump_flags [] = {
    JSON_COMPACT, JSON_COMPACT | JSON_ENSURE_ASCII, JSON_COMPACT | JSON_ENCODE_ANY,
    JSON_COMPACT | JSON_ENSURE_ASCII | JSON_ENCODE_ANY, 0, JSON_ENCODE_ANY,
    JSON_COMPACT | JSON_REAL_PRECISION (4), JSON_INDENT (2) | JSON_SORT_KEYS,
};

static void
s_same_dumps (const json_t *v)
{
    for (size_t i = 0; i < sizeof s_dump_flags / sizeof s_dump_flags [0]; i++) {
        size_t len = 0;
        char *ours = ch_jfast_dump (v, s_dump_flags [i], &len);
        char *theirs = json_dumps (v, s_dump_flags [i]);
        if (!ours != !theirs || (ours && (strcmp (ours, theirs) != 0 || len != strlen (ours))))
            abort ();
        free (ours);
        free (theirs);
    }
}

static void
s_same_parse (const uint8_t *data, size_t size, size_t flags)
{
    json_t *ours = ch_jfast_parse (data, size, flags);
    json_t *theirs = json_loadb ((const char *) data, size, flags, NULL);
    if (ours) {
        char *a = json_dumps (ours, JSON_ENCODE_ANY), *b = json_dumps (theirs, JSON_ENCODE_ANY);
        if (!theirs || !json_equal (ours, theirs) || !a || !b || strcmp (a, b) != 0)
            abort ();                           //  accepted what jansson refuses, or differs
        free (a);
        free (b);
    }
    if (theirs && (flags & JSON_DECODE_ANY))
        s_same_dumps (theirs);
    json_decref (ours);
    json_decref (theirs);
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    s_same_parse (data, size, JSON_DECODE_ANY);
    s_same_parse (data, size, JSON_REJECT_DUPLICATES);
    s_same_parse (data, size, 0);
    json_t *raw = json_stringn_nocheck ((const char *) data, size);
    json_t *obj = json_object ();
    json_object_setn_new_nocheck (obj, (const char *) data, size, json_incref (raw));
    json_t *arr = json_pack ("[O, O, f, I]", raw, obj, (double) size / 7, (json_int_t) -size);
    s_same_dumps (raw);
    s_same_dumps (obj);
    s_same_dumps (arr);
    json_decref (raw);
    json_decref (obj);
    json_decref (arr);
    return 0;
}
