/*  gw_check - what each side may send, message by message.

    Pure tables and checks, no state: which msg_types a client may send on
    each channel, and whether a message from the kernel is allowed on its
    channel with the content fields the Jupyter spec (5.3) requires, with
    the right JSON types. The session adds the checks that need its state
    (is this reply's parent outstanding?).
*/
#ifndef GW_CHECK_H
#define GW_CHECK_H

#include <stdbool.h>
#include <stddef.h>

#include "ch_msg.h"

//  True when a client may send msg_type on channel (shell, control, stdin).
bool gw_check_client_type (ch_channel_t channel, const char *msg_type);

//  Check a message from the kernel against its channel's allow-list and
//  the content schema of its type. 0, or -EBADMSG with a reason in why.
int gw_check_kernel_msg (const ch_msg_t *msg, char *why, size_t whylen);

//  Check a kernel `hello`: protocol "cellvm-channel", major version 1,
//  role "kernel". 0, or -EPROTO with a reason in why.
int gw_check_hello (const ch_msg_t *msg, char *why, size_t whylen);

//  Check a cellvm_replay_request's content: exactly one of msg_id or
//  since, a msg_id string of 1 to 256 bytes. 0, or -EINVAL with why.
int gw_check_replay_request (const json_t *content, char *why, size_t whylen);

#endif
