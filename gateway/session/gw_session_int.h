/*  gw_session_int - what gw_session.c and gw_session_kernel.c share.

    Private to the session: the struct, and the few functions one file
    calls in the other (named gw_session__*, the libuv way of saying
    "internal"). Nothing else includes this.
*/
#ifndef GW_SESSION_INT_H
#define GW_SESSION_INT_H

#include "session/gw_session.h"
#include "wire/gw_chan.h"
#include "files/gw_files.h"
#include "session/gw_reqs.h"
#include "files/gw_share.h"
#include "base/gw_worker.h"

#include <czmq.h>

typedef enum { GW_SESSION_NONE, GW_SESSION_STARTING, GW_SESSION_READY, GW_SESSION_DYING } gw_session_state_t;

struct _gw_session_t {
    gw_backend_t *backend;                      //  owned
    gw_session_opts_t opts;                     //  with defaults filled in
    gw_out_t *out;                              //  to clients
    char session [37];                          //  header.session we sign with
    json_t *env;                                //  for the kernel (gw_env), sent in hellos
    json_t *ipython;                            //  --Class.trait=value for its shell, too
    gw_session_state_t state;
    gw_chan_t *chan;                            //  the kernel's channel, NULL unless STARTING/READY
    gw_reqs_t *reqs;                            //  outstanding (and recent) requests
    zlistx_t *held;                             //  ch_msg_t, waiting for the hello
    int64_t deadline;                           //  STARTING: hello by; DYING: escalate at
    int64_t restart_at;                         //  NONE: start the next kernel at
    bool restart_pending;                       //  NONE: a restart is scheduled
    bool hello;                                 //  this kernel said hello
    bool killed;                                //  we killed this kernel
    int notices;                                //  protocol_error notices from this kernel
    char end_reason [320];                      //  why we ended it ("" = it died)
    int starts;                                 //  kernels started
    int failures;                               //  starts in a row without a hello
    int exec_count;                             //  last execution_count seen
    bool shutting_down;
    int64_t shutdown_at;                        //  kill the kernel if still there
    bool finished;
    int exit_code;
    char gave_up [512];                 //  why the kernel cannot be started, once given up
    char why [256];                             //  reason of a kernel violation
    gw_files_t *files;                          //  file requests and artifacts
    gw_worker_t *worker;                        //  host file writes, off the reactor
    zlistx_t *deferred;                         //  ch_msg_t: output behind a held reply
    char outdir [512];                          //  the kernel's output directory (hello)
    //  gw_session_life.c
    int64_t started_at, last_activity;          //  ch_clock_mono_ms
    bool pausing, paused;                       //  idle pause under way / done
    bool suspending;                            //  SIGTERM: pausing to be kept, then the end
    bool suspended;                             //  ... and it was saved whole
    int64_t checkpoint_at;                      //  the last checkpoint's try (mono ms)
    unsigned pause_failures;                    //  in a row: each doubles the wait
    gw_share_t *share;                          //  --share-cwd, NULL: off
    bool sharing;                               //  requests wait for the copy
    char share_notice [700];                    //  what it left out, for the next cell
    bool restart_requested;                     //  shutdown_request with restart: true
    bool snapshotting;                          //  a cellvm_snapshot_request is under way
};


//  Send what waited for the kernel's hello.
void gw_session__flush_held (gw_session_t *self);

//  gw_session_kernel.c: the notebook folder's copy (started after each hello;
//  requests wait for it) ends when the kernel does.
void gw_session__share_stop (gw_session_t *self);
//  What the copy left out, said once, as output of the first cell (msg) that runs.
void gw_session__share_notice (gw_session_t *self, const ch_msg_t *msg);

//  The kernel broke the protocol: log why, stop it.
void gw_session__violation (gw_session_t *self, const char *why);

//  Every complete message from the kernel (gw_chan_msg_fn): 0, or 1 after
//  writing the violation into self->why.
int gw_session__on_kernel_msg (void *arg, ch_msg_t **msg_p);

//  gw_session_life.c: lifetimes, idle pauses, snapshots.
void gw_session__life_tick (gw_session_t *self, int64_t now);
//  A client request arrived: the session is active; a paused one resumes.
void gw_session__activity (gw_session_t *self, bool resume);
//  Start the kernel (again): quietly, without a `starting` status or a
//  new session id, when it resumes from an idle pause.
int gw_session__start_kernel (gw_session_t *self, bool quiet, char *err, size_t errlen);
void gw_session__snapshot_request (gw_session_t *self, ch_msg_t *msg, gw_frames_t **ids_p);
void gw_session__begin_shutdown (gw_session_t *self, bool own_request);
//  cellvm_put/get_request: answered through the backend, later.
void gw_session__file_request (gw_session_t *self, ch_msg_t *msg, gw_frames_t **ids_p);

//  gw_session_net.c: egress (docs/network.md)
//  What the kernel's first hello carries into os.environ: the client's
//  CELLVM_ENV_ variables, then egress's own (the proxy, pip's settings, the
//  user site) where the client set none.
void gw_session__env (gw_session_t *self);
//  A request the gateway answers itself (cellvm_snapshot_request, and
//  cellvm_egress_request: change the client list, answer with the policy):
//  true when msg was one.
bool gw_session__own_request (gw_session_t *self, ch_msg_t *msg, gw_frames_t **ids_p);

#endif
