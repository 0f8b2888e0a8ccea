/*  gw_session - one Jupyter session = one kernel behind a backend.

    The session sits between the client-facing sockets (gw_server) and the
    kernel's channel (gw_chan over a gw_backend). It

    - keeps a table of outstanding requests, msg_id -> client identities,
      channel and the request header as the client sent it;
    - forwards client requests to the kernel, holding those that arrive
      before the kernel's hello; control requests are never held behind a
      running cell (the kernel reads control on its own thread);
    - validates everything the kernel sends (channel, msg_type allowed on
      that channel, required content fields and types, size) and re-stamps
      it: fresh msg_id, the session's id, a UTC date, version 5.3, and a
      parent_header rebuilt from the stored request, never the kernel's;
    - turns a kernel death or protocol violation into an `error` on the
      running cell, error replies for the rest, status `restarting`, and a
      restart; and runs shutdown (client request or SIGTERM) to completion.

    The session touches no ZeroMQ socket: what goes to clients leaves
    through the emit callback, so unit tests drive it with a mock backend.
*/
#ifndef GW_SESSION_H
#define GW_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/gw_backend.h"
#include "net/gw_egress.h"
#include "session/gw_out.h"
#include "wire/gw_frames.h"
#include "ch_msg.h"

typedef struct _gw_session_t gw_session_t;

typedef struct {
    uint32_t max_frame;                         //  channel frame cap (0: 64 MiB)
    size_t max_msg;                             //  kernel message cap (0: 64 MiB)
    double cell_timeout;                        //  seconds a cell may run, 0: off
    double ready_timeout;                       //  seconds to the kernel's hello (0: 60)
    int restart_limit;                          //  failed starts in a row before giving up (0: 5)
    const char *artifacts_dir;                  //  output_files copied here, NULL: off
    size_t artifact_max_file;                   //  per file (0: 100 MiB)
    size_t artifact_max_session;                //  per session (0: 1 GiB)
    //  Sessions that outlive a process (docs/sessions.md); 0 / NULL: off.
    double idle_pause;                          //  save the VM to disk after S idle seconds
    double idle_timeout;                        //  end the session after S idle seconds
    double ttl;                                 //  end the session S seconds after its start
    const char *snapshot_dir;                   //  the snapshot store
    const char *pause_name;                     //  the name an idle pause saves under
    bool suspend_on_term;                       //  a named session: gw_session_terminate
                                                //  suspends it under pause_name
    const char *session_name;                   //  ... its name (gw_ckpt's names)
    double checkpoint_every;                    //  ... snapshot it every S s between cells
    const char *kernel_name;                    //  the client's kernelspec name, NULL: unknown
    //  IPython's --Class.trait=value options, for the kernel's shell (borrowed).
    const char *const *ipython_options;
    size_t n_ipython_options;
    //  cellvm-notebook: this folder copied into the VM's /notebook (gw_share), NULL: off.
    const char *share_dir;
    size_t share_max;                           //  bytes (0: GW_SHARE_MAX_BYTES)
    //  Egress (docs/network.md): the session's policy, NULL: no network. A
    //  cellvm_egress_request replaces its client list; the backend reads it
    //  at each new connection. The guest proxy's port, for the kernel's
    //  proxy variables.
    gw_egress_t *egress;
    unsigned egress_port;
} gw_session_opts_t;

//  New session over *backend_p (ownership moves in). opts may be NULL.
gw_session_t *gw_session_new (gw_backend_t **backend_p, const gw_session_opts_t *opts,
                              gw_session_emit_fn *emit, void *emit_arg);

//  Stop the kernel if it still runs and free everything; nulls *self_p.
void gw_session_destroy (gw_session_t **self_p);

//  Publish status `starting` and start the first kernel. 0, or a negative
//  errno with the reason in err (the gateway should then exit).
int gw_session_start (gw_session_t *self, char *err, size_t errlen);

//  A verified client message (gw_wire_decode output). Takes both. Returns 0
//  when it was forwarded or held, a negative errno when it was dropped
//  (already logged): -EPROTONOSUPPORT unknown msg_type for its channel,
//  -EINVAL bad header, -EEXIST msg_id already outstanding, -EBUSY too many
//  outstanding requests, -ESHUTDOWN the session is shutting down.
int gw_session_request (gw_session_t *self, gw_frames_t **ids_p, ch_msg_t **msg_p);

//  A verified client request that cannot be accepted whole (over the
//  message size limit; it carries no buffers): answer it with an error reply
//  saying why, bracketed by busy and idle, so the client never waits for
//  nothing. Takes both.
void gw_session_refuse (gw_session_t *self, gw_frames_t **ids_p, ch_msg_t **msg_p,
                        const char *why);

//  Shut down without a client request (SIGTERM): ask the kernel to exit,
//  stop it if it does not within a second, then finish.
void gw_session_shutdown (gw_session_t *self);
//  SIGTERM (an eviction, a drain): a named session (suspend_on_term) is
//  saved into the store under pause_name, kept there for the next launch,
//  and then shut down; any other session is shut down.
void gw_session_terminate (gw_session_t *self);
//  How the session ended: "suspended" (saved whole for the next launch),
//  "suspend_failed", or "ended".
const char *gw_session_end_kind (const gw_session_t *self);

//  The channel fd to poll (-1 when there is none right now), and whether to
//  poll it for writing too. Both change as kernels come and go.
int gw_session_fd (const gw_session_t *self);
bool gw_session_wants_write (const gw_session_t *self);

//  The reactor says the channel fd is readable / writable.
void gw_session_readable (gw_session_t *self);
void gw_session_writable (gw_session_t *self);

//  The backend's own event fd to poll for reading (-1 when none), and its
//  handler for when it is readable.
int gw_session_backend_fd (const gw_session_t *self);
void gw_session_backend_event (gw_session_t *self);

//  The session's worker (host file writes) has finished jobs: poll this fd
//  for reading (it never changes) and call gw_session_worker_event.
int gw_session_worker_fd (const gw_session_t *self);
void gw_session_worker_event (gw_session_t *self);

//  Timers: reap, restart, deadlines. Call every few tens of milliseconds,
//  and when SIGCHLD arrives.
void gw_session_tick (gw_session_t *self);

//  True once shutdown has completed (or the kernel cannot be started any
//  more); the gateway then exits with gw_session_exit_code.
bool gw_session_finished (const gw_session_t *self);
int gw_session_exit_code (const gw_session_t *self);

//  Why the session gave up starting its kernel (what every waiting request
//  was told), or NULL: the gateway's one line on stderr as it exits.
const char *gw_session_gave_up (const gw_session_t *self);

//  The backend (borrowed), for its pid and workspace in the status file.
gw_backend_t *gw_session_backend (gw_session_t *self);
//  A client asked for a restart (shutdown_request with restart: true).
bool gw_session_restart_requested (const gw_session_t *self);
//  Leave /workspace in dir for the next gateway (gw_backend_keep_workspace),
//  before the session is destroyed. 0 or -errno with the reason in err.
int gw_session_keep_workspace (gw_session_t *self, const char *dir, char *err, size_t errlen);
//  The session's state in one word for `cellvm ls`: "starting", "running"
//  (a request outstanding), "idle", "pausing", "paused", "stopping".
const char *gw_session_state_name (const gw_session_t *self);

//  The session id in the headers the gateway signs (new for each kernel).
const char *gw_session_id (const gw_session_t *self);

#endif
