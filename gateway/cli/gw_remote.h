/*  gw_remote - cellvm-remote, the launcher Enterprise Gateway and Gateway
    Provisioners start on a node (docs/cluster.md).

    new: bind six listening ports inside the port range (five for Jupyter,
    one for EG's comm port) and write a connection file (a random key,
    hmac-sha256) into a private 0700 directory. start: run cellvm-gateway
    as a child on that file with the five Jupyter ports as --listen-fds
    (so the front's first connects queue, never refused), then deliver the
    encrypted reply to the response address within the launch timeout.
    serve: answer the comm port until the gateway exits:

        {"signum": 0}    liveness: once the gateway is gone the comm port
                         refuses connections, which EG reads as "dead"
        {"signum": 2}    a signed interrupt_request on the control port
                         (the gateway ignores SIGINT: interrupt_mode message)
        {"shutdown": 1}  the end: a signed shutdown_request, SIGKILL if the
        {"signum": 15}   gateway is still there GW_REMOTE_SHUTDOWN_MS later
        {"signum": 9}    (GW_REMOTE_KILL_MS for 9)

    The session is named after the kernel id (--session-name, unless the
    kernelspec names it): a relaunch of the same kernel id, on any node that
    shares the snapshot store, resumes it (docs/cluster.md). So 9 and 15,
    which EG sends to end a kernel, end it through shutdown_request (the
    session and its checkpoints are discarded) rather than by a signal,
    while SIGTERM to the launcher itself (a pod evicted, a node drained) is
    forwarded to the gateway, which suspends the session into the store.
    SIGHUP is forwarded too; SIGINT becomes an interrupt_request. The launcher's pid and process group go
    into the reply, as EG's own launchers send theirs.
*/
#ifndef GW_REMOTE_H
#define GW_REMOTE_H

#include <stddef.h>

#include "cli/gw_rargs.h"
#include "wire/gw_egreply.h"

typedef struct _gw_remote_t gw_remote_t;

#define GW_REMOTE_SHUTDOWN_MS 10000
#define GW_REMOTE_KILL_MS 2000

//  Ports and connection file for args (borrowed; it must outlive the
//  launcher), taking *reply_p. NULL with err (no port free in the range, the
//  directory cannot be made).
gw_remote_t *gw_remote_new (const gw_rargs_t *args, gw_egreply_t **reply_p, char *err,
                            size_t errlen);

//  End the gateway if it still runs (SIGTERM, then SIGKILL), remove the
//  connection file and its directory. NULL-safe.
void gw_remote_destroy (gw_remote_t **self_p);

//  Start gateway (a path) and deliver the reply. 0, or -errno with err
//  (the gateway cannot run or exited, the response address is unreachable
//  within the launch timeout); then destroy ends the child.
int gw_remote_start (gw_remote_t *self, const char *gateway, char *err, size_t errlen);

//  Serve the comm port and signals until the gateway exits: its exit code,
//  or 128 + the signal that ended it.
int gw_remote_serve (gw_remote_t *self);

#endif
