/*  gw_patience - a deadline that measures a process's progress, not the
    wall.

    A VM start waits on its guest: for QEMU to load a snapshot, for init
    and the kernel to answer. On a host busy with a burst of starts, the
    guest may simply not get a CPU before a wall-clock deadline, and a
    restore that is merely slow must not be taken for a broken one (that
    turns it into a cold boot, ten times dearer, and the host falls
    further behind). So past its deadline a wait goes on, a step at a
    time, while the process has had less CPU than the timeout since the
    wait began and has waited for a CPU meanwhile (its threads'
    schedstat, gw_procstat). A guest that hangs idle waits for no CPU,
    and one that spins uses its budget: both end as before. There is a
    latest deadline, twelve timeouts, whatever happens.
*/
#ifndef GW_PATIENCE_H
#define GW_PATIENCE_H

typedef struct _gw_patience_t gw_patience_t;

//  Patience with process pid (0 or less: the wall alone) for timeout_ms.
gw_patience_t *gw_patience_new (int pid, int timeout_ms);

//  Nulls *self_p. NULL-safe.
void gw_patience_destroy (gw_patience_t **self_p);

//  Begin again: timeout_ms from now, the budget counted from now.
void gw_patience_reset (gw_patience_t *self, int timeout_ms);

//  How long a wait may last now, in ms: the rest of the deadline; past
//  it, a step (250 ms) at a time while the process is short of CPU (the
//  first time, logged as vm.short_of_cpu); else 0. Call it again after
//  each wait.
int gw_patience_left_ms (gw_patience_t *self);

#endif
