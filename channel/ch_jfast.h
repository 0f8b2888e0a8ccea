/*  ch_jfast - jansson values from JSON text and back, fast for long texts.

    jansson's parser and dumper go through every byte of a string one call
    at a time: a 1 MiB cell costs json_loadb ~11 ms and json_dumps 5-8 ms,
    on the gateway's reactor and in the guest kernel under TCG ten times
    over. This codec builds and reads the same jansson values, copying runs
    that need no escape in one go (docs/channel.md "JSON on the hot path").
    Pure: text in, values out; part of the channel library.

    What it accepts it checks by ch_jscan's rules, which are at least as
    strict as jansson's. It is not the judge of refused text: it gives up
    (NULL) on anything it is not sure of, and the caller asks jansson, whose
    verdict and error words then stand. ch_jfast_loadb does just that.
*/
#ifndef CH_JFAST_H
#define CH_JFAST_H
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

//  The value of the JSON text p[0..len), or NULL when this parser does not
//  accept it: malformed, a duplicate key, nested deeper than CH_JSCAN_DEPTH,
//  an integer out of json_int_t's range, a real that overflows, a flag other
//  than JSON_DECODE_ANY and JSON_REJECT_DUPLICATES (a duplicate is always
//  refused). Without JSON_DECODE_ANY the text must be an object or array.
//  Whenever it returns a value, json_loadb (p, len, flags) accepts the text
//  and gives a json_equal value (tests/fuzz/fuzz_ch_jfast.c checks that).
json_t *ch_jfast_parse (const uint8_t *p, size_t len, size_t flags);

//  ch_jfast_parse, or, when it gives up, json_loadb with the same flags:
//  what jansson refuses is refused with jansson's error (error is only
//  written then, as the callers read it only on a refusal).
json_t *ch_jfast_loadb (const uint8_t *p, size_t len, size_t flags, json_error_t *error);

//  Exactly the bytes json_dumps (v, flags) gives, and their length into
//  *len_p (when not NULL); NULL where json_dumps gives NULL. Fast for flags
//  made of JSON_COMPACT, JSON_ENSURE_ASCII, JSON_ENCODE_ANY and a real
//  precision; any other flag, and any value this dumper does not handle
//  (invalid UTF-8, very deep or looping values), is left to json_dumps.
//  Free the text with free().
char *ch_jfast_dump (const json_t *v, size_t flags, size_t *len_p);

#endif
