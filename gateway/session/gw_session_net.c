/*  gw_session_net - a session's egress, as the client and the kernel see
    it (docs/network.md): the variables that point the kernel's tools at
    the guest's proxy, and the control request that changes the policy of
    a live session. */
#include "session/gw_session_int.h"
#include "base/gw_log.h"
#include "session/gw_env.h"

#include <unistd.h>

#include <stdio.h>
#include <string.h>

//  pip installs into /workspace, so what a cell installs survives restarts
//  and snapshots; Debian's pip refuses user installs without the last one.
static const char *const s_pip [][2] = {
    { "PYTHONUSERBASE", "/workspace/.local" }, { "PIP_USER", "1" },
    { "PIP_BREAK_SYSTEM_PACKAGES", "1" }, { "PIP_DISABLE_PIP_VERSION_CHECK", "1" },
    { "SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt" },
    { "REQUESTS_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt" },
    { "NO_PROXY", "localhost,127.0.0.1,::1" }, { "no_proxy", "localhost,127.0.0.1,::1" },
};

static void
s_egress_env (gw_session_t *self)
{
    if (!self->opts.egress || !self->env)
        return;
    char proxy [64];
    snprintf (proxy, sizeof proxy, "http://127.0.0.1:%u", self->opts.egress_port);
    const char *proxies [] = { "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy" };
    for (size_t i = 0; i < sizeof proxies / sizeof proxies [0]; i++)
        if (!json_object_get (self->env, proxies [i]))
            json_object_set_new (self->env, proxies [i], json_string (proxy));
    for (size_t i = 0; i < sizeof s_pip / sizeof s_pip [0]; i++)
        if (!json_object_get (self->env, s_pip [i][0]))
            json_object_set_new (self->env, s_pip [i][0], json_string (s_pip [i][1]));
}

void
gw_session__env (gw_session_t *self)
{
    size_t skipped = 0;
    self->env = gw_env_passed (environ, &skipped);
    s_egress_env (self);
    if (skipped)
        gw_log (GW_LOG_WARN, "session.env_skipped", "count=%zu reason=\"a " GW_ENV_PREFIX
                "NAME needs a NAME of [A-Za-z_][A-Za-z0-9_]* and a UTF-8 value, %d "
                "variables and %u bytes at most\"", skipped, GW_ENV_MAX_VARS, GW_ENV_MAX_BYTES);
}

static json_t *
s_error (const char *ename, const char *evalue)
{
    return json_pack ("{s:s, s:s, s:s, s:[s]}", "status", "error", "ename", ename,
                      "evalue", evalue, "traceback", evalue);
}

//  {"allow": "LIST"} replaces the client list ("" or null removes it, back
//  to the operator's); {} only asks. The reply carries the policy in force.
static json_t *
s_apply (gw_session_t *self, const json_t *content)
{
    char why [400], policy [GW_EGRESS_LIST_MAX * 3 + 64];
    if (!self->opts.egress)
        return s_error ("EgressOff", "This session has no network: its operator allows no "
                        "egress (cellvm-gateway --egress-allow), and a client can only narrow "
                        "what the operator allows.");
    const json_t *allow = json_object_get (content, "allow");
    if (allow && !json_is_null (allow) && !json_is_string (allow))
        return s_error ("BadRequest", "allow must be a string: a comma-separated list of "
                        "rules, or \"\" for the operator's list.");
    if (allow && gw_egress_narrow (self->opts.egress, json_is_string (allow)
                                   ? json_string_value (allow) : NULL, why, sizeof why) < 0)
        return s_error ("BadEgressList", why);
    gw_egress_format (self->opts.egress, policy, sizeof policy);
    if (allow)
        gw_log (GW_LOG_INFO, "egress.policy_changed", "policy=%s", policy);
    json_t *reply = json_pack ("{s:s}", "status", "ok");
    json_t *p = json_loads (policy, 0, NULL);
    json_object_set_new (reply, "policy", p ? p : json_object ());
    return reply;
}

static void
s_egress_request (gw_session_t *self, ch_msg_t *msg, gw_frames_t **ids_p)
{
    json_t *header = ch_msg_header (msg);
    gw_out_status (self->out, header, "busy");
    json_t *content = s_apply (self, ch_msg_content (msg));
    gw_out_new_msg (self->out, CH_CONTROL, *ids_p, "cellvm_egress_reply", header, &content);
    gw_out_status (self->out, header, "idle");
    gw_frames_destroy (ids_p);
}

bool
gw_session__own_request (gw_session_t *self, ch_msg_t *msg, gw_frames_t **ids_p)
{
    if (strcmp (ch_msg_type (msg), "cellvm_snapshot_request") == 0)
        gw_session__snapshot_request (self, msg, ids_p);
    else if (strcmp (ch_msg_type (msg), "cellvm_egress_request") == 0)
        s_egress_request (self, msg, ids_p);
    else
        return false;
    return true;
}
