/*  gw_proxyreq - the request head a cell's HTTP client sends to its forward
    proxy (docs/network.md), as the gateway's egress side reads it, as a
    pure codec: bytes in, where to connect and what to send upstream out.
    No sockets, no resolver, no policy: the caller checks the host and port
    against gw_egress, then connects.

    Two kinds of request are carried:
        CONNECT pypi.org:443 HTTP/1.1       a tunnel (https and any TLS)
        GET http://example.org/path HTTP/1.1
                                            a plain http request, any method
    The second is rewritten for the server: origin-form target, the
    client's headers minus the hop-by-hop ones (Proxy-Connection,
    Proxy-Authorization, Connection, Keep-Alive, TE, Upgrade and those the
    Connection header names), Host first and exactly once, Connection:
    close. Bytes after the head are the body (or the tunnel's first bytes):
    the caller sends them on unchanged.

    Refused, with a status and words a cell's reader can act on: anything
    that is not HTTP/1.0 or 1.1 (a TLS hello sent to the proxy among them),
    bare CRs, control bytes, obs-fold, an origin-form target (a client that
    ignores its proxy settings), https:// as a plain request (clients send
    CONNECT for it), user@ in a URL, a host that is not a DNS name or a
    strict IP literal (127.1 and 0x7f.0.0.1 are classic filter bypasses),
    percent-encoding in the host, a Host header naming another authority,
    and what smuggles a request: two Host or Content-Length headers,
    Content-Length with Transfer-Encoding, a Connection header that would
    strip Host, Content-Length or Transfer-Encoding.
*/
#ifndef GW_PROXYREQ_H
#define GW_PROXYREQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "net/gw_egress.h"

#define GW_PROXYREQ_HEAD_MAX 16384              //  longest head, through its blank line
#define GW_PROXYREQ_LINE_MAX 8192               //  longest request line, without its line end
#define GW_PROXYREQ_FIELDS_MAX 100              //  most header lines

//  What the proxy answers a CONNECT it carries, before the tunnel's bytes.
#define GW_PROXYREQ_ESTABLISHED "HTTP/1.1 200 Connection established\r\n\r\n"

typedef struct {
    bool connect;                               //  CONNECT host:port, else a plain http:// request
    char host [GW_EGRESS_NAME_MAX + 1];         //  lowercased, no trailing dot; IPv6 unbracketed
    bool literal;                               //  host is an IP address literal ...
    gw_egress_addr_t addr;                      //  ... this one
    unsigned port;                              //  CONNECT: given; http: 80 unless given
    size_t head_len;                            //  bytes of the head, through the blank line
    char *forward;                              //  http: the head to send upstream; CONNECT: NULL
    size_t forward_len;                         //  (forward ends in a NUL after these bytes)
} gw_proxyreq_t;

//  The request head at the start of data into out (gw_proxyreq_clear it
//  after). 0: parsed. -EAGAIN: no blank line yet and len < HEAD_MAX, and
//  nothing seen so far is wrong: feed more. -EPROTO: refuse it with
//  *status (400, 405, 414, 431, 501 or 505) and why in words. -ENOMEM.
//  On any error out holds nothing to free.
int gw_proxyreq_parse (const uint8_t *data, size_t len, gw_proxyreq_t *out, int *status,
                       char *why, size_t whylen);

//  Frees req's forward head; req may be parsed into again.
void gw_proxyreq_clear (gw_proxyreq_t *req);

#define GW_PROXYREQ_WORDS_MAX 1024              //  the most of words a response carries

//  A complete HTTP/1.1 response the proxy sends when it refuses or fails:
//  the status line with its standard reason phrase, " - " and the first
//  300 bytes of words (a status outside 100-599 is sent as 500),
//  Content-Type: text/plain; charset=utf-8, Content-Length, Connection:
//  close, X-Cellvm-Egress: refused, and words (at most WORDS_MAX) as one
//  printable line for the body. malloc'd, its length in *len_p; NULL on OOM.
char *gw_proxyreq_response (int status, const char *words, size_t *len_p);

#endif
