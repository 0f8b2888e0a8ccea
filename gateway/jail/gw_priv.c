/*  gw_priv - the unprivileged gateway's side of privilege separation (see gw_priv.h). */
#include "jail/gw_priv.h"
#include "base/gw_log.h"
#include "jail/gw_privd.h"
#include "jail/gw_privmsg.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

struct _gw_priv_t {
    int sock;                                   //  to the helper
    pid_t helper;
    pthread_mutex_t lock;                       //  one round trip at a time
};

static gw_priv_t *s_priv;

gw_priv_t *
gw_priv (void)
{
    return s_priv;
}

//  ==========================================================================
//  One round trip.

static int
s_call (gw_priv_t *self, const gw_privmsg_t *msg, const int *fds, int nfds,
        gw_privreply_t *r, int *fd_in)
{
    static uint8_t buf [GW_PRIVMSG_MAX];
    pthread_mutex_lock (&self->lock);
    int n = gw_privmsg_encode (msg, buf, sizeof buf), rc = 0;
    union { struct cmsghdr h; char space [CMSG_SPACE (2 * sizeof (int))]; } out, in;
    struct iovec iov = { buf, n > 0 ? (size_t) n : 0 };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
    if (nfds > 0) {
        mh.msg_control = out.space;
        mh.msg_controllen = CMSG_SPACE ((size_t) nfds * sizeof (int));
        struct cmsghdr *c = CMSG_FIRSTHDR (&mh);
        *c = (struct cmsghdr) { .cmsg_len = CMSG_LEN ((size_t) nfds * sizeof (int)),
                                .cmsg_level = SOL_SOCKET, .cmsg_type = SCM_RIGHTS };
        memcpy (CMSG_DATA (c), fds, (size_t) nfds * sizeof (int));
    }
    if (n < 0)
        rc = n;
    else if (sendmsg (self->sock, &mh, MSG_NOSIGNAL) != n)
        rc = -EPIPE;
    struct iovec riov = { r, sizeof *r };
    struct msghdr rm = { .msg_iov = &riov, .msg_iovlen = 1, .msg_control = in.space,
                         .msg_controllen = sizeof in.space };
    ssize_t got = -1;
    while (rc == 0 && (got = recvmsg (self->sock, &rm, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
        ;
    if (rc == 0 && got != (ssize_t) sizeof *r)
        rc = -EPIPE;                            //  the helper is gone
    struct cmsghdr *c = rc == 0 ? CMSG_FIRSTHDR (&rm) : NULL;
    if (c && c->cmsg_type == SCM_RIGHTS && c->cmsg_len >= CMSG_LEN (sizeof (int)))
        memcpy (fd_in, CMSG_DATA (c), sizeof (int));
    pthread_mutex_unlock (&self->lock);
    if (rc < 0) {
        *r = (gw_privreply_t) { .rc = rc };
        snprintf (r->text, sizeof r->text, "the privileged helper (pid %d) is gone: %s",
                  (int) self->helper, strerror (-rc));
    }
    gw_privreply_terminate (r);
    return rc < 0 ? rc : r->rc;
}

int
gw_priv_spawn (gw_priv_t *self, const gw_jail_vm_t *vm, const gw_vmspawn_t *sp,
               pid_t *pid_p, int *pidfd_p, gw_priv_jail_t *info, char *err, size_t errlen)
{
    assert (self && vm && sp && pid_p && pidfd_p && info && err);
    gw_privmsg_t msg = { .op = GW_PRIV_SPAWN, .mem_mib = vm->mem_mib,
                         .mem_share = vm->mem_share, .kvm = vm->kvm,
                         .fsize = (uint64_t) sp->fsize,
                         .path = { vm->run_dir, vm->disk, vm->files [0], vm->files [1],
                                   vm->files [2], vm->mem_path } };
    while (sp->argv [msg.argc] && msg.argc < GW_PRIVMSG_ARGV)
        msg.argv [msg.argc] = sp->argv [msg.argc], msg.argc++;
    if (sp->argv [msg.argc]) {
        snprintf (err, errlen, "privd: QEMU's command line is too long");
        return -E2BIG;
    }
    int fds [2] = { sp->log_fd, sp->null_fd }, pidfd = -1;
    gw_privreply_t r;
    int rc = s_call (self, &msg, fds, 2, &r, &pidfd);
    if (rc < 0) {
        snprintf (err, errlen, "%s", r.text [0] ? r.text : strerror (-rc));
        if (pidfd >= 0)
            close (pidfd);
        return rc;
    }
    *pid_p = r.pid;
    *pidfd_p = pidfd;
    info->uid = r.uid;
    snprintf (info->kind, sizeof info->kind, "%s", r.kind);
    snprintf (info->cgroup, sizeof info->cgroup, "%s", r.cgroup);
    return 0;
}

int
gw_priv_kill (gw_priv_t *self, pid_t pid)
{
    assert (self);
    gw_privmsg_t msg = { .op = GW_PRIV_KILL, .pid = pid };
    gw_privreply_t r;
    return s_call (self, &msg, NULL, 0, &r, &(int) { -1 });
}

int
gw_priv_reap (gw_priv_t *self, pid_t pid, bool block, int *wstatus, char *why, size_t cap)
{
    assert (self && wstatus && why);
    gw_privmsg_t msg = { .op = GW_PRIV_REAP, .pid = pid, .block = block };
    gw_privreply_t r;
    int rc = s_call (self, &msg, NULL, 0, &r, &(int) { -1 });
    *wstatus = r.wstatus;
    snprintf (why, cap, "%s", rc == 0 ? r.text : "");
    if (rc < 0 && rc != -EAGAIN)                //  the helper is gone, and QEMU with it
        gw_log (GW_LOG_WARN, "vm.lost", "pid=%d reason=\"%s\"", (int) pid, r.text);
    return rc == -EAGAIN ? rc : 0;
}

int
gw_priv_console (gw_priv_t *self, pid_t pid, const char *path, int *fd_p)
{
    assert (self && path && fd_p);
    gw_privmsg_t msg = { .op = GW_PRIV_CONSOLE, .pid = pid, .path = { path } };
    gw_privreply_t r;
    *fd_p = -1;
    int rc = s_call (self, &msg, NULL, 0, &r, fd_p);
    if (rc < 0 && *fd_p >= 0) {
        close (*fd_p);
        *fd_p = -1;
    }
    return rc < 0 ? rc : *fd_p >= 0 ? 0 : -EIO;
}

//  ==========================================================================
//  Starting the helper, and dropping.

typedef struct {
    uid_t uid;
    gid_t gid;
    char home [256];
    char name [64];
} s_user_t;

static int
s_lookup (const char *user, s_user_t *u, char *err, size_t errlen)
{
    char *end = NULL;
    unsigned long id = strtoul (user, &end, 10);
    struct passwd *pw = *user && end && !*end ? getpwuid ((uid_t) id) : getpwnam (user);
    if (!pw && !(*user && end && !*end)) {
        snprintf (err, errlen, "--user %s: no such user (create it, e.g. useradd --system "
                  "--shell /usr/sbin/nologin --create-home %s)", user, user);
        return -ENOENT;
    }
    *u = (s_user_t) { .uid = pw ? pw->pw_uid : (uid_t) id, .gid = pw ? pw->pw_gid : (gid_t) id };
    snprintf (u->home, sizeof u->home, "%s", pw && pw->pw_dir ? pw->pw_dir : "/");
    snprintf (u->name, sizeof u->name, "%s", pw ? pw->pw_name : user);
    if (u->uid == 0 || u->gid == 0) {
        snprintf (err, errlen, "--user %s: that is root; name an unprivileged user", user);
        return -EINVAL;
    }
    return 0;
}

//  The user's gid, kvm's (the accelerator is chosen here), then the jail
//  range's: the VMs' files are readable to us.
static size_t
s_groups (const s_user_t *u, const gw_jail_opts_t *jail, gid_t *out)
{
    unsigned base = jail->uid_base ? jail->uid_base : GW_JAIL_UID_BASE;
    size_t n = 0;
    struct group *kvm = getgrnam ("kvm");
    out [n++] = u->gid;
    if (kvm && kvm->gr_gid != 0)
        out [n++] = kvm->gr_gid;
    for (unsigned i = 0; i < GW_JAIL_UID_COUNT; i++)
        out [n++] = (gid_t) (base + i);
    return n;
}

static void
s_helper_main (int sock, const s_user_t *u, const gw_jail_opts_t *jail, const char *qemu,
               pid_t gateway)
{
    prctl (PR_SET_PDEATHSIG, SIGKILL);          //  dies with the gateway, and its VMs with it
    if (getppid () != gateway)
        _exit (1);
    prctl (PR_SET_NAME, "cellvm-privd");
    umask (007);                                //  QEMU's files: the gateway reads them by group
    for (int fd = 3; fd < 1024; fd++)
        if (fd != sock)
            close (fd);
    gw_privd_cfg_t cfg = { .uid = u->uid, .gid = u->gid, .gateway = gateway, .qemu = qemu,
                           .jail = *jail };
    _exit (gw_privd_run (sock, &cfg));
}

//  The helper, with the user's groups (its checks open files as the user).
static pid_t
s_fork_helper (const s_user_t *u, const gid_t *groups, size_t ngroups,
               const gw_jail_opts_t *jail, const char *qemu, int sv [2])
{
    if (socketpair (AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return -1;
    pid_t gateway = getpid (), pid = fork ();
    if (pid == 0) {
        close (sv [0]);
        if (setgroups (ngroups, groups) < 0)
            _exit (1);
        s_helper_main (sv [1], u, jail, qemu, gateway);
    }
    close (sv [1]);
    if (pid < 0)
        close (sv [0]);
    return pid;
}

static int
s_become (const s_user_t *u, const gid_t *groups, size_t ngroups, char *err, size_t errlen)
{
    if (setgroups (ngroups, groups) < 0 || setresgid (u->gid, u->gid, u->gid) < 0
    ||  setresuid (u->uid, u->uid, u->uid) < 0 || prctl (PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0
    ||  setuid (0) == 0) {                      //  no way back
        snprintf (err, errlen, "--user %s: cannot drop to uid %u: %s", u->name,
                  (unsigned) u->uid, strerror (errno ? errno : EPERM));
        return -EPERM;
    }
    prctl (PR_SET_DUMPABLE, 1);                 //  setuid cleared it: /proc stays ours
    setenv ("HOME", u->home, 1);
    setenv ("USER", u->name, 1);
    setenv ("LOGNAME", u->name, 1);
    const char *xdg [] = { "XDG_DATA_HOME", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME",
                           "XDG_CACHE_HOME" };
    for (size_t i = 0; i < 4; i++)
        unsetenv (xdg [i]);
    return 0;
}

int
gw_priv_drop (const char *user, const gw_jail_opts_t *jail, const char *qemu, char *err,
              size_t errlen)
{
    assert (user && jail && err);
    static gw_priv_t priv = { .sock = -1, .lock = PTHREAD_MUTEX_INITIALIZER };
    static gid_t groups [GW_JAIL_UID_COUNT + 2];
    s_user_t u;
    int rc = s_lookup (user, &u, err, errlen), sv [2];
    if (rc < 0)
        return rc;
    if (geteuid () != 0) {
        if (geteuid () == u.uid)
            return 0;
        snprintf (err, errlen, "--user %s: only root can change user", user);
        return -EPERM;
    }
    if (jail->mode == GW_JAIL_OFF || !qemu) {
        snprintf (err, errlen, "--user %s: %s", user, qemu ? "needs the jail (not --jail off)"
                  : "no QEMU binary found");
        return -EINVAL;
    }
    size_t ngroups = s_groups (&u, jail, groups);
    pid_t pid = s_fork_helper (&u, groups, ngroups, jail, qemu, sv);
    if (pid < 0 || (rc = s_become (&u, groups, ngroups, err, errlen)) < 0) {
        rc = pid < 0 ? -errno : rc;
        if (pid > 0) {
            kill (pid, SIGKILL);
            close (sv [0]);
        }
        return rc;
    }
    priv.sock = sv [0];
    priv.helper = pid;
    s_priv = &priv;
    gw_log (GW_LOG_INFO, "gateway.user", "user=%s uid=%u helper=%d home=%s", u.name,
            (unsigned) u.uid, (int) pid, u.home);
    return 0;
}
