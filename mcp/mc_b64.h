/*  mc_b64 - base64 (RFC 4648, standard alphabet), only where MCP needs it.

    Bytes never travel as base64 inside the VM channel: cellvm-mcp decodes an
    upload's content_base64 before the bytes go to the gateway as a raw
    buffer, and encodes downloads and images only for the MCP reply.
*/
#ifndef MC_B64_H
#define MC_B64_H

#include <stddef.h>
#include <stdint.h>

//  Encoded length of len bytes, NUL excluded.
size_t mc_b64_encoded_len (size_t len);

//  New NUL-terminated base64 of data (padded). The caller frees it.
char *mc_b64_encode (const uint8_t *data, size_t len);

//  Decode text (whitespace and line breaks are skipped; padding optional,
//  but only at the end). 0 and a new *out_p (malloc'ed, never NULL) of
//  *len_p bytes; or -EINVAL with *bad_p the offset of the first character
//  that is not base64 (or len when the length is wrong).
int mc_b64_decode (const char *text, size_t len, uint8_t **out_p, size_t *len_p,
                   size_t *bad_p);

#endif
