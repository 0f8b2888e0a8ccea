/*  gw_vmh - one handle on a session's VM, whoever holds its QEMU. */
#include "backend/gw_vmh.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>

struct _gw_vmh_t {
    const gw_vmh_ops_t *ops;
    void *vm;                                   //  owned
};

//  gw_vm behind the seam.
static int s_vm_pid (void *vm) { return gw_vm_pid (vm); }
static int s_vm_kill (void *vm) { return gw_vm_kill (vm); }
static int s_vm_reap (void *vm, int *wstatus) { return gw_vm_reap (vm, wstatus); }
static const char *s_vm_run_dir (void *vm) { return gw_vm_run_dir (vm); }
static const char *s_vm_console (void *vm) { return gw_vm_console_log (vm); }
static void s_vm_destroy (void *vm) { gw_vm_destroy ((gw_vm_t **) &vm); }
static const char *s_vm_death (void *vm) { return gw_vm_death (vm); }

static int
s_vm_connect_port (void *vm, const char *name, int *fd_p)
{
    return gw_vm_connect_port (vm, name, fd_p);
}

static const gw_vmh_ops_t s_vm_ops = {
    .pid = s_vm_pid, .kill = s_vm_kill, .reap = s_vm_reap,
    .run_dir = s_vm_run_dir, .console = s_vm_console, .destroy = s_vm_destroy,
    .connect_port = s_vm_connect_port, .death = s_vm_death
};

//  A pool lease behind the seam: the holder kills and cleans up.
static int s_lease_pid (void *l) { return gw_pool_lease_pid (l); }
static int s_lease_kill (void *l) { return gw_pool_lease_kill (l); }
static int s_lease_reap (void *l, int *wstatus) { return gw_pool_lease_reap (l, wstatus); }
static const char *s_lease_run_dir (void *l) { return gw_pool_lease_run_dir (l); }
static const char *s_lease_console (void *l) { return gw_pool_lease_console (l); }
static void s_lease_destroy (void *l) { gw_pool_lease_destroy ((gw_pool_lease_t **) &l); }

//  The holder connected the clone's ports and handed them over with it.
static int
s_lease_connect_port (void *l, const char *name, int *fd_p)
{
    (void) l, (void) name, (void) fd_p;
    return -ENOTSUP;
}

static const gw_vmh_ops_t s_lease_ops = {
    .pid = s_lease_pid, .kill = s_lease_kill, .reap = s_lease_reap,
    .run_dir = s_lease_run_dir, .console = s_lease_console, .destroy = s_lease_destroy,
    .connect_port = s_lease_connect_port
};

gw_vmh_t *
gw_vmh_new (const gw_vmh_ops_t *ops, void *vm)
{
    assert (ops && vm);
    gw_vmh_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->ops = ops;
    self->vm = vm;
    return self;
}

gw_vmh_t *
gw_vmh_from_vm (gw_vm_t **vm_p)
{
    assert (vm_p && *vm_p);
    gw_vmh_t *self = gw_vmh_new (&s_vm_ops, *vm_p);
    *vm_p = NULL;
    return self;
}

gw_vmh_t *
gw_vmh_from_lease (gw_pool_lease_t **lease_p)
{
    assert (lease_p && *lease_p);
    gw_vmh_t *self = gw_vmh_new (&s_lease_ops, *lease_p);
    *lease_p = NULL;
    return self;
}

void
gw_vmh_destroy (gw_vmh_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        (*self_p)->ops->destroy ((*self_p)->vm);
        free (*self_p);
        *self_p = NULL;
    }
}

int gw_vmh_pid (const gw_vmh_t *self) { assert (self); return self->ops->pid (self->vm); }
int gw_vmh_kill (gw_vmh_t *self) { assert (self); return self->ops->kill (self->vm); }

int
gw_vmh_reap (gw_vmh_t *self, int *wstatus)
{
    assert (self && wstatus);
    return self->ops->reap (self->vm, wstatus);
}

const char *
gw_vmh_run_dir (const gw_vmh_t *self)
{
    assert (self);
    return self->ops->run_dir (self->vm);
}

const char *
gw_vmh_console (const gw_vmh_t *self)
{
    assert (self);
    return self->ops->console (self->vm);
}

int
gw_vmh_connect_port (gw_vmh_t *self, const char *name, int *fd_p)
{
    assert (self && name && fd_p);
    return self->ops->connect_port ? self->ops->connect_port (self->vm, name, fd_p) : -ENOTSUP;
}

const char *
gw_vmh_death (const gw_vmh_t *self)
{
    assert (self);
    const char *why = self->ops->death ? self->ops->death (self->vm) : NULL;
    return why ? why : "";
}
