/*  gw_patience - a deadline that measures progress (see gw_patience.h). */
#include "base/gw_patience.h"
#include "base/gw_log.h"
#include "base/gw_procstat.h"
#include "ch_clock.h"

#include <assert.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#define S_LATEST 12                 //  the latest deadline, in timeouts
#define S_STEP_MS 250               //  past the deadline, a look this often

struct _gw_patience_t {
    int pid;                        //  0: the wall alone
    int64_t deadline, latest;       //  ch_clock_mono_ms
    int64_t run0, wait0;            //  its ms on a CPU and waiting for one then; -1: unknown
    int budget_ms;                  //  the CPU it may use past the deadline
    bool said;                      //  vm.short_of_cpu was logged
};

gw_patience_t *
gw_patience_new (int pid, int timeout_ms)
{
    gw_patience_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->pid = pid > 0 ? pid : 0;
    gw_patience_reset (self, timeout_ms);
    return self;
}

void
gw_patience_destroy (gw_patience_t **self_p)
{
    assert (self_p);
    free (*self_p);
    *self_p = NULL;
}

void
gw_patience_reset (gw_patience_t *self, int timeout_ms)
{
    assert (self);
    int64_t now = ch_clock_mono_ms ();
    self->deadline = now + timeout_ms;
    self->latest = now + (int64_t) timeout_ms * S_LATEST;
    self->budget_ms = timeout_ms;
    if (!self->pid || gw_procstat_sched (self->pid, &self->run0, &self->wait0) < 0)
        self->run0 = self->wait0 = -1;
}

//  Short of CPU: less CPU than its budget, and a step's wait for one.
static bool
s_short_of_cpu (gw_patience_t *self, int64_t now)
{
    int64_t run = 0, wait = 0;
    bool short_of_cpu = self->run0 >= 0 && now < self->latest
        && gw_procstat_sched (self->pid, &run, &wait) == 0
        && run - self->run0 < self->budget_ms && wait - self->wait0 >= S_STEP_MS;
    if (short_of_cpu && !self->said)
        gw_log (GW_LOG_INFO, "vm.short_of_cpu", "pid=%d cpu_ms=%lld waited_for_cpu_ms=%lld "
                "budget_ms=%d reason=\"past its deadline, but waiting for a CPU: it waits on\"",
                self->pid, (long long) (run - self->run0), (long long) (wait - self->wait0),
                self->budget_ms);
    self->said |= short_of_cpu;
    return short_of_cpu;
}

int
gw_patience_left_ms (gw_patience_t *self)
{
    assert (self);
    int64_t now = ch_clock_mono_ms ();
    int64_t left = self->deadline - now;
    if (left > 0)
        return (int) left;
    if (!s_short_of_cpu (self, now))
        return 0;
    return (int) (self->latest - now < S_STEP_MS ? self->latest - now : S_STEP_MS);
}
