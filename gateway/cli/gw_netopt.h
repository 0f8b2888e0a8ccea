/*  gw_netopt - a session's egress from its options (docs/network.md): the
    operator's lists (--egress-allow, --egress-deny) are the ceiling; the
    client's CELLVM_EGRESS_ALLOW, or else the list a resumed snapshot was
    taken with, narrows them. No --egress-allow: no network at all.
*/
#ifndef GW_NETOPT_H
#define GW_NETOPT_H

#include "cli/gw_args.h"
#include "net/gw_egproxy.h"

#define GW_NETOPT_ENV "CELLVM_EGRESS_ALLOW"

//  The policy into *policy_p (NULL: egress off). client: the client's list
//  (NULL: none), snapshot: the client list a snapshot recorded (NULL:
//  none). 0, or -EINVAL with the bad rule in err (the session must not
//  start: a list it cannot read would silently allow too little or more).
int gw_netopt_policy (const gw_args_t *args, const char *client, const char *snapshot,
                      gw_egress_t **policy_p, char *err, size_t errlen);

//  The caps the options give.
void gw_netopt_caps (const gw_args_t *args, gw_egproxy_cfg_t *caps);

#endif
