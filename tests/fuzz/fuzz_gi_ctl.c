/*  fuzz_gi_ctl - init's control port, from bytes to decoded requests.

    What gi_ctl and gi_ops do with the host's bytes, minus the effects: feed
    them to ch_asm under init's limits (CH_FRAME_MAX_DEFAULT frames,
    GI_CTL_MSG_MAX per message) in chunks of varying size, reset the input
    on a bad frame length as gi_ctl does, and hand every whole message to
    gi_ops_decode, which is pure. The input is the raw stream (4-byte
    big-endian lengths and frames, docs/channel.md); the chunk sizes come
    from a generator seeded by the input's length and last byte.

    Invariants: decoding is deterministic; every refusal has a reason, and
    an ename and a *_reply name unless the message is dropped; a decoded put
    or get names a path below /workspace (checked here independently of
    gi_files); decoded numbers are within their documented ranges.
*/
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ch_asm.h"
#include "ch_frame.h"
#include "gi_ctl.h"
#include "gi_files.h"
#include "gi_ops.h"

#define S_CHECK(cond) do { if (!(cond)) abort (); } while (0)

//  rel, as it comes out of path, never climbs above /workspace.
static void
s_check_path (const char *path, const char *rel)
{
    size_t n = strlen ("/workspace");
    S_CHECK (path && rel && rel [0] && rel [0] != '/');
    S_CHECK (rel >= path && rel < path + strlen (path));
    if (path [0] == '/')
        S_CHECK (strncmp (path, "/workspace/", n + 1) == 0);
    else
        S_CHECK (rel == path);
    long depth = 0;
    for (const char *p = rel; *p; p += strcspn (p, "/"), p += *p == '/') {
        size_t len = strcspn (p, "/");
        if (len == 2 && p [0] == '.' && p [1] == '.')
            depth--;
        else if (len && !(len == 1 && p [0] == '.'))
            depth++;
        S_CHECK (depth >= 0);
    }
}

static void
s_check_refusal (int rc, const gi_req_t *r, const char *why)
{
    size_t n = strlen (r->reply);
    S_CHECK (why [0] && r->op == GI_OP_NONE);
    if (rc == -ENOMSG) {
        S_CHECK (!r->reply [0] && !r->ename);
        return;
    }
    S_CHECK (rc == -EINVAL || rc == -EXDEV || rc == -ENOSYS);
    S_CHECK (r->ename && r->ename [0]);
    S_CHECK (n > 6 && strcmp (r->reply + n - 6, "_reply") == 0);
}

static void
s_check_request (const ch_msg_t *msg, const gi_req_t *r)
{
    S_CHECK (r->op > GI_OP_NONE && r->op < GI_OP_COUNT && r->reply [0]);
    S_CHECK (ch_msg_channel (msg) == CH_CELLVM);
    S_CHECK (!r->len || r->data);
    if (r->op == GI_OP_PUT)
        S_CHECK (ch_msg_nbuffers (msg) <= 1);
    if (r->op == GI_OP_PUT || r->op == GI_OP_GET)
        s_check_path (r->path, r->rel);
    if (r->op == GI_OP_GET)
        S_CHECK (r->length <= GI_CHUNK_MAX);
    if (r->op == GI_OP_KILL)
        S_CHECK (r->signal > 0 && r->signal < NSIG);
    if (r->op == GI_OP_SET_TIME)
        S_CHECK (r->has_time && isfinite (r->time) && r->time >= 0 && r->time <= 4e11);
    if (r->op == GI_OP_ADD_ENTROPY)
        S_CHECK (r->data && r->len >= 1 && r->len <= 4096);
}

static void
s_check (const ch_msg_t *msg)
{
    gi_req_t r, again;
    char why [512], why2 [512];
    int rc = gi_ops_decode (msg, &r, why, sizeof why);
    S_CHECK (rc <= 0);
    S_CHECK (gi_ops_decode (msg, &again, why2, sizeof why2) == rc);
    S_CHECK (strcmp (why, why2) == 0 && r.op == again.op && strcmp (r.reply, again.reply) == 0);
    if (rc < 0)
        s_check_refusal (rc, &r, why);
    else
        s_check_request (msg, &r);
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    uint32_t rng = (uint32_t) size * 2654435761u ^ data [size - 1] ^ 0x9e3779b9u;
    ch_limits_t lim = { .max_frame = CH_FRAME_MAX_DEFAULT, .max_msg = GI_CTL_MSG_MAX };
    ch_asm_t *a = ch_asm_new (&lim);
    while (size > 0) {
        rng ^= rng << 13, rng ^= rng >> 17, rng ^= rng << 5;
        size_t chunk = 1 + rng % (rng & 0x100 ? 4096 : 16);
        chunk = chunk < size ? chunk : size;
        for (size_t off = 0; off < chunk; ) {
            size_t used = 0;
            ch_msg_t *msg = NULL;
            int rc = ch_asm_feed (a, data + off, chunk - off, &used, &msg);
            S_CHECK (rc == 0 || ch_asm_why (a) [0]);
            S_CHECK (used > 0 || msg || rc != 0);   //  progress, or something out
            if (msg)
                s_check (msg);
            ch_msg_destroy (&msg);
            if (rc == -EPROTO) {                //  gi_ctl: input reset, read buffer dropped
                ch_asm_reset (a);
                break;
            }
            off += used;
        }
        data += chunk;
        size -= chunk;
    }
    ch_asm_destroy (&a);
    return 0;
}
