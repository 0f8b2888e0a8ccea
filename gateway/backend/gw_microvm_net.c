/*  gw_microvm_net - a session VM's egress (docs/network.md): once init is
    ready in a new VM, connect its cellvm.net port to a gw_egproxy and ask
    init to start the guest's proxy with a fresh nonce. With egress off
    nothing here runs: no proxy in the guest, nobody on the port. */
#include "backend/gw_microvm_int.h"
#include "base/gw_log.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <stdlib.h>
#include <unistd.h>


static void
s_nonce (char out [33])
{
    unsigned char raw [16] = { 0 };
    if (getrandom (raw, sizeof raw, 0) != (ssize_t) sizeof raw)
        abort ();                               //  the kernel's pool never fails once up
    for (int i = 0; i < 16; i++)
        snprintf (out + 2 * i, 3, "%02x", raw [i]);
}

static unsigned
s_port (const s_self_t *self)
{
    return self->opts.egress_port ? self->opts.egress_port : GW_EGPROXY_GUEST_PORT;
}

void
gw_microvm__net_start (s_self_t *self)
{
    if (!self->opts.egress || self->net || !self->vm || !self->init || !self->init_ready)
        return;
    int fd = -1;
    char err [300];
    int rc = gw_vmh_connect_port (self->vm, "net", &fd);
    if (rc < 0) {
        gw_log (GW_LOG_ERROR, "egress.unavailable", "reason=\"%s\" action=\"this VM has no "
                "network; its cells' connections fail at the proxy\"", rc == -ENOTSUP ?
                "a pool clone's ports are its holder's" : strerror (-rc));
        return;
    }
    s_nonce (self->net_nonce);
    gw_egproxy_cfg_t cfg = self->opts.egress_caps;
    cfg.policy = self->opts.egress;
    cfg.nonce = self->net_nonce;
    if (cfg.max_bytes)                          //  what earlier VMs used is gone: 1 refuses
        cfg.max_bytes = cfg.max_bytes > self->net_used ? cfg.max_bytes - self->net_used : 1;
    self->net = gw_egproxy_new (&cfg, &fd, err, sizeof err);
    struct epoll_event ev = { .events = EPOLLIN };
    if (!self->net || epoll_ctl (self->epfd, EPOLL_CTL_ADD, gw_egproxy_fd (self->net), &ev) < 0) {
        gw_log (GW_LOG_ERROR, "egress.unavailable", "reason=\"%s\"", self->net ? strerror (errno)
                : err);
        gw_egproxy_destroy (&self->net);
        if (fd >= 0)
            close (fd);
        return;
    }
    json_t *c = json_pack ("{s:s, s:i}", "nonce", self->net_nonce, "port",
                           (int) s_port (self));
    if (gw_init_send (self->init, "egress_start_request", &c, NULL, 0, self->net_id) == 0)
        gw_watch_owed (self->watch, "egress_start_reply");
    json_decref (c);
    gw_microvm__watch_init (self);
}

bool
gw_microvm__net_reply (s_self_t *self, const ch_msg_t *msg)
{
    if (!self->net_id [0] || strcmp (ch_msg_parent_id (msg), self->net_id) != 0)
        return false;
    self->net_id [0] = '\0';
    json_t *c = ch_msg_content (msg);
    if (strcmp (json_string_value (json_object_get (c, "status")) ?: "", "ok") == 0)
        gw_log (GW_LOG_INFO, "egress.started", "guest_pid=%" JSON_INTEGER_FORMAT " port=%u",
                json_integer_value (json_object_get (c, "pid")), s_port (self));
    else {
        gw_log (GW_LOG_ERROR, "egress.unavailable", "reason=\"init did not start the proxy: "
                "%s: %s\"", json_string_value (json_object_get (c, "ename")) ?: "?",
                json_string_value (json_object_get (c, "evalue")) ?: "?");
        gw_microvm__net_drop (self);
    }
    return true;
}

void
gw_microvm__net_event (s_self_t *self)
{
    if (!self->net)
        return;
    char err [400] = "";
    int rc = gw_egproxy_on_event (self->net, err, sizeof err);
    if (rc == -EPROTO) {
        char why [460];
        snprintf (why, sizeof why, "the guest broke its egress stream: %s", err);
        gw_microvm__net_drop (self);
        gw_microvm__stop_vm (self, why);
    }
    else if (rc < 0) {
        gw_log (GW_LOG_WARN, "egress.port_closed", "reason=\"%s\"", err);
        gw_microvm__net_drop (self);
    }
}

void
gw_microvm__net_drop (s_self_t *self)
{
    if (!self->net)
        return;
    gw_egproxy_stats_t st;
    gw_egproxy_stats (self->net, &st);
    self->net_used += st.bytes_out + st.bytes_in;
    gw_log (GW_LOG_INFO, "egress.stopped", "allowed=%llu refused=%llu bytes_out=%llu "
            "bytes_in=%llu open=%u", (unsigned long long) st.allowed,
            (unsigned long long) st.refused, (unsigned long long) st.bytes_out,
            (unsigned long long) st.bytes_in, st.open);
    epoll_ctl (self->epfd, EPOLL_CTL_DEL, gw_egproxy_fd (self->net), NULL);
    gw_egproxy_destroy (&self->net);
    self->net_id [0] = '\0';
}
