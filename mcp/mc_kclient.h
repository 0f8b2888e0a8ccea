/*  mc_kclient - a Jupyter client's sockets on one cellvm-gateway.

    Writes the connection file (random key, free TCP ports on 127.0.0.1,
    mode 0600), connects DEALER sockets to shell and control and a SUB to
    iopub (ZeroMQ through czmq), signs what it sends and checks what it
    receives with the gateway's own codec (gw_wire, gw_hmac, gw_conn).
    There is no heartbeat socket: cellvm-mcp started the gateway and watches
    its process directly. It never blocks: sends are queued by ZeroMQ,
    receives are taken only when a poll said the socket is readable.
*/
#ifndef MC_KCLIENT_H
#define MC_KCLIENT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "ch_msg.h"

typedef struct _mc_kclient_t mc_kclient_t;

//  Write a new connection file at path (0600, never over an existing file):
//  five free ports on 127.0.0.1, a 256-bit random key, hmac-sha256. 0 or
//  -errno with err in words.
int mc_kclient_write_conn (const char *path, char *err, size_t errlen);

//  Connect to the gateway of the connection file. max_msg caps one received
//  message, all frames (a download is at most 256 MiB). NULL with err.
mc_kclient_t *mc_kclient_new (const char *conn_path, size_t max_msg, char *err, size_t errlen);
void mc_kclient_destroy (mc_kclient_t **self_p);

//  Send a request of msg_type on ch (CH_SHELL or CH_CONTROL), stealing
//  *content_p, with one buffer when buf is not NULL (copied). Its msg_id
//  goes into msg_id. 0 or -EIO.
int mc_kclient_send (mc_kclient_t *self, ch_channel_t ch, const char *msg_type,
                     json_t **content_p, const uint8_t *buf, size_t len, char msg_id [37]);

//  The ZeroMQ socket handle of ch (shell, control, iopub), for zmq_poll.
void *mc_kclient_handle (mc_kclient_t *self, ch_channel_t ch);

//  Take one message from ch if there is one: 0 and *msg_p; -EAGAIN when
//  none is waiting; -EBADMSG when one was dropped (bad signature, malformed:
//  *why says why). Call until -EAGAIN after a poll.
int mc_kclient_recv (mc_kclient_t *self, ch_channel_t ch, ch_msg_t **msg_p, const char **why);

#endif
