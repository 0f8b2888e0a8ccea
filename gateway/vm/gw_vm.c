/*  gw_vm - one QEMU microVM: its config, run directory, process and ports.

    The child side of fork() runs in a process that has other threads (the
    ZeroMQ I/O threads), so between fork and exec it only makes
    async-signal-safe calls; everything it needs is prepared beforehand.
*/
#include "vm/gw_vm.h"
#include "disk/gw_chain.h"
#include "base/gw_log.h"
#include "base/gw_mem.h"
#include "jail/gw_priv.h"
#include "disk/gw_qcow2.h"
#include "vm/gw_rundir.h"
#include "base/gw_fs.h"
#include "vm/gw_vmargv.h"
#include "jail/gw_vmspawn.h"
#include "ch_clock.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define S_MIB (1024ull * 1024)
#define S_QEMU_LOG "qemu.log"
#define S_BASE_DISK "base.qcow2"            //  a snapshot's disk under a fork's layer

//  Indexes of the config's strings, which gw_vm_new copies.
enum { S_QEMU, S_QEMU_IMG, S_IMAGE_DIR, S_KERNEL, S_INITRD, S_ROOTFS, S_RUN_BASE,
       S_APPEND, S_CPU, S_MEM_PATH, S_DISK_BACKING, S_DISK_SEED, S_DISK_CHAIN, S_DISK_BASE,
       S_DISK_NAME, S_NSTR };

struct _gw_vm_t {
    gw_vm_config_t cfg;                         //  resolved; strings point into str
    char *str [S_NSTR];                         //  owned copies of cfg's strings
    gw_rundir_t *dir;                           //  run directory, owned
    char console_log [PATH_MAX];                //  dir/console.log
    char **argv;                                //  QEMU's argv, owned
    char accel_reason [192];                    //  why this accelerator
    pid_t pid;                                  //  QEMU, and its process group; 0 = none
    bool started;                               //  gw_vm_start succeeded
    int64_t started_ms;                         //  monotonic time of the spawn
    gw_jail_t *jail;                            //  QEMU's jail, NULL: unjailed or the helper's
    gw_priv_t *priv;                            //  the privileged helper that started QEMU
    int pidfd;                                  //  ... and QEMU's pidfd then, else -1
    gw_priv_jail_t priv_jail;                   //  ... and what it said of the jail
    gw_jail_vm_t priv_vm;                       //  ... and what it was asked to jail
    char death [256];                           //  why QEMU died, when the jail knows
    gw_readlease_t *ram_lease;                  //  on the RAM file it maps, until reaped
    char ram_changed [300];                     //  why the gateway stopped it: that file
};

//  ==========================================================================
//  Resolving the config: copies, defaults, executables, image files.

static const char **
s_field (gw_vm_config_t *cfg, int i)
{
    const char **fields [S_NSTR] = {
        &cfg->qemu, &cfg->qemu_img, &cfg->image_dir, &cfg->kernel, &cfg->initrd,
        &cfg->rootfs, &cfg->run_base, &cfg->append, &cfg->cpu, &cfg->mem_path,
        &cfg->disk_backing, &cfg->disk_seed, &cfg->disk_chain_dir, &cfg->disk_base,
        &cfg->disk_name
    };
    return fields [i];
}

//  Make string i of the config value (taken; NULL allowed).
static void
s_set (gw_vm_t *self, int i, char *value)
{
    free (self->str [i]);
    self->str [i] = value;
    *s_field (&self->cfg, i) = value;
}

//  Full path of an executable: name itself if it holds a '/', else the
//  first match on PATH. NULL when there is none. Resolved here because the
//  child may only call execv (execvp is not async-signal-safe).
static char *
s_which (const char *name)
{
    if (strchr (name, '/'))
        return access (name, X_OK) == 0 ? gw_strdup (name) : NULL;
    const char *path = getenv ("PATH");
    char *dirs = gw_strdup (path && *path ? path : "/usr/local/bin:/usr/bin:/bin");
    char *found = NULL, *save = NULL;
    for (char *dir = strtok_r (dirs, ":", &save); dir && !found;
         dir = strtok_r (NULL, ":", &save)) {
        char full [PATH_MAX];
        struct stat st;
        int n = snprintf (full, sizeof full, "%s/%s", dir, name);
        if (n > 0 && (size_t) n < sizeof full && stat (full, &st) == 0
        &&  S_ISREG (st.st_mode) && access (full, X_OK) == 0)
            found = gw_strdup (full);
    }
    free (dirs);
    return found;
}

//  A readable regular file, or an error naming it.
static int
s_check_file (const char *what, const char *path, char *err, size_t errlen)
{
    struct stat st;
    const char *why = NULL;
    if (stat (path, &st) < 0 || access (path, R_OK) < 0)
        why = strerror (errno);
    else if (!S_ISREG (st.st_mode))
        why = "not a regular file";
    if (why)
        snprintf (err, errlen, "vm %s %s: %s%s", what, path, why,
                  strcmp (what, "disk backing") ? " (run make image?)" : "");
    return why ? -ENOENT : 0;
}

static int
s_resolve_files (gw_vm_t *self, char *err, size_t errlen)
{
    const char *names [] = { "vmlinux", "initrd.img", "rootfs.ext4" };
    for (int i = 0; i < 3; i++) {
        if (!self->str [S_KERNEL + i] && !self->cfg.image_dir) {
            snprintf (err, errlen, "vm: no image dir configured");
            return -EINVAL;
        }
        if (!self->str [S_KERNEL + i]) {
            char path [PATH_MAX];
            snprintf (path, sizeof path, "%s/%s", self->cfg.image_dir, names [i]);
            s_set (self, S_KERNEL + i, gw_strdup (path));
        }
        if (s_check_file (names [i], self->str [S_KERNEL + i], err, errlen) < 0)
            return -ENOENT;
    }
    if (self->cfg.disk_backing && self->cfg.disk_backing [0] != '/') {
        snprintf (err, errlen, "vm disk backing %s: must be an absolute path",
                  self->cfg.disk_backing);
        return -EINVAL;
    }
    if (self->cfg.disk_backing)
        return s_check_file ("disk backing", self->cfg.disk_backing, err, errlen);
    return 0;
}

static int
s_resolve (gw_vm_t *self, char *err, size_t errlen)
{
    for (int i = S_QEMU; i <= S_QEMU_IMG; i++) {
        const char *name = self->str [i] ? self->str [i] : "";
        char *path = s_which (name);
        if (!path) {
            snprintf (err, errlen, "vm: %s not found or not executable "
                      "(install qemu-system-x86 and qemu-utils)", name);
            return -ENOENT;
        }
        s_set (self, i, path);
    }
    return s_resolve_files (self, err, errlen);
}

//  The accelerator (probed unless given) and the TCG clock rate.
static int
s_choose_accel (gw_vm_t *self, char *err, size_t errlen)
{
    gw_accel_probe_t probe;
    gw_accel_probe (&probe);
    int accel = gw_accel_choose (self->cfg.accel, &probe, self->accel_reason,
                                 sizeof self->accel_reason);
    if (accel < 0) {
        snprintf (err, errlen, "vm: %s", self->accel_reason);
        return accel;
    }
    gw_log (self->cfg.accel == GW_ACCEL_AUTO ? GW_LOG_INFO : GW_LOG_DEBUG, "vm.accel",
            "accel=%s reason=\"%s\"", gw_accel_name (accel), self->accel_reason);
    self->cfg.accel = (gw_accel_t) accel;
    if (!self->cfg.tsc_khz)
        self->cfg.tsc_khz = gw_accel_tsc_khz ();
    if (!self->cfg.tsc_khz && accel == GW_ACCEL_TCG)
        gw_log (GW_LOG_WARN, "vm.tsc_unknown", "reason=\"host TSC rate unknown: the guest "
                "may hang calibrating its clock\"");
    return 0;
}

gw_vm_t *
gw_vm_new (const gw_vm_config_t *cfg, char *err, size_t errlen)
{
    assert (cfg && err);
    gw_vm_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->cfg = *cfg;
    self->pidfd = -1;
    self->priv = gw_priv ();                    //  NULL unless this gateway dropped to --user
    for (int i = 0; i < S_NSTR; i++)
        s_set (self, i, gw_strdup (*s_field (&self->cfg, i)));
    if (s_resolve (self, err, errlen) < 0 || s_choose_accel (self, err, errlen) < 0)
        goto fail;
    self->dir = gw_rundir_new (self->cfg.run_base, err, errlen);
    if (!self->dir
    ||  gw_vmargv_build (&self->cfg, gw_rundir_path (self->dir), &self->argv, err, errlen) < 0)
        goto fail;
    gw_rundir_file (self->dir, GW_VMARGV_CONSOLE, self->console_log, sizeof self->console_log);
    return self;
fail:
    gw_vm_destroy (&self);
    return NULL;
}

char *
gw_vm_which (const char *name)
{
    assert (name);
    return s_which (name);
}

//  ==========================================================================
//  Processes.

//  Every file QEMU writes is capped: the qcow2 can grow to its virtual size
//  plus metadata (<1/4000 of it), RAM and migration files to the RAM size,
//  and the console log cannot fill the host disk.
static rlim_t
s_fsize_limit (const gw_vm_config_t *cfg)
{
    uint64_t disk = cfg->disk_bytes + cfg->disk_bytes / 64 + 16 * S_MIB;
    uint64_t ram = (uint64_t) cfg->mem_mib * S_MIB + 16 * S_MIB;
    return (rlim_t) (disk > ram ? disk : ram);
}

//  Run sp->argv (qemu-img) to its end, in a tool jail (gw_jail_tool_new)
//  unless jails are off or this gateway is a service user (then it runs as
//  that user); its wait status. 0 or -errno.
static int
s_run_tool (const gw_jail_opts_t *opts, gw_vmspawn_t *sp, const char *dir, const char *disk,
            const char *rw_dir, int *status)
{
    char why [300] = "";
    int rc = 0;
    pid_t pid = 0;
    gw_jail_t *jail = gw_priv () ? NULL : gw_jail_tool_new (opts, sp->argv [0], dir, disk,
                                                           rw_dir, &rc, why, sizeof why);
    sp->jail = jail;
    if (rc == 0)
        rc = gw_vmspawn (sp, &pid, why, sizeof why);
    while (rc == 0 && waitpid (pid, status, 0) < 0)
        if (errno != EINTR) {
            rc = -errno;
            break;
        }
    if (why [0])
        gw_log (GW_LOG_WARN, "vm.tool_failed", "exe=%s reason=\"%s\"", sp->argv [0], why);
    gw_jail_destroy (&jail);
    sp->jail = NULL;
    return rc;
}

//  A new empty qcow2 at path over backing (NULL: none), made in-process
//  (gw_qcow2: a jailed qemu-img took 8-45 ms of the reactor's turn). Unless
//  unsafe, backing must be readable now, as qemu-img create would check.
static int
s_make_disk (gw_vm_t *self, const char *path, const char *backing, bool unsafe, char *err,
             size_t errlen)
{
    int64_t t0 = ch_clock_mono_ms ();
    char seen [PATH_MAX * 2];                   //  a relative backing is beside path
    const char *slash = strrchr (path, '/');
    if (backing && backing [0] != '/' && slash)
        snprintf (seen, sizeof seen, "%.*s/%s", (int) (slash - path), path, backing);
    else
        snprintf (seen, sizeof seen, "%s", backing ? backing : "");
    int rc = !unsafe && backing && access (seen, R_OK) < 0 ? -errno : 0;
    if (rc < 0) {
        snprintf (err, errlen, "the /workspace disk's backing file %s cannot be read (%s); "
                  "rebuild the image (make image)", seen, strerror (-rc));
        return rc;
    }
    rc = gw_qcow2_create (path, self->cfg.disk_bytes, backing, backing ? "qcow2" : NULL);
    if (rc < 0)
        snprintf (err, errlen, "creating the /workspace disk %s: %s", path, strerror (-rc));
    else
        gw_log (GW_LOG_DEBUG, "vm.disk_created", "path=%s bytes=%llu ms=%lld", path,
                (unsigned long long) self->cfg.disk_bytes, (long long) (ch_clock_mono_ms () - t0));
    return rc;
}

//  A fresh layer over a snapshot's standalone disk, linked in as base.qcow2
//  (relative, so the chain moves as a whole: gw_chain).
static int
s_disk_over_base (gw_vm_t *self, const char *path, char *err, size_t errlen)
{
    char base [PATH_MAX];
    gw_rundir_file (self->dir, S_BASE_DISK, base, sizeof base);
    int rc = link (self->cfg.disk_base, base) == 0 ? 0
           : gw_fs_copy (self->cfg.disk_base, base, false);
    if (rc < 0) {
        snprintf (err, errlen, "linking %s into the run dir: %s", self->cfg.disk_base,
                  strerror (-rc));
        return rc;
    }
    return s_make_disk (self, path, S_BASE_DISK, true, err, errlen);
}

//  The session's disk: an adopted chain, a layer over a snapshot's disk,
//  the seed's copy, else a new layer.
//  The top layer's file name of the /workspace disk in the run dir.
static const char *
s_disk_name (gw_vm_t *self)
{
    return self->cfg.disk_name ? self->cfg.disk_name : GW_VMARGV_DISK;
}

static int
s_create_disk (gw_vm_t *self, char *err, size_t errlen)
{
    char path [PATH_MAX];
    gw_rundir_file (self->dir, s_disk_name (self), path, sizeof path);
    if (self->cfg.disk_chain_dir)
        return gw_chain_import (self->cfg.disk_chain_dir, gw_rundir_path (self->dir), err,
                                errlen);
    if (self->cfg.disk_base)
        return s_disk_over_base (self, path, err, errlen);
    if (self->cfg.disk_seed) {
        int rc = gw_fs_copy (self->cfg.disk_seed, path, false);
        gw_log (rc < 0 ? GW_LOG_WARN : GW_LOG_DEBUG, "vm.disk_copied", "seed=%s rc=%d",
                self->cfg.disk_seed, rc);
        if (rc == 0)
            return 0;
    }
    return s_make_disk (self, path, self->cfg.disk_backing, false, err, errlen);
}

//  Spawn context for qemu-img and QEMU: logs to the run dir, files capped.
static int
s_spawn_open (gw_vm_t *self, gw_vmspawn_t *sp, char *err, size_t errlen)
{
    char log_path [PATH_MAX];
    gw_rundir_file (self->dir, S_QEMU_LOG, log_path, sizeof log_path);
    *sp = (gw_vmspawn_t) { .cwd = gw_rundir_path (self->dir), .parent = getpid (),
                        .fsize = s_fsize_limit (&self->cfg) };
    sp->log_fd = open (log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
    sp->null_fd = open ("/dev/null", O_RDWR | O_CLOEXEC);
    int rc = sp->log_fd < 0 || sp->null_fd < 0 ? -errno : 0;
    if (rc < 0)
        snprintf (err, errlen, "vm: cannot open %s: %s", log_path, strerror (-rc));
    return rc;
}

static void
s_spawn_close (gw_vmspawn_t *sp)
{
    gw_vmspawn_env_destroy (&sp->env);
    if (sp->log_fd >= 0)
        close (sp->log_fd);
    if (sp->null_fd >= 0)
        close (sp->null_fd);
}

int
gw_vm_make_layer (gw_vm_t *self, const char *path, const char *backing, char *err,
                  size_t errlen)
{
    assert (self && path && backing && err);
    return s_make_disk (self, path, backing, true, err, errlen);
}

//  A layer in a jailed VM's run dir (sticky, the VM's group) is for that
//  VM to write.
static int
s_share_layer (const char *dir, const char *path)
{
    struct stat st;
    if (stat (dir, &st) < 0 || !(st.st_mode & S_ISVTX) || st.st_gid == getegid ())
        return 0;
    int fd = open (path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    int rc = fd < 0 || fchown (fd, (uid_t) -1, st.st_gid) < 0 || fchmod (fd, 0660) < 0
           ? -errno : 0;
    if (fd >= 0)
        close (fd);
    return rc;
}

int
gw_vm_new_layer (const gw_vm_config_t *cfg, const char *dir, const char *name,
                 const char *backing, char *err, size_t errlen)
{
    assert (cfg && dir && name && backing && err);
    char path [PATH_MAX];
    int rc = strchr (name, '/') ? -EINVAL : 0;
    if (rc == 0 && snprintf (path, sizeof path, "%s/%s", dir, name) >= (int) sizeof path)
        rc = -ENAMETOOLONG;
    if (rc == 0)
        rc = gw_qcow2_create (path, cfg->disk_bytes, backing, "qcow2");
    if (rc < 0) {
        snprintf (err, errlen, "creating the layer %s in %s: %s", name, dir, strerror (-rc));
        return rc;
    }
    if ((rc = s_share_layer (dir, path)) < 0) {
        snprintf (err, errlen, "handing the layer %s to its VM: %s", path, strerror (-rc));
        unlink (path);
    }
    return rc;
}

int
gw_vm_run_qemu_img (const char *qemu_img, const gw_jail_opts_t *jail, const char *dir,
                    const char *disk, const char *rw_dir, const char *const *args, char *err,
                    size_t errlen)
{
    assert (qemu_img && jail && dir && args);
    char *exe = s_which (qemu_img);             //  execv needs the full path
    char *argv [24] = { exe ? exe : (char *) qemu_img }, log_path [PATH_MAX];
    for (int n = 1; args [n - 1] && n < 23; n++)
        argv [n] = (char *) args [n - 1];
    snprintf (log_path, sizeof log_path, "%s/" S_QEMU_LOG, dir);
    gw_vmspawn_t sp = { .cwd = dir, .parent = getpid (), .argv = argv };
    sp.log_fd = open (log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
    sp.null_fd = open ("/dev/null", O_RDWR | O_CLOEXEC);
    int status = 0, rc = sp.log_fd < 0 || sp.null_fd < 0 ? -errno
                       : s_run_tool (jail, &sp, dir, disk, rw_dir, &status);
    if (rc == 0 && (!WIFEXITED (status) || WEXITSTATUS (status) != 0))
        rc = -EIO;
    if (rc < 0)
        snprintf (err, errlen, "qemu-img %s failed (%s); see %s", args [0],
                  rc == -EIO ? "non-zero exit" : strerror (-rc), log_path);
    s_spawn_close (&sp);
    free (exe);
    return rc;
}

//  The jail of this VM (none when it runs unjailed): what QEMU opens.
static int
s_jail_new (gw_vm_t *self, char *err, size_t errlen)
{
    const gw_vm_config_t *c = &self->cfg;
    gw_jail_vm_t vm = { .qemu = c->qemu, .run_dir = gw_rundir_path (self->dir),
                        .disk = s_disk_name (self), .files = { c->kernel, c->initrd, c->rootfs },
                        .mem_path = c->mem_path, .mem_share = c->mem_share,
                        .kvm = c->accel == GW_ACCEL_KVM, .mem_mib = c->mem_mib };
    int rc = 0;
    if (!self->priv) {
        self->jail = gw_jail_new (&c->jail, &vm, &rc, err, errlen);
        return rc;
    }
    //  The helper jails it: a template's RAM file must be ours before it
    //  hands it to the VM's group.
    int fd = vm.mem_share ? open (vm.mem_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600)
                          : -2;
    if (fd == -1) {
        snprintf (err, errlen, "vm: cannot create %s: %s", vm.mem_path, strerror (errno));
        return -errno;
    }
    if (fd >= 0)
        close (fd);
    self->priv_vm = vm;
    return 0;
}

//  A clone with free page reporting has the shim, jailed or not: without
//  it QEMU 7.2 would punch the pages its guest frees out of the RAM file
//  other VMs map (jailshim.c).
static int
s_shim_env (gw_vm_t *self, gw_vmspawn_t *sp, char *err, size_t errlen)
{
    const gw_vm_config_t *c = &self->cfg;
    if (!c->page_reporting || !c->mem_path || c->mem_share)
        return 0;
    const char *shim = gw_jail_shim ();
    if (!shim) {
        snprintf (err, errlen, "vm: cellvm-jailshim.so is missing beside the gateway; without "
                  "it this VM would punch holes in %s, which other sessions map (reinstall "
                  "cellvm: make install puts it beside cellvm-gateway)", c->mem_path);
        return -ENOENT;
    }
    if (!self->jail && !self->priv)
        sp->env = gw_vmspawn_env (shim, c->mem_path);
    return 0;
}

//  ms: the disk, the jail's preparation, and clone to exec.
static void
s_log_spawned (gw_vm_t *self, const int64_t t [3])
{
    char pid_text [24];
    snprintf (pid_text, sizeof pid_text, "%d\n", (int) self->pid);
    gw_rundir_write (self->dir, "qemu.pid", pid_text);  //  for the sweeper
    gw_jail_t *j = self->jail;
    const gw_priv_jail_t *pj = &self->priv_jail;
    const char *cgroup = self->priv ? pj->cgroup : j ? gw_jail_cgroup (j) : NULL;
    gw_log (GW_LOG_INFO, "vm.spawned", "pid=%d accel=%s mem_mib=%u vcpus=%u jail=%s uid=%u "
            "cgroup=%s disk_ms=%lld jail_ms=%lld spawn_ms=%lld dir=%s", (int) self->pid,
            gw_accel_name (self->cfg.accel), self->cfg.mem_mib, self->cfg.vcpus,
            self->priv ? pj->kind : j ? gw_jail_kind (j) : "none",
            self->priv ? pj->uid : j ? gw_jail_uid (j) : (unsigned) geteuid (),
            cgroup && *cgroup ? cgroup : "none", (long long) (t [1] - t [0]),
            (long long) (t [2] - t [1]), (long long) (self->started_ms - t [2]),
            gw_rundir_path (self->dir));
}

int
gw_vm_start (gw_vm_t *self, char *err, size_t errlen)
{
    assert (self && err);
    if (self->started)
        return -EALREADY;
    int64_t t [3] = { ch_clock_mono_ms () };
    gw_vmspawn_t sp;
    int rc = s_spawn_open (self, &sp, err, errlen);
    if (rc < 0 || (rc = s_create_disk (self, err, errlen)) < 0)
        goto fail;
    t [1] = ch_clock_mono_ms ();
    if ((rc = s_jail_new (self, err, errlen)) < 0 || (rc = s_shim_env (self, &sp, err, errlen)) < 0)
        goto fail;
    t [2] = ch_clock_mono_ms ();
    sp.argv = self->argv;
    sp.jail = self->jail;
    err [0] = '\0';
    rc = self->priv ? gw_priv_spawn (self->priv, &self->priv_vm, &sp, &self->pid, &self->pidfd,
                                     &self->priv_jail, err, errlen)
                    : gw_vmspawn (&sp, &self->pid, err, errlen);
    if (rc < 0) {
        char why [400];
        snprintf (why, sizeof why, "%s", err [0] ? err : strerror (-rc));
        snprintf (err, errlen, "vm: cannot start %s: %s", self->cfg.qemu, why);
        goto fail;
    }
    self->started = true;
    self->started_ms = ch_clock_mono_ms ();
    s_log_spawned (self, t);
fail:
    s_spawn_close (&sp);
    return rc;
}

//  ==========================================================================
//  Ports.

//  True once QEMU has exited; it stays a zombie for gw_vm_reap (WNOWAIT).
static bool
s_has_exited (gw_vm_t *self, pid_t pid)
{
    if (self->pidfd >= 0) {                     //  the helper's child: its pidfd tells
        struct pollfd pf = { self->pidfd, POLLIN, 0 };
        return poll (&pf, 1, 0) == 1;
    }
    siginfo_t si;
    memset (&si, 0, sizeof si);
    return waitid (P_PID, (id_t) pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid;
}

static int
s_connect_unix (const char *path, int *fd_p)
{
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    if (strlen (path) >= sizeof addr.sun_path)
        return -ENAMETOOLONG;
    strcpy (addr.sun_path, path);
    //  Non-blocking: a full backlog must not stall the reactor.
    int fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    if (connect (fd, (struct sockaddr *) &addr, sizeof addr) < 0) {
        int e = errno;
        close (fd);
        return -e;
    }
    fcntl (fd, F_SETFL, fcntl (fd, F_GETFL) & ~O_NONBLOCK);
    *fd_p = fd;
    return 0;
}

int
gw_vm_connect_port (gw_vm_t *self, const char *name, int *fd_p)
{
    assert (self && name && fd_p);
    const char *file = gw_vmargv_port_file (name);
    if (!file)
        return -EINVAL;
    if (!self->started)
        return -ECHILD;
    if (!self->pid || s_has_exited (self, self->pid))
        return -ESRCH;
    char path [PATH_MAX];
    gw_rundir_file (self->dir, file, path, sizeof path);
    int rc = s_connect_unix (path, fd_p);
    int64_t ms = ch_clock_mono_ms () - self->started_ms;
    if (rc == 0)
        gw_log (GW_LOG_INFO, "vm.port_connected", "pid=%d port=%s ms=%lld",
                (int) self->pid, name, (long long) ms);
    else if (rc == -ENOENT || rc == -ECONNREFUSED || rc == -EAGAIN)
        rc = ms > self->cfg.port_timeout_ms ? -ETIMEDOUT : -EAGAIN;
    return rc;
}

int
gw_vm_wait_port (gw_vm_t *self, const char *name, int timeout_ms, int *fd_p)
{
    int64_t deadline = ch_clock_mono_ms () + timeout_ms;
    int rc;
    while ((rc = gw_vm_connect_port (self, name, fd_p)) == -EAGAIN) {
        if (ch_clock_mono_ms () >= deadline)
            return -ETIMEDOUT;
        struct timespec ts = { 0, 5 * 1000 * 1000 };
        nanosleep (&ts, NULL);
    }
    return rc;
}

//  ==========================================================================
//  Ending.

int
gw_vm_pid (gw_vm_t *self)
{
    assert (self);
    return (int) self->pid;
}

int
gw_vm_kill (gw_vm_t *self)
{
    assert (self);
    if (!self->pid)
        return -ESRCH;
    if (self->priv)
        return gw_priv_kill (self->priv, self->pid);
    if (killpg (self->pid, SIGKILL) < 0 && kill (self->pid, SIGKILL) < 0)
        return -errno;
    return 0;
}

static void
s_log_exit (gw_vm_t *self, int status)
{
    char how [48];
    if (WIFSIGNALED (status))
        snprintf (how, sizeof how, "signal=%d", WTERMSIG (status));
    else
        snprintf (how, sizeof how, "exit_code=%d", WEXITSTATUS (status));
    gw_log (GW_LOG_INFO, "vm.exited", "pid=%d %s uptime_ms=%lld", (int) self->pid, how,
            (long long) (ch_clock_mono_ms () - self->started_ms));
}

//  The helper's child: it reaps it and tells why it died.
static int
s_reap_priv (gw_vm_t *self, bool block, int *wstatus)
{
    int status = 0;
    if (gw_priv_reap (self->priv, self->pid, block, &status, self->death,
                      sizeof self->death) == -EAGAIN)
        return -EAGAIN;
    s_log_exit (self, status);
    self->pid = 0;
    gw_readlease_destroy (&self->ram_lease);
    if (self->pidfd >= 0)
        close (self->pidfd);
    self->pidfd = -1;
    if (wstatus)
        *wstatus = status;
    return 0;
}

int
gw_vm_reap (gw_vm_t *self, int *wstatus)
{
    assert (self);
    if (!self->pid)
        return -ECHILD;
    int status = 0;
    if (self->priv)
        return s_reap_priv (self, false, wstatus);
    pid_t r = waitpid (self->pid, &status, WNOHANG);
    if (r == 0 || (r < 0 && errno == EINTR))
        return -EAGAIN;
    if (r < 0) {                                //  someone else reaped it (a bug)
        gw_log (GW_LOG_WARN, "vm.lost", "pid=%d reason=\"%s\"", (int) self->pid,
                strerror (errno));
        status = 0;
    }
    //  No killpg of the group now: the pid may already be reused, and QEMU
    //  under -sandbox spawn=deny has no children to leave behind.
    s_log_exit (self, status);
    if (self->jail)
        gw_jail_reaped (self->jail, status, self->death, sizeof self->death);
    self->pid = 0;
    gw_readlease_destroy (&self->ram_lease);
    if (wstatus)
        *wstatus = status;
    return 0;
}

void
gw_vm_destroy (gw_vm_t **self_p)
{
    assert (self_p);
    gw_vm_t *self = *self_p;
    if (!self)
        return;
    if (self->pid) {
        gw_vm_kill (self);
        int status = 0;
        if (self->priv)
            s_reap_priv (self, true, NULL);
        else {
            while (waitpid (self->pid, &status, 0) < 0 && errno == EINTR)
                ;
            s_log_exit (self, status);
        }
    }
    if (self->pidfd >= 0)
        close (self->pidfd);
    gw_readlease_destroy (&self->ram_lease);     //  QEMU is gone: a waiting writer proceeds
    gw_jail_destroy (&self->jail);
    gw_rundir_destroy (&self->dir);
    gw_vmargv_destroy (&self->argv);
    for (int i = 0; i < S_NSTR; i++)
        free (self->str [i]);
    free (self);
    *self_p = NULL;
}

const char *
gw_vm_death (gw_vm_t *self)
{
    assert (self);
    return self->ram_changed [0] ? self->ram_changed : self->death;
}

//  A writer waits for the RAM file: the guest must never read what it
//  writes, so QEMU goes first; the lease goes when QEMU is reaped.
static void
s_ram_changing (void *arg)
{
    gw_vm_t *self = arg;
    snprintf (self->ram_changed, sizeof self->ram_changed, "the RAM file this VM maps (%.120s) "
              "was opened for writing or truncated by another process; the gateway stopped the "
              "VM before it could read changed memory", self->cfg.mem_path);
    gw_log (GW_LOG_ERROR, "vm.ram_changed", "pid=%d path=%s", (int) self->pid,
            self->cfg.mem_path);
    gw_vm_kill (self);
}

void
gw_vm_hold_lease (gw_vm_t *self, gw_readlease_t **lease_p)
{
    assert (self && lease_p && *lease_p && !self->ram_lease);
    self->ram_lease = *lease_p;
    *lease_p = NULL;
    gw_readlease_on_break (self->ram_lease, s_ram_changing, self);
}

const char *
gw_vm_run_dir (gw_vm_t *self)
{
    assert (self);
    return gw_rundir_path (self->dir);
}

const char *
gw_vm_console_log (gw_vm_t *self)
{
    assert (self);
    return self->console_log;
}

gw_accel_t
gw_vm_accel (gw_vm_t *self)
{
    assert (self);
    return self->cfg.accel;
}

const char *
gw_vm_accel_reason (gw_vm_t *self)
{
    assert (self);
    return self->accel_reason;
}
