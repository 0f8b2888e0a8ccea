/*  gw_rundir - a VM's private run directory, and sweeping dead ones.

    Layout: BASE/vm-<gateway pid>-XXXXXX/ (mode 0700) holding gateway.pid
    ("<pid> <start time>": who owns it), and whatever the VM puts there
    (sockets, logs, disk). BASE is created 0700 and must be a real directory
    owned by us: in a shared /tmp someone else could have made it first.

    gw_rundir_destroy deletes the directory and everything in it.
    gw_rundir_sweep deletes the directories of gateways that are gone, which
    is how a gateway killed with SIGKILL gets cleaned up after: the next one
    to start sweeps. (Its QEMUs died with it, by PR_SET_PDEATHSIG.)
*/
#ifndef GW_RUNDIR_H
#define GW_RUNDIR_H

#include <stdbool.h>

#include <stddef.h>

typedef struct _gw_rundir_t gw_rundir_t;

//  Create base if needed (checked: a directory, not a symlink, ours, then
//  chmod 0700) and a fresh run dir under it, with gateway.pid written.
//  base NULL: gw_runbase_default. NULL with the reason in err on failure.
gw_rundir_t *gw_rundir_new (const char *base, char *err, size_t errlen);

//  Delete the directory and everything in it, free; nulls *self_p.
//  NULL-safe.
void gw_rundir_destroy (gw_rundir_t **self_p);

const char *gw_rundir_path (const gw_rundir_t *self);

//  path/name into out. 0 or -ENAMETOOLONG.
int gw_rundir_file (const gw_rundir_t *self, const char *name, char *out, size_t cap);

//  Write text to path/name (created 0600, replaced). 0 or -errno.
int gw_rundir_write (const gw_rundir_t *self, const char *name, const char *text);

//  Delete run dirs under base whose gateway is gone, first SIGKILLing a
//  QEMU still running from one (its qemu.pid, if its command line names
//  that directory). Returns the number removed, or -errno when base cannot
//  be read (-ENOENT: nothing to do).
int gw_rundir_sweep (const char *base);

#endif
