/*  fuzz_gw_privmsg - the privileged helper's request decoder on arbitrary
    bytes: gw_privmsg_decode is what root runs on whatever a (possibly
    compromised) gateway sends.

    The input is one request datagram. Whatever the decoder accepts must
    hold what its header promises (a known op, argc within bounds, argv
    NULL-terminated, every string NUL-terminated inside the input), must
    come back byte for byte through gw_privmsg_encode, and then goes
    through the helper's own shape check of a spawn (gw_privd_check_spawn),
    whose refusals must say why. The same bytes as a reply go through
    gw_privreply_terminate. The seeds are requests the gateway really
    sends: a spawn with QEMU's full command line (gw_vmargv_build's), a
    template's and a clone's, kill, reap, console.
*/
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jail/gw_privd.h"
#include "jail/gw_privmsg.h"

static uint8_t s_buf [GW_PRIVMSG_MAX];

//  A string the decoder hands out points into the input and ends there.
static void
s_inside (const char *s, const uint8_t *data, size_t size)
{
    if (!s)
        return;
    const uint8_t *p = (const uint8_t *) s;
    if (p < data || p >= data + size || !memchr (p, 0, size - (size_t) (p - data)))
        abort ();
    if (strlen (s) > GW_PRIVMSG_STRLEN)
        abort ();
}

static void
s_check_decoded (const gw_privmsg_t *msg, const uint8_t *data, size_t size)
{
    if (msg->op < GW_PRIV_SPAWN || msg->op > GW_PRIV_CONSOLE || msg->argc > GW_PRIVMSG_ARGV
    ||  msg->argv [msg->argc])
        abort ();
    for (int i = 0; i < GW_PRIVMSG_PATHS; i++)
        s_inside (msg->path [i], data, size);
    for (uint32_t i = 0; i < msg->argc; i++) {
        if (!msg->argv [i])
            abort ();
        s_inside (msg->argv [i], data, size);
    }
}

static void
s_check_spawn (const gw_privmsg_t *msg)
{
    static const gw_privd_cfg_t cfg = { .uid = 65534, .gid = 65534, .gateway = 1,
                                        .qemu = "/usr/bin/qemu-system-x86_64" };
    char err [256] = "";
    int rc = gw_privd_check_spawn (&cfg, msg, err, sizeof err);
    if (rc != 0 && (rc != -EPERM || !err [0]))
        abort ();
    if (rc == 0 && (msg->argc < 1 || strcmp (msg->argv [0], cfg.qemu) != 0
                    || !msg->path [GW_PRIVMSG_RUN_DIR] || !msg->path [GW_PRIVMSG_DISK]
                    || strchr (msg->path [GW_PRIVMSG_DISK], '/')))
        abort ();                               //  passed what it is there to refuse
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    gw_privmsg_t msg;
    if (gw_privmsg_decode (&msg, data, size) == 0) {
        s_check_decoded (&msg, data, size);
        int n = gw_privmsg_encode (&msg, s_buf, sizeof s_buf);
        if (n < 0 || (size_t) n != size || memcmp (s_buf, data, size) != 0)
            abort ();                           //  the one encoding of what it decoded
        if (msg.op == GW_PRIV_SPAWN)
            s_check_spawn (&msg);
    }
    gw_privreply_t reply;
    memset (&reply, 0xa5, sizeof reply);
    memcpy (&reply, data, size < sizeof reply ? size : sizeof reply);
    gw_privreply_terminate (&reply);
    if (strlen (reply.kind) >= sizeof reply.kind || strlen (reply.cgroup) >= sizeof reply.cgroup
    ||  strlen (reply.text) >= sizeof reply.text)
        abort ();
    return 0;
}
