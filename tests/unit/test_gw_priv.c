/*  test_gw_priv - privilege separation (docs/security.md): the request codec, and
    the helper's checks against a compromised gateway. The helper runs for
    real in a child, over a socketpair, as these tests do (root).
*/
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "jail/gw_privd.h"
#include "jail/gw_privmsg.h"
#include "vm/gw_vm.h"
#include "tu.h"

#define S_NOBODY 65534u

static uint8_t s_buf [GW_PRIVMSG_MAX];

static gw_privmsg_t
s_spawn_msg (const char *qemu, const char *run_dir, const char *disk)
{
    gw_privmsg_t m = { .op = GW_PRIV_SPAWN, .mem_mib = 512, .fsize = 1 << 30,
                       .path = { run_dir, disk, "/etc/hostname", "/etc/hostname",
                                 "/etc/hostname", NULL },
                       .argc = 2, .argv = { qemu, "-nodefaults" } };
    return m;
}

//  --------------------------------------------------------------------------
//  The codec

static void
test_gw_privmsg_round_trips_and_refuses_every_truncation (void **state)
{
    (void) state;
    gw_privmsg_t m = s_spawn_msg ("/usr/bin/qemu", "/var/tmp/r", "disk.qcow2"), d;
    int n = gw_privmsg_encode (&m, s_buf, sizeof s_buf);
    assert_true (n > 0);
    assert_int_equal (gw_privmsg_decode (&d, s_buf, (size_t) n), 0);
    assert_int_equal (d.op, GW_PRIV_SPAWN);
    assert_int_equal (d.mem_mib, 512);
    assert_string_equal (d.path [GW_PRIVMSG_RUN_DIR], "/var/tmp/r");
    assert_null (d.path [GW_PRIVMSG_MEM_PATH]);
    assert_int_equal (d.argc, 2);
    assert_string_equal (d.argv [1], "-nodefaults");
    assert_null (d.argv [2]);
    for (int len = 0; len < n; len++)
        assert_int_equal (gw_privmsg_decode (&d, s_buf, (size_t) len), -EBADMSG);
    s_buf [n] = 'x';                            //  a trailing byte
    assert_int_equal (gw_privmsg_decode (&d, s_buf, (size_t) n + 1), -EBADMSG);
}

static void
test_gw_privmsg_refuses_bad_strings_ops_and_counts (void **state)
{
    (void) state;
    gw_privmsg_t m = s_spawn_msg ("/q", "/r", "d"), d;
    int n = gw_privmsg_encode (&m, s_buf, sizeof s_buf);
    //  The run dir "/r": its length at 32, then '/', 'r', NUL.
    assert_memory_equal (s_buf + 36, "/r", 3);
    s_buf [38] = 'x';                           //  no terminator
    assert_int_equal (gw_privmsg_decode (&d, s_buf, (size_t) n), -EBADMSG);
    s_buf [38] = 0;
    s_buf [37] = 0;                             //  a NUL inside
    assert_int_equal (gw_privmsg_decode (&d, s_buf, (size_t) n), -EBADMSG);
    s_buf [37] = 'r';
    assert_int_equal (gw_privmsg_decode (&d, s_buf, (size_t) n), 0);
    uint32_t op = 99;
    memcpy (s_buf, &op, 4);
    assert_int_equal (gw_privmsg_decode (&d, s_buf, (size_t) n), -EBADMSG);
    m.argc = GW_PRIVMSG_ARGV + 1;
    assert_int_equal (gw_privmsg_encode (&m, s_buf, sizeof s_buf), -EMSGSIZE);
    static char big [GW_PRIVMSG_STRLEN + 2];
    memset (big, 'a', sizeof big - 1);
    m = s_spawn_msg (big, "/r", "d");
    assert_int_equal (gw_privmsg_encode (&m, s_buf, sizeof s_buf), -EMSGSIZE);
}

//  --------------------------------------------------------------------------
//  The checks

static gw_privd_cfg_t s_cfg = { .uid = S_NOBODY, .gid = S_NOBODY, .gateway = 1,
                                .qemu = "/usr/bin/qemu-system-x86_64" };

static void
test_gw_privd_vet_reads_as_the_service_user_and_changes_only_its_files (void **state)
{
    (void) state;
    char dir [] = "/tmp/test_gw_priv.XXXXXX", hidden [64], open_dir [] = "/tmp/test_gw_priv.XXXXXX";
    assert_non_null (mkdtemp (dir));            //  0700 root: nobody cannot pass
    snprintf (hidden, sizeof hidden, "%s/canary", dir);
    int fd = open (hidden, O_WRONLY | O_CREAT | O_EXCL, 0644);
    assert_true (fd >= 0);
    close (fd);
    //  Root can read it: without the check, the jail would expose it.
    fd = open (hidden, O_RDONLY);
    assert_true (fd >= 0);
    close (fd);
    assert_int_equal (gw_privd_vet (&s_cfg, hidden, NULL, GW_JAIL_VET_READ), -EACCES);
    assert_non_null (mkdtemp (open_dir));
    chmod (open_dir, 0755);
    assert_int_equal (gw_privd_vet (&s_cfg, open_dir, NULL, GW_JAIL_VET_READ), 0);
    assert_int_equal (gw_privd_vet (&s_cfg, "relative", NULL, GW_JAIL_VET_READ), -EINVAL);
    struct stat st = { .st_uid = 0 };
    assert_int_equal (gw_privd_vet (&s_cfg, hidden, &st, GW_JAIL_VET_OWN), -EPERM);
    assert_int_equal (gw_privd_vet (&s_cfg, hidden, &st, GW_JAIL_VET_CHMOD), -EPERM);
    st.st_uid = GW_JAIL_UID_BASE + 3;           //  a jailed VM's file: o+r only
    assert_int_equal (gw_privd_vet (&s_cfg, hidden, &st, GW_JAIL_VET_CHMOD), 0);
    assert_int_equal (gw_privd_vet (&s_cfg, hidden, &st, GW_JAIL_VET_OWN), -EPERM);
    st.st_uid = S_NOBODY;
    assert_int_equal (gw_privd_vet (&s_cfg, hidden, &st, GW_JAIL_VET_OWN), 0);
    assert_int_equal (gw_privd_vet (&s_cfg, hidden, NULL, GW_JAIL_VET_OWN), -EINVAL);
    unlink (hidden);
    rmdir (dir);
    rmdir (open_dir);
}

static void
test_gw_privd_check_spawn_refuses_what_is_not_a_vm (void **state)
{
    (void) state;
    char err [256];
    gw_privmsg_t m = s_spawn_msg (s_cfg.qemu, "/var/tmp/r", "disk.qcow2");
    assert_int_equal (gw_privd_check_spawn (&s_cfg, &m, err, sizeof err), 0);
    m.argv [0] = "/bin/sh";
    assert_int_equal (gw_privd_check_spawn (&s_cfg, &m, err, sizeof err), -EPERM);
    assert_non_null (strstr (err, "not the QEMU"));
    m = s_spawn_msg (s_cfg.qemu, "var/tmp/r", "disk.qcow2");
    assert_int_equal (gw_privd_check_spawn (&s_cfg, &m, err, sizeof err), -EPERM);
    const char *disks [] = { "../disk", "a/b", "..", ".", "" };
    for (size_t i = 0; i < 5; i++) {
        m = s_spawn_msg (s_cfg.qemu, "/var/tmp/r", disks [i]);
        assert_int_equal (gw_privd_check_spawn (&s_cfg, &m, err, sizeof err), -EPERM);
    }
    m = s_spawn_msg (s_cfg.qemu, "/var/tmp/r", "disk.qcow2");
    m.mem_mib = 1u << 30;
    assert_int_equal (gw_privd_check_spawn (&s_cfg, &m, err, sizeof err), -EPERM);
    m.mem_mib = 512;
    m.mem_share = 1;
    assert_int_equal (gw_privd_check_spawn (&s_cfg, &m, err, sizeof err), -EPERM);
}

//  --------------------------------------------------------------------------
//  The helper itself, against a compromised gateway

static void
s_send (int sock, const void *data, size_t len, int fd)
{
    union { struct cmsghdr h; char space [CMSG_SPACE (2 * sizeof (int))]; } c;
    struct iovec iov = { (void *) data, len };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
    if (fd >= 0) {
        int fds [2] = { fd, fd };
        mh.msg_control = c.space;
        mh.msg_controllen = sizeof c.space;
        struct cmsghdr *h = CMSG_FIRSTHDR (&mh);
        *h = (struct cmsghdr) { .cmsg_len = CMSG_LEN (sizeof fds), .cmsg_level = SOL_SOCKET,
                                .cmsg_type = SCM_RIGHTS };
        memcpy (CMSG_DATA (h), fds, sizeof fds);
    }
    assert_int_equal (sendmsg (sock, &mh, 0), (ssize_t) len);
}

static gw_privreply_t
s_ask (int sock, const gw_privmsg_t *m, int fd)
{
    int n = gw_privmsg_encode (m, s_buf, sizeof s_buf);
    assert_true (n > 0);
    s_send (sock, s_buf, (size_t) n, fd);
    gw_privreply_t r;
    assert_int_equal (recv (sock, &r, sizeof r, 0), (ssize_t) sizeof r);
    gw_privreply_terminate (&r);
    return r;
}

static void
test_gw_privd_serves_a_hostile_gateway_without_harm (void **state)
{
    (void) state;
    char *qemu = gw_vm_which ("qemu-system-x86_64");
    if (!qemu || geteuid () != 0) {
        free (qemu);
        tu_skip (qemu ? "not root: the helper jails QEMU as root"
                      : "no qemu-system-x86_64 on PATH (scripts/deps.sh installs it)");
    }
    gw_privd_cfg_t cfg = { .uid = S_NOBODY, .gid = S_NOBODY, .gateway = getpid (), .qemu = qemu };
    int sv [2];
    assert_int_equal (socketpair (AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
    pid_t pid = fork ();
    if (pid == 0) {
        close (sv [0]);
        _exit (gw_privd_run (sv [1], &cfg));
    }
    close (sv [1]);
    s_send (sv [0], "garbage", 7, -1);          //  malformed: answered, and it serves on
    gw_privreply_t r;
    assert_int_equal (recv (sv [0], &r, sizeof r, 0), (ssize_t) sizeof r);
    assert_int_equal (r.rc, -EBADMSG);
    gw_privmsg_t m = { .op = GW_PRIV_KILL, .pid = 1 };     //  not its VM: init lives
    assert_int_equal (s_ask (sv [0], &m, -1).rc, -ESRCH);
    m = (gw_privmsg_t) { .op = GW_PRIV_REAP, .pid = getpid () };
    assert_int_equal (s_ask (sv [0], &m, -1).rc, -ECHILD);
    m = (gw_privmsg_t) { .op = GW_PRIV_CONSOLE, .pid = 1, .path = { "/etc/shadow" } };
    assert_int_equal (s_ask (sv [0], &m, -1).rc, -ESRCH);
    int null_fd = open ("/dev/null", O_RDWR);
    m = s_spawn_msg ("/bin/sh", "/tmp", "x");
    r = s_ask (sv [0], &m, null_fd);
    assert_int_equal (r.rc, -EPERM);
    assert_non_null (strstr (r.text, "not the QEMU"));
    //  A run dir that is root's: the helper must not hand it to a VM's group.
    char dir [] = "/tmp/test_gw_priv.XXXXXX", disk [64];
    assert_non_null (mkdtemp (dir));
    chmod (dir, 0755);
    snprintf (disk, sizeof disk, "%s/disk.qcow2", dir);
    close (open (disk, O_WRONLY | O_CREAT, 0644));
    m = s_spawn_msg (qemu, dir, "disk.qcow2");
    r = s_ask (sv [0], &m, null_fd);
    assert_true (r.rc < 0);
    struct stat st;
    assert_int_equal (stat (dir, &st), 0);
    assert_int_equal (st.st_gid, 0);
    assert_int_equal (st.st_mode & 07777, 0755);
    assert_int_equal (stat (disk, &st), 0);
    assert_int_equal (st.st_gid, 0);
    assert_int_equal (st.st_mode & 07777, 0644);
    close (sv [0]);                             //  the gateway is gone: so is the helper
    int status = -1;
    assert_int_equal (waitpid (pid, &status, 0), pid);
    assert_true (WIFEXITED (status) && WEXITSTATUS (status) == 0);
    char jail [80];
    snprintf (jail, sizeof jail, "%s/.jail", dir);
    rmdir (jail);
    unlink (disk);
    rmdir (dir);
    close (null_fd);
    free (qemu);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_gw_privmsg_round_trips_and_refuses_every_truncation),
        cmocka_unit_test (test_gw_privmsg_refuses_bad_strings_ops_and_counts),
        cmocka_unit_test (test_gw_privd_vet_reads_as_the_service_user_and_changes_only_its_files),
        cmocka_unit_test (test_gw_privd_check_spawn_refuses_what_is_not_a_vm),
        cmocka_unit_test (test_gw_privd_serves_a_hostile_gateway_without_harm),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
