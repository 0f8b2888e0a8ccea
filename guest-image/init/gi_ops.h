/*  gi_ops - the requests init answers on the control port (docs/init.md):
 *  hello, status, restart, kill, put, get, set_time, add_entropy,
 *  workspace_detach, egress_start, shutdown; and the kernel_exited notice.
 *
 *  Each message is first decoded and checked by gi_ops_decode, which is
 *  pure (no I/O, no clock, no signals): it says which operation to run with
 *  which arguments, or how to refuse. Only then does gi_ops_handle act.
 */
#ifndef GI_OPS_H
#define GI_OPS_H

#include "gi_ctl.h"
#include "gi_kernel.h"

#include <stddef.h>
#include <stdint.h>

typedef enum {
    GI_OP_NONE,                 //  refused, or not for us
    GI_OP_HELLO, GI_OP_STATUS, GI_OP_RESTART, GI_OP_KILL, GI_OP_PUT, GI_OP_GET,
    GI_OP_SET_TIME, GI_OP_ADD_ENTROPY, GI_OP_SHUTDOWN, GI_OP_WORKSPACE_DETACH,
    GI_OP_EGRESS_START,
    GI_OP_COUNT
} gi_op_t;

//  One decoded request. Strings and bytes are borrowed from the message.
typedef struct {
    gi_op_t op;
    char reply [128];           //  the reply's msg_type; "" when none is due
    const char *ename;          //  refused: the reply's ename (NULL when dropped)
    const char *path;           //  put, get: as the host sent it
    const char *rel;            //  put, get: the part below /workspace
    int append;                 //  put
    unsigned mode;              //  put: 0 means 0644
    uint64_t offset;            //  get
    size_t length;              //  get: 1 chunk at most (GI_CHUNK_MAX)
    const uint8_t *data;        //  put: the bytes (NULL: none); hello, add_entropy:
    size_t len;                 //  the random bytes
    int signal;                 //  kill
    int kill_kernel;            //  workspace_detach
    int freeze;                 //  workspace_detach: stop the kernel, freeze /workspace
    int has_time;               //  set_time; hello: "time" was given
    double time;
    const char *protocol;       //  hello: the host's "protocol", NULL if absent
    const char *nonce;          //  egress_start: 16..64 of [0-9a-f]
    unsigned port;              //  egress_start: 1024..65535
} gi_req_t;

//  Decode and check req, touching nothing. 0: out says what to do.
//  Otherwise out->reply and out->ename say how to refuse and why gets the
//  reply's evalue: -EINVAL (BadRequest), -EXDEV (PathOutsideWorkspace),
//  -ENOSYS (an unknown *_request: UnknownMessageType); -ENOMSG for a message
//  that gets no reply at all (why says what it was: logged and dropped).
int gi_ops_decode (const ch_msg_t *req, gi_req_t *out, char *why, size_t whylen);

typedef struct _gi_ops_t gi_ops_t;

//  Borrow ctl and kernel (both outlive ops). workspace is "ext4" or "tmpfs",
//  mounted at /workspace (through gi_sys).
gi_ops_t *gi_ops_new (gi_ctl_t *ctl, gi_kernel_t *kernel, const char *workspace);
void gi_ops_destroy (gi_ops_t **self_p);

//  Answer one message from the host; takes *msg_p. 0, or 1 when the host
//  asked for the VM to power off (the reply is queued).
int gi_ops_handle (gi_ops_t *self, ch_msg_t **msg_p);

//  A reaped child (PID 1 reaps them all) that was not the kernel. Returns 1
//  when it was the egress proxy: its death is logged and it is gone.
int gi_ops_reaped (gi_ops_t *self, pid_t pid, int status);

//  The kernel died: tell the host (dropped when nobody is connected; the
//  next hello carries it in kernel.last_exit).
void gi_ops_kernel_exited (gi_ops_t *self);

#endif
