/*  fuzz_gw_proxyreq - the bytes a guest's HTTP client sends its proxy, read
    as a proxy request head. A parsed head must lie within the bytes given
    and end in its blank line, name a valid host (a lowercase DNS name, or
    a literal that reads back as itself) and port, and for http give a
    head for the server that starts with the method and an origin-form
    target, holds exactly one Host and one Connection: close, no
    Proxy-Authorization, only CRLF line ends; every shorter prefix must
    ask for more, and bytes after the head must not change the answer. A
    refusal must carry a status the proxy sends and words; a wait, fewer
    bytes than the cap. The same bytes as a status and words must make a
    refusal that reads as one HTTP response with the Content-Length it
    states.
*/
#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "net/gw_egress.h"
#include "net/gw_proxyreq.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static void
s_check_host (const gw_proxyreq_t *r)
{
    char again [GW_EGRESS_NAME_MAX + 1], text [64];
    if (r->port < 1 || r->port > 65535)
        abort ();
    if (r->literal) {
        int af = r->addr.family == 6 ? AF_INET6 : AF_INET;
        if ((r->addr.family != 4 && r->addr.family != 6)
        ||  !inet_ntop (af, r->addr.bytes, text, sizeof text) || strcmp (text, r->host) != 0)
            abort ();
    }
    else
    if (gw_egress_name (r->host, again, sizeof again) < 0 || strcmp (again, r->host) != 0)
        abort ();
}

static void
s_check_forward (const gw_proxyreq_t *r, const uint8_t *data)
{
    const char *f = r->forward;
    size_t n = r->forward_len, hosts = 0, closes = 0;
    if (r->connect) {
        if (f)
            abort ();
        return;
    }
    const uint8_t *sp = memchr (data, ' ', r->head_len);
    size_t m = sp ? (size_t) (sp - data) : 0;
    if (!f || n < m + 6 || f [n] != '\0' || !sp || memcmp (f, data, m) != 0 || f [m] != ' ' || f [m + 1] != '/'
    ||  memcmp (f + n - 4, "\r\n\r\n", 4) != 0)
        abort ();
    for (size_t at = 0; at < n; ) {
        const char *lf = memchr (f + at, '\n', n - at);
        if (!lf || lf == f + at || lf [-1] != '\r' || memchr (f + at, '\r', (size_t) (lf - f - at) - 1))
            abort ();
        size_t len = (size_t) (lf - f - at) - 1;
        hosts += len >= 5 && strncasecmp (f + at, "host:", 5) == 0;
        closes += len == 17 && memcmp (f + at, "Connection: close", 17) == 0;
        if (len >= 20 && strncasecmp (f + at, "proxy-authorization:", 20) == 0)
            abort ();
        at = (size_t) (lf - f) + 1;
    }
    if (hosts != 1 || closes != 1 || strncmp ((char *) memchr (f, '\n', n) + 1, "Host: ", 6) != 0)
        abort ();
}

//  A parsed head read again with bytes after it, and cut short by one.
static void
s_check_stable (const gw_proxyreq_t *r, const uint8_t *data)
{
    gw_proxyreq_t again;
    int status;
    char why [256];
    uint8_t *more = malloc (r->head_len + 5);
    if (!more)
        return;
    memcpy (more, data, r->head_len);
    memcpy (more + r->head_len, "\r\nX:\n", 5);
    if (gw_proxyreq_parse (more, r->head_len + 5, &again, &status, why, sizeof why) != 0
    ||  again.head_len != r->head_len || again.port != r->port || strcmp (again.host, r->host)
    ||  again.forward_len != r->forward_len
    ||  (r->forward && memcmp (again.forward, r->forward, r->forward_len) != 0))
        abort ();
    gw_proxyreq_clear (&again);
    if (gw_proxyreq_parse (more, r->head_len - 1, &again, &status, why, sizeof why) != -EAGAIN
    ||  again.forward)
        abort ();
    free (more);
}

static void
s_check_response (const uint8_t *data, size_t size)
{
    int status = size >= 2 ? (data [0] << 8 | data [1]) % 1000 : 400;
    char words [512];
    size_t wn = size > 2 ? size - 2 : 0, len = 0;
    wn = wn < sizeof words ? wn : sizeof words - 1;
    memcpy (words, data + (size > 2 ? 2 : 0), wn);
    words [wn] = '\0';
    char *r = gw_proxyreq_response (status, words, &len);
    if (!r)
        return;
    const char *end = strstr (r, "\r\n\r\n");
    size_t head = end ? (size_t) (end - r) + 4 : 0, lengths = 0, stated = 0;
    if (!end || strncmp (r, "HTTP/1.1 ", 9) != 0 || r [12] != ' ' || strlen (r) != len
    ||  (status >= 100 && status <= 599 && atoi (r + 9) != status) || r [len - 1] != '\n')
        abort ();
    for (const char *at = r; at < end; ) {
        const char *crlf = strstr (at, "\r\n");
        if (memchr (at, '\n', (size_t) (crlf - at)) || memchr (at, '\r', (size_t) (crlf - at)))
            abort ();
        if (strncmp (at, "Content-Length: ", 16) == 0) {
            lengths++;
            stated = strtoul (at + 16, NULL, 10);
        }
        at = crlf + 2;
    }
    for (size_t i = head; i + 1 < len; i++)
        if ((unsigned char) r [i] < 0x20 || (unsigned char) r [i] >= 0x7f)
            abort ();
    if (lengths != 1 || stated != len - head)
        abort ();
    free (r);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    gw_proxyreq_t r;
    int status = -1;
    char why [256];
    int rc = gw_proxyreq_parse (data, size, &r, &status, why, sizeof why);
    if (rc == 0) {
        if (r.head_len > size || r.head_len > GW_PROXYREQ_HEAD_MAX || r.head_len < 2
        ||  data [r.head_len - 1] != '\n' || status != 0)
            abort ();
        s_check_host (&r);
        s_check_forward (&r, data);
        s_check_stable (&r, data);
    }
    bool sent = status == 400 || status == 405 || status == 414 || status == 431
             || status == 501 || status == 505;
    if (rc == -EPROTO && (!sent || !why [0]))
        abort ();
    if (rc == -EAGAIN && (size >= GW_PROXYREQ_HEAD_MAX || status != 0))
        abort ();
    if (rc != 0 && (rc != -EAGAIN && rc != -EPROTO && rc != -ENOMEM))
        abort ();
    if (rc != 0 && r.forward)
        abort ();
    gw_proxyreq_clear (&r);
    s_check_response (data, size);
    return 0;
}
