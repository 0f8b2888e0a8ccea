/*  gw_privmsg - the gateway's requests to its privileged helper (see gw_privmsg.h). */
#include "jail/gw_privmsg.h"

#include <assert.h>
#include <errno.h>
#include <string.h>

//  The fixed part, in this order: op, pid, block, mem_mib, mem_share, kvm, fsize.
#define S_HEAD (6 * 4 + 8)
#define S_NONE 0xffffffffu                      //  a NULL string

static int
s_put (uint8_t *buf, size_t cap, size_t *off, const void *data, size_t n)
{
    if (n > cap - *off)
        return -EMSGSIZE;
    memcpy (buf + *off, data, n);
    *off += n;
    return 0;
}

//  A string as its length, its bytes and a NUL; NULL as S_NONE alone.
static int
s_put_str (uint8_t *buf, size_t cap, size_t *off, const char *s)
{
    uint32_t len = s ? (uint32_t) strnlen (s, GW_PRIVMSG_STRLEN + 1) : S_NONE;
    if (s && len > GW_PRIVMSG_STRLEN)
        return -EMSGSIZE;
    int rc = s_put (buf, cap, off, &len, 4);
    if (rc == 0 && s)
        rc = s_put (buf, cap, off, s, (size_t) len + 1);
    return rc;
}

int
gw_privmsg_encode (const gw_privmsg_t *msg, uint8_t *buf, size_t cap)
{
    assert (msg && buf);
    uint32_t head [6] = { msg->op, (uint32_t) msg->pid, msg->block, msg->mem_mib,
                          msg->mem_share, msg->kvm };
    size_t off = 0;
    if (cap > GW_PRIVMSG_MAX)
        cap = GW_PRIVMSG_MAX;
    if (msg->argc > GW_PRIVMSG_ARGV)
        return -EMSGSIZE;
    int rc = s_put (buf, cap, &off, head, sizeof head);
    rc = rc ? rc : s_put (buf, cap, &off, &msg->fsize, 8);
    for (int i = 0; rc == 0 && i < GW_PRIVMSG_PATHS; i++)
        rc = s_put_str (buf, cap, &off, msg->path [i]);
    rc = rc ? rc : s_put (buf, cap, &off, &msg->argc, 4);
    for (uint32_t i = 0; rc == 0 && i < msg->argc; i++)
        rc = msg->argv [i] ? s_put_str (buf, cap, &off, msg->argv [i]) : -EINVAL;
    return rc < 0 ? rc : (int) off;
}

static int
s_get (const uint8_t *buf, size_t len, size_t *off, void *out, size_t n)
{
    if (n > len - *off)
        return -EBADMSG;
    memcpy (out, buf + *off, n);
    *off += n;
    return 0;
}

//  A string in place: its bytes hold no NUL and one follows them.
static int
s_get_str (const uint8_t *buf, size_t len, size_t *off, const char **out, bool null_ok)
{
    uint32_t n;
    *out = NULL;
    if (s_get (buf, len, off, &n, 4) < 0)
        return -EBADMSG;
    if (n == S_NONE)
        return null_ok ? 0 : -EBADMSG;
    if (n > GW_PRIVMSG_STRLEN || (size_t) n + 1 > len - *off || buf [*off + n] != 0
    ||  memchr (buf + *off, 0, n))
        return -EBADMSG;
    *out = (const char *) buf + *off;
    *off += (size_t) n + 1;
    return 0;
}

int
gw_privmsg_decode (gw_privmsg_t *msg, const uint8_t *buf, size_t len)
{
    assert (msg && buf);
    memset (msg, 0, sizeof *msg);
    uint32_t head [6];
    size_t off = 0;
    if (len > GW_PRIVMSG_MAX || s_get (buf, len, &off, head, sizeof head) < 0
    ||  s_get (buf, len, &off, &msg->fsize, 8) < 0)
        return -EBADMSG;
    msg->op = head [0];
    msg->pid = (int32_t) head [1];
    msg->block = head [2];
    msg->mem_mib = head [3];
    msg->mem_share = head [4];
    msg->kvm = head [5];
    if (msg->op < GW_PRIV_SPAWN || msg->op > GW_PRIV_CONSOLE)
        return -EBADMSG;
    for (int i = 0; i < GW_PRIVMSG_PATHS; i++)
        if (s_get_str (buf, len, &off, &msg->path [i], true) < 0)
            return -EBADMSG;
    if (s_get (buf, len, &off, &msg->argc, 4) < 0 || msg->argc > GW_PRIVMSG_ARGV)
        return -EBADMSG;
    for (uint32_t i = 0; i < msg->argc; i++)
        if (s_get_str (buf, len, &off, &msg->argv [i], false) < 0)
            return -EBADMSG;
    msg->argv [msg->argc] = NULL;
    return off == len ? 0 : -EBADMSG;           //  nothing trails
}

void
gw_privreply_terminate (gw_privreply_t *reply)
{
    assert (reply);
    reply->kind [sizeof reply->kind - 1] = '\0';
    reply->cgroup [sizeof reply->cgroup - 1] = '\0';
    reply->text [sizeof reply->text - 1] = '\0';
}
