/*  test_gw_vmargv - QEMU's command line (pure), and the run dir's names.

    The argv is part of the snapshot-template contract: the first test
    spells it out whole, so any change to it has to be deliberate.
*/
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "vm/gw_vmargv.h"

#define SANDBOX "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"

//  ==========================================================================
//  The command line.

static gw_vm_config_t
s_config (void)
{
    gw_vm_config_t cfg;
    gw_vm_config_defaults (&cfg);
    cfg.qemu = "/usr/bin/qemu-system-x86_64";
    cfg.image_dir = "/img";
    cfg.accel = GW_ACCEL_TCG;
    cfg.tsc_khz = 2445428;
    return cfg;
}

//  The value after flag, the n-th time flag appears (0-based); NULL if not.
static const char *
s_opt (char **argv, const char *flag, int n)
{
    for (int i = 0; argv [i]; i++)
        if (strcmp (argv [i], flag) == 0 && n-- == 0)
            return argv [i + 1];
    return NULL;
}

static bool
s_has (char **argv, const char *needle)
{
    for (int i = 0; argv [i]; i++)
        if (strstr (argv [i], needle))
            return true;
    return false;
}

static void
test_gw_vmargv_is_exactly_the_recipe (void **state)
{
    (void) state;
    //  The whole list, in order: a snapshot restores only into the
    //  template's exact device model, so any change here must be deliberate.
    const char *want [] = {
        "/usr/bin/qemu-system-x86_64", "-M", "microvm", "-accel", "tcg,tb-size=32", "-cpu", "max,erms=off",
        "-m", "512", "-smp", "1", "-nodefaults", "-no-user-config", "-nic", "none",
        "-display", "none", "-no-reboot", "-sandbox", SANDBOX,
        "-serial", "file:/r/vm-1/console.log", "-kernel", "/img/vmlinux",
        "-initrd", "/img/initrd.img",
        "-append", "console=ttyS0 quiet panic=-1 reboot=t tsc_early_khz=2445428 tsc=reliable",
        "-drive", "file=/img/rootfs.ext4,if=none,id=root,format=raw,readonly=on",
        "-device", "virtio-blk-device,drive=root",
        "-drive", "file=/r/vm-1/workspace.qcow2,if=none,id=ws,format=qcow2,"
                  "werror=report,rerror=report",
        "-device", "virtio-blk-device,drive=ws",
        "-device", "virtio-serial-device",
        "-chardev", "socket,id=k,path=/r/vm-1/kernel.sock,server=on,wait=off",
        "-device", "virtserialport,chardev=k,name=cellvm.kernel",
        "-chardev", "socket,id=i,path=/r/vm-1/init.sock,server=on,wait=off",
        "-device", "virtserialport,chardev=i,name=cellvm.init",
        "-chardev", "socket,id=n,path=/r/vm-1/net.sock,server=on,wait=off",
        "-device", "virtserialport,chardev=n,name=cellvm.net",
        "-device", "virtio-rng-device",
        "-device", "virtio-balloon-device,free-page-reporting=on",
        "-qmp", "unix:/r/vm-1/qmp.sock,server=on,wait=off", NULL
    };
    gw_vm_config_t cfg = s_config ();
    char **argv = NULL, err [256];
    assert_int_equal (gw_vmargv_build (&cfg, "/r/vm-1", &argv, err, sizeof err), 0);
    size_t i = 0;
    for (; want [i]; i++) {
        assert_non_null (argv [i]);
        assert_string_equal (argv [i], want [i]);
    }
    assert_null (argv [i]);
    gw_vmargv_destroy (&argv);
    assert_null (argv);
}

static void
test_gw_vmargv_has_no_network_and_every_isolation_flag (void **state)
{
    (void) state;
    gw_vm_config_t cfg = s_config ();
    char **argv = NULL, err [256];
    assert_int_equal (gw_vmargv_build (&cfg, "/r/vm-1", &argv, err, sizeof err), 0);
    assert_string_equal (s_opt (argv, "-sandbox", 0), SANDBOX);
    assert_string_equal (s_opt (argv, "-nic", 0), "none");
    assert_non_null (s_opt (argv, "-nodefaults", 0) ? "" : NULL);
    assert_true (s_has (argv, "-no-user-config") && s_has (argv, "-no-reboot"));
    assert_string_equal (s_opt (argv, "-display", 0), "none");
    //  No network device, no host directory, no exec, no monitor on stdio.
    const char *never [] = { "-netdev", "-net", "net-", "virtio-net", "user,", "tap",
                             "9p", "virtfs", "vhost", "exec:", "stdio", "-monitor",
                             "-incoming", "-object", "-S" };
    for (size_t i = 0; i < sizeof never / sizeof never [0]; i++)
        assert_false (s_has (argv, never [i]));
    //  The shared base image is read-only; panics end QEMU instead of rebooting.
    assert_non_null (strstr (s_opt (argv, "-drive", 0), "readonly=on"));
    assert_non_null (strstr (s_opt (argv, "-append", 0), "panic=-1"));
    gw_vmargv_destroy (&argv);
}

static void
test_gw_vmargv_follows_the_config (void **state)
{
    (void) state;
    gw_vm_config_t cfg = s_config ();
    cfg.accel = GW_ACCEL_KVM;
    cfg.mem_mib = 2048;
    cfg.vcpus = 2;
    cfg.tsc_khz = 0;
    cfg.append = "cellvm.debug=1 console=ttyS0,115200";
    cfg.kernel = "/k/vmlinux-test";
    char **argv = NULL, err [256];
    assert_int_equal (gw_vmargv_build (&cfg, "/r/vm-2", &argv, err, sizeof err), 0);
    assert_string_equal (s_opt (argv, "-accel", 0), "kvm");
    assert_string_equal (s_opt (argv, "-cpu", 0), "host");
    assert_string_equal (s_opt (argv, "-m", 0), "2048");
    assert_string_equal (s_opt (argv, "-smp", 0), "2");
    assert_string_equal (s_opt (argv, "-kernel", 0), "/k/vmlinux-test");
    assert_string_equal (s_opt (argv, "-initrd", 0), "/img/initrd.img");
    assert_string_equal (s_opt (argv, "-append", 0), "console=ttyS0 quiet panic=-1 reboot=t "
                         "cellvm.debug=1 console=ttyS0,115200");
    gw_vmargv_destroy (&argv);
    cfg.cpu = "host,-arch-capabilities";
    assert_int_equal (gw_vmargv_build (&cfg, "/r/vm-2", &argv, err, sizeof err), 0);
    assert_string_equal (s_opt (argv, "-cpu", 0), "host,-arch-capabilities");
    gw_vmargv_destroy (&argv);
    //  TCG's code buffer: capped as asked, or QEMU's own; KVM has none.
    cfg.accel = GW_ACCEL_TCG;
    cfg.tcg_tb_mib = 0;
    assert_int_equal (gw_vmargv_build (&cfg, "/r/vm-2", &argv, err, sizeof err), 0);
    assert_string_equal (s_opt (argv, "-accel", 0), "tcg");
    gw_vmargv_destroy (&argv);
    cfg.tcg_tb_mib = 16;
    assert_int_equal (gw_vmargv_build (&cfg, "/r/vm-2", &argv, err, sizeof err), 0);
    assert_string_equal (s_opt (argv, "-accel", 0), "tcg,tb-size=16");
    gw_vmargv_destroy (&argv);
}

static void
test_gw_vmargv_has_the_snapshot_hooks (void **state)
{
    (void) state;
    gw_vm_config_t cfg = s_config ();
    cfg.mem_path = "/dev/shm/cellvm-t1.ram";
    cfg.mem_share = true;                       //  the template writes through
    char **t = NULL, **c = NULL, err [256];
    assert_int_equal (gw_vmargv_build (&cfg, "/r/t", &t, err, sizeof err), 0);
    assert_string_equal (s_opt (t, "-M", 0), "microvm,memory-backend=mem");
    assert_string_equal (s_opt (t, "-object", 0), "memory-backend-file,id=mem,size=512M,"
                         "mem-path=/dev/shm/cellvm-t1.ram,share=on");
    assert_null (s_opt (t, "-incoming", 0));
    cfg.mem_share = false;                      //  a clone maps it copy-on-write
    cfg.incoming_defer = true;
    assert_int_equal (gw_vmargv_build (&cfg, "/r/c", &c, err, sizeof err), 0);
    assert_non_null (strstr (s_opt (c, "-object", 0), ",share=off"));
    assert_string_equal (s_opt (c, "-incoming", 0), "defer");
    //  Same devices in the same order, only paths differ.
    size_t nt = 0, nc = 0;
    while (t [nt])
        nt++;
    while (c [nc])
        nc++;
    assert_int_equal (nc, nt + 2);
    for (size_t i = 0; i < nt; i++)
        if (strcmp (t [i], "-device") == 0)
            assert_string_equal (t [i + 1], c [i + 1]);
    gw_vmargv_destroy (&t);
    gw_vmargv_destroy (&c);
    //  A snapshot from before free page reporting: the same devices without the balloon.
    cfg.page_reporting = false;
    assert_int_equal (gw_vmargv_build (&cfg, "/r/c", &c, err, sizeof err), 0);
    for (size_t i = 0; c [i]; i++)
        assert_null (strstr (c [i], "virtio-balloon"));
    assert_string_equal (s_opt (c, "-device", 5), "virtserialport,chardev=n,name=cellvm.net");
    assert_string_equal (s_opt (c, "-device", 6), "virtio-rng-device");
    assert_null (s_opt (c, "-device", 7));
    gw_vmargv_destroy (&c);
}

//  Build with one field spoiled: must fail with -EINVAL and say what.
static void
s_rejects (gw_vm_config_t cfg, const char *run_dir, const char *what)
{
    char **argv = NULL, err [256] = "";
    assert_int_equal (gw_vmargv_build (&cfg, run_dir, &argv, err, sizeof err), -EINVAL);
    assert_null (argv);
    if (!strstr (err, what))
        fail_msg ("error \"%s\" does not mention \"%s\"", err, what);
}

static void
test_gw_vmargv_rejects_bad_config (void **state)
{
    (void) state;
    gw_vm_config_t cfg = s_config ();
    cfg.accel = GW_ACCEL_AUTO;
    s_rejects (cfg, "/r/x", "accel must be resolved");
    cfg = s_config (), cfg.mem_mib = 16;
    s_rejects (cfg, "/r/x", "memory");
    cfg = s_config (), cfg.vcpus = 0;
    s_rejects (cfg, "/r/x", "vcpus");
    cfg = s_config (), cfg.disk_bytes = 4096;
    s_rejects (cfg, "/r/x", "disk size");
    //  A comma would smuggle drive options in: readonly=off on the base.
    cfg = s_config (), cfg.image_dir = "/img/x,readonly=off,file=/etc/shadow";
    s_rejects (cfg, "/r/x", "holds a comma");
    cfg = s_config ();
    s_rejects (cfg, "/r/x,server=off", "run dir");
    cfg = s_config (), cfg.mem_path = "/dev/shm/a,share=on";
    s_rejects (cfg, "/r/x", "mem_path");
    cfg = s_config (), cfg.append = "quiet\ninit=/bin/sh";
    s_rejects (cfg, "/r/x", "append");
    cfg = s_config (), cfg.cpu = "max -device x";
    s_rejects (cfg, "/r/x", "cpu");
    cfg = s_config (), cfg.image_dir = NULL;
    s_rejects (cfg, "/r/x", "kernel");
    char long_dir [120];
    memset (long_dir, 'd', sizeof long_dir - 1);
    long_dir [0] = '/';
    long_dir [sizeof long_dir - 1] = 0;
    cfg = s_config ();
    s_rejects (cfg, long_dir, "unix sockets");
}

//  The sockets QEMU is told to listen on are the ones gw_vm connects to.
static void
test_gw_vmargv_names_each_port_once (void **state)
{
    (void) state;
    assert_string_equal (gw_vmargv_port_file ("kernel"), "kernel.sock");
    assert_string_equal (gw_vmargv_port_file ("init"), "init.sock");
    assert_string_equal (gw_vmargv_port_file ("net"), "net.sock");
    assert_string_equal (gw_vmargv_port_file ("qmp"), "qmp.sock");
    assert_null (gw_vmargv_port_file ("console"));
    assert_null (gw_vmargv_port_file (""));
    gw_vm_config_t cfg = s_config ();
    char **argv = NULL, err [256];
    assert_int_equal (gw_vmargv_build (&cfg, "/r/p", &argv, err, sizeof err), 0);
    const char *names [] = { "kernel", "init", "qmp" };
    for (int i = 0; i < 3; i++) {
        char path [64];
        snprintf (path, sizeof path, "/r/p/%s,", gw_vmargv_port_file (names [i]));
        assert_true (s_has (argv, path));
    }
    snprintf (err, sizeof err, "file:/r/p/%s", GW_VMARGV_CONSOLE);
    assert_string_equal (s_opt (argv, "-serial", 0), err);
    assert_true (s_has (argv, "file=/r/p/" GW_VMARGV_DISK ","));
    gw_vmargv_destroy (&argv);
    gw_vmargv_destroy (&argv);                  //  NULL-safe
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_gw_vmargv_is_exactly_the_recipe),
        cmocka_unit_test (test_gw_vmargv_has_no_network_and_every_isolation_flag),
        cmocka_unit_test (test_gw_vmargv_follows_the_config),
        cmocka_unit_test (test_gw_vmargv_has_the_snapshot_hooks),
        cmocka_unit_test (test_gw_vmargv_rejects_bad_config),
        cmocka_unit_test (test_gw_vmargv_names_each_port_once),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
