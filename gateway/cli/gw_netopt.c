/*  gw_netopt - a session's egress from its options (see gw_netopt.h). */
#include "cli/gw_netopt.h"
#include "base/gw_log.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static bool
s_given (const char *list)
{
    return list && list [strspn (list, " ,")];
}

int
gw_netopt_policy (const gw_args_t *args, const char *client, const char *snapshot,
                  gw_egress_t **policy_p, char *err, size_t errlen)
{
    const char *allow = args->text [GW_OPT_EGRESS_ALLOW], *deny = args->text [GW_OPT_EGRESS_DENY];
    const char *narrow = client ? client : snapshot;
    *policy_p = NULL;
    if (!s_given (allow)) {
        if (s_given (narrow))
            gw_log (GW_LOG_WARN, "egress.off", "asked=\"%.200s\" reason=\"%s asks for egress, "
                    "but this kernel's operator allows none (no --egress-allow): the session "
                    "has no network\"", narrow, client ? GW_NETOPT_ENV : "the snapshot");
        return 0;
    }
    char why [300];
    gw_egress_t *policy = gw_egress_new (allow, deny, why, sizeof why);
    if (!policy) {
        snprintf (err, errlen, "%s", why);       //  it names the option and the rule
        return -EINVAL;
    }
    if (s_given (narrow) && gw_egress_narrow (policy, narrow, why, sizeof why) < 0) {
        snprintf (err, errlen, "%s%s", client ? "" : "the snapshot's egress list: ", why);
        gw_egress_destroy (&policy);
        return -EINVAL;
    }
    char text [1024];
    gw_egress_format (policy, text, sizeof text);
    gw_log (GW_LOG_INFO, "egress.policy", "policy=%s", text);
    *policy_p = policy;
    return 0;
}

void
gw_netopt_caps (const gw_args_t *args, gw_egproxy_cfg_t *caps)
{
    *caps = (gw_egproxy_cfg_t) {
        .max_streams = args->egress_streams,
        .max_conns_per_min = args->egress_conns,
        .max_bytes = gw_args_has (args, GW_OPT_EGRESS_MAX) ? args->egress_max : 4ULL << 30,
    };
}
