/*  gw_proxyreq - a forward proxy's request head read, its refusal written
    (see gw_proxyreq.h). The head is read again from its first byte each
    time more arrives: it is at most 16 KiB, and being stateless keeps the
    caller's loop plain. Each line is judged as soon as its line end is in,
    so a client that speaks something else is refused at once instead of
    waiting for a blank line that never comes.
*/
#include "net/gw_proxyreq.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define S_QUOTE_MAX 60                          //  most of the client's bytes quoted in words
#define S_QUOTE_CAP (S_QUOTE_MAX + 4)
#define S_AUTH_CAP (GW_EGRESS_NAME_MAX + 10)    //  [host]:port

typedef struct {
    const char *p;
    size_t n;
} s_str_t;

typedef struct {
    s_str_t name, value;                        //  value without the spaces around it
} s_field_t;

//  A host and port as an authority names them.
typedef struct {
    char host [GW_EGRESS_NAME_MAX + 1];
    bool literal;
    gw_egress_addr_t addr;
    unsigned port;                              //  0: none given
} s_auth_t;

typedef struct {
    const char *data;
    size_t len;                                 //  bytes looked at: at most HEAD_MAX
    bool full;                                  //  the caller gave HEAD_MAX bytes or more
    s_str_t method, version;
    s_str_t path;                               //  http: the origin-form, "" for "/"
    s_field_t fields [GW_PROXYREQ_FIELDS_MAX];
    size_t nfields;
    int *status;
    char *why;
    size_t whylen;
} s_parse_t;

//  ==========================================================================
//  Slices of the head.

static s_str_t
s_trim (s_str_t s)
{
    while (s.n && (s.p [0] == ' ' || s.p [0] == '\t')) {
        s.p++;
        s.n--;
    }
    while (s.n && (s.p [s.n - 1] == ' ' || s.p [s.n - 1] == '\t'))
        s.n--;
    return s;
}

//  Equal, ignoring case (header names, schemes, list elements)?
static bool
s_eq (s_str_t s, const char *text)
{
    size_t n = strlen (text);
    return s.n == n && strncasecmp (s.p, text, n) == 0;
}

//  Equal byte for byte (methods are case-sensitive)?
static bool
s_is (s_str_t s, const char *text)
{
    size_t n = strlen (text);
    return s.n == n && memcmp (s.p, text, n) == 0;
}

static bool
s_token (s_str_t s)
{
    for (size_t i = 0; i < s.n; i++) {
        unsigned char c = (unsigned char) s.p [i];
        bool alnum = (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
        if (!alnum && (!c || !strchr ("!#$%&'*+-.^_`|~", c)))
            return false;
    }
    return s.n > 0;
}

//  The next element of a comma-separated list, trimmed, into *e (lists
//  may hold empty ones); false when the list is used up.
static bool
s_element (s_str_t list, size_t *at, s_str_t *e)
{
    if (*at > list.n)
        return false;
    const char *comma = memchr (list.p + *at, ',', list.n - *at);
    size_t end = comma ? (size_t) (comma - list.p) : list.n;
    *e = s_trim ((s_str_t) { list.p + *at, end - *at });
    *at = end + 1;
    return true;
}

//  s as words may quote it: its first bytes, each not printable as '?'.
static const char *
s_quote (s_str_t s, char *buf)
{
    size_t n = s.n < S_QUOTE_MAX ? s.n : S_QUOTE_MAX;
    for (size_t i = 0; i < n; i++)
        buf [i] = s.p [i] >= 0x20 && s.p [i] < 0x7f ? s.p [i] : '?';
    strcpy (buf + n, s.n > n ? "..." : "");
    return buf;
}

static int s_refuse (s_parse_t *p, int status, const char *fmt, ...)
    __attribute__ ((format (printf, 3, 4)));

static int
s_refuse (s_parse_t *p, int status, const char *fmt, ...)
{
    va_list ap;
    va_start (ap, fmt);
    vsnprintf (p->why, p->whylen, fmt, ap);
    va_end (ap);
    *p->status = status;
    return -EPROTO;
}

//  ==========================================================================
//  Lines.

static int
s_bad_byte (s_parse_t *p, size_t at)
{
    unsigned char c = (unsigned char) p->data [at];
    if (at == 0 && c == 0x16)
        return s_refuse (p, 400, "TLS came where a proxy request was expected: the proxy's URL "
                         "must start with http://, not https:// (https sites still go through "
                         "it, by CONNECT)");
    if (at == 0 && (c == 4 || c == 5))
        return s_refuse (p, 400, "SOCKS came where a proxy request was expected: the proxy "
                         "speaks HTTP; its URL starts with http://, not socks5://");
    if (c == '\r')
        return s_refuse (p, 400, "a bare CR (not followed by LF) at byte %zu of the request "
                         "head: end each line with CRLF", at);
    return s_refuse (p, 400, "%s (0x%02x) at byte %zu of the request head: this is not an "
                     "HTTP request", c ? "a control byte" : "a NUL byte", c, at);
}

//  The line at `at` without its line end (CRLF or LF) into *line, where
//  the next one starts into *next. -EAGAIN when no LF ends it yet. A bare
//  CR or a control byte other than a tab refuses it, ended or not.
static int
s_line (s_parse_t *p, size_t at, s_str_t *line, size_t *next)
{
    const char *start = p->data + at;
    const char *lf = at < p->len ? memchr (start, '\n', p->len - at) : NULL;
    size_t n = lf ? (size_t) (lf - start) : p->len - at;
    size_t end = n && start [n - 1] == '\r' ? n - 1 : n;    //  unended: its LF may follow
    for (size_t i = 0; i < end; i++) {
        unsigned char c = (unsigned char) start [i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return s_bad_byte (p, at + i);
    }
    if (!lf)
        return -EAGAIN;
    *line = (s_str_t) { start, end };
    *next = at + n + 1;
    return 0;
}

//  The line at `at` has no line end yet: wait for it, unless it or the
//  head is already longer than it may be.
static int
s_incomplete (s_parse_t *p, size_t at)
{
    size_t n = p->len - at;
    if (n && p->data [p->len - 1] == '\r')
        n--;
    if (at == 0 && n > GW_PROXYREQ_LINE_MAX)
        return s_refuse (p, 414, "the request line is longer than %d bytes: shorten the URL",
                         GW_PROXYREQ_LINE_MAX);
    if (p->full)
        return s_refuse (p, 431, "the request head is longer than %d bytes: send fewer or "
                         "shorter headers", GW_PROXYREQ_HEAD_MAX);
    return -EAGAIN;
}

//  ==========================================================================
//  Hosts and ports.

//  Does the name's last label read as a number (digits, or 0x and hex)?
//  Resolvers read such a name as an IPv4 address in a loose form.
static bool
s_ends_in_number (const char *text)
{
    const char *dot = strrchr (text, '.');
    const char *last = dot ? dot + 1 : text;
    size_t n = strlen (last);
    if (n && strspn (last, "0123456789") == n)
        return true;
    return n >= 2 && last [0] == '0' && (last [1] | 0x20) == 'x'
        && strspn (last + 2, "0123456789abcdefABCDEF") == n - 2;
}

//  Four decimal parts of 0-255, no leading zeros, nothing else.
static bool
s_dotted_quad (const char *s, uint8_t *bytes)
{
    for (int part = 0; part < 4; part++) {
        size_t n = strspn (s, "0123456789");
        if (n == 0 || n > 3 || (n > 1 && s [0] == '0'))
            return false;
        unsigned v = 0;
        for (size_t i = 0; i < n; i++)
            v = v * 10 + (unsigned) (s [i] - '0');
        if (v > 255)
            return false;
        bytes [part] = (uint8_t) v;
        s += n;
        if (part < 3 && *s++ != '.')
            return false;
    }
    return *s == '\0';
}

static int
s_literal (s_parse_t *p, const char *text, bool v6, const char *what, s_auth_t *a)
{
    a->literal = true;
    a->addr.family = v6 ? 6 : 4;
    if (v6 ? inet_pton (AF_INET6, text, a->addr.bytes) != 1
           : !s_dotted_quad (text, a->addr.bytes))
        return v6 ? s_refuse (p, 400, "%s names [%s], which is not an IPv6 address", what, text)
                  : s_refuse (p, 400, "%s names \"%s\", which reads as an IPv4 address (its last "
                              "part is a number) but is not one in dotted-quad form: write four "
                              "decimal parts without leading zeros (127.1, 0x7f.0.0.1 and "
                              "017.0.0.1 are refused: resolvers read them as other addresses)",
                              what, text);
    inet_ntop (v6 ? AF_INET6 : AF_INET, a->addr.bytes, a->host, sizeof a->host);
    return 0;
}

//  The host of an authority (a bracketed one without its brackets) into a.
static int
s_host (s_parse_t *p, s_str_t s, bool bracketed, const char *what, s_auth_t *a)
{
    char text [GW_EGRESS_NAME_MAX + 2], bare [GW_EGRESS_NAME_MAX + 2], q [S_QUOTE_CAP];
    if (s.n == 0)
        return s_refuse (p, 400, "%s has no host", what);
    if (s.n >= sizeof text)
        return s_refuse (p, 400, "%s names a host longer than %d characters", what,
                         GW_EGRESS_NAME_MAX);
    memcpy (text, s.p, s.n);
    text [s.n] = '\0';
    if (bracketed)
        return s_literal (p, text, true, what, a);
    strcpy (bare, text);
    if (s.n > 1 && bare [s.n - 1] == '.')
        bare [s.n - 1] = '\0';                  //  the root's dot
    if (s_ends_in_number (bare))
        return s_literal (p, bare, false, what, a);
    if (gw_egress_name (text, a->host, sizeof a->host) < 0)
        return s_refuse (p, 400, "%s names \"%s\", which is neither a DNS name (letters, digits, "
                         "'-' and '_', labels of 1-63) nor an IP address", what, s_quote (s, q));
    return 0;
}

static int
s_port (s_parse_t *p, s_str_t s, const char *what, s_auth_t *a)
{
    char q [S_QUOTE_CAP];
    unsigned v = 0;
    bool ok = s.n >= 1 && s.n <= 5;
    for (size_t i = 0; ok && i < s.n; i++) {
        ok = s.p [i] >= '0' && s.p [i] <= '9';
        v = v * 10 + (unsigned) (s.p [i] - '0');
    }
    if (!ok || v == 0 || v > 65535)
        return s_refuse (p, 400, "%s has the port \"%s\": a port is a number from 1 to 65535",
                         what, s_quote (s, q));
    a->port = v;
    return 0;
}

//  host, host:port, [v6] or [v6]:port into a (a->port 0: none given).
static int
s_authority (s_parse_t *p, s_str_t s, const char *what, s_auth_t *a)
{
    char q [S_QUOTE_CAP];
    memset (a, 0, sizeof *a);
    if (memchr (s.p, '@', s.n))
        return s_refuse (p, 400, "%s \"%s\" holds credentials (user@host): the proxy refuses "
                         "them; send an Authorization header instead", what, s_quote (s, q));
    if (memchr (s.p, '%', s.n))
        return s_refuse (p, 400, "%s \"%s\" has percent-encoding in its host: write the host "
                         "plainly", what, s_quote (s, q));
    bool bracketed = s.n && s.p [0] == '[';
    const char *close = bracketed ? memchr (s.p, ']', s.n) : NULL, *end = s.p + s.n;
    const char *colon = close ? close + 1 : bracketed ? NULL : memchr (s.p, ':', s.n);
    if (bracketed && (!close || (colon < end && *colon != ':')))
        return s_refuse (p, 400, "%s \"%s\" is not [IPv6]:port", what, s_quote (s, q));
    if (!bracketed && colon && memchr (colon + 1, ':', (size_t) (end - colon - 1)))
        return s_refuse (p, 400, "%s \"%s\" holds an IPv6 address without brackets: write "
                         "[2001:db8::1]:443", what, s_quote (s, q));
    if (colon == end)
        colon = NULL;
    s_str_t host = bracketed ? (s_str_t) { s.p + 1, (size_t) (close - s.p - 1) }
                             : (s_str_t) { s.p, colon ? (size_t) (colon - s.p) : s.n };
    int rc = s_host (p, host, bracketed, what, a);
    if (rc == 0 && colon)
        rc = s_port (p, (s_str_t) { colon + 1, (size_t) (end - colon - 1) }, what, a);
    return rc;
}

static void
s_set (gw_proxyreq_t *out, const s_auth_t *a, unsigned port)
{
    strcpy (out->host, a->host);
    out->literal = a->literal;
    out->addr = a->addr;
    out->port = port;
}

//  The request's authority as a Host header names it (http's port 80 left out).
static void
s_authority_text (const gw_proxyreq_t *req, char *out, size_t cap)
{
    bool v6 = req->literal && req->addr.family == 6;
    if (!req->connect && req->port == 80)
        snprintf (out, cap, v6 ? "[%s]" : "%s", req->host);
    else
        snprintf (out, cap, v6 ? "[%s]:%u" : "%s:%u", req->host, req->port);
}

//  ==========================================================================
//  The request line.

static int
s_connect_target (s_parse_t *p, s_str_t target, gw_proxyreq_t *out)
{
    char q [S_QUOTE_CAP];
    s_auth_t a;
    out->connect = true;
    if (target.p [0] == '/' || memmem (target.p, target.n, "://", 3))
        return s_refuse (p, 400, "CONNECT takes host:port (CONNECT pypi.org:443), not \"%s\"",
                         s_quote (target, q));
    int rc = s_authority (p, target, "CONNECT's target", &a);
    if (rc == 0 && a.port == 0)
        rc = s_refuse (p, 400, "CONNECT's target \"%s\" has no port: CONNECT host:port, as in "
                       "CONNECT pypi.org:443", s_quote (target, q));
    if (rc == 0)
        s_set (out, &a, a.port);
    return rc;
}

static bool
s_scheme (s_str_t s)
{
    for (size_t i = 0; i < s.n; i++) {
        char c = (char) (s.p [i] | 0x20);
        bool alpha = c >= 'a' && c <= 'z';
        if (!alpha && (i == 0 || !s.p [i] || !strchr ("0123456789+-.", s.p [i])))
            return false;
    }
    return s.n > 0;
}

//  http://authority/path?query into out and p->path.
static int
s_absolute_target (s_parse_t *p, s_str_t target, gw_proxyreq_t *out)
{
    char q [S_QUOTE_CAP], m [S_QUOTE_CAP];
    const char *sep = memmem (target.p, target.n, "://", 3);
    s_str_t scheme = { target.p, sep ? (size_t) (sep - target.p) : 0 };
    if (!sep || !s_scheme (scheme))
        return s_refuse (p, 400, "the proxy takes a full URL (%s http://host/path) or CONNECT "
                         "host:port, not \"%s\": is the client ignoring its proxy settings?",
                         s_quote (p->method, m), s_quote (target, q));
    if (s_eq (scheme, "https"))
        return s_refuse (p, 501, "https:// came as a plain proxy request (\"%s\"): https goes "
                         "through the proxy as CONNECT host:443, which clients send by themselves "
                         "for https URLs", s_quote (target, q));
    if (!s_eq (scheme, "http"))
        return s_refuse (p, 501, "the scheme \"%s\" is not carried: the proxy takes http:// "
                         "URLs, and CONNECT host:port for https", s_quote (scheme, q));
    if (memchr (target.p, '#', target.n))
        return s_refuse (p, 400, "a fragment (#...) in the request target \"%s\": clients keep "
                         "it to themselves", s_quote (target, q));
    s_str_t rest = { sep + 3, (size_t) (target.p + target.n - sep - 3) };
    size_t an = 0;
    while (an < rest.n && rest.p [an] != '/' && rest.p [an] != '?')
        an++;
    p->path = (s_str_t) { rest.p + an, rest.n - an };
    s_auth_t a;
    int rc = s_authority (p, (s_str_t) { rest.p, an }, "the URL", &a);
    if (rc == 0)
        s_set (out, &a, a.port ? a.port : 80);
    return rc;
}

static int
s_method (s_parse_t *p, s_str_t target, gw_proxyreq_t *out)
{
    static const char *known [] = { "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH",
                                    "CONNECT", "TRACE" };
    char m [S_QUOTE_CAP];
    if (s_is (p->method, "CONNECT"))
        return s_connect_target (p, target, out);
    if (s_is (p->method, "TRACE") || s_is (p->method, "TRACK"))
        return s_refuse (p, 405, "the proxy does not carry %s (it echoes the request back): "
                         "test a server with GET or HEAD", s_quote (p->method, m));
    for (size_t i = 0; i < sizeof known / sizeof known [0]; i++)
        if (s_eq (p->method, known [i]) && !s_is (p->method, known [i]))
            return s_refuse (p, 501, "the method \"%s\" is not one the proxy knows: methods are "
                             "case-sensitive (%s)", s_quote (p->method, m), known [i]);
    return s_absolute_target (p, target, out);
}

static int
s_version (s_parse_t *p)
{
    char q [S_QUOTE_CAP];
    s_str_t v = p->version;
    if (s_is (v, "HTTP/1.1") || s_is (v, "HTTP/1.0"))
        return 0;
    bool numbered = v.n > 5 && memcmp (v.p, "HTTP/", 5) == 0 && v.p [5] >= '0' && v.p [5] <= '9';
    for (size_t i = 5; numbered && i < v.n; i++)
        numbered = (v.p [i] >= '0' && v.p [i] <= '9') || v.p [i] == '.';
    if (numbered)
        return s_refuse (p, 505, "%s is not spoken here: send HTTP/1.1 (or HTTP/1.0)",
                         s_quote (v, q));
    return s_refuse (p, 400, "\"%s\" is not an HTTP version: the request line ends in HTTP/1.1",
                     s_quote (v, q));
}

static int
s_request_line (s_parse_t *p, s_str_t line, gw_proxyreq_t *out)
{
    char q [S_QUOTE_CAP];
    if (line.n > GW_PROXYREQ_LINE_MAX)
        return s_refuse (p, 414, "the request line is longer than %d bytes: shorten the URL",
                         GW_PROXYREQ_LINE_MAX);
    for (size_t i = 0; i < line.n; i++)
        if (line.p [i] == '\t' || (unsigned char) line.p [i] >= 0x80)
            return s_refuse (p, 400, "a tab or a byte that is not ASCII in the request line "
                             "\"%s\": percent-encode it in the URL", s_quote (line, q));
    const char *sp1 = memchr (line.p, ' ', line.n), *sp2 = memrchr (line.p, ' ', line.n);
    if (!sp1 || sp1 == sp2 || sp1 == line.p)
        return s_refuse (p, 400, "\"%s\" is not an HTTP request line (METHOD target HTTP/1.1)",
                         s_quote (line, q));
    p->method = (s_str_t) { line.p, (size_t) (sp1 - line.p) };
    p->version = (s_str_t) { sp2 + 1, (size_t) (line.p + line.n - sp2 - 1) };
    s_str_t target = { sp1 + 1, (size_t) (sp2 - sp1 - 1) };
    if (!s_token (p->method))
        return s_refuse (p, 400, "the method \"%s\" is not a token", s_quote (p->method, q));
    int rc = s_version (p);
    if (rc < 0)
        return rc;
    if (target.n == 0 || memchr (target.p, ' ', target.n))
        return s_refuse (p, 400, "a space inside the request target \"%s\": percent-encode it "
                         "as %%20", s_quote (target, q));
    return s_method (p, target, out);
}

//  ==========================================================================
//  Header fields.

static int
s_field (s_parse_t *p, s_str_t line)
{
    char q [S_QUOTE_CAP];
    if (line.p [0] == ' ' || line.p [0] == '\t')
        return s_refuse (p, 400, "the header line \"%s\" starts with a space or tab, continuing "
                         "the one before (obs-fold): send each header on one line",
                         s_quote (line, q));
    const char *colon = memchr (line.p, ':', line.n);
    s_str_t name = { line.p, colon ? (size_t) (colon - line.p) : line.n };
    if (!colon)
        return s_refuse (p, 400, "the header line \"%s\" has no colon (Name: value)",
                         s_quote (line, q));
    if (!s_token (name))
        return s_refuse (p, 400, "the header name \"%s\" is not a token (no space before the "
                         "colon)", s_quote (name, q));
    if (p->nfields == GW_PROXYREQ_FIELDS_MAX)
        return s_refuse (p, 431, "more than %d header lines: send fewer",
                         GW_PROXYREQ_FIELDS_MAX);
    s_str_t value = { colon + 1, (size_t) (line.p + line.n - colon - 1) };
    p->fields [p->nfields++] = (s_field_t) { name, s_trim (value) };
    return 0;
}

static int
s_check_host (s_parse_t *p, s_str_t value, const gw_proxyreq_t *out)
{
    char q [S_QUOTE_CAP], target [S_AUTH_CAP];
    s_auth_t a;
    int rc = s_authority (p, value, "the Host header", &a);
    if (rc < 0)
        return rc;
    bool same = a.literal == out->literal
             && (a.literal ? a.addr.family == out->addr.family
                             && memcmp (a.addr.bytes, out->addr.bytes, 16) == 0
                           : strcmp (a.host, out->host) == 0);
    unsigned port = a.port ? a.port : out->connect ? out->port : 80;
    if (same && port == out->port)
        return 0;
    s_authority_text (out, target, sizeof target);
    return s_refuse (p, 400, "the Host header names \"%s\" but the request is for %s: they must "
                     "agree", s_quote (value, q), target);
}

static int
s_check_length (s_parse_t *p, s_str_t value)
{
    char q [S_QUOTE_CAP];
    bool ok = value.n >= 1 && value.n <= 18;
    for (size_t i = 0; ok && i < value.n; i++)
        ok = value.p [i] >= '0' && value.p [i] <= '9';
    if (ok)
        return 0;
    return s_refuse (p, 400, "Content-Length \"%s\" is not one number of bytes",
                     s_quote (value, q));
}

//  A Connection header lists tokens; stripping the ones a body's length
//  or the server's routing rests on would let a request smuggle another.
static int
s_check_connection (s_parse_t *p, s_str_t value)
{
    char q [S_QUOTE_CAP];
    s_str_t e;
    size_t at = 0;
    while (s_element (value, &at, &e)) {
        if (e.n && !s_token (e))
            return s_refuse (p, 400, "the Connection header \"%s\" is not a list of names",
                             s_quote (value, q));
        if (s_eq (e, "Host") || s_eq (e, "Content-Length") || s_eq (e, "Transfer-Encoding"))
            return s_refuse (p, 400, "the Connection header names %s, which must reach the "
                             "server: drop it from Connection", s_quote (e, q));
    }
    return 0;
}

//  The last transfer coding must be chunked, or the body has no known end.
static int
s_check_chunked (s_parse_t *p, s_str_t value)
{
    char q [S_QUOTE_CAP];
    s_str_t e, last = { value.p, 0 };
    size_t at = 0;
    while (s_element (value, &at, &e))
        if (e.n)
            last = e;
    if (s_eq (last, "chunked"))
        return 0;
    return s_refuse (p, 400, "Transfer-Encoding \"%s\" does not end in chunked: the body's "
                     "length is unknown", s_quote (value, q));
}

static int
s_check_fields (s_parse_t *p, const gw_proxyreq_t *out)
{
    size_t hosts = 0, lengths = 0;
    const s_field_t *coding = NULL;             //  the last Transfer-Encoding
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < p->nfields; i++) {
        const s_field_t *f = &p->fields [i];
        if (s_eq (f->name, "Host"))
            rc = ++hosts > 1 ? s_refuse (p, 400, "two Host headers: a request smuggling form; "
                                         "send one") : s_check_host (p, f->value, out);
        if (s_eq (f->name, "Content-Length"))
            rc = ++lengths > 1 ? s_refuse (p, 400, "two Content-Length headers: a request "
                                           "smuggling form; send one")
                               : s_check_length (p, f->value);
        if (s_eq (f->name, "Connection"))
            rc = s_check_connection (p, f->value);
        if (s_eq (f->name, "Transfer-Encoding"))
            coding = f;
    }
    if (rc == 0 && lengths && coding)
        rc = s_refuse (p, 400, "Content-Length together with Transfer-Encoding: a request "
                       "smuggling form; send one");
    if (rc == 0 && coding)
        rc = s_check_chunked (p, coding->value);
    return rc;
}

//  ==========================================================================
//  The head sent upstream.

typedef struct {
    char *p;
    size_t n, cap;
} s_buf_t;

static void
s_add (s_buf_t *b, const char *p, size_t n)
{
    assert (b->n + n <= b->cap);
    memcpy (b->p + b->n, p, n);
    b->n += n;
}

//  Is a header of this name hop-by-hop: for the proxy, not the server?
static bool
s_hop (const s_parse_t *p, s_str_t name)
{
    static const char *hop [] = { "Host", "Connection", "Proxy-Connection",
                                  "Proxy-Authorization", "Keep-Alive", "TE", "Upgrade" };
    for (size_t i = 0; i < sizeof hop / sizeof hop [0]; i++)
        if (s_eq (name, hop [i]))
            return true;
    for (size_t i = 0; i < p->nfields; i++) {
        s_str_t e;
        size_t at = 0;
        if (!s_eq (p->fields [i].name, "Connection"))
            continue;
        while (s_element (p->fields [i].value, &at, &e))
            if (e.n == name.n && strncasecmp (e.p, name.p, e.n) == 0)
                return true;
    }
    return false;
}

static int
s_forward (const s_parse_t *p, gw_proxyreq_t *out)
{
    //  Each line grows by at most 3 bytes (": ", CR); Host and Connection are new.
    s_buf_t b = { NULL, 0, out->head_len + 3 * (GW_PROXYREQ_FIELDS_MAX + 1) + 2 * S_AUTH_CAP };
    char auth [S_AUTH_CAP];
    if (!(b.p = malloc (b.cap)))
        return -ENOMEM;
    s_authority_text (out, auth, sizeof auth);
    s_add (&b, p->method.p, p->method.n);
    s_add (&b, " /", p->path.n && p->path.p [0] == '/' ? 1 : 2);
    s_add (&b, p->path.p, p->path.n);
    s_add (&b, " ", 1);
    s_add (&b, p->version.p, p->version.n);
    s_add (&b, "\r\nHost: ", 8);
    s_add (&b, auth, strlen (auth));
    s_add (&b, "\r\n", 2);
    for (size_t i = 0; i < p->nfields; i++) {
        const s_field_t *f = &p->fields [i];
        if (s_hop (p, f->name))
            continue;
        s_add (&b, f->name.p, f->name.n);
        s_add (&b, ": ", 2);
        s_add (&b, f->value.p, f->value.n);
        s_add (&b, "\r\n", 2);
    }
    s_add (&b, "Connection: close\r\n\r\n", 22);     //  its NUL too, for a caller's log
    b.n--;
    out->forward = b.p;
    out->forward_len = b.n;
    return 0;
}

int
gw_proxyreq_parse (const uint8_t *data, size_t len, gw_proxyreq_t *out, int *status,
                   char *why, size_t whylen)
{
    assert ((data || len == 0) && out && status && why && whylen);
    memset (out, 0, sizeof *out);
    *status = 0;
    why [0] = '\0';
    s_parse_t p = { .data = (const char *) data, .full = len >= GW_PROXYREQ_HEAD_MAX,
                    .len = len < GW_PROXYREQ_HEAD_MAX ? len : GW_PROXYREQ_HEAD_MAX,
                    .status = status, .why = why, .whylen = whylen };
    s_str_t line;
    size_t at = 0, next = 0;
    int rc = s_line (&p, 0, &line, &next);
    if (rc == 0)
        rc = line.n ? s_request_line (&p, line, out)
                    : s_refuse (&p, 400, "an empty line where the request line should be");
    while (rc == 0) {
        at = next;
        rc = s_line (&p, at, &line, &next);
        if (rc == 0 && line.n == 0)
            break;                              //  the blank line: the head is whole
        if (rc == 0)
            rc = s_field (&p, line);
    }
    if (rc == -EAGAIN)
        rc = s_incomplete (&p, at);
    if (rc == 0)
        out->head_len = next;
    if (rc == 0)
        rc = s_check_fields (&p, out);
    if (rc == 0 && !out->connect)
        rc = s_forward (&p, out);
    if (rc < 0)
        gw_proxyreq_clear (out);
    return rc;
}

void
gw_proxyreq_clear (gw_proxyreq_t *req)
{
    if (!req)
        return;
    free (req->forward);
    memset (req, 0, sizeof *req);
}

//  ==========================================================================
//  The proxy's refusal.

static const char *
s_reason (int status)
{
    static const struct { int status; const char *reason; } reasons [] = {
        { 200, "OK" }, { 400, "Bad Request" }, { 401, "Unauthorized" },
        { 402, "Payment Required" }, { 403, "Forbidden" }, { 404, "Not Found" },
        { 405, "Method Not Allowed" }, { 406, "Not Acceptable" },
        { 407, "Proxy Authentication Required" }, { 408, "Request Timeout" },
        { 409, "Conflict" }, { 410, "Gone" }, { 411, "Length Required" },
        { 412, "Precondition Failed" }, { 413, "Content Too Large" }, { 414, "URI Too Long" },
        { 415, "Unsupported Media Type" }, { 416, "Range Not Satisfiable" },
        { 417, "Expectation Failed" }, { 421, "Misdirected Request" },
        { 422, "Unprocessable Content" }, { 426, "Upgrade Required" },
        { 428, "Precondition Required" }, { 429, "Too Many Requests" },
        { 431, "Request Header Fields Too Large" }, { 451, "Unavailable For Legal Reasons" },
        { 500, "Internal Server Error" }, { 501, "Not Implemented" }, { 502, "Bad Gateway" },
        { 503, "Service Unavailable" }, { 504, "Gateway Timeout" },
        { 505, "HTTP Version Not Supported" }, { 511, "Network Authentication Required" },
    };
    static const char *classes [] = { "Informational", "Successful", "Redirection",
                                      "Client Error", "Server Error" };
    for (size_t i = 0; i < sizeof reasons / sizeof reasons [0]; i++)
        if (reasons [i].status == status)
            return reasons [i].reason;
    return classes [status / 100 - 1];
}

//  words as one line of printable ASCII, into out (cap > 0 bytes with its NUL).
static size_t
s_printable (const char *words, char *out, size_t cap)
{
    size_t n = 0;
    for (; words && words [n] && n + 1 < cap; n++) {
        char c = words [n];
        out [n] = c >= 0x20 && c < 0x7f ? c : (unsigned char) c >= 0x80 ? '?' : ' ';
    }
    out [n] = '\0';
    return n;
}

//  The words go in the reason phrase too: a client refused a tunnel shows
//  that line and never the body (urllib, requests and pip say "Tunnel
//  connection failed: 403 Forbidden - ...").
char *
gw_proxyreq_response (int status, const char *words, size_t *len_p)
{
    assert (len_p);
    if (status < 100 || status > 599)
        status = 500;
    char body [GW_PROXYREQ_WORDS_MAX + 1], head [GW_PROXYREQ_WORDS_MAX + 256];
    size_t wn = s_printable (words, body, sizeof body);
    int hn = snprintf (head, sizeof head, "HTTP/1.1 %d %s%s%.300s\r\n"
                       "Content-Type: text/plain; charset=utf-8\r\n"
                       "Content-Length: %zu\r\nConnection: close\r\n"
                       "X-Cellvm-Egress: refused\r\n\r\n", status, s_reason (status),
                       wn ? " - " : "", body, wn + 1);
    assert (hn > 0 && (size_t) hn < sizeof head);
    char *r = malloc ((size_t) hn + wn + 2);
    if (!r)
        return NULL;
    memcpy (r, head, (size_t) hn);
    memcpy (r + hn, body, wn);
    r [(size_t) hn + wn] = '\n';
    r [(size_t) hn + wn + 1] = '\0';
    *len_p = (size_t) hn + wn + 1;
    return r;
}
