/*  fuzz_gw_egress - the egress policy reads lists from the operator's
    options and from any client (CELLVM_EGRESS_ALLOW). The input is three
    lines (allow, deny, the client's allow), then a destination: a family
    byte, 16 address bytes, 2 port bytes, a name.

    A refused list must say why; an accepted one must read back from its
    own normal form to the same form; every verdict must give a reason that
    says which it is, and an address only an operator may allow must never
    be allowed by a policy without address rules.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/gw_egress.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

//  The value of key in gw_egress_format's text, into out.
static void
s_field (const char *text, const char *key, char *out, size_t cap)
{
    const char *at = strstr (text, key);
    out [0] = '\0';
    if (!at)
        return;
    at += strlen (key);
    const char *end = strchr (at, '"');
    if (!end || (size_t) (end - at) >= cap)
        abort ();
    memcpy (out, at, (size_t) (end - at));
    out [end - at] = '\0';
}

//  Does the operator's allow list (in its normal form) hold an address rule:
//  "[...]" or digits, dots and a prefix, with or without a port?
static bool
s_has_net_rule (const gw_egress_t *p)
{
    static char text [4 * GW_EGRESS_LIST_MAX], allow [GW_EGRESS_LIST_MAX * 2];
    gw_egress_format (p, text, sizeof text);
    s_field (text, "\"allow\": \"", allow, sizeof allow);
    char *save = NULL;
    for (char *r = strtok_r (allow, ",", &save); r; r = strtok_r (NULL, ",", &save)) {
        size_t n = strcspn (r, ":");
        if (r [0] == '[' || (n && strspn (r, "0123456789./") == n))
            return true;
    }
    return false;
}

static void
s_round_trip (const gw_egress_t *p)
{
    static char text [4 * GW_EGRESS_LIST_MAX], allow [GW_EGRESS_LIST_MAX * 2],
                deny [GW_EGRESS_LIST_MAX * 2], again [4 * GW_EGRESS_LIST_MAX];
    char err [512] = "";
    if (gw_egress_format (p, text, sizeof text) >= (int) sizeof text)
        abort ();
    s_field (text, "\"allow\": \"", allow, sizeof allow);
    s_field (text, "\"deny\": \"", deny, sizeof deny);
    gw_egress_t *q = gw_egress_new (allow, deny, err, sizeof err);
    if (!q)
        abort ();                               //  its own normal form must read back
    gw_egress_format (q, again, sizeof again);
    static char allow2 [GW_EGRESS_LIST_MAX * 2], deny2 [GW_EGRESS_LIST_MAX * 2];
    s_field (again, "\"allow\": \"", allow2, sizeof allow2);
    s_field (again, "\"deny\": \"", deny2, sizeof deny2);
    if (strcmp (allow, allow2) != 0 || strcmp (deny, deny2) != 0)
        abort ();
    gw_egress_destroy (&q);
}

static void
s_verdict (const gw_egress_t *p, bool has_net_rule, const uint8_t *data, size_t size)
{
    gw_egress_addr_t a = { .family = size && (data [0] & 1) ? 6 : 4 };
    if (size >= 17)
        memcpy (a.bytes, data + 1, 16);
    unsigned port = size >= 19 ? (unsigned) (data [17] << 8 | data [18]) : 443;
    char name [300] = "", reason [512] = "";
    if (size > 19) {
        size_t n = size - 19 < sizeof name - 1 ? size - 19 : sizeof name - 1;
        memcpy (name, data + 19, n);
        name [n] = '\0';
    }
    bool ok = gw_egress_check (p, size > 19 ? name : NULL, &a, port, reason, sizeof reason);
    if (!reason [0] || (strncmp (reason, "allowed: ", 9) == 0) != ok)
        abort ();
    if (ok && gw_egress_addr_private (&a) && !has_net_rule)
        abort ();
    ok = gw_egress_check_name (p, name, port, reason, sizeof reason);
    if (!reason [0] || (strncmp (reason, "refused: ", 9) == 0) == ok)
        abort ();
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    char *text = malloc (size + 1), *lines [3] = { NULL, NULL, NULL }, err [512] = "";
    if (!text)
        return 0;
    memcpy (text, data, size);
    text [size] = '\0';
    char *at = text;
    for (int i = 0; i < 3 && at; i++) {
        lines [i] = at;
        at = strchr (at, '\n');
        if (at)
            *at++ = '\0';
    }
    size_t used = at ? (size_t) (at - text) : size;
    gw_egress_t *p = gw_egress_new (lines [0], lines [1], err, sizeof err);
    if (!p && !err [0])
        abort ();
    if (p && gw_egress_narrow (p, lines [2], err, sizeof err) < 0 && !err [0])
        abort ();
    if (p) {
        s_round_trip (p);
        s_verdict (p, s_has_net_rule (p), data + used, size - used);
    }
    gw_egress_destroy (&p);
    free (text);
    return 0;
}
