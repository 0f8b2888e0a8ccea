/*  gw_microvm_watch - the microvm backend's guard against a frozen or
    hostile guest (docs/security.md, "Hostile and frozen guests"): init is
    pinged, what init sends unasked is counted, its file replies are
    checked, the console is capped (gw_watch). A VM that fails any of it
    is stopped, and the reap says why; the session then starts a new one.
*/
#include "backend/gw_microvm_int.h"
#include "base/gw_log.h"
#include "ch_text.h"
#include "ch_clock.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#define S_MAX_PATH 1024             //  docs/files.md: a path's limit

void
gw_microvm__watch_vm (s_self_t *self)
{
    gw_watch_reset (self->watch, self->vm ? gw_vmh_pid (self->vm) : 0,
                    self->vm ? gw_vmh_console (self->vm) : NULL);
}

void
gw_microvm__stop_vm (s_self_t *self, const char *why)
{
    if (!self->vm || self->stop_why [0])
        return;
    snprintf (self->stop_why, sizeof self->stop_why, "%s", why);
    gw_log (GW_LOG_ERROR, "vm.stopped", "pid=%d reason=\"%s\" console=%s", gw_vmh_pid (self->vm),
            why, gw_vmh_console (self->vm));
    gw_vmh_kill (self->vm);
}

static void
s_ping (s_self_t *self, int64_t now)
{
    char id [37];
    json_t *c = json_object ();
    if (gw_init_send (self->init, "status_request", &c, NULL, 0, id) == 0)
        gw_watch_pinged (self->watch, id, now);
    json_decref (c);                            //  NULL once sent
    gw_microvm__watch_init (self);
}

void
gw_microvm__watch_tick (s_self_t *self)
{
    if (!self->vm || self->stop_why [0])
        return;
    bool can_ping = self->init && self->init_ready && !self->starting && !self->save_done
                 && !self->detach_id [0];
    char why [400];
    int64_t now = ch_clock_mono_ms ();
    int rc = gw_watch_tick (self->watch, now, can_ping, why, sizeof why);
    if (rc == GW_WATCH_PING)
        s_ping (self, now);
    else if (rc == GW_WATCH_DEAD)
        gw_microvm__stop_vm (self, why);
}

void
gw_microvm__unasked (s_self_t *self, const char *what)
{
    char why [400];
    bool quiet = strcmp (what, "hello") == 0;   //  init answers every hello anyone sent
    if (gw_watch_unasked (self->watch, what, quiet, why, sizeof why) == GW_WATCH_DEAD)
        gw_microvm__stop_vm (self, why);
}

//  Words for a path init named that is not a plain one under /workspace (or
//  under /notebook, for the gateway's own puts there: gw_share), or NULL. A
//  reply without one is fine: the client's own spelling is used.
static const char *
s_bad_path (const json_t *path_j, const char *asked)
{
    const char *path = json_string_value (path_j);
    const char *area = asked && strncmp (asked, "/notebook/", 10) == 0 ? "/notebook/"
                                                                      : "/workspace/";
    if (!path_j)
        return NULL;
    if (!path)
        return "a path that is not a string";
    if (strlen (path) > S_MAX_PATH)
        return "a path over 1024 bytes";
    if (strncmp (path, area, strlen (area)) != 0)
        return "a path outside the directory asked for";
    for (const char *p = path + strlen (area); *p; ) {
        const char *e = strchr (p, '/');
        size_t k = e ? (size_t) (e - p) : strlen (p);
        if (k == 0 || (k == 1 && p [0] == '.') || (k == 2 && p [0] == '.' && p [1] == '.'))
            return "a path with an empty, . or .. part";
        for (size_t i = 0; i < k; i++)
            if ((unsigned char) p [i] < 0x20 || p [i] == 0x7f)
                return "a path with a control character";
        p += k + (e ? 1 : 0);
    }
    return NULL;
}

//  Words for what is wrong with a get or put reply's numbers, or NULL (the
//  ones it leaves out gw_xfer reads safely as 0 or false).
static const char *
s_bad_numbers (const s_op_t *op, const ch_msg_t *msg)
{
    json_t *c = ch_msg_content (msg);
    json_t *size = json_object_get (c, "size");
    size_t len = 0;
    if (size && (!json_is_integer (size) || json_integer_value (size) < 0))
        return "size is not a count of bytes";
    if (op->put)
        return ch_msg_nbuffers (msg) ? "a put reply with a buffer" : NULL;
    json_t *off = json_object_get (c, "offset"), *eof = json_object_get (c, "eof");
    if (off && (!json_is_integer (off) || (uint64_t) json_integer_value (off) != op->offset))
        return "offset is not the one asked for";
    if (eof && !json_is_boolean (eof))
        return "eof is not true or false";
    if (ch_msg_nbuffers (msg) > 1 || (ch_msg_buffer (msg, 0, &len) && len > op->len))
        return "more bytes than were asked for";
    return NULL;
}

int
gw_microvm__check_file_reply (const s_op_t *op, const ch_msg_t *msg, char *err, size_t errlen)
{
    const char *path = json_string_value (json_object_get (ch_msg_content (msg), "path"));
    const char *bad = s_bad_path (json_object_get (ch_msg_content (msg), "path"), op->path);
    if (!bad)
        bad = s_bad_numbers (op, msg);
    if (!bad)
        return 0;
    char quoted [80];
    snprintf (quoted, sizeof quoted, "%s", path ? path : "");
    ch_text_printable (quoted, "\"\\");
    snprintf (err, errlen, "the VM's init sent a %s reply that breaks the protocol (%s: "
              "\"%s\"); the transfer was stopped", op->put ? "put" : "get", bad, quoted);
    gw_log (GW_LOG_WARN, "vm.init_bad_reply", "reason=\"%s\" path=\"%s\"", bad, quoted);
    return -EPROTO;
}

void
gw_microvm__vm_detail (s_self_t *self, const char *how, gw_exit_t *exit_p)
{
    if (self->stop_why [0])
        snprintf (exit_p->detail, sizeof exit_p->detail, "The session's virtual machine was "
                  "stopped by the gateway: %.300s. Everything in its memory and /workspace is "
                  "gone. A new VM is starting", self->stop_why);
    else
        snprintf (exit_p->detail, sizeof exit_p->detail, "The session's virtual machine itself "
                  "stopped%s; everything in its memory and /workspace is gone. A new VM is "
                  "starting", how);
    self->stop_why [0] = '\0';
}
