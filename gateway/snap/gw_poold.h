/*  gw_poold - the warm pool daemon and its clone holders.

    The daemon keeps `size` clones ready and hands one to each gateway that
    asks on its unix socket (the protocol and the gateway's side are in
    gw_pool.h). It is single-threaded (no ZeroMQ), so it may fork without
    exec: each clone lives under a *holder*, a process forked per clone (in
    its own process group) which restores the clone, so that QEMU's
    PR_SET_PDEATHSIG is tied to the holder, warms it, reports "ready PID" or
    "failed WHY" to the daemon over a socketpair, and waits:
    - for a hand-out: the daemon passes it the gateway's connection and
      forgets the clone; the holder sends the gateway the ports and from
      then on serves that connection as the clone's lifeline (the gateway
      closing it kills the clone; the clone exiting is reported on it);
    - or for the daemon to go: its socketpair closes and the clone goes too.

    Bookkeeping: a failed clone is dropped (its holder killed) and replaced;
    a hand-out takes the clone that has been ready longest; clones are added
    while fewer than size exist and the pool's memory (the ready clones'
    PSS, GW_POOLD_EST_MIB for one still starting) plus one more stays within
    budget_mib; the daemon exits after idle_s without a request.

    What the pool does to VMs goes through a seam, gw_poold_ops_t, so the
    bookkeeping runs in tests without QEMU (tests/unit/test_gw_pool.c). The
    real operations are gw_poolvm's. See docs/snapshots.md.
*/
#ifndef GW_POOLD_H
#define GW_POOLD_H

#include <stddef.h>

#define GW_POOLD_EST_MIB 64                     //  assumed for a clone still starting

typedef struct {
    const char *socket_path;                    //  where the daemon listens
    unsigned size;                              //  clones kept ready
    unsigned budget_mib;                        //  host memory the pool may use (PSS)
    unsigned idle_s;                            //  exit after this long unused, 0: never
} gw_poold_opts_t;

//  A clone as a hand-out describes it. Strings borrowed from the clone.
typedef struct {
    int pid;                                    //  QEMU's
    const char *run_dir;
    const char *console;                        //  the guest console's log
} gw_poold_info_t;

//  The seam: what the pool does to VMs. `clone` is the implementation's
//  own handle. All but pss_mib run in a holder, a process forked per clone.
typedef struct {
    void *ctx;
    //  Restore a clone, reseeded (both handshakes done). serial numbers the
    //  holders this daemon started, from 0. 0 and *clone_p, or -errno + err.
    int (*restore) (void *ctx, unsigned serial, void **clone_p, char *err, size_t errlen);
    //  Warm it up for its first requests. 0 or -errno + err.
    int (*warm) (void *ctx, void *clone, char *err, size_t errlen);
    void (*describe) (void *ctx, void *clone, gw_poold_info_t *info);
    //  Give up its ports (connected fds the caller then owns): kernel, init.
    int (*take_ports) (void *ctx, void *clone, int *kernel_fd, int *init_fd);
    //  Kill its QEMU. 0 or -errno.
    int (*kill) (void *ctx, void *clone);
    //  -EAGAIN while QEMU runs, then 0 and its wait status. Non-blocking.
    int (*reap) (void *ctx, void *clone, int *wstatus);
    //  Kill and free it; nulls *clone_p.
    void (*destroy) (void *ctx, void **clone_p);
    //  In the daemon: a ready clone's memory (its QEMU's PSS) in MiB.
    long (*pss_mib) (void *ctx, int pid);
} gw_poold_ops_t;

//  Run the daemon until SIGTERM, SIGINT or SIGHUP (or idle_s without a
//  request). Returns the process exit code: 0, 3 when another daemon
//  already listens on the socket, 1 on other errors.
int gw_poold_run (const gw_poold_opts_t *opts, const gw_poold_ops_t *ops);

#endif
