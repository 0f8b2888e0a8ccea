/*  gw_microvm_int - what the microvm backend's files share: its state, and
    the few functions one file calls in the other (gw_microvm__*). Private
    to gw_backend_microvm.c and gw_microvm_life.c.
*/
#ifndef GW_MICROVM_INT_H
#define GW_MICROVM_INT_H

#include "backend/gw_backend_microvm.h"
#include "guest/gw_init.h"
#include "backend/gw_vmh.h"
#include "vm/gw_rundir.h"
#include "snap/gw_snapref.h"
#include "backend/gw_vmstart.h"
#include "guest/gw_watch.h"
#include "net/gw_egproxy.h"

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

//  A chunk operation sent (or waiting to be sent) to init.
typedef struct s_op_t {
    struct s_op_t *next;
    char id [37];                   //  its request's msg_id, "" until sent
    bool put, append;
    char *path;
    const uint8_t *data;            //  put: the caller's bytes
    size_t len;
    uint64_t offset;
    int64_t deadline;               //  once sent
    gw_chunk_fn *done;
    void *arg;
} s_op_t;

typedef struct {
    gw_vm_config_t cfg;
    gw_microvm_seam_t seam;         //  the real thing, or a test's mock VMs
    int64_t chunk_ms;               //  a chunk's deadline after it was sent
    gw_vmstart_t *starter;          //  pool take or restore, on its own thread
    bool starting;                  //  a start is with the starter
    bool stop_start;                //  ... and was killed: end it when it returns
    gw_vmh_t *vm;                   //  the session's VM, NULL: none
    int kernel_fd;                  //  our connection to the kernel port
    gw_init_t *init;
    int epfd, timerfd;              //  event fd: init's port, timer, starter
    bool init_ready;                //  init answered a hello
    bool kernel_alive;              //  started and not reported dead
    bool have_exit;                 //  exit waiting for reap
    gw_exit_t exit;
    s_op_t *ops;                    //  chunk operations, oldest first
    //  Sessions that outlive a VM (gw_microvm_life.c, docs/sessions.md).
    gw_microvm_opts_t opts;         //  its strings borrowed
    char disk_top [NAME_MAX + 1];   //  the VM's /workspace top layer in its run dir
    char chain_dir [PATH_MAX];      //  a disk chain waiting for the next VM, "" none
    gw_rundir_t *chain_rd;          //  ... the run dir that holds it
    char detach_id [37];            //  the workspace_detach_request in flight, "" none
    bool first_start_done;          //  opts' adopt/from-snapshot were used
    char paused [80];               //  paused into the store under this name, "" not
    char paused_store [PATH_MAX];   //  ... that store
    char workspace [PATH_MAX];      //  run dir/disk_top, for `cellvm ls`
    gw_snapref_t *paused_ref;       //  holds the paused snapshot (LOCK_SH: gc skips it)
    bool paused_unresumable;        //  its resume failed: never delete it
    bool paused_kept;               //  suspended: a later launch resumes it
    gw_chunk_fn *save_done;         //  a snapshot or pause in flight
    void *save_arg;
    char save_name [80];
    bool save_pause;
    //  A frozen or hostile guest (gw_microvm_watch.c, docs/security.md).
    gw_watch_t *watch;              //  pings, unasked-for messages, the console
    char stop_why [400];            //  the gateway stopped the VM: why, "" it did not
    //  Egress (gw_microvm_net.c, docs/network.md).
    gw_egproxy_t *net;              //  this VM's, NULL: none (egress off, or not yet)
    char net_nonce [33];            //  the guest proxy's
    char net_id [37];               //  the egress_start_request in flight, "" none
    uint64_t net_used;              //  bytes the session's earlier VMs moved (the cap is
                                    //  the session's, across pauses and rebirths)
} s_self_t;


void gw_microvm__watch_init (s_self_t *self);
void gw_microvm__drop_vm (s_self_t *self);

//  gw_microvm_watch.c
//  A new VM (or none): watch it from now on.
void gw_microvm__watch_vm (s_self_t *self);
//  Every tick: pings, the console; a frozen or flooding VM is stopped.
void gw_microvm__watch_tick (s_self_t *self);
//  Stop the VM for a reason of the gateway's (the reap explains it).
void gw_microvm__stop_vm (s_self_t *self, const char *why);
//  A message from init that answers nothing we know of (what: its type).
void gw_microvm__unasked (s_self_t *self, const char *what);
//  A file reply from init that breaks docs/init.md: 0, or -EPROTO and err.
int gw_microvm__check_file_reply (const s_op_t *op, const ch_msg_t *msg, char *err,
                                  size_t errlen);
//  The reap's words for a VM that ended; the gateway's reason when it stopped it.
void gw_microvm__vm_detail (s_self_t *self, const char *how, gw_exit_t *exit_p);

//  gw_microvm_net.c
//  Init is ready in a new VM: start its egress, when the session has any.
void gw_microvm__net_start (s_self_t *self);
//  init's egress_start_reply: true when msg was it.
bool gw_microvm__net_reply (s_self_t *self, const ch_msg_t *msg);
//  The backend's event: the egress proxy's share (a hostile guest stops the VM).
void gw_microvm__net_event (s_self_t *self);
//  The VM went away: so does its egress.
void gw_microvm__net_drop (s_self_t *self);

//  gw_microvm_life.c
//  A start with a VM still there (its kernel died, or a restart): a new VM
//  from the template over this one's disk, when it can; 1 when that is
//  under way (the starter reports to connect), 0 when the caller should
//  restart the kernel inside this VM instead.
int gw_microvm__rebirth (s_self_t *self);
//  A reply from init that the lifecycle waits for: true when it was one.
bool gw_microvm__on_init_reply (s_self_t *self, const ch_msg_t *msg);
//  The first start, or a start after a pause: set the starter's source.
void gw_microvm__prepare_start (s_self_t *self);
//  The starter gave a VM: note its disk. rc as gw_vmstart_take.
void gw_microvm__started (s_self_t *self, int rc, const char *how);
//  The starter's eventfd fired: a save may have ended.
void gw_microvm__on_save (s_self_t *self);
//  The backend ends: a paused snapshot goes with it unless it was kept.
void gw_microvm__end (s_self_t *self);
int gw_microvm__keep_workspace (void *ctx, const char *dir, char *err, size_t errlen);
int gw_microvm__snapshot (void *ctx, const char *store_dir, const char *name,
                          const json_t *extra, gw_chunk_fn *done, void *arg, char *err,
                          size_t errlen);
const char *gw_microvm__workspace (void *ctx);
void gw_microvm__keep_paused (void *ctx);
int gw_microvm__pause (void *ctx, const char *store_dir, const char *name, gw_chunk_fn *done,
                       void *arg, char *err, size_t errlen);

#endif
