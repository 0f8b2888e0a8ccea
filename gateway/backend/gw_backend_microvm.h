/*  gw_backend_microvm - each session's kernel in its own QEMU microVM.

    The first start takes a clone from the pool or restores a snapshot
    template (gw_vmstart, off the reactor thread), or, when neither can be
    had, boots a VM (gw_vm) from the guest image and connects its two
    ports: the kernel channel and init's control port (gw_init). Later
    starts, after the kernel died, ask init to restart the kernel in the same
    VM, so /workspace survives. Init reports every kernel death in words;
    the VM itself dying is reported as such, and the next start boots a new
    VM. The VM is killed on destroy, and dies with the gateway anyway
    (PR_SET_PDEATHSIG).
*/
#ifndef GW_BACKEND_MICROVM_H
#define GW_BACKEND_MICROVM_H

#include "backend/gw_backend.h"
#include "vm/gw_vm_config.h"
#include "backend/gw_vmh.h"
#include "net/gw_egproxy.h"

typedef struct _gw_vmstart_result_t gw_vmstart_result_t;   //  gw_vmstart.h

//  Where the backend gets its VMs, so tests can run it with no QEMU
//  (test_gw_backend_microvm). A NULL field, or 0, is the real thing.
typedef struct {
    //  Cold boot, on the reactor: spawn a VM whose ports come up later
    //  (gw_vmh_connect_port). NULL with the reason in err. Real: gw_vm.
    gw_vmh_t *(*boot) (void *arg, const gw_vm_config_t *cfg, char *err, size_t errlen);
    //  On gw_vmstart's thread: 0 and *res (a VM whose init and kernel
    //  hellos are done), or -ENOENT (cold-boot instead). Real: a pool
    //  clone, else a template restore.
    int (*fast_start) (void *arg, gw_vmstart_result_t *res);
    void *arg;                                  //  passed to both
    unsigned chunk_ms;                          //  one chunk's round trip, 0: 60 s
} gw_microvm_seam_t;

//  How a VM starts (docs/snapshots.md). Strings are borrowed and must
//  outlive the backend.
typedef struct {
    const char *template_dir;                   //  restore from templates here; NULL: cold boot
    char *const *build_argv;                    //  builds a missing template in the
                                                //  background (gw_template_build_detached)
    const char *pool_socket;                    //  take clones from this pool daemon, NULL: no
    char *const *pool_argv;                     //  starts the daemon when none answers
    gw_microvm_seam_t seam;                     //  all zero but in tests
    //  Sessions that outlive a process (docs/sessions.md). NULL: none.
    const char *adopt_chain_dir;                //  the first VM adopts this kept disk chain
    const char *from_snapshot;                  //  the first VM resumes this snapshot
    bool resume;                                //  ... as the same session that was
                                                //  suspended there: its generators kept,
                                                //  the snapshot removed once it runs
    const char *snapshot_dir;                   //  the snapshot store (NULL: its default)
    //  The host's admission queue (gw_admit, docs/sessions.md): restores and
    //  resumes wait for one of admit_slots slots. 0: no queue.
    const char *admit_dir;
    int admit_slots;
    int start_timeout_ms;                       //  each step of a restore (gw_patience), 0: 5 s
    //  Egress (docs/network.md): the session's policy, NULL: no network at
    //  all. Borrowed; a live change edits it in place and new connections
    //  see it. Its caps (policy and nonce there unused) and the guest
    //  proxy's port (0: 3128).
    const gw_egress_t *egress;
    gw_egproxy_cfg_t egress_caps;
    unsigned egress_port;
} gw_microvm_opts_t;

//  cfg is copied; its strings are borrowed and must outlive the backend.
//  Probes the accelerator once (logged with its reason). NULL + err. A VM
//  starts as a pool clone or by restoring a template when opts name them
//  (opts may be NULL), and cold-boots (with a log line saying why) when
//  that is not possible.
gw_backend_t *gw_backend_microvm_new_opts (const gw_vm_config_t *cfg,
                                           const gw_microvm_opts_t *opts,
                                           char *err, size_t errlen);

#endif
