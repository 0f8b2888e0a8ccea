/*  test_gw_jail - the jailer's pure parts: its options, the cgroup values,
    and the mount plan of the minimal root (gw_jail, gw_cgroup,
    gw_jail_mount). The jail itself is proven on real VMs by
    tests/integration/test_jail.py.
*/
#include "jail/gw_cgroup.h"
#include "jail/gw_jail.h"
#include "jail/gw_jail_mount.h"
#include "tu.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define MIB (1024ull * 1024)

typedef struct {
    char dir [TU_DIR_MAX];
} fixture_t;

static int
s_setup (void **state)
{
    *state = tu_fixture_new (sizeof (fixture_t), "gw_jail");
    return 0;
}

static void
test_gw_jail_mode_parse (void **state)
{
    (void) state;
    assert_int_equal (gw_jail_mode_parse ("off"), GW_JAIL_OFF);
    assert_int_equal (gw_jail_mode_parse ("auto"), GW_JAIL_AUTO);
    assert_int_equal (gw_jail_mode_parse ("on"), GW_JAIL_ON);
    assert_int_equal (gw_jail_mode_parse ("yes"), -EINVAL);
    assert_int_equal (gw_jail_mode_parse (""), -EINVAL);
    assert_int_equal (gw_jail_mode_parse (NULL), -EINVAL);
}

static void
test_gw_cgroup_vm_memory_is_ram_plus_overhead (void **state)
{
    (void) state;
    //  KVM: RAM + 256 MiB; TCG adds the code buffer, 1 GiB or 1/8 of the host.
    assert_int_equal (gw_cgroup_vm_memory (512, false, 0), (512 + 256) * MIB);
    assert_int_equal (gw_cgroup_vm_memory (512, true, 0), (512 + 256 + 1024) * MIB);
    assert_int_equal (gw_cgroup_vm_memory (512, true, 64 * 1024 * MIB), (512 + 256 + 1024) * MIB);
    assert_int_equal (gw_cgroup_vm_memory (512, true, 4 * 1024 * MIB), (512 + 256 + 512) * MIB);
}

//  The value written to file, or NULL.
static const char *
s_find (const gw_cgroup_value_t *v, size_t n, const char *ctl, const char *file)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp (v [i].controller, ctl) == 0 && strcmp (v [i].file, file) == 0)
            return v [i].value;
    return NULL;
}

static void
test_gw_cgroup_values_v2 (void **state)
{
    (void) state;
    gw_cgroup_value_t v [GW_CGROUP_VALUES_MAX];
    gw_cgroup_limits_t lim = { .mem_bytes = 768 * MIB, .pids = 256, .cpu_weight = 100 };
    size_t n = gw_cgroup_values (&lim, 2, v);
    assert_int_equal (n, 4);
    assert_string_equal (s_find (v, n, "", "memory.max"), "805306368");
    assert_string_equal (s_find (v, n, "", "memory.swap.max"), "0");
    assert_string_equal (s_find (v, n, "", "pids.max"), "256");
    assert_string_equal (s_find (v, n, "", "cpu.weight"), "100");
    assert_null (s_find (v, n, "", "cpu.max"));
    lim.cpus = 0.5;
    n = gw_cgroup_values (&lim, 2, v);
    assert_string_equal (s_find (v, n, "", "cpu.max"), "50000 100000");
    lim.cpus = 2;
    n = gw_cgroup_values (&lim, 2, v);
    assert_string_equal (s_find (v, n, "", "cpu.max"), "200000 100000");
}

static void
test_gw_cgroup_block_device_is_the_whole_disk_or_none (void **state)
{
    (void) state;
    char dev [24];
    //  /proc is no block device; /dev/shm (tmpfs) neither.
    assert_int_equal (gw_cgroup_block_device ("/proc", dev, sizeof dev), -ENODEV);
    assert_int_equal (gw_cgroup_block_device ("/dev/shm", dev, sizeof dev), -ENODEV);
    assert_int_equal (gw_cgroup_block_device ("/no/such/path", dev, sizeof dev), -ENOENT);
    struct stat st;
    assert_int_equal (stat ("/var/tmp", &st), 0);
    char sys [64], part [96];
    snprintf (sys, sizeof sys, "/sys/dev/block/%u:%u", major (st.st_dev), minor (st.st_dev));
    if (access (sys, F_OK) < 0)                 //  a container's overlay, say
        tu_skip_expected ("/var/tmp is on no block device (%s is missing)", sys);
    assert_int_equal (gw_cgroup_block_device ("/var/tmp", dev, sizeof dev), 0);
    snprintf (part, sizeof part, "%s/partition", sys);
    char want [24];
    snprintf (want, sizeof want, "%u:%u", major (st.st_dev), minor (st.st_dev));
    if (access (part, F_OK) == 0)               //  a partition: its disk is another device
        assert_string_not_equal (dev, want);
    else
        assert_string_equal (dev, want);
    snprintf (sys, sizeof sys, "/sys/dev/block/%s/partition", dev);
    assert_int_not_equal (access (sys, F_OK), 0);   //  whatever it is, a whole disk
}

static void
test_gw_cgroup_values_v1 (void **state)
{
    (void) state;
    gw_cgroup_value_t v [GW_CGROUP_VALUES_MAX];
    gw_cgroup_limits_t lim = { .mem_bytes = 768 * MIB, .pids = 256, .cpu_weight = 100,
                               .cpus = 0.25 };
    size_t n = gw_cgroup_values (&lim, 1, v);
    assert_int_equal (n, 5);
    assert_string_equal (s_find (v, n, "memory", "memory.limit_in_bytes"), "805306368");
    assert_string_equal (s_find (v, n, "pids", "pids.max"), "256");
    assert_string_equal (s_find (v, n, "cpu", "cpu.shares"), "1024");
    assert_string_equal (s_find (v, n, "cpu", "cpu.cfs_period_us"), "100000");
    assert_string_equal (s_find (v, n, "cpu", "cpu.cfs_quota_us"), "25000");
    //  Disk I/O: the four throttle files, on the device given.
    gw_cgroup_limits_t io = { .io_dev = "254:0", .io_bps = 50 * MIB, .io_iops = 2000 };
    n = gw_cgroup_values (&io, 1, v);
    assert_int_equal (n, 4);
    assert_string_equal (s_find (v, n, "blkio", "blkio.throttle.read_bps_device"),
                         "254:0 52428800");
    assert_string_equal (s_find (v, n, "blkio", "blkio.throttle.write_bps_device"),
                         "254:0 52428800");
    assert_string_equal (s_find (v, n, "blkio", "blkio.throttle.read_iops_device"), "254:0 2000");
    assert_string_equal (s_find (v, n, "blkio", "blkio.throttle.write_iops_device"), "254:0 2000");
    n = gw_cgroup_values (&io, 2, v);
    assert_int_equal (n, 1);
    assert_string_equal (s_find (v, n, "", "io.max"),
                         "254:0 rbps=52428800 wbps=52428800 riops=2000 wiops=2000");
    io.io_iops = 0;
    n = gw_cgroup_values (&io, 2, v);
    assert_string_equal (s_find (v, n, "", "io.max"), "254:0 rbps=52428800 wbps=52428800");
    io.io_dev [0] = '\0';                       //  no device: no limit
    assert_int_equal (gw_cgroup_values (&io, 1, v), 0);
    //  Nothing asked, nothing written.
    gw_cgroup_limits_t none = { 0 };
    assert_int_equal (gw_cgroup_values (&none, 1, v), 0);
    assert_int_equal (gw_cgroup_values (&none, 2, v), 0);
}

static void
test_gw_cgroup_parse_key (void **state)
{
    (void) state;
    const char *events = "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n";
    assert_int_equal (gw_cgroup_parse_key (events, "oom_kill"), 1);
    assert_int_equal (gw_cgroup_parse_key (events, "oom"), 2);
    assert_int_equal (gw_cgroup_parse_key (events, "max"), 12);
    assert_int_equal (gw_cgroup_parse_key (events, "oom_group"), 0);
    const char *v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
    assert_int_equal (gw_cgroup_parse_key (v1, "oom_kill"), 3);
    assert_int_equal (gw_cgroup_parse_key ("", "oom_kill"), 0);
}

//  The entry planned at path (dir-relative), or NULL.
static const gw_jm_entry_t *
s_entry (const gw_jail_mount_t *m, const char *dir, const char *rel)
{
    char path [PATH_MAX];
    snprintf (path, sizeof path, "%s%s%s", dir, *rel ? "/" : "", rel);
    for (size_t i = 0; i < gw_jail_mount_size (m); i++)
        if (strcmp (gw_jail_mount_entry (m, i)->path, path) == 0)
            return gw_jail_mount_entry (m, i);
    return NULL;
}

static void
s_tree (const char *dir)
{
    char path [PATH_MAX];
    mkdir (tu_path (path, sizeof path, dir, "a"), 0755);
    mkdir (tu_path (path, sizeof path, dir, "a/b"), 0755);
    mkdir (tu_path (path, sizeof path, dir, "lib"), 0755);
    tu_write_file (dir, "a/b/file", "x");
    tu_write_file (dir, "lib/libx.so.1.2", "x");
    assert_int_equal (symlink ("a", tu_path (path, sizeof path, dir, "link")), 0);
    assert_int_equal (symlink ("libx.so.1.2", tu_path (path, sizeof path, dir, "lib/libx.so.1")),
                      0);
    assert_int_equal (symlink ("loop2", tu_path (path, sizeof path, dir, "loop1")), 0);
    assert_int_equal (symlink ("loop1", tu_path (path, sizeof path, dir, "loop2")), 0);
}

static void
test_gw_jail_mount_mirrors_paths_and_their_symlinks (void **state)
{
    fixture_t *f = *state;
    s_tree (f->dir);
    gw_jail_mount_t *m = gw_jail_mount_new ("/jail");
    char path [PATH_MAX];
    assert_int_equal (gw_jail_mount_add (m, tu_path (path, sizeof path, f->dir, "link/b/file"),
                                         false, true), 0);
    //  The symlink is copied, then followed: dirs, then the file bound read-only.
    const gw_jm_entry_t *e = s_entry (m, f->dir, "link");
    assert_non_null (e);
    assert_int_equal (e->kind, GW_JM_SYMLINK);
    assert_string_equal (e->link, "a");
    assert_int_equal (s_entry (m, f->dir, "a")->kind, GW_JM_DIR);
    assert_int_equal (s_entry (m, f->dir, "a/b")->kind, GW_JM_DIR);
    e = s_entry (m, f->dir, "a/b/file");
    assert_int_equal (e->kind, GW_JM_FILE);
    assert_true (e->remount & MS_RDONLY);
    assert_true (e->remount & MS_NOSUID);
    snprintf (path, sizeof path, "/jail%s/a/b/file", f->dir);
    assert_string_equal (e->target, path);
    //  The directories above the scratch dir are planned as directories.
    assert_int_equal (s_entry (m, "/tmp", "")->kind, GW_JM_DIR);
    //  Planning the same again adds nothing.
    size_t n = gw_jail_mount_size (m);
    assert_int_equal (gw_jail_mount_add (m, tu_path (path, sizeof path, f->dir, "a/b/file"),
                                         false, true), 0);
    assert_int_equal (gw_jail_mount_size (m), n);
    gw_jail_mount_destroy (&m);
    assert_null (m);
}

static void
test_gw_jail_mount_trees_cover_what_is_below (void **state)
{
    fixture_t *f = *state;
    s_tree (f->dir);
    gw_jail_mount_t *m = gw_jail_mount_new ("/jail");
    char path [PATH_MAX];
    assert_int_equal (gw_jail_mount_add (m, tu_path (path, sizeof path, f->dir, "lib"), true,
                                         true), 0);
    assert_int_equal (s_entry (m, f->dir, "lib")->kind, GW_JM_TREE);
    assert_true (gw_jail_mount_covered (m, tu_path (path, sizeof path, f->dir, "lib/x")));
    assert_false (gw_jail_mount_covered (m, tu_path (path, sizeof path, f->dir, "libx")));
    size_t n = gw_jail_mount_size (m);
    //  A library (through its symlink) inside the bound dir: nothing more.
    assert_int_equal (gw_jail_mount_add (m, tu_path (path, sizeof path, f->dir, "lib/libx.so.1"),
                                         false, true), 0);
    assert_int_equal (gw_jail_mount_size (m), n);
    //  A read-write tree is remounted without MS_RDONLY.
    assert_int_equal (gw_jail_mount_add (m, tu_path (path, sizeof path, f->dir, "a"), true,
                                         false), 0);
    assert_false (s_entry (m, f->dir, "a")->remount & MS_RDONLY);
    gw_jail_mount_destroy (&m);
}

static void
test_gw_jail_mount_refuses_bad_paths (void **state)
{
    fixture_t *f = *state;
    s_tree (f->dir);
    gw_jail_mount_t *m = gw_jail_mount_new ("/jail");
    char path [PATH_MAX];
    assert_int_equal (gw_jail_mount_add (m, "relative/path", false, true), -EINVAL);
    assert_int_equal (gw_jail_mount_add (m, "/", true, true), -EINVAL);
    assert_int_equal (gw_jail_mount_add (m, tu_path (path, sizeof path, f->dir, "missing"),
                                         false, true), -ENOENT);
    assert_int_equal (gw_jail_mount_add (m, tu_path (path, sizeof path, f->dir, "loop1"),
                                         false, true), -ELOOP);
    assert_int_equal (gw_jail_mount_add (m, tu_path (path, sizeof path, f->dir, "a/b/file/x"),
                                         false, true), -ENOTDIR);
    gw_jail_mount_destroy (&m);
}

static void
test_gw_jail_mount_node_is_made_for_the_vm_only (void **state)
{
    (void) state;
    gw_jail_mount_t *m = gw_jail_mount_new ("/jail");
    assert_int_equal (gw_jail_mount_add_node (m, "/dev/kvm", makedev (10, 232), 64001, 64002), 0);
    const gw_jm_entry_t *e = s_entry (m, "/dev", "");
    assert_int_equal (e->kind, GW_JM_DIR);
    e = s_entry (m, "/dev", "kvm");
    assert_int_equal (e->kind, GW_JM_NODE);
    assert_int_equal (major (e->dev), 10);
    assert_int_equal (minor (e->dev), 232);
    assert_int_equal (e->uid, 64001);
    assert_int_equal (e->gid, 64002);
    assert_string_equal (e->target, "/jail/dev/kvm");
    assert_int_equal (gw_jail_mount_add_node (m, "dev/kvm", 0, 1, 1), -EINVAL);
    gw_jail_mount_destroy (&m);
    //  Under a bound tree the node would be hidden: refused.
    m = gw_jail_mount_new ("/jail");
    assert_int_equal (gw_jail_mount_add (m, "/dev", true, false), 0);
    assert_int_equal (gw_jail_mount_add_node (m, "/dev/kvm", makedev (10, 232), 1, 1), -EEXIST);
    gw_jail_mount_destroy (&m);
}

static void
test_gw_jail_mount_libs_lists_what_ld_so_loads (void **state)
{
    (void) state;
    char **libs = gw_jail_mount_libs ("/bin/true");
    assert_non_null (libs);
    bool libc = false, all_absolute = true;
    for (size_t i = 0; libs [i]; i++) {
        libc = libc || strstr (libs [i], "libc.so") != NULL;
        all_absolute = all_absolute && libs [i][0] == '/';
        free (libs [i]);
    }
    free (libs);
    assert_true (libc);
    assert_true (all_absolute);
    assert_null (gw_jail_mount_libs ("/nonexistent/qemu"));
    //  A static binary (Debian's ldconfig) needs nothing, and is never run.
    if (access ("/sbin/ldconfig", X_OK) == 0) {
        libs = gw_jail_mount_libs ("/sbin/ldconfig");
        assert_non_null (libs);
        assert_null (libs [0]);
        free (libs);
    }
}

int
main (void)
{
#define S_TEST(name) cmocka_unit_test_setup_teardown (name, s_setup, tu_fixture_teardown)
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_gw_jail_mode_parse),
        cmocka_unit_test (test_gw_cgroup_vm_memory_is_ram_plus_overhead),
        cmocka_unit_test (test_gw_cgroup_values_v2),
        cmocka_unit_test (test_gw_cgroup_values_v1),
        cmocka_unit_test (test_gw_cgroup_block_device_is_the_whole_disk_or_none),
        cmocka_unit_test (test_gw_cgroup_parse_key),
        S_TEST (test_gw_jail_mount_mirrors_paths_and_their_symlinks),
        S_TEST (test_gw_jail_mount_trees_cover_what_is_below),
        S_TEST (test_gw_jail_mount_refuses_bad_paths),
        cmocka_unit_test (test_gw_jail_mount_node_is_made_for_the_vm_only),
        S_TEST (test_gw_jail_mount_libs_lists_what_ld_so_loads),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
