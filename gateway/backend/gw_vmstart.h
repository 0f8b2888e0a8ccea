/*  gw_vmstart - a session's VM made ready off the reactor thread.

    The fast starts block: a pool take waits for the daemon (up to 2 s), a
    restore for QMP, the reseed and two handshakes (~0.3-0.5 s under TCG).
    The reactor may not wait for either, so they run here, on a thread of
    their own that lives as long as this object: QEMU's PR_SET_PDEATHSIG
    is tied to the thread that forked it, so that thread must outlive the
    VM. A result is reported through an eventfd the reactor polls.

    The order is the documented one (docs/snapshots.md): a clone from the
    pool daemon, else a restore of the template, else nothing (the caller
    cold-boots; the reason is logged, and a missing template or daemon is
    started in the background for next time). opts->seam.fast_start, when
    set, replaces all of that (tests).
*/
#ifndef GW_VMSTART_H
#define GW_VMSTART_H

#include "backend/gw_backend_microvm.h"
#include "guest/gw_init.h"
#include "backend/gw_vmh.h"
#include "snap/gw_vmsave.h"

typedef struct _gw_vmstart_t gw_vmstart_t;

//  A VM ready for its session (typedef in gw_backend_microvm.h).
struct _gw_vmstart_result_t {
    gw_vmh_t *vm;                               //  the VM (owned by the taker)
    gw_init_t *init;                            //  init's port, hello done
    int kernel_fd;                              //  the kernel's channel, hello done
    const char *how;                            //  "pool" or "restore"
};

//  cfg and opts are copied; their strings are borrowed and must outlive it.
gw_vmstart_t *gw_vmstart_new (const gw_vm_config_t *cfg, const gw_microvm_opts_t *opts);

//  Wait for a start in progress, kill a VM nobody took, stop the thread.
void gw_vmstart_destroy (gw_vmstart_t **self_p);

//  Readable when a start has ended.
int gw_vmstart_fd (const gw_vmstart_t *self);

//  Destroy *vm_p (kill QEMU, reap it, delete its run dir and disk) on the
//  thread, after any start in progress: deleting a disk of hundreds of MiB
//  may take longer than a reactor turn. Nulls *vm_p.
void gw_vmstart_dispose (gw_vmstart_t *self, gw_vmh_t **vm_p);

//  Where the next start's VM comes from, instead of the pool (strings are
//  copied; NULL fields: none). Consumed by the next gw_vmstart_begin.
typedef struct {
    const char *chain_dir;                      //  adopt this disk chain (gw_chain) under
                                                //  a template restore: a restart that keeps
                                                //  /workspace. Cold boot if that fails.
    const char *store_dir;                      //  resume snapshot `snapshot` from this store
    const char *snapshot;                       //  ... a failure is the start's failure
    bool keep_seeds;                            //  resume: do not reseed Python's generators
                                                //  (an idle pause's own resume)
    bool consume;                               //  resume: remove the snapshot once resumed
} gw_vmstart_source_t;
void gw_vmstart_set_source (gw_vmstart_t *self, const gw_vmstart_source_t *src);

//  Begin a start. 0, or -EBUSY while one runs or waits to be taken.
int gw_vmstart_begin (gw_vmstart_t *self);

//  The start's end: 0 and *res (ownership moves), -EAGAIN while it runs,
//  -ENOENT when there is nothing to take (cold-boot instead: logged why),
//  -ECHILD when no start was begun.
int gw_vmstart_take (gw_vmstart_t *self, gw_vmstart_result_t *res);
//  Why the last start failed ("" when it did not), for the session's words.
const char *gw_vmstart_error (gw_vmstart_t *self);

//  Save a running VM into the snapshot store, on the thread (gw_vmsave).
//  req is copied (its cfg must outlive the save). 0, or -EBUSY
//  while a save runs or waits to be taken.
int gw_vmstart_save (gw_vmstart_t *self, const gw_vmsave_req_t *req, const char *store_dir,
                     const char *name);
//  The save's end: 0 and *out, -EAGAIN while it runs, -ECHILD when none
//  was begun, else its -errno with the reason in err.
int gw_vmstart_save_take (gw_vmstart_t *self, gw_vmsave_out_t *out, char *err, size_t errlen);

#endif
