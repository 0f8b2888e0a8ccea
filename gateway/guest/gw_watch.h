/*  gw_watch - a frozen or runaway guest is noticed in bounded time, so a
    session never hangs on a VM that stopped answering, nor fills the host
    for one that will not stop talking (docs/security.md, "Hostile and
    frozen guests").

    One gw_watch_t per session VM, driven by the microvm backend's tick:
    - init is asked for its status (a ping) every few seconds while nothing
      else is in flight; a ping unanswered for gw_watch_stall_ms means the
      VM is frozen (QEMU stopped, the guest hung, init not reading its port);
    - messages from init nobody asked for are counted; past GW_WATCH_FLOOD
      in one VM's life the VM is flooding its port;
    - the console log is capped: QEMU's own descriptor of console.log is
      borrowed (pidfd_getfd) and set to append, so the file can be cut
      back in place: past its cap ($CELLVM_CONSOLE_MAX bytes, 64 KiB..1 GiB,
      else GW_WATCH_CONSOLE_MAX) its tail goes to console.log.1 and the
      file starts again. More than four times that many bytes within a
      minute is a flood.
    A verdict is GW_WATCH_DEAD with the words in why: the owner stops the VM.
    The bound on a kernel's own channel (gw_chan_stalled) uses the same
    gw_watch_stall_ms.
*/
#ifndef GW_WATCH_H
#define GW_WATCH_H

#include "ch_msg.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GW_WATCH_STALL_MS 30000     //  default of $CELLVM_STALL_MS
#define GW_WATCH_CONSOLE_MAX (16u << 20)    //  default of $CELLVM_CONSOLE_MAX
#define GW_WATCH_FLOOD 1000         //  unasked-for messages from init, one VM's life
#define GW_WATCH_LOGGED 10          //  ... of which this many are logged one by one

enum { GW_WATCH_OK = 0, GW_WATCH_PING = 1, GW_WATCH_DEAD = 2 };

//  How long a guest may stay stuck: $CELLVM_STALL_MS (1000..3600000), read
//  once, else GW_WATCH_STALL_MS.
int64_t gw_watch_stall_ms (void);

typedef struct _gw_watch_t gw_watch_t;

//  How the console's descriptor is had from QEMU (pid): 0 and *fd_p (ours,
//  O_APPEND set on the description QEMU writes through), or -errno. A
//  gateway running as a service user cannot reach QEMU's fds and asks its
//  root helper (gw_priv_console); one that can calls gw_fdborrow.
typedef int (gw_watch_borrow_fn) (void *ctx, int pid, const char *path, int *fd_p);

//  borrow NULL: gw_fdborrow. ctx is passed to borrow.
gw_watch_t *gw_watch_new (gw_watch_borrow_fn *borrow, void *ctx);
void gw_watch_destroy (gw_watch_t **self_p);

//  A new VM: QEMU's pid (0: none) and its console log's path (copied).
void gw_watch_reset (gw_watch_t *self, int pid, const char *console);

//  Call often (every reactor tick is fine; it does its work at most every
//  few hundred ms). can_ping: init is ready and nothing that stops the VM
//  (a save) is in flight. GW_WATCH_OK, GW_WATCH_PING (send a status_request
//  and give its id to gw_watch_pinged), or GW_WATCH_DEAD with why.
int gw_watch_tick (gw_watch_t *self, int64_t now, bool can_ping, char *why, size_t whylen);
void gw_watch_pinged (gw_watch_t *self, const char *id, int64_t now);

//  A request to init whose reply is expected (a restart, a kill).
void gw_watch_sent (gw_watch_t *self, const char *id);
//  A reply of this type is due to a request whose id we do not have (a
//  hello: init answers each, and those sent while it boots may all be
//  answered at once; the pool's set_time_request): counted, not matched.
void gw_watch_owed (gw_watch_t *self, const char *reply_type);

//  A message from init: true when it answers the ping or a request given to
//  gw_watch_sent (each answers once).
bool gw_watch_answer (gw_watch_t *self, const ch_msg_t *msg);

//  init sent something nobody asked for (what: a few words for the log;
//  quiet: counted, never logged: a hello answered twice, as a hello repeated
//  while a VM starts is). 0, or GW_WATCH_DEAD with why once that is a flood.
int gw_watch_unasked (gw_watch_t *self, const char *what, bool quiet, char *why,
                      size_t whylen);

#endif
