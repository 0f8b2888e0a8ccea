/*  gw_vmargv - QEMU's command line for one microVM (pure). */
#include "vm/gw_vmargv.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#define S_MIB (1024ull * 1024)
#define S_CMDLINE "console=ttyS0 quiet panic=-1 reboot=t"
#define S_SANDBOX "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"
#define S_PATH_MAX 1024                         //  longest path we put on QEMU's command line

//  The ports QEMU listens on: name (gw_vm_connect_port), socket file. The
//  order is the command line's: the kernel's, init's and egress's chardevs
//  (s_nports virtio ports), then QMP.
static const struct { const char *name, *file, *id, *guest; } s_ports [] = {
    { "kernel", "kernel.sock", "k", "cellvm.kernel" }, { "init", "init.sock", "i", "cellvm.init" },
    { "net", "net.sock", "n", "cellvm.net" }, { "qmp", "qmp.sock", NULL, NULL }
};
enum { s_nports = 3 };

const char *
gw_vmargv_port_file (const char *name)
{
    assert (name);
    for (size_t i = 0; i < sizeof s_ports / sizeof s_ports [0]; i++)
        if (strcmp (name, s_ports [i].name) == 0)
            return s_ports [i].file;
    return NULL;
}

typedef struct {
    char **v;                                   //  NULL-terminated
    size_t n, cap;
} s_args_t;

static void
s_add (s_args_t *a, const char *fmt, ...) __attribute__ ((format (printf, 2, 3)));

static void
s_add (s_args_t *a, const char *fmt, ...)
{
    if (a->n + 2 > a->cap) {
        a->cap = a->cap ? a->cap * 2 : 64;
        a->v = realloc (a->v, a->cap * sizeof *a->v);
        if (!a->v)
            abort ();
    }
    va_list args;
    va_start (args, fmt);
    if (vasprintf (&a->v [a->n], fmt, args) < 0)
        abort ();
    va_end (args);
    a->v [++a->n] = NULL;
}

void
gw_vmargv_destroy (char ***argv_p)
{
    assert (argv_p);
    char **argv = *argv_p;
    for (size_t i = 0; argv && argv [i]; i++)
        free (argv [i]);
    free (argv);
    *argv_p = NULL;
}

//  A value QEMU's option parser takes verbatim: no control characters, and
//  no comma unless allowed (a comma would start a new option: injection).
static bool
s_clean (const char *s, bool comma_ok, size_t max)
{
    if (!s || !*s || strlen (s) > max)
        return false;
    for (; *s; s++)
        if ((unsigned char) *s < 0x20 || *s == 0x7f || (*s == ',' && !comma_ok))
            return false;
    return true;
}

static bool
s_cpu_ok (const char *cpu)
{
    return cpu && *cpu && strlen (cpu) < 256
        && strspn (cpu, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                        "0123456789,._+=-") == strlen (cpu);
}

//  The image file path: explicit, or image_dir/name. "" when neither.
static void
s_image_path (const char *explicit, const char *dir, const char *name, char *out, size_t cap)
{
    if (explicit)
        snprintf (out, cap, "%s", explicit);
    else if (dir)
        snprintf (out, cap, "%s/%s", dir, name);
    else
        out [0] = 0;
}

static const char *
s_check_numbers (const gw_vm_config_t *cfg)
{
    if (cfg->accel != GW_ACCEL_KVM && cfg->accel != GW_ACCEL_TCG)
        return "accel must be resolved to kvm or tcg";
    if (cfg->mem_mib < 64 || cfg->mem_mib > 1024 * 1024)
        return "memory must be 64 MiB .. 1 TiB";
    if (cfg->vcpus < 1 || cfg->vcpus > 64)
        return "vcpus must be 1 .. 64";
    if (cfg->disk_bytes < 16 * S_MIB || cfg->disk_bytes > 16 * 1024 * 1024 * S_MIB)
        return "disk size must be 16 MiB .. 16 TiB";
    if (cfg->tsc_khz > 20000000)
        return "tsc_khz out of range";
    return NULL;
}

static int
s_check_config (const gw_vm_config_t *cfg, const char *run_dir, const char *paths [3],
                char *err, size_t errlen)
{
    const char *why = s_check_numbers (cfg), *what = "config";
    const struct { const char *what, *value; bool required, comma_ok; } checks [] = {
        { "qemu", cfg->qemu, true, false },   { "kernel", paths [0], true, false },
        { "initrd", paths [1], true, false }, { "rootfs", paths [2], true, false },
        { "run dir", run_dir, true, false },  { "mem_path", cfg->mem_path, false, false },
        { "append", cfg->append, false, true }
    };
    for (size_t i = 0; !why && i < sizeof checks / sizeof checks [0]; i++)
        if ((checks [i].required || checks [i].value)
        &&  !s_clean (checks [i].value, checks [i].comma_ok, S_PATH_MAX)) {
            what = checks [i].what;
            why = "missing, too long, or holds a comma or control character";
        }
    //  sun_path is 108 bytes: the longest socket is run_dir/kernel.sock.
    struct sockaddr_un addr;
    if (!why && strlen (run_dir) + sizeof "/kernel.sock" > sizeof addr.sun_path)
        why = "run dir path too long for unix sockets", what = "run dir";
    if (!why && cfg->cpu && !s_cpu_ok (cfg->cpu))
        why = "bad cpu model", what = "cpu";
    if (why)
        snprintf (err, errlen, "vm %s: %s", what, why);
    return why ? -EINVAL : 0;
}

//  Under TCG without ERMS: "max" advertises it, so the guest's kernel and
//  libc copy and clear with rep movsb/stosb, which TCG runs a byte per
//  iteration (every port write and page fault; ~2x on bulk output).
const char *
gw_vmargv_cpu (const gw_vm_config_t *cfg)
{
    assert (cfg);
    return cfg->cpu ? cfg->cpu : cfg->accel == GW_ACCEL_KVM ? "host" : "max,erms=off";
}

//  Machine, accelerator, CPU and RAM (in a file when snapshotting).
static void
s_args_machine (s_args_t *a, const gw_vm_config_t *cfg)
{
    bool kvm = cfg->accel == GW_ACCEL_KVM;
    s_add (a, "-M");
    s_add (a, "microvm%s", cfg->mem_path || cfg->mem_named ? ",memory-backend=mem" : "");
    s_add (a, "-accel");
    //  TCG keeps translated code in a buffer that only grows until it is full (1 GiB by
    //  default), and an idle VM still holds every page it filled: capped, a session's
    //  translations cost at most this much host memory (docs/snapshots.md).
    if (kvm || !cfg->tcg_tb_mib)
        s_add (a, "%s", kvm ? "kvm" : "tcg");
    else
        s_add (a, "tcg,tb-size=%u", cfg->tcg_tb_mib);
    s_add (a, "-cpu");
    s_add (a, "%s", gw_vmargv_cpu (cfg));
    s_add (a, "-m");
    s_add (a, "%u", cfg->mem_mib);
    s_add (a, "-smp");
    s_add (a, "%u", cfg->vcpus);
    if (cfg->mem_path) {
        s_add (a, "-object");
        s_add (a, "memory-backend-file,id=mem,size=%uM,mem-path=%s,share=%s",
               cfg->mem_mib, cfg->mem_path, cfg->mem_share ? "on" : "off");
    }
    else if (cfg->mem_named) {                  //  a snapshot's RAM block is called "mem"
        s_add (a, "-object");
        s_add (a, "memory-backend-ram,id=mem,size=%uM", cfg->mem_mib);
    }
}

//  Nothing by default, no network, no display, no reboot, and a seccomp
//  filter: no exec, no privilege changes, no scheduler/affinity games.
static void
s_args_isolation (s_args_t *a)
{
    const char *flags [] = { "-nodefaults", "-no-user-config", "-nic", "none",
                             "-display", "none", "-no-reboot", "-sandbox", S_SANDBOX };
    for (size_t i = 0; i < sizeof flags / sizeof flags [0]; i++)
        s_add (a, "%s", flags [i]);
}

static void
s_args_boot (s_args_t *a, const gw_vm_config_t *cfg, const char *run_dir, const char *paths [3])
{
    s_add (a, "-serial");
    s_add (a, "file:%s/" GW_VMARGV_CONSOLE, run_dir);
    s_add (a, "-kernel");
    s_add (a, "%s", paths [0]);
    s_add (a, "-initrd");
    s_add (a, "%s", paths [1]);
    s_add (a, "-append");
    char tsc [32] = "";
    if (cfg->tsc_khz)                           //  TCG hangs calibrating against the PIT without it
        snprintf (tsc, sizeof tsc, " tsc_early_khz=%u", cfg->tsc_khz);
    //  TCG's TSC is the host's, steady, but its CPU has no invariant-TSC flag, so Linux drops
    //  the TSC and keeps time by jiffies, which lose the ticks a busy host delays (the clock ran
    //  7 % slow). Marked reliable, the TSC is the clocksource.
    const char *reliable = cfg->accel == GW_ACCEL_TCG ? " tsc=reliable" : "";
    s_add (a, S_CMDLINE "%s%s%s%s", tsc, reliable, cfg->append ? " " : "",
           cfg->append ? cfg->append : "");
}

//  The device list. Its order is part of the snapshot contract: a restored
//  VM must have the template's exact device model, so change nothing here
//  without changing the template key.
static void
s_args_devices (s_args_t *a, const gw_vm_config_t *cfg, const char *run_dir, const char *rootfs)
{
    s_add (a, "-drive");
    s_add (a, "file=%s,if=none,id=root,format=raw,readonly=on", rootfs);
    s_add (a, "-device");
    s_add (a, "virtio-blk-device,drive=root");
    //  A host-side write error reaches the guest as EIO instead of pausing it.
    s_add (a, "-drive");
    s_add (a, "file=%s/%s,if=none,id=ws,format=qcow2,werror=report,rerror=report",
           run_dir, cfg->disk_name ? cfg->disk_name : GW_VMARGV_DISK);
    s_add (a, "-device");
    s_add (a, "virtio-blk-device,drive=ws");
    s_add (a, "-device");
    s_add (a, "virtio-serial-device");
    //  The egress port is always there, so one template serves sessions with
    //  and without egress; with egress off nothing connects to either end.
    for (int i = 0; i < s_nports; i++) {
        s_add (a, "-chardev");
        s_add (a, "socket,id=%s,path=%s/%s,server=on,wait=off", s_ports [i].id, run_dir,
               s_ports [i].file);
        s_add (a, "-device");
        s_add (a, "virtserialport,chardev=%s,name=%s", s_ports [i].id, s_ports [i].guest);
    }
    s_add (a, "-device");
    s_add (a, "virtio-rng-device");
    //  Free page reporting: the guest hands back the pages it frees, in 2 MiB blocks. A
    //  snapshot records whether its VM had it (gw_vmsave).
    if (cfg->page_reporting) {
        s_add (a, "-device");
        s_add (a, "virtio-balloon-device,free-page-reporting=on");
    }
    s_add (a, "-qmp");
    s_add (a, "unix:%s/%s,server=on,wait=off", run_dir, s_ports [s_nports].file);
    if (cfg->incoming_defer) {
        s_add (a, "-incoming");
        s_add (a, "defer");
    }
}

int
gw_vmargv_build (const gw_vm_config_t *cfg, const char *run_dir, char ***argv_p,
                 char *err, size_t errlen)
{
    assert (cfg && argv_p && err);
    *argv_p = NULL;
    char kernel [S_PATH_MAX + 2], initrd [S_PATH_MAX + 2], rootfs [S_PATH_MAX + 2];
    s_image_path (cfg->kernel, cfg->image_dir, "vmlinux", kernel, sizeof kernel);
    s_image_path (cfg->initrd, cfg->image_dir, "initrd.img", initrd, sizeof initrd);
    s_image_path (cfg->rootfs, cfg->image_dir, "rootfs.ext4", rootfs, sizeof rootfs);
    const char *paths [3] = { kernel, initrd, rootfs };
    int rc = s_check_config (cfg, run_dir, paths, err, errlen);
    if (rc < 0)
        return rc;
    s_args_t a = { 0 };
    s_add (&a, "%s", cfg->qemu);
    s_args_machine (&a, cfg);
    s_args_isolation (&a);
    s_args_boot (&a, cfg, run_dir, paths);
    s_args_devices (&a, cfg, run_dir, rootfs);
    *argv_p = a.v;
    return 0;
}
