/*  gw_poolvm - the pool's real VM operations (see gw_poolvm.h). */
#include "snap/gw_poolvm.h"
#include "guest/gw_drive.h"
#include "snap/gw_template.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_STEP_MS 15000             //  each of restore, reseed and warm-up

struct _gw_poolvm_t {
    const gw_vm_config_t *cfg;
    const char *template_dir;
};

//  One clone: its VM and the driver over its two ports.
typedef struct {
    gw_vm_t *vm;
    gw_drive_t *drive;
} s_clone_t;

gw_poolvm_t *
gw_poolvm_new (const gw_vm_config_t *cfg, const char *template_dir)
{
    assert (cfg && template_dir);
    gw_poolvm_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->cfg = cfg;
    self->template_dir = template_dir;
    return self;
}

void
gw_poolvm_destroy (gw_poolvm_t **self_p)
{
    assert (self_p);
    free (*self_p);
    *self_p = NULL;
}

static void
s_destroy (void *ctx, void **clone_p)
{
    (void) ctx;
    s_clone_t *c = *clone_p;
    if (c) {
        gw_drive_destroy (&c->drive);
        gw_vm_destroy (&c->vm);
        free (c);
    }
    *clone_p = NULL;
}

static int
s_restore (void *ctx, unsigned serial, void **clone_p, char *err, size_t errlen)
{
    gw_poolvm_t *self = ctx;
    (void) serial;
    int rc = -EIO, kfd = -1;
    gw_init_t *init = NULL;
    s_clone_t *c = calloc (1, sizeof *c);
    if (!c)
        abort ();
    gw_template_t *t = gw_template_open (self->template_dir, self->cfg, &rc, err, errlen);
    if (t)
        c->vm = gw_template_restore (t, self->cfg, S_STEP_MS, err, errlen);
    gw_template_destroy (&t);
    rc = c->vm ? gw_template_reseed (c->vm, S_STEP_MS, &init, &kfd, err, errlen) : -EIO;
    if (rc == 0)
        c->drive = gw_drive_adopt (&init, kfd, S_STEP_MS);
    *clone_p = c;
    if (rc < 0)
        s_destroy (ctx, clone_p);
    return rc;
}

static int
s_warm (void *ctx, void *clone, char *err, size_t errlen)
{
    (void) ctx;
    s_clone_t *c = clone;
    gw_drive_set_timeout (c->drive, S_STEP_MS);
    int rc = gw_drive_kernel_info (c->drive, err, errlen);
    if (rc == 0)
        rc = gw_drive_silent_cell (c->drive, "pass", err, errlen);
    if (rc < 0) {
        char why [400];
        snprintf (why, sizeof why, "%s", err);
        snprintf (err, errlen, "warming the clone: %s", why);
    }
    return rc;
}

static void
s_describe (void *ctx, void *clone, gw_poold_info_t *info)
{
    (void) ctx;
    s_clone_t *c = clone;
    *info = (gw_poold_info_t) { .pid = gw_vm_pid (c->vm), .run_dir = gw_vm_run_dir (c->vm),
                                .console = gw_vm_console_log (c->vm) };
}

static int
s_take_ports (void *ctx, void *clone, int *kernel_fd, int *init_fd)
{
    (void) ctx;
    s_clone_t *c = clone;
    gw_init_t *init = gw_drive_take_init (c->drive);
    *kernel_fd = gw_drive_take_kernel_fd (c->drive);
    *init_fd = init ? fcntl (gw_init_fd (init), F_DUPFD_CLOEXEC, 3) : -1;
    gw_init_destroy (&init);
    return *kernel_fd >= 0 && *init_fd >= 0 ? 0 : -EBADF;
}

static int
s_kill (void *ctx, void *clone)
{
    (void) ctx;
    return gw_vm_kill (((s_clone_t *) clone)->vm);
}

static int
s_reap (void *ctx, void *clone, int *wstatus)
{
    (void) ctx;
    return gw_vm_reap (((s_clone_t *) clone)->vm, wstatus);
}

static long
s_pss_mib (void *ctx, int pid)
{
    (void) ctx;
    char path [64], line [256];
    long kib = 0;
    snprintf (path, sizeof path, "/proc/%d/smaps_rollup", pid);
    FILE *f = fopen (path, "re");
    while (f && fgets (line, sizeof line, f))
        if (strncmp (line, "Pss:", 4) == 0)
            kib = atol (line + 4);
    if (f)
        fclose (f);
    return kib / 1024;
}

gw_poold_ops_t
gw_poolvm_ops (gw_poolvm_t *self)
{
    assert (self);
    return (gw_poold_ops_t) { .ctx = self, .restore = s_restore, .warm = s_warm,
                              .describe = s_describe, .take_ports = s_take_ports,
                              .kill = s_kill, .reap = s_reap, .destroy = s_destroy,
                              .pss_mib = s_pss_mib };
}
