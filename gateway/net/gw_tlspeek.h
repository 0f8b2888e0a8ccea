/*  gw_tlspeek - the server name a TLS client asks for, read from the first
    bytes it sends (the ClientHello, RFC 8446 4.1.2 and RFC 6066 3), as a
    pure codec: no sockets, nothing decrypted, nothing changed. The egress
    proxy's host side checks it against the CONNECT's host before one byte
    goes on (docs/network.md), so an allowed name cannot front for another.

    The ClientHello may span several handshake records; bytes after it are
    not looked at. Refused as not TLS, or malformed: a record that is not a
    handshake, a first message that is not a ClientHello, any length that
    overruns what holds it, an extension twice, a server_name list without
    exactly one host_name, a name that is not a DNS name.
*/
#ifndef GW_TLSPEEK_H
#define GW_TLSPEEK_H

#include <stddef.h>
#include <stdint.h>

#define GW_TLSPEEK_MAX 16384                    //  most ClientHello bytes read

//  The server_name of the ClientHello at the start of data, lowercased,
//  into name ("" when it has none). 0; -EAGAIN when data ends before the
//  ClientHello does (*need: how many bytes in all, at least); -EPROTO when
//  it is not a TLS ClientHello, and why in why; -E2BIG when the ClientHello
//  is longer than GW_TLSPEEK_MAX.
int gw_tlspeek_sni (const uint8_t *data, size_t len, char *name, size_t cap, size_t *need,
                    char *why, size_t whylen);

#endif
