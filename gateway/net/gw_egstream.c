/*  gw_egstream - one egress connection's decision (docs/network.md): the
    request, the name checked before any lookup, the lookup on the worker,
    every address checked, the connect, and for a tunnel to a name the TLS
    server name. Relaying is gw_egproxy.c's. */
#include "net/gw_egproxy_int.h"
#include "net/gw_tlspeek.h"
#include "base/gw_log.h"
#include "ch_clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define S_REQUEST_MS 30000                      //  a request's head, a tunnel's TLS hello

//  A fatal TLS alert, access_denied: what a client in a tunnel can read.
static const uint8_t s_alert [] = { 0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x31 };

typedef struct {
    gw_egproxy_t *owner;
    uint32_t id;
    int (*resolve) (const char *, gw_egress_addr_t *, size_t, char *, size_t);
    char name [GW_EGRESS_NAME_MAX + 1];
    gw_egress_addr_t addrs [S_ADDRS_MAX];
    int n;
    char err [200];
} s_job_t;

static int
s_getaddrinfo (const char *name, gw_egress_addr_t *out, size_t cap, char *err, size_t errlen)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res = NULL;
    int rc = getaddrinfo (name, NULL, &hints, &res);
    if (rc != 0) {
        snprintf (err, errlen, "%s", rc == EAI_NONAME || rc == EAI_NODATA ? "no such name"
                  : rc == EAI_SYSTEM ? strerror (errno) : gai_strerror (rc));
        return rc == EAI_NONAME || rc == EAI_NODATA ? -ENOENT : -EHOSTUNREACH;
    }
    size_t n = 0;
    for (struct addrinfo *ai = res; ai && n < cap; ai = ai->ai_next)
        if (ai->ai_family == AF_INET) {
            out [n].family = 4;
            memcpy (out [n++].bytes, &((struct sockaddr_in *) ai->ai_addr)->sin_addr, 4);
        }
        else if (ai->ai_family == AF_INET6) {
            out [n].family = 6;
            memcpy (out [n++].bytes, &((struct sockaddr_in6 *) ai->ai_addr)->sin6_addr, 16);
        }
    freeaddrinfo (res);
    return (int) n;
}

static void
s_resolve_work (void *arg)
{
    s_job_t *job = arg;
    job->n = job->resolve (job->name, job->addrs, S_ADDRS_MAX, job->err, sizeof job->err);
}

static void s_check_addrs (gw_egproxy_t *self, s_stream_t *s, const gw_egress_addr_t *addrs,
                           size_t n);
static void s_refuse (gw_egproxy_t *self, s_stream_t *s, int status, const char *words);

static void
s_resolve_done (void *arg)
{
    s_job_t *job = arg;
    s_stream_t *s = gw_egproxy__find (job->owner, job->id);
    if (s && s->phase == S_RESOLVE) {
        char words [600];
        if (job->n <= 0) {
            snprintf (words, sizeof words, "egress failed: %s does not resolve on the gateway's "
                      "host (%s)", s->req.host, job->n == 0 ? "no addresses" : job->err);
            s_refuse (job->owner, s, 502, words);
        }
        else
            s_check_addrs (job->owner, s, job->addrs, (size_t) job->n);
    }
    free (job);
}

static void
s_text (const gw_egress_addr_t *a, char *out, size_t cap)
{
    if (!inet_ntop (a->family == 6 ? AF_INET6 : AF_INET, a->bytes, out, (socklen_t) cap))
        snprintf (out, cap, "?");
}

//  Connect to the next allowed address; none left: 502 with the last error.
static void
s_connect_next (gw_egproxy_t *self, s_stream_t *s, int last_err)
{
    while (s->next_addr < s->naddrs) {
        const gw_egress_addr_t *a = &s->addrs [s->next_addr++];
        gw_egress_addr_t dial = *a;
        unsigned port = s->port;
        if (self->cfg.route)
            self->cfg.route (&dial, &port);
        struct sockaddr_storage ss = { 0 };
        socklen_t sl = dial.family == 6 ? sizeof (struct sockaddr_in6)
                                        : sizeof (struct sockaddr_in);
        if (dial.family == 6) {
            struct sockaddr_in6 *v6 = (struct sockaddr_in6 *) &ss;
            *v6 = (struct sockaddr_in6) { .sin6_family = AF_INET6, .sin6_port = htons (port) };
            memcpy (&v6->sin6_addr, dial.bytes, 16);
        }
        else {
            struct sockaddr_in *v4 = (struct sockaddr_in *) &ss;
            *v4 = (struct sockaddr_in) { .sin_family = AF_INET, .sin_port = htons (port) };
            memcpy (&v4->sin_addr, dial.bytes, 4);
        }
        s_text (a, s->addr, sizeof s->addr);
        int fd = socket (ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd >= 0 && (connect (fd, (struct sockaddr *) &ss, sl) == 0 || errno == EINPROGRESS)) {
            s->fd = fd;
            s->phase = S_CONNECT;
            s->deadline = ch_clock_mono_ms () + self->cfg.connect_ms;
            char scratch [8];                   //  allowed without the name: an address rule
            s->need_sni = s->req.connect && !s->req.literal
                          && !gw_egress_check (self->cfg.policy, NULL, a, s->port, scratch,
                                               sizeof scratch);
            gw_egproxy__watch (self, s);
            return;
        }
        last_err = errno;
        if (fd >= 0)
            close (fd);
    }
    char words [600];
    snprintf (words, sizeof words, "egress failed: could not connect to %s (%s): %s", s->dest,
              s->addr, strerror (last_err));
    s_refuse (self, s, 502, words);
}

//  Keep the addresses the policy allows, in order; none: 403 with the first
//  refusal's words (they name the address a name resolved to).
static void
s_check_addrs (gw_egproxy_t *self, s_stream_t *s, const gw_egress_addr_t *addrs, size_t n)
{
    char reason [400], first [420] = "";
    const char *name = s->req.literal ? NULL : s->req.host;
    s->naddrs = s->next_addr = 0;
    for (size_t i = 0; i < n; i++) {
        if (gw_egress_check (self->cfg.policy, name, &addrs [i], s->port, reason, sizeof reason)) {
            if (!s->naddrs)
                snprintf (s->rule, sizeof s->rule, "%.299s", reason);
            s->addrs [s->naddrs++] = addrs [i];
        }
        else if (!first [0])
            snprintf (first, sizeof first, "egress %s", reason);
    }
    if (!s->naddrs)
        s_refuse (self, s, 403, first);
    else
        s_connect_next (self, s, ECONNREFUSED);
}

static void
s_decide (gw_egproxy_t *self, s_stream_t *s)
{
    char reason [400];
    const gw_proxyreq_t *r = &s->req;
    s->port = r->port;
    snprintf (s->dest, sizeof s->dest, "%s%s%s:%u", strchr (r->host, ':') ? "[" : "", r->host,
              strchr (r->host, ':') ? "]" : "", r->port);
    if (r->literal) {
        s_check_addrs (self, s, &r->addr, 1);
        return;
    }
    if (!gw_egress_check_name (self->cfg.policy, r->host, r->port, reason, sizeof reason)) {
        char words [420];
        snprintf (words, sizeof words, "egress %s", reason);
        s_refuse (self, s, 403, words);   //  refused before any lookup
        return;
    }
    s_job_t *job = calloc (1, sizeof *job);
    if (!job) {
        s_refuse (self, s, 503, "egress failed: the gateway is out of memory");
        return;
    }
    *job = (s_job_t) { .owner = self, .id = s->id,
                       .resolve = self->cfg.resolve ? self->cfg.resolve : s_getaddrinfo };
    snprintf (job->name, sizeof job->name, "%s", r->host);
    s->phase = S_RESOLVE;
    s->deadline = ch_clock_mono_ms () + S_REQUEST_MS;
    gw_worker_submit (gw_egproxy__worker (self), s_resolve_work, s_resolve_done, job);
}

//  The request's head: parse it once it is whole, then decide.
static void
s_head (gw_egproxy_t *self, s_stream_t *s)
{
    size_t len = 0;
    const uint8_t *data = ch_bytes_peek (s->in, &len);
    int status = 400;
    char why [300];
    int rc = gw_proxyreq_parse (data, len, &s->req, &status, why, sizeof why);
    if (rc == -EAGAIN && !s->guest_eof)
        return;
    if (rc < 0) {
        char words [340];
        snprintf (words, sizeof words, "egress refused: %s", rc == -EAGAIN ? "the connection "
                  "ended before its request did" : why);
        s_refuse (self, s, rc == -EAGAIN ? 400 : status, words);
        return;
    }
    s->parsed = true;
    ch_bytes_drop (s->in, s->req.head_len);
    s->consumed += (uint32_t) s->req.head_len;
    s->pre = (uint8_t *) s->req.forward;        //  a plain request's head goes first
    s->pre_len = s->req.forward_len;
    s->req.forward = NULL;
    s_decide (self, s);
}

//  A tunnel to a name: its TLS hello must name that name.
static void
s_peek (gw_egproxy_t *self, s_stream_t *s)
{
    size_t len = 0, need = 0;
    const uint8_t *data = ch_bytes_peek (s->in, &len);
    char name [GW_EGRESS_NAME_MAX + 2] = "", why [200] = "", words [900];
    int rc = gw_tlspeek_sni (data, len, name, sizeof name, &need, why, sizeof why);
    if (rc == -EAGAIN && !s->guest_eof)
        return;
    size_t nl = strlen (name);
    if (nl && name [nl - 1] == '.')
        name [nl - 1] = '\0';
    if (rc == 0 && strcmp (name, s->req.host) == 0) {
        s->phase = S_RELAY;
        s->first_checked = true;
        s->deadline = 0;
        self->stats.allowed++;
        gw_log (GW_LOG_INFO, "egress.allowed", "stream=%u dest=%s addr=%s sni=%s rule=\"%s\"",
                (unsigned) s->id, s->dest, s->addr, name, s->rule);
        gw_egproxy__watch (self, s);
        return;
    }
    if (rc == 0 && !name [0])
        snprintf (words, sizeof words, "egress refused: the TLS hello in the tunnel to %s names "
                  "no server; it must name %s", s->dest, s->req.host);
    else if (rc == 0)
        snprintf (words, sizeof words, "egress refused: the TLS server name %s differs from the "
                  "tunnel's host %s; an allowed name cannot carry another", name, s->req.host);
    else
        snprintf (words, sizeof words, "egress refused: a tunnel to the name %s must carry TLS "
                  "naming it (%s)", s->req.host, rc == -EAGAIN ? "it ended before its hello"
                  : rc == -E2BIG ? "the hello is too long" : why);
    s_refuse (self, s, 403, words);
}

int
gw_egstream__first (gw_egproxy_t *self, s_stream_t *s)
{
    size_t len = 0, need = 0;
    const uint8_t *data = ch_bytes_peek (s->in, &len);
    if (s->first_checked || !s->req.connect || !len)
        return 0;
    char name [GW_EGRESS_NAME_MAX + 2] = "", why [200], words [700];
    int rc = data [0] == 0x16 ? gw_tlspeek_sni (data, len, name, sizeof name, &need, why,
                                                sizeof why) : -EPROTO;
    if (rc == -EAGAIN && !s->guest_eof)
        return -EAGAIN;
    s->first_checked = true;
    size_t nl = strlen (name);
    if (nl && name [nl - 1] == '.')
        name [--nl] = '\0';
    if (rc != 0 || !nl || strcmp (name, s->req.host) == 0)
        return 0;                               //  not TLS, or no name: the address allowed it
    snprintf (words, sizeof words, "egress refused: the TLS server name %s differs from the "
              "tunnel's host %s; an allowed destination cannot carry another", name,
              s->req.host);
    s->phase = S_PEEK;                          //  the refusal is a TLS alert
    s_refuse (self, s, 403, words);
    return -ECANCELED;
}

void
gw_egstream__advance (gw_egproxy_t *self, s_stream_t *s)
{
    if (s->phase == S_HEAD)
        s_head (self, s);
    else if (s->phase == S_PEEK)
        s_peek (self, s);
}

void
gw_egstream__connected (gw_egproxy_t *self, s_stream_t *s)
{
    struct pollfd pf = { .fd = s->fd, .events = POLLOUT };
    if (poll (&pf, 1, 0) <= 0)
        return;                                 //  still connecting
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    if (getsockopt (s->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
        soerr = errno;
    if (soerr) {
        gw_egproxy__forget_fd (self, s);
        s_connect_next (self, s, soerr);
        return;
    }
    if (s->req.connect)
        gw_egproxy__send (self, CH_MUX_DATA, s->id, GW_PROXYREQ_ESTABLISHED,
                          strlen (GW_PROXYREQ_ESTABLISHED));
    if (s->req.connect)                         //  the guest credits it back like any DATA
        s->credit -= (uint32_t) strlen (GW_PROXYREQ_ESTABLISHED);
    if (s->need_sni) {
        s->phase = S_PEEK;
        s->deadline = ch_clock_mono_ms () + S_REQUEST_MS;
        gw_egproxy__watch (self, s);
        s_peek (self, s);                       //  a client may send its hello at once
        return;
    }
    s->phase = S_RELAY;
    s->deadline = 0;
    self->stats.allowed++;
    gw_log (GW_LOG_INFO, "egress.allowed", "stream=%u dest=%s addr=%s rule=\"%s\"",
            (unsigned) s->id, s->dest, s->addr, s->rule);
    gw_egproxy__watch (self, s);
}

//  Refuse the request: an HTTP response with status and words (a TLS alert
//  once a tunnel is established), logged, the stream ended.
static void
s_refuse (gw_egproxy_t *self, s_stream_t *s, int status, const char *words)
{
    if (s->phase == S_PEEK)                     //  the client speaks TLS by now
        gw_egproxy__send (self, CH_MUX_DATA, s->id, s_alert, sizeof s_alert);
    else {
        size_t len = 0;
        char *resp = gw_proxyreq_response (status, words, &len);
        if (resp && len <= CH_MUX_DATA_MAX)
            gw_egproxy__send (self, CH_MUX_DATA, s->id, resp, len);
        free (resp);
    }
    gw_egproxy__send (self, CH_MUX_EOF, s->id, NULL, 0);
    self->stats.refused++;
    gw_log (GW_LOG_WARN, "egress.refused", "stream=%u dest=%s addr=%s status=%d reason=\"%s\"",
            (unsigned) s->id, s->dest [0] ? s->dest : "?", s->addr [0] ? s->addr : "-",
            s->phase == S_PEEK ? 0 : status, words);
    gw_egproxy__end (self, s, words, true);
}

void
gw_egstream__tick (gw_egproxy_t *self, s_stream_t *s, int64_t now)
{
    (void) now;
    char words [400];
    switch (s->phase) {
    case S_HEAD:
        s_refuse (self, s, 408, "egress refused: no complete request within 30 s");
        return;
    case S_RESOLVE:
        snprintf (words, sizeof words, "egress failed: looking up %s on the gateway's host took "
                  "over 30 s", s->req.host);
        s_refuse (self, s, 504, words);
        return;
    case S_CONNECT:
        gw_egproxy__forget_fd (self, s);
        s_connect_next (self, s, ETIMEDOUT);
        return;
    case S_PEEK:
        s_refuse (self, s, 403, "egress refused: no TLS hello within 30 s");
        return;
    default:
        s->deadline = 0;
    }
}
