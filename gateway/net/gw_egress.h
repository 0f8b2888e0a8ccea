/*  gw_egress - a session's egress policy (docs/network.md), as a pure
    codec: lists of rules in, a verdict with its reason out. No sockets, no
    resolver: the caller resolves a name and asks about each address.

    A list is comma-separated rules, each with an optional :PORT:
        pypi.org            that name exactly
        *.pythonhosted.org  any name below it (not the name itself)
        203.0.113.7         that address; [2001:db8::7] for IPv6
        10.1.2.0/24         that network; [fd00::/8] for IPv6
        *                   any public address
    e.g. "pypi.org,*.pythonhosted.org:443,10.1.2.0/24:5432,127.0.0.1:8080".

    A connection is allowed when no deny rule matches it and an allow rule
    does. Name rules match the name the guest asked for; address rules
    match the address it resolved to. Loopback, private, link-local (the
    cloud metadata address among them), shared, multicast and reserved
    addresses are refused after resolution unless an operator's address
    rule names them (a name rule, or "*", never reaches them). A client's
    list (CELLVM_EGRESS_ALLOW) only narrows: both must allow.
*/
#ifndef GW_EGRESS_H
#define GW_EGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GW_EGRESS_RULES_MAX 256                 //  rules per list
#define GW_EGRESS_LIST_MAX 16384                //  longest list text
#define GW_EGRESS_NAME_MAX 253                  //  longest DNS name

typedef struct _gw_egress_t gw_egress_t;

//  An address: family 4 (bytes [0..3]) or 6 (bytes [0..15]).
typedef struct {
    int family;
    uint8_t bytes [16];
} gw_egress_addr_t;

//  The operator's policy from its allow and deny lists (NULL or "": none).
//  NULL with the bad rule and why in err.
gw_egress_t *gw_egress_new (const char *allow, const char *deny, char *err, size_t errlen);
void gw_egress_destroy (gw_egress_t **self_p);

//  A client's allow list on top: from now on both must allow. Replaces an
//  earlier client list; NULL or "" removes it. 0, or -EINVAL with err (the
//  policy unchanged).
int gw_egress_narrow (gw_egress_t *self, const char *allow, char *err, size_t errlen);

//  May the guest reach addr:port, asked for as name (NULL: an address
//  literal)? true or false, and why in reason (the rule that decided, or
//  what no rule covered), in words a cell's reader can act on.
bool gw_egress_check (const gw_egress_t *self, const char *name, const gw_egress_addr_t *addr,
                      unsigned port, char *reason, size_t cap);

//  May the guest ask for name:port at all (before resolving)? false when a
//  deny rule names it, or no allow rule could match it; why in reason.
bool gw_egress_check_name (const gw_egress_t *self, const char *name, unsigned port,
                           char *reason, size_t cap);

//  name lowercased, its trailing dot dropped, into out; -EINVAL if it is
//  not a DNS name (letters, digits, '-', '_', labels of 1-63).
int gw_egress_name (const char *name, char *out, size_t cap);

//  Is addr one only an operator's address rule may allow?
bool gw_egress_addr_private (const gw_egress_addr_t *addr);

//  The policy in force, as lists a later gw_egress_new reads back:
//  {"allow": "...", "deny": "...", "client_allow": "..." or absent}.
//  Returns the length it needed (as snprintf).
int gw_egress_format (const gw_egress_t *self, char *out, size_t cap);

#endif
