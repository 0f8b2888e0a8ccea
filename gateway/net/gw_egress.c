/*  gw_egress - a session's egress policy (see gw_egress.h). */
#include "net/gw_egress.h"

#include <arpa/inet.h>
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { S_NAME, S_SUFFIX, S_NET, S_ANY } s_kind_t;

typedef struct {
    s_kind_t kind;
    char name [GW_EGRESS_NAME_MAX + 1];         //  S_NAME; S_SUFFIX without its "*."
    gw_egress_addr_t net;                       //  S_NET
    unsigned prefix;                            //  S_NET: bits that must match
    unsigned port;                              //  0: any
    char text [GW_EGRESS_NAME_MAX + 24];        //  as a list shows it
} s_rule_t;

typedef struct {
    s_rule_t *v;
    size_t n;
} s_list_t;

struct _gw_egress_t {
    s_list_t allow, deny, client;
    bool has_client;
};

//  ==========================================================================
//  Addresses.

typedef struct {
    int family;
    uint8_t bytes [16];
    unsigned prefix;
} s_net_t;

//  Ranges a guest must not reach unless an operator's rule names them.
static const char *s_private [] = {
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
    "172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15",
    "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
    "::/96", "64:ff9b:1::/48", "100::/64", "2001::/23", "2001:db8::/32", "2002::/16",
    "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8"
};

static bool
s_in_net (const gw_egress_addr_t *a, int family, const uint8_t *net, unsigned prefix)
{
    if (a->family != family)
        return false;
    unsigned full = prefix / 8, rest = prefix % 8;
    if (memcmp (a->bytes, net, full) != 0)
        return false;
    uint8_t mask = (uint8_t) (0xff << (8 - rest));
    return rest == 0 || (a->bytes [full] & mask) == (net [full] & mask);
}

//  "A.B.C.D/N" or "X::/N" (no brackets) into net; -EINVAL if not one.
static int
s_parse_net (const char *text, s_net_t *net, bool need_prefix)
{
    char buf [64];
    if (strlen (text) >= sizeof buf)
        return -EINVAL;
    strcpy (buf, text);
    char *slash = strchr (buf, '/');
    if (need_prefix && !slash)
        return -EINVAL;
    if (slash)
        *slash = '\0';
    net->family = strchr (buf, ':') ? 6 : 4;
    if (inet_pton (net->family == 6 ? AF_INET6 : AF_INET, buf, net->bytes) != 1)
        return -EINVAL;
    unsigned max = net->family == 6 ? 128 : 32;
    net->prefix = max;
    if (slash) {
        char *end = NULL;
        unsigned long n = strtoul (slash + 1, &end, 10);
        if (!isdigit ((unsigned char) slash [1]) || *end || n > max)
            return -EINVAL;
        net->prefix = (unsigned) n;
    }
    return 0;
}

//  IPv4 carried in IPv6 (mapped ::ffff:0:0/96, NAT64 64:ff9b::/96) is
//  judged as the IPv4 address it reaches.
static gw_egress_addr_t
s_plain (const gw_egress_addr_t *a)
{
    static const uint8_t mapped [12] = { [10] = 0xff, [11] = 0xff };
    static const uint8_t nat64 [12] = { 0x00, 0x64, 0xff, 0x9b };
    gw_egress_addr_t out = *a;
    if (a->family == 6 && (memcmp (a->bytes, mapped, 12) == 0
                       ||  memcmp (a->bytes, nat64, 12) == 0)) {
        memset (&out, 0, sizeof out);
        out.family = 4;
        memcpy (out.bytes, a->bytes + 12, 4);
    }
    return out;
}

bool
gw_egress_addr_private (const gw_egress_addr_t *addr)
{
    assert (addr);
    gw_egress_addr_t a = s_plain (addr);
    for (size_t i = 0; i < sizeof s_private / sizeof s_private [0]; i++) {
        s_net_t net;
        int rc = s_parse_net (s_private [i], &net, true);
        assert (rc == 0);
        (void) rc;
        if (s_in_net (&a, net.family, net.bytes, net.prefix))
            return true;
    }
    return a.family != 4 && a.family != 6;
}

//  ==========================================================================
//  Rules.

int
gw_egress_name (const char *name, char *out, size_t cap)
{
    size_t n = name ? strlen (name) : 0;
    if (n && name [n - 1] == '.')
        n--;                                    //  the root's dot
    if (n == 0 || n > GW_EGRESS_NAME_MAX || n >= cap)
        return -EINVAL;
    size_t label = 0;
    for (size_t i = 0; i < n; i++) {
        char c = (char) tolower ((unsigned char) name [i]);
        bool ok = isalnum ((unsigned char) c) || c == '-' || c == '_';
        if (c == '.' ? label == 0 : !ok || ++label > 63)
            return -EINVAL;
        if (c == '.')
            label = 0;
        out [i] = c;
    }
    out [n] = '\0';
    return label ? 0 : -EINVAL;
}

//  ":PORT" at the end of text (cut off) into *port; 0 when there is none.
static int
s_cut_port (char *colon, unsigned *port)
{
    *port = 0;
    if (!colon)
        return 0;
    char *end = NULL;
    unsigned long n = strtoul (colon + 1, &end, 10);
    if (!isdigit ((unsigned char) colon [1]) || *end || n == 0 || n > 65535)
        return -EINVAL;
    *port = (unsigned) n;
    *colon = '\0';
    return 0;
}

//  A network's bits past its prefix must be clear: 10.1.2.3/24 is a typo.
static int
s_host_bits (const s_rule_t *r, const char *host, char *why, size_t cap)
{
    gw_egress_addr_t base = r->net;
    unsigned max = r->net.family == 6 ? 128 : 32;
    for (unsigned b = r->prefix; b < max; b++)
        base.bytes [b / 8] &= (uint8_t) ~(0x80u >> (b % 8));
    if (memcmp (base.bytes, r->net.bytes, sizeof base.bytes) == 0)
        return 0;
    char txt [INET6_ADDRSTRLEN];
    inet_ntop (r->net.family == 6 ? AF_INET6 : AF_INET, base.bytes, txt, sizeof txt);
    snprintf (why, cap, "\"%s\" has host bits set (the network is %s/%u)", host, txt,
              r->prefix);
    return -EINVAL;
}

//  The host part of a rule (its port already cut) into r.
static int
s_parse_host (char *host, bool bracketed, s_rule_t *r, char *why, size_t cap)
{
    s_net_t net;
    if (!bracketed && strcmp (host, "*") == 0) {
        r->kind = S_ANY;
        return 0;
    }
    if (!bracketed && strncmp (host, "*.", 2) == 0) {
        r->kind = S_SUFFIX;
        if (gw_egress_name (host + 2, r->name, sizeof r->name) == 0)
            return 0;
        snprintf (why, cap, "\"%s\" is not a domain", host + 2);
        return -EINVAL;
    }
    bool literal = bracketed || strchr (host, '/') || strchr (host, ':')
                || (host [0] && strspn (host, "0123456789.") == strlen (host));
    if (!literal) {
        r->kind = S_NAME;
        if (gw_egress_name (host, r->name, sizeof r->name) == 0)
            return 0;
        snprintf (why, cap, "\"%s\" is not a domain, address or network", host);
        return -EINVAL;
    }
    bool v6 = bracketed || strchr (host, ':');
    if (s_parse_net (host, &net, false) < 0 || (net.family == 6) != v6) {
        snprintf (why, cap, "\"%s\" is not an address or network", host);
        return -EINVAL;
    }
    r->kind = S_NET;
    r->prefix = net.prefix;
    r->net.family = net.family;
    memcpy (r->net.bytes, net.bytes, sizeof net.bytes);
    return s_host_bits (r, host, why, cap);
}
//  How r reads in a list (the normal form: lowercase, brackets for IPv6).
static void
s_rule_text (s_rule_t *r)
{
    char host [GW_EGRESS_NAME_MAX + 8], addr [INET6_ADDRSTRLEN];
    if (r->kind == S_ANY)
        snprintf (host, sizeof host, "*");
    else if (r->kind == S_SUFFIX)
        snprintf (host, sizeof host, "*.%s", r->name);
    else if (r->kind == S_NAME)
        snprintf (host, sizeof host, "%s", r->name);
    else {
        bool v6 = r->net.family == 6;
        char bits [8] = "";
        if (r->prefix != (v6 ? 128u : 32u))
            snprintf (bits, sizeof bits, "/%u", r->prefix);
        inet_ntop (v6 ? AF_INET6 : AF_INET, r->net.bytes, addr, sizeof addr);
        snprintf (host, sizeof host, "%s%s%s%s", v6 ? "[" : "", addr, bits, v6 ? "]" : "");
    }
    if (r->port)
        snprintf (r->text, sizeof r->text, "%s:%u", host, r->port);
    else
        snprintf (r->text, sizeof r->text, "%s", host);
}

//  One rule as written (spaces trimmed) into r.
static int
s_parse_rule (char *tok, s_rule_t *r, char *why, size_t cap)
{
    memset (r, 0, sizeof *r);
    bool bracketed = tok [0] == '[';
    char *host = tok, *colon = NULL;
    if (bracketed) {
        char *close = strchr (tok, ']');
        if (!close || (close [1] && close [1] != ':')) {
            snprintf (why, cap, "an IPv6 rule is [ADDRESS] or [ADDRESS]:PORT");
            return -EINVAL;
        }
        *close = '\0';
        host = tok + 1;
        colon = close [1] ? close + 1 : NULL;
    }
    else if (strchr (tok, ':') && strchr (tok, ':') == strrchr (tok, ':'))
        colon = strchr (tok, ':');
    if (s_cut_port (colon, &r->port) < 0) {
        snprintf (why, cap, "the port must be a number from 1 to 65535");
        return -EINVAL;
    }
    int rc = s_parse_host (host, bracketed, r, why, cap);
    if (rc == 0)
        s_rule_text (r);
    return rc;
}

static char *
s_trim (char *s)
{
    while (isspace ((unsigned char) *s))
        s++;
    size_t n = strlen (s);
    while (n && isspace ((unsigned char) s [n - 1]))
        s [--n] = '\0';
    return s;
}

//  A comma-separated list into list (empty items are skipped).
static int
s_parse_list (const char *text, const char *what, s_list_t *list, char *err, size_t errlen)
{
    memset (list, 0, sizeof *list);
    if (!text || !*text)
        return 0;
    if (strlen (text) > GW_EGRESS_LIST_MAX) {
        snprintf (err, errlen, "%s: longer than %d characters", what, GW_EGRESS_LIST_MAX);
        return -EINVAL;
    }
    char *copy = strdup (text), *save = NULL, why [400];
    list->v = calloc (GW_EGRESS_RULES_MAX, sizeof *list->v);
    if (!copy || !list->v)
        abort ();
    int rc = 0;
    for (char *tok = strtok_r (copy, ",", &save); tok && rc == 0;
         tok = strtok_r (NULL, ",", &save)) {
        char *rule = s_trim (tok);
        if (!*rule)
            continue;
        if (list->n == GW_EGRESS_RULES_MAX) {
            snprintf (err, errlen, "%s: more than %d rules", what, GW_EGRESS_RULES_MAX);
            rc = -EINVAL;
        }
        else if ((rc = s_parse_rule (rule, &list->v [list->n], why, sizeof why)) < 0)
            snprintf (err, errlen, "%s: rule \"%.200s\": %s", what, rule, why);
        else
            list->n++;
    }
    free (copy);
    if (rc < 0) {
        free (list->v);
        memset (list, 0, sizeof *list);
    }
    return rc;
}

//  ==========================================================================
//  The policy.

gw_egress_t *
gw_egress_new (const char *allow, const char *deny, char *err, size_t errlen)
{
    assert (err);
    gw_egress_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    if (s_parse_list (allow, "--egress-allow", &self->allow, err, errlen) < 0
    ||  s_parse_list (deny, "--egress-deny", &self->deny, err, errlen) < 0)
        gw_egress_destroy (&self);
    return self;
}

void
gw_egress_destroy (gw_egress_t **self_p)
{
    assert (self_p);
    gw_egress_t *self = *self_p;
    if (!self)
        return;
    free (self->allow.v);
    free (self->deny.v);
    free (self->client.v);
    free (self);
    *self_p = NULL;
}

int
gw_egress_narrow (gw_egress_t *self, const char *allow, char *err, size_t errlen)
{
    assert (self && err);
    s_list_t list;
    int rc = s_parse_list (allow, "CELLVM_EGRESS_ALLOW", &list, err, errlen);
    if (rc < 0)
        return rc;
    free (self->client.v);
    self->client = list;
    self->has_client = allow && *allow;
    return 0;
}

static bool
s_match (const s_rule_t *r, const char *name, const gw_egress_addr_t *addr, unsigned port)
{
    if (r->port && r->port != port)
        return false;
    size_t n = name ? strlen (name) : 0, k = strlen (r->name);
    switch (r->kind) {
    case S_ANY: return true;
    case S_NAME: return name && strcmp (name, r->name) == 0;
    case S_SUFFIX: return n > k + 1 && name [n - k - 1] == '.' && strcmp (name + n - k, r->name) == 0;
    case S_NET: return addr && s_in_net (addr, r->net.family, r->net.bytes, r->prefix);
    }
    return false;
}

//  The first rule of list matching; a private address only by an address rule.
static const s_rule_t *
s_find (const s_list_t *list, const char *name, const gw_egress_addr_t *addr, unsigned port,
        bool only_net)
{
    for (size_t i = 0; i < list->n; i++)
        if ((!only_net || list->v [i].kind == S_NET) && s_match (&list->v [i], name, addr, port))
            return &list->v [i];
    return NULL;
}

//  A rule of list that would match on its own port: the words for a port refused.
static const s_rule_t *
s_other_port (const s_list_t *list, const char *name, const gw_egress_addr_t *addr,
              bool only_net)
{
    for (size_t i = 0; i < list->n; i++)
        if ((!only_net || list->v [i].kind == S_NET) && list->v [i].port
        &&  s_match (&list->v [i], name, addr, list->v [i].port))
            return &list->v [i];
    return NULL;
}

bool
gw_egress_check (const gw_egress_t *self, const char *name, const gw_egress_addr_t *addr,
                 unsigned port, char *reason, size_t cap)
{
    assert (self && addr && reason);
    char host [GW_EGRESS_NAME_MAX + 1] = "", txt [INET6_ADDRSTRLEN] = "?", dest [360];
    gw_egress_addr_t a = s_plain (addr);
    if (a.family == 4 || a.family == 6)
        inet_ntop (a.family == 6 ? AF_INET6 : AF_INET, a.bytes, txt, sizeof txt);
    if (name && gw_egress_name (name, host, sizeof host) < 0) {
        snprintf (reason, cap, "refused: \"%.100s\" is not a domain name", name);
        return false;
    }
    const char *nm = name ? host : NULL;
    snprintf (dest, sizeof dest, "%s%s%s%s:%u", nm ? nm : "", nm ? " (" : "", txt,
              nm ? ")" : "", port);
    bool priv = gw_egress_addr_private (&a);
    const s_rule_t *r = s_find (&self->deny, nm, &a, port, false);
    if (r) {
        snprintf (reason, cap, "refused: %s matches the deny rule %s", dest, r->text);
        return false;
    }
    if (!(r = s_find (&self->allow, nm, &a, port, priv))) {
        bool by_name = priv && s_find (&self->allow, nm, &a, port, false);  //  not enough
        if (!by_name && (r = s_other_port (&self->allow, nm, &a, priv)))
            snprintf (reason, cap, "refused: %s: port %u is not allowed (the rule %s allows "
                      "port %u)", dest, port, r->text, r->port);
        else if (priv)
            snprintf (reason, cap, "refused: %s is a loopback, private, link-local or reserved "
                      "address; only an operator's rule naming that address allows it", dest);
        else
            snprintf (reason, cap, "refused: %s matches no rule of --egress-allow", dest);
        return false;
    }
    //  The client's list reads as the operator's does: * and names are public only.
    const s_rule_t *c = self->has_client ? s_find (&self->client, nm, &a, port, priv) : r;
    if (!c) {
        snprintf (reason, cap, "refused: %s is not in this session's CELLVM_EGRESS_ALLOW%s",
                  dest, priv ? " (a private address needs an address rule there too)" : "");
        return false;
    }
    snprintf (reason, cap, "allowed: %s by the rule %s", dest, c->text);
    return true;
}

//  Could a rule of list allow name:port (once resolved)?
static bool
s_could (const s_list_t *list, const char *name, unsigned port)
{
    for (size_t i = 0; i < list->n; i++) {
        const s_rule_t *r = &list->v [i];
        if ((r->kind == S_NET || r->kind == S_ANY) ? !r->port || r->port == port
                                                   : s_match (r, name, NULL, port))
            return true;
    }
    return false;
}

bool
gw_egress_check_name (const gw_egress_t *self, const char *name, unsigned port, char *reason,
                      size_t cap)
{
    assert (self && reason);
    char host [GW_EGRESS_NAME_MAX + 1];
    if (gw_egress_name (name, host, sizeof host) < 0) {
        snprintf (reason, cap, "refused: \"%.100s\" is not a domain name", name ? name : "");
        return false;
    }
    for (size_t i = 0; i < self->deny.n; i++) {
        const s_rule_t *r = &self->deny.v [i];
        if (r->kind != S_NET && s_match (r, host, NULL, port)) {
            snprintf (reason, cap, "refused: %s:%u matches the deny rule %s", host, port, r->text);
            return false;
        }
    }
    if (!s_could (&self->allow, host, port)) {
        snprintf (reason, cap, "refused: %s:%u matches no rule of --egress-allow", host, port);
        return false;
    }
    if (self->has_client && !s_could (&self->client, host, port)) {
        snprintf (reason, cap, "refused: %s:%u is not in this session's CELLVM_EGRESS_ALLOW",
                  host, port);
        return false;
    }
    snprintf (reason, cap, "%s:%u may be allowed once resolved", host, port);
    return true;
}

static size_t
s_list_text (const s_list_t *list, char *out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < list->n; i++) {
        int k = snprintf (out + (n < cap ? n : cap), n < cap ? cap - n : 0, "%s%s",
                          i ? "," : "", list->v [i].text);
        n += k > 0 ? (size_t) k : 0;
    }
    return n;
}

int
gw_egress_format (const gw_egress_t *self, char *out, size_t cap)
{
    assert (self && (out || cap == 0));
    const s_list_t *lists [3] = { &self->allow, &self->deny, &self->client };
    const char *keys [3] = { "{\"allow\": \"", "\", \"deny\": \"", "\", \"client_allow\": \"" };
    size_t n = 0;
    for (int i = 0; i < (self->has_client ? 3 : 2); i++) {
        int k = snprintf (out + (n < cap ? n : cap), n < cap ? cap - n : 0, "%s", keys [i]);
        n += (size_t) k;
        n += s_list_text (lists [i], out + (n < cap ? n : cap), n < cap ? cap - n : 0);
    }
    int k = snprintf (out + (n < cap ? n : cap), n < cap ? cap - n : 0, "\"}");
    return (int) (n + (size_t) k);
}
