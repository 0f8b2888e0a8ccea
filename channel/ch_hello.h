/*  ch_hello - the first message on each port, built and checked in one place.

    Two protocols share the framing: the kernel channel ("cellvm-channel",
    docs/channel.md) and init's control port ("cellvm-init", docs/init.md).
    Both are at version 1. A driver (the gateway, the template builder, the
    pool) opens each with a driver hello; the far side answers with its own.
*/
#ifndef CH_HELLO_H
#define CH_HELLO_H

#include <jansson.h>
#include <stddef.h>

#define CH_PROTO_CHANNEL "cellvm-channel"
#define CH_PROTO_INIT "cellvm-init"
#define CH_HELLO_VERSION 1

//  {"protocol": protocol, "version": 1, "role": "driver", "implementation":
//  implementation}, plus "time" (the host's UTC seconds) when with_time.
//  New reference.
json_t *ch_hello_driver (const char *protocol, const char *implementation, int with_time);

//  Check a peer's hello content: the protocol, version 1 and, when role is
//  not NULL, the role. 0, or -EPROTO with the reason in why.
int ch_hello_check (const json_t *content, const char *protocol, const char *role,
                    char *why, size_t whylen);

#endif
