/*  ch_text - stream text: JSON escaping that makes UTF-8 valid on the way,
    and where UTF-8 text may be cut; and text made printable ASCII for one
    line of a terminal or a log.

    The kernel escapes its queued output with it; the gateway escapes the
    raw texts a kernel sends as bytes (docs/channel.md "Raw stream texts")
    with the very same code, so a text reads the same whichever side
    escaped it. Pure: bytes in, bytes out. Part of the channel library.
*/
#ifndef CH_TEXT_H
#define CH_TEXT_H

#include <stddef.h>
#include <stdint.h>

//  Escape in[0..len) as the inside of a JSON string into out (room bytes),
//  making it valid UTF-8 on the way: an invalid byte, and NUL, becomes
//  U+FFFD. Stops at the end, before a character whose escape does not fit
//  in room, or before a trailing incomplete UTF-8 sequence (which the caller
//  holds back for the next bytes). *used gets the input consumed. Returns
//  the bytes written. Never writes more than 6 bytes per input byte.
size_t ch_json_escape (const unsigned char *in, size_t len, char *out, size_t room,
                       size_t *used);

//  The bytes at the end of p[0..len) that ch_json_escape holds back: an
//  incomplete UTF-8 sequence (0..3 bytes).
size_t ch_utf8_tail (const uint8_t *p, size_t len);

//  Where to cut p[0..len) (len > cap >= 4) at most cap bytes in, so that
//  no sequence is split: escaping the two parts apart gives what escaping
//  them whole gives. cap, or the start of a sequence that crosses it.
size_t ch_utf8_cut (const uint8_t *p, size_t len, size_t cap);

//  Stream content {"name":"<name>","text":"<text escaped>"} into *out_p
//  (caller frees), *len_p its size. name is "stdout" or "stderr" (else
//  -EINVAL); invalid UTF-8, a cut sequence at the end included, becomes
//  U+FFFD. -EMSGSIZE (nothing allocated) when it would be over cap bytes.
int ch_text_stream_content (const char *name, const uint8_t *text, size_t len, size_t cap,
                            uint8_t **out_p, size_t *len_p);

//  Every byte of text outside printable ASCII (below 0x20, 0x7f and up),
//  and every byte in also (NULL: none), replaced in place by '?': text that
//  may quote a kernel, a guest or a path, cut anywhere, then fits one line
//  and stays valid UTF-8 (and JSON, once escaped).
void ch_text_printable (char *text, const char *also);

#endif
