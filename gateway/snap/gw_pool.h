/*  gw_pool - how a gateway takes a clone from the warm pool.

    Kernelspec launches start one gateway per kernel, so the pool has its own
    long-lived owner: `cellvm-gateway --pool-daemon --pool N` (gw_poold),
    which keeps N clones restored (and reseeded) ahead of need and hands one
    to each gateway that asks over a unix socket. A clone is used once.

    Each clone lives under a holder process (gw_poold.h). On hand-out the
    daemon passes the gateway's connection to the holder and forgets the
    clone; the holder sends the gateway the connected kernel and init ports
    (SCM_RIGHTS) and QEMU's pid, and from then on that connection is the
    clone's lifeline: the gateway closing it (exit, crash, SIGKILL) makes
    the holder kill QEMU and delete the run dir; QEMU exiting makes the
    holder send its wait status and go. So the daemon dying takes no running
    session with it, and a session's VM never outlives its gateway.

    Protocol on the daemon socket: the gateway sends "take\n"; it gets back
    one JSON line, {"ok": true, "pid": QEMU, "run_dir": ..., "console": ...}
    with two fds (kernel port, init port), or {"ok": false, "error": ...}.
    Later on the lifeline the holder may send {"exited": WSTATUS}; the
    gateway may send "kill\n". See docs/snapshots.md.
*/
#ifndef GW_POOL_H
#define GW_POOL_H

#include <stdbool.h>
#include <stddef.h>

#include "vm/gw_vm_config.h"

typedef struct _gw_pool_lease_t gw_pool_lease_t;

//  The daemon socket for cfg: /var/tmp/cellvm-<uid>/pool-<template key>.sock.
int gw_pool_socket_path (const gw_vm_config_t *cfg, char *out, size_t cap);

//  Ask the daemon at socket_path for a clone. 0 and *lease_p; -ECONNREFUSED
//  or -ENOENT when no daemon runs; -EAGAIN when it has none ready; other
//  -errno with the reason in err. Blocks up to timeout_ms.
int gw_pool_take (const char *socket_path, int timeout_ms, gw_pool_lease_t **lease_p,
                  char *err, size_t errlen);

//  Close the lifeline: the holder kills the clone. Nulls *self_p.
void gw_pool_lease_destroy (gw_pool_lease_t **self_p);

//  QEMU's pid, run dir, console log.
int gw_pool_lease_pid (const gw_pool_lease_t *self);
const char *gw_pool_lease_run_dir (const gw_pool_lease_t *self);
const char *gw_pool_lease_console (const gw_pool_lease_t *self);

//  Take the ports (each once): connected fds the caller then owns.
int gw_pool_lease_take_kernel_fd (gw_pool_lease_t *self);
int gw_pool_lease_take_init_fd (gw_pool_lease_t *self);

//  Ask the holder to kill QEMU now. 0 or -EPIPE.
int gw_pool_lease_kill (gw_pool_lease_t *self);

//  Has the clone ended? -EAGAIN while it runs; 0 and *wstatus once QEMU
//  exited (or the holder vanished: status SIGKILL). Non-blocking.
int gw_pool_lease_reap (gw_pool_lease_t *self, int *wstatus);

#endif
