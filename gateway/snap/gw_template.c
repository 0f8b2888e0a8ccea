/*  gw_template - snapshot templates (see gw_template.h, docs/snapshots.md). */
#include "snap/gw_template.h"
#include "ch_sig.h"
#include "ch_util.h"
#include "guest/gw_drive.h"
#include "base/gw_log.h"
#include "base/gw_fs.h"
#include "snap/gw_snapshot.h"
#include "snap/gw_tplmeta.h"
#include "ch_clock.h"
#include "ch_child.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define S_BOOT_MS 300000            //  a cold boot to the warm-up cell's idle
#define S_SAVE_MS 60000             //  saving the device state
//  The warm-up lives in the kernel (kernel/py/cellvm_shell.py, warm_up): the
//  usual imports, then once each what a user's first error, Tab, inspection,
//  `?`, chart and DataFrame would cost under TCG. Being in the kernel's files,
//  hence in the image, a change to it changes the template key. It leaves no
//  name, history or count, and ends outside /workspace, which init then
//  unmounts: a clone mounts whichever disk it was given (docs/sessions.md).
#define S_WARMUP "__import__('cellvm_shell').warm_up()\n" \
                 "__import__('os').chdir('/')\n"

struct _gw_template_t {
    char path [PATH_MAX];           //  BASE/<key>
    char ram [PATH_MAX + 8], state [PATH_MAX + 8], disk [PATH_MAX + 24];
    char layer [PATH_MAX + 16];     //  a pristine clone layer over disk, "" if none
    unsigned tsc_khz;               //  the template's, so the clone's -append matches
};

int
gw_template_default_dir (char *out, size_t cap)
{
    const char *env = getenv ("CELLVM_TEMPLATE_DIR");
    int n = env && env [0] == '/' ? snprintf (out, cap, "%s", env)
          : snprintf (out, cap, "/var/tmp/cellvm-%u/templates", (unsigned) getuid ());
    return n < 0 || (size_t) n >= cap ? -ENAMETOOLONG : 0;
}

//  ==========================================================================
//  Opening and checking.

static void
s_set_paths (gw_template_t *self, const char *dir)
{
    snprintf (self->path, sizeof self->path, "%s", dir);
    snprintf (self->ram, sizeof self->ram, "%s/" GW_TPL_RAM, dir);
    snprintf (self->state, sizeof self->state, "%s/" GW_TPL_STATE, dir);
    snprintf (self->disk, sizeof self->disk, "%s/" GW_TPL_DISK, dir);
    snprintf (self->layer, sizeof self->layer, "%s/" GW_TPL_LAYER, dir);
}

//  Keep self->layer only if it looks like a qcow2 (else qemu-img makes each
//  clone's layer, as before there were seeds).
static void
s_check_layer (gw_template_t *self)
{
    char magic [4] = "";
    int fd = open (self->layer, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    bool ok = fd >= 0 && read (fd, magic, 4) == 4 && memcmp (magic, "QFI\xfb", 4) == 0;
    if (fd >= 0)
        close (fd);
    if (!ok && fd >= 0)
        gw_log (GW_LOG_WARN, "template.layer_ignored", "path=%s reason=\"not a qcow2\"",
                self->layer);
    if (!ok)
        self->layer [0] = '\0';
}

//  Why the template in self->path cannot be used, or NULL when it can.
static const char *
s_check (gw_template_t *self, const gw_vm_config_t *cfg, const char *key)
{
    gw_tplmeta_t *meta = gw_tplmeta_load (self->path);
    const char *why = gw_tplmeta_check (meta, self->path, cfg, key);
    self->tsc_khz = gw_tplmeta_tsc_khz (meta);
    gw_tplmeta_destroy (&meta);
    return why;
}

gw_template_t *
gw_template_open (const char *base, const gw_vm_config_t *cfg, int *rc_p, char *err,
                  size_t errlen)
{
    assert (base && cfg && rc_p);
    char key [GW_TPLMETA_KEY_LEN + 1], dir [PATH_MAX];
    gw_template_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    *rc_p = gw_tplmeta_key (cfg, key, sizeof key, err, errlen);
    if (*rc_p < 0)
        goto fail;
    snprintf (dir, sizeof dir, "%s/%s", base, key);
    s_set_paths (self, dir);
    if (access (dir, F_OK) < 0) {
        *rc_p = -ENOENT;
        snprintf (err, errlen, "no template %s yet", dir);
        goto fail;
    }
    const char *why = s_check (self, cfg, key);
    if (why) {
        *rc_p = -ESTALE;
        snprintf (err, errlen, "template %s is corrupt (%s); deleted", dir, why);
        gw_log (GW_LOG_WARN, "template.corrupt", "dir=%s reason=\"%s\"", dir, why);
        gw_fs_remove_tree (dir);
        goto fail;
    }
    s_check_layer (self);
    char meta [PATH_MAX + 16];
    snprintf (meta, sizeof meta, "%s/" GW_TPL_META, dir);
    utimensat (AT_FDCWD, meta, NULL, 0);        //  "last used", for gw_tplsweep
    *rc_p = 0;
    return self;
fail:
    free (self);
    return NULL;
}

void
gw_template_destroy (gw_template_t **self_p)
{
    assert (self_p);
    free (*self_p);
    *self_p = NULL;
}

const char *
gw_template_path (const gw_template_t *self)
{
    assert (self);
    return self->path;
}

//  ==========================================================================
//  Building.

//  Boot vm to a warmed-up kernel through drive, which the caller keeps open
//  until the state is saved (connected through the snapshot, as in the
//  tested recipe).
static int
s_boot_warm (gw_vm_t *vm, gw_drive_t *drive, char *err, size_t errlen)
{
    int rc = gw_drive_init_hello (drive, NULL, NULL, 0, NULL, err, errlen);
    if (rc == 0)
        rc = gw_drive_kernel_hello (drive, NULL, err, errlen);
    if (rc < 0) {
        char why [400];
        snprintf (why, sizeof why, "%s", err);
        snprintf (err, errlen, "template boot: %s; see %s", why, gw_vm_console_log (vm));
        return rc;
    }
    gw_log (GW_LOG_INFO, "template.kernel_ready", "pid=%d", gw_vm_pid (vm));
    rc = gw_drive_silent_cell (drive, S_WARMUP, err, errlen);
    if (rc == 0)
        rc = gw_drive_init_request (drive, "workspace_detach_request", NULL, NULL, err, errlen);
    return rc;
}

//  Stop the template, save its state into dir, copy its disk there.
static int
s_save (gw_vm_t *vm, const char *dir, char *err, size_t errlen)
{
    char path [PATH_MAX + 32], disk [PATH_MAX + 32];
    snprintf (path, sizeof path, "%s/" GW_TPL_STATE, dir);
    int rc = gw_snapshot_save (vm, path, S_SAVE_MS, err, errlen);
    snprintf (path, sizeof path, "%s/workspace.qcow2", gw_vm_run_dir (vm));
    snprintf (disk, sizeof disk, "%s/" GW_TPL_DISK, dir);
    if (rc == 0 && (rc = gw_fs_copy (path, disk, true)) < 0)
        snprintf (err, errlen, "copy %s: %s", path, strerror (-rc));
    return rc;
}

//  A failed build's guest console, last lines, into the log: the VM and its
//  run dir are gone right after, and the console says why.
static void
s_log_console (gw_vm_t *vm)
{
    char buf [4097];
    int fd = open (gw_vm_console_log (vm), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    off_t end = fd >= 0 ? lseek (fd, 0, SEEK_END) : -1;
    ssize_t n = end >= 0 ? pread (fd, buf, sizeof buf - 1, end > 4096 ? end - 4096 : 0) : -1;
    if (fd >= 0)
        close (fd);
    buf [n > 0 ? n : 0] = '\0';
    char *line = end > 4096 ? strchr (buf, '\n') : buf;     //  skip a cut first line
    for (char *next; line && *line; line = next) {
        next = strchr (line, '\n');
        if (next)
            *next++ = '\0';
        for (char *c = line; *c; c++)
            if (*c == '"' || (unsigned char) *c < 0x20)
                *c = '\'';
        if (*line)
            gw_log (GW_LOG_WARN, "template.console", "line=\"%.300s\"", line);
    }
}

//  The template's VM config: RAM in tmp/ram, shared, so the clones can map it.
static void
s_template_config (const gw_vm_config_t *cfg, const char *ram, gw_vm_config_t *c)
{
    *c = *cfg;
    c->mem_path = ram;
    c->mem_share = true;
    c->incoming_defer = false;
    c->disk_backing = NULL;
    c->disk_seed = NULL;
}

//  Boot, warm up and save into tmp, which becomes dir.
static int
s_build_into (const char *tmp, const char *dir, const char *key, const gw_vm_config_t *cfg,
              char *err, size_t errlen)
{
    char layer [PATH_MAX + 32], backing [PATH_MAX + 24], ram [PATH_MAX + 32];
    snprintf (layer, sizeof layer, "%s/" GW_TPL_LAYER, tmp);
    snprintf (backing, sizeof backing, "%s/" GW_TPL_DISK, dir);
    snprintf (ram, sizeof ram, "%s/" GW_TPL_RAM, tmp);
    int64_t t0 = ch_clock_mono_ms ();
    gw_vm_config_t c;
    s_template_config (cfg, ram, &c);
    gw_vm_t *vm = gw_vm_new (&c, err, errlen);
    gw_drive_t *drive = gw_drive_new (vm, S_BOOT_MS);
    int rc = vm ? gw_vm_start (vm, err, errlen) : -EIO;
    if (rc == 0)
        rc = s_boot_warm (vm, drive, err, errlen);
    if (rc == 0)
        rc = s_save (vm, tmp, err, errlen);
    if (rc == 0)
        rc = gw_vm_make_layer (vm, layer, backing, err, errlen);
    if (rc == 0 && (rc = gw_tplmeta_write (tmp, key, &c, c.tsc_khz ? c.tsc_khz
                                           : gw_accel_tsc_khz (), ch_clock_mono_ms () - t0)) < 0)
        snprintf (err, errlen, "writing %s/" GW_TPL_META ": %s", tmp, strerror (-rc));
    if (rc < 0 && vm)
        s_log_console (vm);
    gw_drive_destroy (&drive);
    gw_vm_destroy (&vm);
    return rc;
}

//  Hold dir's build lock: a locked fd, or -EBUSY while another process
//  builds it, or -errno; the reason in err.
static int
s_lock (const char *dir, char *err, size_t errlen)
{
    char lock [PATH_MAX + 8];
    snprintf (lock, sizeof lock, "%s.lock", dir);
    int fd = open (lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    int rc = fd < 0 ? -errno : flock (fd, LOCK_EX | LOCK_NB) < 0 ? -EBUSY : fd;
    if (rc < 0)
        snprintf (err, errlen, "template %s: %s", dir, rc == -EBUSY ? "another process is "
                  "building it" : strerror (-rc));
    if (rc < 0 && fd >= 0)
        close (fd);
    return rc;
}

int
gw_template_build (const char *base, const gw_vm_config_t *cfg, char *err, size_t errlen)
{
    assert (base && cfg);
    char key [GW_TPLMETA_KEY_LEN + 1], dir [PATH_MAX], tmp [PATH_MAX + 8];
    int lock_fd = -1, rc = gw_tplmeta_key (cfg, key, sizeof key, err, errlen);
    if (rc < 0 || (rc = ch_mkdir_p (base, 0700)) < 0)
        goto fail;
    snprintf (dir, sizeof dir, "%s/%s", base, key);
    snprintf (tmp, sizeof tmp, "%s.tmp", dir);
    if ((rc = lock_fd = s_lock (dir, err, errlen)) < 0)
        goto fail;
    gw_log (GW_LOG_INFO, "template.building", "dir=%s", dir);
    int64_t t0 = ch_clock_mono_ms ();
    gw_fs_remove_tree (tmp);                            //  a build that died half way
    if ((rc = ch_mkdir_p (tmp, 0700)) < 0
    ||  (rc = s_build_into (tmp, dir, key, cfg, err, errlen)) < 0)
        goto fail;
    gw_fs_remove_tree (dir);
    if (rename (tmp, dir) < 0) {
        rc = -errno;
        goto fail;
    }
    gw_log (GW_LOG_INFO, "template.built", "dir=%s ms=%lld", dir,
            (long long) (ch_clock_mono_ms () - t0));
    close (lock_fd);
    return 0;
fail:
    if (lock_fd >= 0) {                         //  ours: what we left goes
        gw_fs_remove_tree (tmp);
        close (lock_fd);
    }
    if (!err [0])
        snprintf (err, errlen, "template: %s", strerror (-rc));
    return rc;
}

int
gw_template_build_detached (char *const argv [], const char *log_path)
{
    char self [PATH_MAX];
    ssize_t n = readlink ("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return -errno;
    self [n] = 0;
    pid_t pid = fork ();
    if (pid < 0)
        return -errno;
    if (pid == 0) {                             //  exec only: other threads existed
        setsid ();
        if (fork () != 0)
            _exit (0);
        int null_fd = open ("/dev/null", O_RDWR | O_CLOEXEC);
        int log_fd = open (log_path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
        int out_fd = log_fd >= 0 ? log_fd : null_fd;
        ch_child_fds ((const int []) { null_fd, out_fd, out_fd }, 3, false);
        //  The gateway ignores SIGINT and blocks SIGTERM for its signalfd, and
        //  both survive exec: the builder and the pool daemon start from the
        //  ordinary dispositions (every one) and set their own.
        ch_sig_defaults ();
        execv (self, argv);
        _exit (127);
    }
    while (waitpid (pid, NULL, 0) < 0 && errno == EINTR)
        ;
    return 0;
}

//  ==========================================================================
//  Restoring.

gw_vm_t *
gw_template_restore (gw_template_t *self, const gw_vm_config_t *cfg, int timeout_ms,
                     char *err, size_t errlen)
{
    assert (self && cfg);
    gw_vm_config_t c = *cfg;
    c.mem_path = self->ram;
    c.mem_share = false;                        //  copy-on-write
    c.incoming_defer = true;
    c.disk_backing = self->disk;
    c.disk_seed = self->layer [0] ? self->layer : NULL;
    if (self->tsc_khz)
        c.tsc_khz = self->tsc_khz;              //  the template's -append, exactly
    gw_vm_t *vm = gw_vm_new (&c, err, errlen);
    int rc = vm ? gw_vm_start (vm, err, errlen) : -EIO;
    if (rc == 0)
        rc = gw_snapshot_load (vm, self->state, timeout_ms, err, errlen);
    if (rc < 0)
        gw_vm_destroy (&vm);
    return vm;
}

//  n random bytes from the host.
static int
s_random (uint8_t *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom (buf + got, n - got, 0);
        if (r < 0 && errno != EINTR)
            return -errno;
        got += r > 0 ? (size_t) r : 0;
    }
    return 0;
}

static json_t *
s_host_time (void)
{
    return json_pack ("{s:f}", "time", ch_clock_wall_s ());
}

//  The hello's time is late when init sets it: a guest just restored is cold under TCG (tens
//  of ms), and a hello resent after 250 ms carries the first one's time. Set the clock once
//  more now that init's path is warm. 0 and *adjusted_p (how far it moved), or -errno + err.
static int
s_resync_clock (gw_drive_t *drive, double *adjusted_p, char *err, size_t errlen)
{
    json_t *c = s_host_time (), *reply = NULL;
    int rc = gw_drive_init_request (drive, "set_time_request", c, &reply, err, errlen);
    *adjusted_p = json_number_value (json_object_get (reply, "adjusted_s"));
    json_decref (c);
    json_decref (reply);
    return rc;
}

//  Init's reseed: a hello carrying 64 random bytes and the host's clock.
static int
s_reseed_init (gw_drive_t *drive, char *err, size_t errlen)
{
    uint8_t pool [64];
    json_t *extra = s_host_time (), *reply = NULL;
    double resync = 0;
    int rc = s_random (pool, sizeof pool);
    if (rc == 0)
        rc = gw_drive_init_hello (drive, extra, pool, sizeof pool, &reply, err, errlen);
    json_decref (extra);
    json_int_t credited = json_integer_value (json_object_get (reply, "entropy_bytes"));
    if (rc == 0 && credited <= 0) {
        snprintf (err, errlen, "init did not take entropy and time");
        rc = -EPROTO;
    }
    if (rc == 0)
        rc = s_resync_clock (drive, &resync, err, errlen);
    if (rc == 0)
        gw_log (GW_LOG_INFO, "vm.reseeded", "entropy_bytes=%lld clock_adjusted_s=%.3f "
                "clock_resync_s=%.3f", (long long) credited,
                json_number_value (json_object_get (reply, "adjusted_s")), resync);
    json_decref (reply);
    return rc;
}

//  The kernel's reseed: a driver hello carrying 32 random bytes (base64).
static int
s_reseed_kernel (gw_drive_t *drive, char *err, size_t errlen)
{
    uint8_t seed [32];
    unsigned char b64 [64];
    int rc = s_random (seed, sizeof seed);
    if (rc < 0) {
        snprintf (err, errlen, "getrandom: %s", strerror (-rc));
        return rc;
    }
    EVP_EncodeBlock (b64, seed, sizeof seed);
    return gw_drive_kernel_hello (drive, (const char *) b64, err, errlen);
}

static int
s_reseed (gw_vm_t *vm, int timeout_ms, bool python, gw_init_t **init_p, int *kernel_fd_p,
          char *err, size_t errlen)
{
    assert (vm && init_p && kernel_fd_p);
    gw_drive_t *drive = gw_drive_new (vm, timeout_ms);
    int rc = s_reseed_init (drive, err, errlen);
    if (rc == 0)
        rc = python ? s_reseed_kernel (drive, err, errlen)
                    : gw_drive_kernel_hello (drive, NULL, err, errlen);
    if (rc == 0) {
        *init_p = gw_drive_take_init (drive);
        *kernel_fd_p = gw_drive_take_kernel_fd (drive);
    }
    gw_drive_destroy (&drive);
    return rc;
}

int
gw_template_reseed (gw_vm_t *vm, int timeout_ms, gw_init_t **init_p, int *kernel_fd_p,
                    char *err, size_t errlen)
{
    return s_reseed (vm, timeout_ms, true, init_p, kernel_fd_p, err, errlen);
}

int
gw_template_rehello (gw_vm_t *vm, int timeout_ms, gw_init_t **init_p, int *kernel_fd_p,
                     char *err, size_t errlen)
{
    return s_reseed (vm, timeout_ms, false, init_p, kernel_fd_p, err, errlen);
}
