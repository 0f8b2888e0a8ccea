/*  gw_jail - the jailer every QEMU the gateway starts runs in (gw_jail.h). */
#include "jail/gw_jail.h"
#include "jail/gw_cgroup.h"
#include "disk/gw_chain.h"
#include "jail/gw_jail_mount.h"
#include "base/gw_log.h"
#include "base/gw_owndir.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define S_ROOT_DIR ".jail"                      //  in the run dir: the tmpfs's mount point
#define S_SLOTS "/run/cellvm-jail"              //  uid-<n>: a lock per uid in use
#define S_STACK (256 * 1024)
#define S_NS (CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET)
#define S_MIB (1024ull * 1024)
#define S_SHIM "cellvm-jailshim.so"             //  beside the gateway (jailshim.c)

typedef enum { S_NONE, S_ROOT, S_USERNS } s_kind_t;

struct _gw_jail_t {
    s_kind_t kind;
    unsigned uid, gid;
    int slot_fd;                                //  flock on S_SLOTS/uid-<uid>, -1: none
    int go [2];                                 //  the child waits on go [0]
    int last_cap;                               //  /proc/sys/kernel/cap_last_cap
    gw_jail_mount_t *mounts;
    gw_cgroup_t *cgroup;
    int procs [GW_CGROUP_PROCS_MAX];            //  its cgroup.procs files, -1: none
    unsigned mem_mib;
    char *env [3];                              //  QEMU's whole environment
    char *template_ram;                         //  a template's RAM, the VM's group's
    gw_jail_opts_t opts;                        //  its vet hook and file group
    bool tool;                                  //  qemu-img: the gateway's uid, no cgroup
};

int
gw_jail_mode_parse (const char *text)
{
    const char *names [] = { "off", "auto", "on" };
    for (int i = 0; text && i < 3; i++)
        if (strcmp (text, names [i]) == 0)
            return i;
    return -EINVAL;
}

//  ==========================================================================
//  Which jail this process can make: decided once, logged once.

//  Can we, unprivileged, make the namespaces a jail needs? A child tries.
static int
s_probe_userns (void)
{
    pid_t pid = fork ();
    if (pid == 0)
        _exit (unshare (CLONE_NEWUSER | S_NS) == 0 ? 0 : errno);
    int status = 0;
    while (pid > 0 && waitpid (pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (pid < 0)
        return -errno;
    return WIFEXITED (status) ? -WEXITSTATUS (status) : -EIO;
}

static bool
s_has_sys_admin (void)
{
    struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
    struct __user_cap_data_struct d [2];
    memset (d, 0, sizeof d);
    return syscall (SYS_capget, &h, d) == 0 && (d [0].effective & (1u << CAP_SYS_ADMIN));
}

static void
s_decide (s_kind_t *kind, char *why, size_t cap)
{
    if (geteuid () == 0 && s_has_sys_admin ()) {
        *kind = S_ROOT;
        snprintf (why, cap, "root: each VM gets a uid of its own");
        return;
    }
    int rc = s_probe_userns ();
    *kind = rc == 0 ? S_USERNS : S_NONE;
    if (rc == 0)
        snprintf (why, cap, "not root: the VM keeps uid %u inside a user namespace",
                  (unsigned) getuid ());
    else
        snprintf (why, cap, "not root, and this kernel refuses unprivileged user "
                  "namespaces (%s)", strerror (-rc));
}

//  The kind for mode, with its reason; -EPERM when mode is on and no jail
//  can be made. The first call per process logs the outcome.
static int
s_kind (int mode, s_kind_t *kind, char *err, size_t errlen)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static bool probed, logged;
    static s_kind_t found;
    static char why [200];
    pthread_mutex_lock (&lock);
    if (mode != GW_JAIL_OFF && !probed)         //  --jail off: nothing to probe
        s_decide (&found, why, sizeof why);
    probed = probed || mode != GW_JAIL_OFF;
    bool first = !logged;
    logged = true;
    pthread_mutex_unlock (&lock);
    *kind = mode == GW_JAIL_OFF ? S_NONE : found;
    const char *reason = mode == GW_JAIL_OFF ? "--jail off" : why;
    if (mode == GW_JAIL_ON && found == S_NONE) {
        snprintf (err, errlen, "--jail on: no jail can be made: %s", why);
        return -EPERM;
    }
    if (first && *kind == S_NONE)
        gw_log (mode == GW_JAIL_OFF ? GW_LOG_INFO : GW_LOG_WARN, "vm.unjailed",
                "reason=\"%s\"", reason);
    else if (first)
        gw_log (GW_LOG_INFO, "vm.jail", "kind=%s reason=\"%s\"",
                found == S_ROOT ? "root" : "userns", reason);
    return 0;
}

//  ==========================================================================
//  The uid: a slot of the range, held by a lock for the VM's life.

static int
s_take_slot (gw_jail_t *self, unsigned base)
{
    char why [128];                             //  rc says it in the caller's log line
    int rc = gw_owndir_make (S_SLOTS, 0, why, sizeof why);
    if (rc < 0)
        return rc;
    unsigned start = (unsigned) getpid () * 7919u % GW_JAIL_UID_COUNT;
    for (unsigned i = 0; i < GW_JAIL_UID_COUNT; i++) {
        unsigned uid = base + (start + i) % GW_JAIL_UID_COUNT;
        char path [64];
        snprintf (path, sizeof path, S_SLOTS "/uid-%u", uid);
        int fd = open (path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd >= 0 && flock (fd, LOCK_EX | LOCK_NB) == 0) {
            self->slot_fd = fd;
            self->uid = self->gid = uid;
            return 0;
        }
        if (fd >= 0)
            close (fd);
    }
    return -EAGAIN;
}

static void
s_choose_uid (gw_jail_t *self, const gw_jail_opts_t *opts)
{
    if (self->kind == S_USERNS) {
        self->uid = (unsigned) getuid ();
        self->gid = (unsigned) getgid ();
        return;
    }
    unsigned base = opts->uid_base ? opts->uid_base : GW_JAIL_UID_BASE;
    int rc = base + GW_JAIL_UID_COUNT < base ? -ERANGE : s_take_slot (self, base);
    if (rc < 0) {
        self->uid = self->gid = GW_JAIL_UID_FALLBACK;
        gw_log (GW_LOG_WARN, "vm.jail_uid_shared", "uid=%u reason=\"no uid of %u..%u: %s\"",
                self->uid, base, base + GW_JAIL_UID_COUNT - 1, strerror (-rc));
    }
}

//  ==========================================================================
//  What the VM opens: visible in its root, and (as root) readable by its uid.

static int
s_vet (const gw_jail_t *self, const char *path, const struct stat *st, gw_jail_vet_t how)
{
    return self->opts.vet ? self->opts.vet (self->opts.vet_arg, path, st, how) : 0;
}

//  Readable by others too (writable only when write): the file sits under
//  a 0700 directory of ours, so only a jail that mounts it gains the right.
//  Changed through a descriptor, after vet saw what it names.
static int
s_let_read (const gw_jail_t *self, const char *path, bool write)
{
    struct stat st;
    int rc = s_vet (self, path, NULL, GW_JAIL_VET_READ);
    int fd = rc < 0 ? -1 : open (path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (rc == 0 && (fd < 0 || fstat (fd, &st) < 0))
        rc = -errno;
    mode_t mode = rc < 0 ? 0 : ((st.st_mode & 07777) | S_IROTH | (write ? S_IWOTH : 0))
                             & (write ? 07777 : ~(mode_t) S_IWOTH);
    if (rc == 0 && S_ISREG (st.st_mode) && mode != (st.st_mode & 07777)
    &&  (rc = s_vet (self, path, &st, GW_JAIL_VET_CHMOD)) == 0 && fchmod (fd, mode) < 0)
        rc = -errno;
    if (fd >= 0)
        close (fd);
    return rc;
}

//  One file for the VM's group, mode mode: through a descriptor, vetted.
static int
s_give (const gw_jail_t *self, const char *path, int flags, mode_t mode)
{
    struct stat st;
    int rc = 0, fd = open (path, flags | O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 || fstat (fd, &st) < 0)
        rc = -errno;
    if (rc == 0 && (rc = s_vet (self, path, &st, GW_JAIL_VET_OWN)) == 0
    &&  (fchown (fd, (uid_t) -1, self->gid) < 0 || fchmod (fd, mode) < 0))
        rc = -errno;
    if (fd >= 0)
        close (fd);
    return rc;
}

//  The run dir and the top layer: group-writable for the VM's gid; the
//  sticky bit keeps the VM from replacing files it does not own.
static int
s_grant_run_dir (gw_jail_t *self, const gw_jail_vm_t *vm)
{
    char top [PATH_MAX];
    snprintf (top, sizeof top, "%s/%s", vm->run_dir, vm->disk);
    int rc = s_give (self, vm->run_dir, O_DIRECTORY, 01770);
    return rc < 0 ? rc : s_give (self, top, 0, 0660);
}

const char *
gw_jail_shim (void)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static char path [PATH_MAX];
    static bool looked, found;
    pthread_mutex_lock (&lock);
    if (!looked) {
        ssize_t n = readlink ("/proc/self/exe", path, sizeof path - sizeof S_SHIM - 1);
        char *slash = n > 0 ? (path [n] = '\0', strrchr (path, '/')) : NULL;
        if (slash)
            strcpy (slash + 1, S_SHIM);
        found = slash && access (path, R_OK) == 0;
        looked = true;
        if (!found)
            gw_log (GW_LOG_WARN, "vm.jail_no_shim", "path=%s reason=\"without it a clone's "
                    "QEMU needs its template's RAM file writable (docs/security.md)\"", path);
    }
    pthread_mutex_unlock (&lock);
    return found ? path : NULL;
}

static char *
s_env (const char *name, const char *value)
{
    char *text = NULL;
    if (asprintf (&text, "%s=%s", name, value) < 0)
        abort ();
    return text;
}

//  A template's RAM (QEMU writes it): made here, the VM's group's. A
//  clone's: read-only, through the shim; writable only without it.
static int
s_plan_mem (gw_jail_t *self, const gw_jail_vm_t *vm)
{
    int rc = 0, fd = -1;
    bool root = self->kind == S_ROOT;
    if (vm->mem_share) {
        struct stat st;
        fd = root ? open (vm->mem_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0660) : -2;
        if (fd == -1 || (fd >= 0 && fstat (fd, &st) < 0))
            rc = -errno;
        if (rc == 0 && fd >= 0 && (rc = s_vet (self, vm->mem_path, &st, GW_JAIL_VET_OWN)) == 0
        &&  (fchown (fd, (uid_t) -1, self->gid) < 0 || fchmod (fd, 0660) < 0))
            rc = -errno;
        if (fd >= 0)
            close (fd);
        if (root && rc == 0 && !(self->template_ram = strdup (vm->mem_path)))
            abort ();
        return rc < 0 ? rc : gw_jail_mount_add (self->mounts, vm->mem_path, false, false);
    }
    const char *shim = gw_jail_shim ();
    if (shim && (rc = gw_jail_mount_add (self->mounts, shim, false, true)) == 0) {
        self->env [0] = s_env ("LD_PRELOAD", shim);
        self->env [1] = s_env ("CELLVM_JAIL_RO_RAM", vm->mem_path);
    }
    if (rc == 0 && root)
        rc = s_let_read (self, vm->mem_path, !shim);
    return rc < 0 ? rc : gw_jail_mount_add (self->mounts, vm->mem_path, false, shim != NULL);
}

//  The disk's layers below the top, from the qcow2 headers: each must be
//  visible (at its own path) and readable.
static int
s_plan_chain (gw_jail_t *self, const gw_jail_vm_t *vm)
{
    char path [PATH_MAX], name [PATH_MAX];
    snprintf (path, sizeof path, "%s/%s", vm->run_dir, vm->disk);
    for (int depth = 0; depth < GW_CHAIN_MAX; depth++) {
        int rc = gw_chain_backing (path, name, sizeof name);
        if (rc < 0 || !name [0])
            return rc == -EBADMSG && depth == 0 ? 0 : rc;  //  a raw top: no chain
        char next [PATH_MAX * 2];
        if (name [0] == '/')
            snprintf (next, sizeof next, "%s", name);
        else
            snprintf (next, sizeof next, "%.*s/%s", (int) (strrchr (path, '/') - path), path,
                      name);
        if (strlen (next) >= sizeof path)
            return -ENAMETOOLONG;
        memcpy (path, next, strlen (next) + 1);
        if ((rc = gw_jail_mount_add (self->mounts, path, false, true)) < 0
        ||  (self->kind == S_ROOT && !self->tool && (rc = s_let_read (self, path, false)) < 0))
            return rc;
    }
    return -ELOOP;
}

//  The shared libraries' directories and QEMU's data: the same for every
//  VM of this process, so found once per binary (QEMU and qemu-img).
static char **
s_libs (const char *exe)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static char **libs [2];
    static char exes [2][PATH_MAX];
    pthread_mutex_lock (&lock);
    int i = strcmp (exes [0], exe) == 0 ? 0 : strcmp (exes [1], exe) == 0 ? 1 : -1;
    if (i < 0) {
        //  A third binary in one process (never, in practice): the old list
        //  stays allocated, since another thread may still read it.
        i = exes [0][0] ? 1 : 0;
        libs [i] = gw_jail_mount_libs (exe);
        snprintf (exes [i], sizeof exes [i], "%s", exe);
    }
    char **found = libs [i];
    pthread_mutex_unlock (&lock);
    return found;
}

//  /dev/kvm: as root a node of its own for the VM's uid (which is not in
//  the kvm group), as the jail's Firecracker does; in a user namespace the
//  gateway's own access, bound.
static int
s_plan_kvm (gw_jail_t *self)
{
    struct stat st;
    if (self->kind != S_ROOT)
        return gw_jail_mount_add (self->mounts, "/dev/kvm", false, false);
    if (stat ("/dev/kvm", &st) < 0)
        return -errno;
    return gw_jail_mount_add_node (self->mounts, "/dev/kvm", st.st_rdev, self->uid, self->gid);
}

static int
s_plan_system (gw_jail_t *self, const gw_jail_vm_t *vm)
{
    char **libs = s_libs (vm->qemu), real [PATH_MAX], share [PATH_MAX];
    if (!libs)
        return -ENOEXEC;
    //  Directory binds first: the libraries' dirs, QEMU's data, the run dir.
    for (size_t i = 0; libs [i]; i++)
        if (realpath (libs [i], real) && strrchr (real, '/') != real) {
            *strrchr (real, '/') = '\0';
            gw_jail_mount_add (self->mounts, real, true, true);
        }
    snprintf (share, sizeof share, "%s", vm->qemu);     //  <prefix>/bin/qemu: <prefix>/share/qemu
    char *bin = strstr (share, "/bin/");
    if (bin)
        snprintf (bin, sizeof share - (size_t) (bin - share), "/share/qemu");
    const char *data [] = { bin ? share : "/usr/share/qemu", "/usr/share/qemu",
                            "/usr/share/seabios" };
    for (size_t i = 0; i < 3; i++)
        if (access (data [i], F_OK) == 0)
            gw_jail_mount_add (self->mounts, data [i], true, true);
    int rc = gw_jail_mount_add (self->mounts, vm->run_dir, true, false);
    for (size_t i = 0; rc == 0 && libs [i]; i++)
        rc = gw_jail_mount_add (self->mounts, libs [i], false, true);
    if (rc == 0)
        rc = gw_jail_mount_add (self->mounts, vm->qemu, false, true);
    const char *devs [] = { "/dev/null", "/dev/urandom" };
    for (size_t i = 0; rc == 0 && i < 2; i++)
        rc = gw_jail_mount_add (self->mounts, devs [i], false, false);
    return rc == 0 && vm->kvm ? s_plan_kvm (self) : rc;
}

static int
s_plan (gw_jail_t *self, const gw_jail_vm_t *vm, char *err, size_t errlen)
{
    int rc = s_plan_system (self, vm);
    const char *what = "QEMU and its libraries";
    for (size_t i = 0; rc == 0 && i < 3; i++)
        if ((rc = gw_jail_mount_add (self->mounts, what = vm->files [i], false, true)) == 0
        &&  self->kind == S_ROOT)
            rc = s_let_read (self, vm->files [i], false);
    if (rc == 0 && vm->mem_path && (rc = s_plan_mem (self, vm)) < 0)
        what = vm->mem_path;
    if (rc == 0 && (rc = s_plan_chain (self, vm)) < 0)
        what = "the disk's backing files";
    if (rc == 0 && self->kind == S_ROOT && (rc = s_grant_run_dir (self, vm)) < 0)
        what = vm->run_dir;
    if (rc < 0)
        snprintf (err, errlen, "jail: %s: %s", what, strerror (-rc));
    return rc;
}

//  ==========================================================================
//  The jail of one VM.

//  --disk-bps, --disk-iops: on the block device under the run dir, where
//  there is one (said once otherwise).
static void
s_io_limits (gw_cgroup_limits_t *lim, const gw_jail_opts_t *opts, const gw_jail_vm_t *vm)
{
    static bool logged;
    if (!opts->disk_bps && !opts->disk_iops)
        return;
    int rc = gw_cgroup_block_device (vm->run_dir, lim->io_dev, sizeof lim->io_dev);
    lim->io_bps = opts->disk_bps;
    lim->io_iops = opts->disk_iops;
    if (rc < 0 && !logged)
        gw_log (GW_LOG_WARN, "vm.no_io_limit", "run_dir=%s reason=\"%s\"", vm->run_dir,
                rc == -ENODEV ? "its filesystem has no block device to limit (tmpfs, overlay "
                "or network)" : strerror (-rc));
    logged = logged || rc < 0;
    if (rc < 0)
        lim->io_dev [0] = '\0';
}

static void
s_cgroup (gw_jail_t *self, const gw_jail_opts_t *opts, const gw_jail_vm_t *vm)
{
    static bool logged;
    long pages = sysconf (_SC_PHYS_PAGES), page = sysconf (_SC_PAGESIZE);
    gw_cgroup_limits_t lim = {
        .mem_bytes = gw_cgroup_vm_memory (vm->mem_mib, !vm->kvm, pages > 0 && page > 0
                                          ? (uint64_t) pages * (uint64_t) page : 0),
        .pids = GW_JAIL_PIDS_MAX, .cpu_weight = 100, .cpus = opts->cpus
    };
    char err [200] = "";
    s_io_limits (&lim, opts, vm);
    self->cgroup = gw_cgroup_new (&lim, err, sizeof err);
    if (self->cgroup)
        gw_cgroup_procs_fds (self->cgroup, self->procs);
    if (!self->cgroup && !logged)               //  once: every VM of this process is the same
        gw_log (self->kind == S_ROOT ? GW_LOG_WARN : GW_LOG_INFO, "vm.no_cgroup",
                "reason=\"%s\"", err);
    logged = logged || !self->cgroup;
}

static int
s_last_cap (void)
{
    char buf [16] = "";
    int fd = open ("/proc/sys/kernel/cap_last_cap", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read (fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0)
        close (fd);
    int last = n > 0 ? atoi (buf) : 0;
    return last > 0 && last < 64 ? last : 63;
}

//  The parts every jail has: its kind, its root's mount point, its go pipe.
static gw_jail_t *
s_alloc (const gw_jail_opts_t *opts, const char *run_dir, int *rc_p, char *err, size_t errlen)
{
    s_kind_t kind;
    *rc_p = s_kind (opts->mode, &kind, err, errlen);
    if (*rc_p < 0 || kind == S_NONE)
        return NULL;
    gw_jail_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    *self = (gw_jail_t) { .kind = kind, .slot_fd = -1, .go = { -1, -1 },
                          .last_cap = s_last_cap (), .opts = *opts };
    for (int i = 0; i < GW_CGROUP_PROCS_MAX; i++)
        self->procs [i] = -1;
    char root [PATH_MAX];
    snprintf (root, sizeof root, "%s/" S_ROOT_DIR, run_dir);
    if ((mkdir (root, 0700) < 0 && errno != EEXIST) || pipe2 (self->go, O_CLOEXEC) < 0
    ||  (opts->file_uid && lchown (root, opts->file_uid, opts->file_gid) < 0)) {
        *rc_p = -errno;
        snprintf (err, errlen, "jail: %s: %s", root, strerror (errno));
        gw_jail_destroy (&self);
        return NULL;
    }
    self->mounts = gw_jail_mount_new (root);
    return self;
}

gw_jail_t *
gw_jail_new (const gw_jail_opts_t *opts, const gw_jail_vm_t *vm, int *rc_p, char *err,
             size_t errlen)
{
    assert (opts && vm && rc_p && err);
    gw_jail_t *self = s_alloc (opts, vm->run_dir, rc_p, err, errlen);
    if (!self)
        return NULL;
    self->mem_mib = vm->mem_mib;
    s_choose_uid (self, opts);
    if ((*rc_p = s_plan (self, vm, err, errlen)) < 0)
        gw_jail_destroy (&self);
    else
        s_cgroup (self, opts, vm);
    return self;
}

gw_jail_t *
gw_jail_tool_new (const gw_jail_opts_t *opts, const char *exe, const char *run_dir,
                  const char *disk, const char *rw_dir, int *rc_p,
                  char *err, size_t errlen)
{
    assert (opts && exe && run_dir && rc_p && err);
    gw_jail_t *self = s_alloc (opts, run_dir, rc_p, err, errlen);
    if (!self)
        return NULL;
    self->tool = true;
    self->uid = (unsigned) geteuid ();          //  as root: root without capabilities
    self->gid = (unsigned) getegid ();
    gw_jail_vm_t vm = { .qemu = exe, .run_dir = run_dir, .disk = disk };
    int rc = s_plan_system (self, &vm);
    if (rc == 0 && rw_dir)
        rc = gw_jail_mount_add (self->mounts, rw_dir, true, false);
    if (rc == 0 && disk)
        rc = s_plan_chain (self, &vm);
    if ((*rc_p = rc) < 0) {
        snprintf (err, errlen, "jail: %s's files: %s", exe, strerror (-rc));
        gw_jail_destroy (&self);
    }
    return self;
}

void
gw_jail_destroy (gw_jail_t **self_p)
{
    assert (self_p);
    gw_jail_t *self = *self_p;
    if (!self)
        return;
    gw_cgroup_destroy (&self->cgroup);
    gw_jail_mount_destroy (&self->mounts);
    //  A built template's RAM is the gateway's again: a later VM with this
    //  gid must not write what every clone maps.
    if (self->template_ram && (chown (self->template_ram, (uid_t) -1, self->opts.file_gid
                                                             ? self->opts.file_gid : getegid ()) < 0
                           ||  chmod (self->template_ram, 0644) < 0) && errno != ENOENT)
        gw_log (GW_LOG_WARN, "vm.jail_ram_left", "path=%s reason=\"%s\"", self->template_ram,
                strerror (errno));
    for (int i = 0; i < 2; i++)
        if (self->go [i] >= 0)
            close (self->go [i]);
    for (int i = 0; i < GW_CGROUP_PROCS_MAX; i++)
        if (self->procs [i] >= 0)
            close (self->procs [i]);
    if (self->slot_fd >= 0)
        close (self->slot_fd);
    for (int i = 0; i < 3; i++)
        free (self->env [i]);
    free (self->template_ram);
    free (self);
    *self_p = NULL;
}

//  ==========================================================================
//  Parent side of the spawn.

pid_t
gw_jail_clone (gw_jail_t *self, int (*fn) (void *), void *arg)
{
    assert (self && fn);
    void *stack = mmap (NULL, S_STACK, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED)
        return -errno;
    int flags = S_NS | SIGCHLD | (self->kind == S_USERNS ? CLONE_NEWUSER : 0);
    pid_t pid = clone (fn, (char *) stack + S_STACK, flags, arg);
    int e = errno;
    munmap (stack, S_STACK);                    //  the child has its own copy
    close (self->go [0]);
    self->go [0] = -1;
    return pid < 0 ? -e : pid;
}

static int
s_write_file (pid_t pid, const char *name, const char *text)
{
    char path [64];
    snprintf (path, sizeof path, "/proc/%d/%s", (int) pid, name);
    int fd = open (path, O_WRONLY | O_CLOEXEC), rc = 0;
    if (fd < 0 || write (fd, text, strlen (text)) < 0)
        rc = -errno;
    if (fd >= 0)
        close (fd);
    return rc;
}

int
gw_jail_release (gw_jail_t *self, pid_t pid, char *err, size_t errlen)
{
    assert (self && err);
    char map [64];
    int rc = 0;
    const char *what = "user namespace maps";
    if (self->kind == S_USERNS) {               //  the same ids inside: nothing else maps
        snprintf (map, sizeof map, "%u %u 1\n", self->uid, self->uid);
        rc = s_write_file (pid, "setgroups", "deny");
        rc = rc ? rc : s_write_file (pid, "uid_map", map);
        snprintf (map, sizeof map, "%u %u 1\n", self->gid, self->gid);
        rc = rc ? rc : s_write_file (pid, "gid_map", map);
    }
    if (rc == 0 && write (self->go [1], "g", 1) != 1)
        rc = -errno;
    if (rc < 0)
        snprintf (err, errlen, "jail: %s: %s", what, strerror (-rc));
    return rc;
}

//  ==========================================================================
//  Child side: syscalls only, no allocation, no locks.

//  No capabilities now or ever: bounding set, ambient, effective, permitted.
static int
s_drop_caps (const gw_jail_t *self)
{
    for (int cap = 0; cap <= self->last_cap; cap++)
        if (prctl (PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
            return -errno;
    if (self->kind == S_ROOT
    &&  (syscall (SYS_setgroups, 0, NULL) < 0
    ||   syscall (SYS_setresgid, self->gid, self->gid, self->gid) < 0
    ||   syscall (SYS_setresuid, self->uid, self->uid, self->uid) < 0))
        return -errno;
    struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
    struct __user_cap_data_struct d [2];
    memset (d, 0, sizeof d);
    if (syscall (SYS_capset, &h, d) < 0
    ||  prctl (PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0
    ||  prctl (PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return -errno;
    return 0;
}

int
gw_jail_enter (const gw_jail_t *self, int *step)
{
    char c;
    ssize_t n;
    *step = -2;
    close (self->go [1]);
    do
        n = read (self->go [0], &c, 1);
    while (n < 0 && errno == EINTR);
    if (n != 1)
        return -EPIPE;                          //  the gateway is gone
    return gw_jail_mount_apply (self->mounts, step);
}

int
gw_jail_finish (const gw_jail_t *self, int *step)
{
    char c;
    int rc;
    //  Its cgroup, before QEMU runs: all it ever uses is counted. The first
    //  move after a while waits out an RCU grace period (~15 ms), which is
    //  why the child does it, after the gateway has gone on.
    *step = -5;
    for (int i = 0; i < GW_CGROUP_PROCS_MAX; i++)
        if (self->procs [i] >= 0 && write (self->procs [i], "0", 1) != 1)
            return -errno;
    *step = -3;
    if ((rc = s_drop_caps (self)) < 0)
        return rc;
    //  A uid change cleared the death signal: set it again, then make
    //  sure the gateway did not die in between (its lifeline is open).
    *step = -4;
    if (prctl (PR_SET_PDEATHSIG, SIGKILL) < 0 || fcntl (self->go [0], F_SETFL, O_NONBLOCK) < 0)
        return -errno;
    if (read (self->go [0], &c, 1) == 0)
        return -EPIPE;
    return 0;
}

const char *
gw_jail_step_name (const gw_jail_t *self, int step, char *buf, size_t cap)
{
    assert (self && buf);
    size_t n = gw_jail_mount_size (self->mounts);
    if (step >= 0 && (size_t) step < n)
        snprintf (buf, cap, "mounting %s", gw_jail_mount_entry (self->mounts, step)->path);
    else
        snprintf (buf, cap, "%s", step == -1 ? "mounting its root tmpfs"
                  : step == -3 ? "dropping privileges" : step == -4 ? "re-arming its death signal"
                  : step == -5 ? "joining its cgroup"
                  : (size_t) step == n ? "pivot_root" : "waiting for the gateway");
    return buf;
}

//  ==========================================================================
//  After QEMU.

bool
gw_jail_reaped (gw_jail_t *self, int wstatus, char *why, size_t cap)
{
    assert (self && why);
    bool oom = self->cgroup && WIFSIGNALED (wstatus) && WTERMSIG (wstatus) == SIGKILL
            && gw_cgroup_oom_kills (self->cgroup) > 0;
    if (oom) {
        uint64_t limit = gw_cgroup_mem_limit (self->cgroup) / S_MIB;
        snprintf (why, cap, "the VM went over its host memory limit of %llu MiB (guest RAM "
                  "%u MiB plus QEMU's own), and the host's OOM killer stopped it",
                  (unsigned long long) limit, self->mem_mib);
        gw_log (GW_LOG_ERROR, "vm.host_oom", "limit_mib=%llu cgroup=%s",
                (unsigned long long) limit, gw_cgroup_path (self->cgroup));
    }
    gw_cgroup_destroy (&self->cgroup);
    return oom;
}

char *const *
gw_jail_env (const gw_jail_t *self)
{
    return self->env;
}

const char *
gw_jail_kind (const gw_jail_t *self)
{
    assert (self);
    return self->kind == S_ROOT ? "root" : "userns";
}

unsigned
gw_jail_uid (const gw_jail_t *self)
{
    assert (self);
    return self->uid;
}

const char *
gw_jail_cgroup (const gw_jail_t *self)
{
    assert (self);
    return self->cgroup ? gw_cgroup_path (self->cgroup) : NULL;
}
