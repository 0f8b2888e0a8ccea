/*  test_gw_vmtool - qemu-img, which parses layers a possibly compromised
    QEMU wrote, runs in a tool jail (docs/security.md): this binary
    runs itself as the "qemu-img" (argv [1] "probe") through
    gw_vm_run_qemu_img, and the probe reports what it can see and do into
    qemu.log. The control: the same with --jail off. Needs root.
*/
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "jail/gw_jail.h"
#include "vm/gw_vm.h"
#include "tu.h"

static char s_self [4096];
static char s_canary [64];

//  The probe: one line of facts, to stdout (the run dir's qemu.log).
static int
s_probe (const char *canary)
{
    struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
    struct __user_cap_data_struct d [2];
    memset (d, 0, sizeof d);
    syscall (SYS_capget, &h, d);
    int fd = open ("probe-wrote", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    printf ("probe uid=%d capeff=%x passwd=%d canary=%d wrote=%d\n", (int) getuid (),
            d [0].effective, access ("/etc/passwd", F_OK) == 0, access (canary, F_OK) == 0,
            fd >= 0);
    return 0;
}

//  Run the probe in a fresh dir with mode; its line from qemu.log.
static void
s_run (int mode, char *line, size_t cap)
{
    char dir [] = "/tmp/test_gw_vmtool.XXXXXX", log [96], err [256] = "";
    assert_non_null (mkdtemp (dir));
    gw_jail_opts_t opts = { .mode = mode };
    const char *args [] = { "probe", s_canary, NULL };
    assert_int_equal (gw_vm_run_qemu_img (s_self, &opts, dir, NULL, NULL, args, err, sizeof err),
                      0);
    snprintf (log, sizeof log, "%s/qemu.log", dir);
    FILE *f = fopen (log, "r");
    assert_non_null (f);
    assert_non_null (fgets (line, (int) cap, f));
    fclose (f);
    char wrote [96];
    snprintf (wrote, sizeof wrote, "%s/probe-wrote", dir);
    unlink (wrote);
    unlink (log);
    snprintf (wrote, sizeof wrote, "%s/.jail", dir);
    rmdir (wrote);
    rmdir (dir);
}

static void
test_qemu_img_runs_without_capabilities_and_without_the_host (void **state)
{
    (void) state;
#if defined (__SANITIZE_ADDRESS__)
    //  The probe is this binary: sanitized, it needs /proc (not in the jail) to start, and
    //  its exit-time leak check decides its status. make test runs it unsanitized.
    tu_skip_expected ("a sanitized build: the probe is this binary, which needs /proc "
                      "(not in the jail) to start; make test runs it unsanitized");
#endif
    if (geteuid () != 0)
        tu_skip ("not root: the jail's namespaces need root");
    char line [256];
    s_run (GW_JAIL_OFF, line, sizeof line);     //  the control sees the host, as root
    assert_non_null (strstr (line, "uid=0 "));
    assert_null (strstr (line, "capeff=0 "));
    assert_non_null (strstr (line, "passwd=1 canary=1 wrote=1"));
    s_run (GW_JAIL_AUTO, line, sizeof line);    //  jailed: no capabilities, no host files
    assert_non_null (strstr (line, "capeff=0 passwd=0 canary=0 wrote=1"));
}

int
main (int argc, char **argv)
{
    if (argc == 3 && strcmp (argv [1], "probe") == 0)
        return s_probe (argv [2]);
    ssize_t n = readlink ("/proc/self/exe", s_self, sizeof s_self - 1);
    if (n <= 0)
        return 1;
    s_self [n] = '\0';
    snprintf (s_canary, sizeof s_canary, "/tmp/test_gw_vmtool.canary.%d", (int) getpid ());
    close (open (s_canary, O_WRONLY | O_CREAT, 0644));
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_qemu_img_runs_without_capabilities_and_without_the_host),
    };
    int rc = cmocka_run_group_tests (tests, NULL, NULL);
    unlink (s_canary);
    return rc;
}
