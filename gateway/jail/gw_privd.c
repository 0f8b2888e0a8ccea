/*  gw_privd - the privileged helper (see gw_privd.h). */
#include "jail/gw_privd.h"
#include "base/gw_fdborrow.h"
#include "base/gw_log.h"
#include "jail/gw_vmspawn.h"
#include "ch_sig.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    pid_t pid;                                  //  0: a free entry
    gw_jail_t *jail;
    bool told;                                  //  its exit was passed on
} s_vm_t;

typedef struct {
    const gw_privd_cfg_t *cfg;
    s_vm_t vms [GW_PRIVD_VMS];
} s_self_t;

//  ==========================================================================
//  The checks.

//  Open path as the service user would: its uid and gid for the checks
//  (this process has its supplementary groups already).
static int
s_open_as_user (const gw_privd_cfg_t *cfg, const char *path)
{
    setfsgid (cfg->gid);
    setfsuid (cfg->uid);
    int fd = open (path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    int e = errno;
    setfsuid (0);
    setfsgid (0);
    errno = e;
    return fd;
}

static bool
s_jailed_uid (const gw_privd_cfg_t *cfg, uid_t uid)
{
    unsigned base = cfg->jail.uid_base ? cfg->jail.uid_base : GW_JAIL_UID_BASE;
    return uid >= base && uid - base < GW_JAIL_UID_COUNT;
}

int
gw_privd_vet (void *arg, const char *path, const struct stat *st, gw_jail_vet_t how)
{
    const gw_privd_cfg_t *cfg = (const gw_privd_cfg_t *) arg;
    assert (cfg && path);
    if (path [0] != '/')
        return -EINVAL;
    if (how == GW_JAIL_VET_READ) {
        int fd = s_open_as_user (cfg, path);
        if (fd < 0)
            return -errno;
        close (fd);
        return 0;
    }
    if (!st)
        return -EINVAL;
    if (st->st_uid == cfg->uid || (how == GW_JAIL_VET_CHMOD && s_jailed_uid (cfg, st->st_uid)))
        return 0;
    gw_log (GW_LOG_WARN, "privd.refused", "path=%s owner=%u reason=\"not the service "
            "user's file\"", path, (unsigned) st->st_uid);
    return -EPERM;
}

static bool
s_plain_name (const char *name)
{
    return name && name [0] && !strchr (name, '/') && strcmp (name, ".") != 0
        && strcmp (name, "..") != 0;
}

int
gw_privd_check_spawn (const gw_privd_cfg_t *cfg, const gw_privmsg_t *msg, char *err,
                      size_t errlen)
{
    assert (cfg && msg && err);
    const char *why = NULL;
    if (msg->argc < 1 || strcmp (msg->argv [0], cfg->qemu) != 0)
        why = "the binary is not the QEMU this helper was started with";
    else if (!msg->path [GW_PRIVMSG_RUN_DIR] || msg->path [GW_PRIVMSG_RUN_DIR][0] != '/')
        why = "the run dir is not an absolute path";
    else if (!s_plain_name (msg->path [GW_PRIVMSG_DISK]))
        why = "the disk is not a plain name in the run dir";
    else if (!msg->path [GW_PRIVMSG_KERNEL] || !msg->path [GW_PRIVMSG_INITRD]
         ||  !msg->path [GW_PRIVMSG_ROOTFS])
        why = "an image file is missing";
    else if (msg->mem_mib < 16 || msg->mem_mib > (1u << 20))
        why = "the guest RAM is out of range";
    else if (msg->mem_share && !msg->path [GW_PRIVMSG_MEM_PATH])
        why = "a shared RAM file without a path";
    if (why)
        snprintf (err, errlen, "privd: spawn refused: %s", why);
    return why ? -EPERM : 0;
}

//  ==========================================================================
//  The requests.

static s_vm_t *
s_find (s_self_t *self, pid_t pid)
{
    for (int i = 0; pid > 0 && i < GW_PRIVD_VMS; i++)
        if (self->vms [i].pid == pid)
            return &self->vms [i];
    return NULL;
}

//  The options it was started with, never the request's: always on, vetted.
static gw_jail_opts_t
s_jail_opts (const gw_privd_cfg_t *cfg)
{
    gw_jail_opts_t opts = cfg->jail;
    opts.mode = GW_JAIL_ON;
    opts.vet = gw_privd_vet;
    opts.vet_arg = (void *) cfg;
    opts.file_uid = cfg->uid;
    opts.file_gid = cfg->gid;
    return opts;
}

//  Jail and start QEMU with the gateway's log and null fds; the reply
//  carries a pidfd of it.
static int
s_spawn (s_self_t *self, const gw_privmsg_t *msg, const int fds [2], gw_privreply_t *r,
         int *pidfd_p)
{
    s_vm_t *slot = NULL;
    for (int i = 0; !slot && i < GW_PRIVD_VMS; i++)
        slot = self->vms [i].pid ? NULL : &self->vms [i];
    if (!slot || fds [0] < 0 || fds [1] < 0) {
        snprintf (r->text, sizeof r->text, "privd: %s", slot ? "no log or null descriptor"
                  : "too many VMs for one gateway");
        return slot ? -EBADF : -EMFILE;
    }
    int rc = gw_privd_check_spawn (self->cfg, msg, r->text, sizeof r->text);
    if (rc < 0)
        return rc;
    gw_jail_opts_t opts = s_jail_opts (self->cfg);
    const char *const *p = msg->path;
    gw_jail_vm_t vm = { .qemu = msg->argv [0], .run_dir = p [GW_PRIVMSG_RUN_DIR],
                        .disk = p [GW_PRIVMSG_DISK], .mem_path = p [GW_PRIVMSG_MEM_PATH],
                        .files = { p [GW_PRIVMSG_KERNEL], p [GW_PRIVMSG_INITRD],
                                   p [GW_PRIVMSG_ROOTFS] },
                        .mem_share = msg->mem_share != 0, .kvm = msg->kvm != 0,
                        .mem_mib = msg->mem_mib };
    gw_jail_t *jail = gw_jail_new (&opts, &vm, &rc, r->text, sizeof r->text);
    if (!jail)
        return rc < 0 ? rc : -EPERM;
    gw_vmspawn_t sp = { .argv = (char **) msg->argv, .cwd = vm.run_dir, .log_fd = fds [0],
                        .null_fd = fds [1], .fsize = (rlim_t) msg->fsize, .parent = getpid (),
                        .jail = jail };
    pid_t pid = 0;
    if ((rc = gw_vmspawn (&sp, &pid, r->text, sizeof r->text)) < 0) {
        gw_jail_destroy (&jail);
        return rc;
    }
    *slot = (s_vm_t) { .pid = pid, .jail = jail };
    *pidfd_p = (int) syscall (SYS_pidfd_open, pid, 0);
    r->pid = pid;
    r->uid = gw_jail_uid (jail);
    snprintf (r->kind, sizeof r->kind, "%s", gw_jail_kind (jail));
    snprintf (r->cgroup, sizeof r->cgroup, "%s", gw_jail_cgroup (jail) ? gw_jail_cgroup (jail)
              : "");
    return 0;
}

static void
s_release (s_vm_t *vm, int wstatus, char *why, size_t cap)
{
    char none [8];
    if (!gw_jail_reaped (vm->jail, wstatus, cap ? why : none, cap ? cap : sizeof none) && cap)
        why [0] = '\0';
    gw_jail_destroy (&vm->jail);
    *vm = (s_vm_t) { 0 };
}

static int
s_reap (s_self_t *self, const gw_privmsg_t *msg, gw_privreply_t *r)
{
    s_vm_t *vm = s_find (self, msg->pid);
    if (!vm)
        return -ECHILD;
    int status = 0;
    pid_t got;
    while ((got = waitpid (vm->pid, &status, msg->block ? 0 : WNOHANG)) < 0 && errno == EINTR)
        ;
    if (got == 0)
        return -EAGAIN;
    r->wstatus = got < 0 ? 0 : status;
    s_release (vm, r->wstatus, r->text, sizeof r->text);
    return 0;
}

static int
s_request (s_self_t *self, const gw_privmsg_t *msg, const int fds [2], gw_privreply_t *r,
           int *fd_out)
{
    s_vm_t *vm = msg->op == GW_PRIV_SPAWN ? NULL : s_find (self, msg->pid);
    switch (msg->op) {
    case GW_PRIV_SPAWN:
        return s_spawn (self, msg, fds, r, fd_out);
    case GW_PRIV_KILL:
        if (!vm)
            return -ESRCH;
        return killpg (vm->pid, SIGKILL) == 0 || kill (vm->pid, SIGKILL) == 0 ? 0 : -errno;
    case GW_PRIV_REAP:
        return s_reap (self, msg, r);
    case GW_PRIV_CONSOLE:
        if (!vm || !msg->path [0])
            return vm ? -EINVAL : -ESRCH;
        return gw_fdborrow (vm->pid, msg->path [0], fd_out);
    default:
        return -EINVAL;
    }
}

//  ==========================================================================
//  The loop.

//  One request: its fds (at most 2) and its bytes, then one reply with at
//  most one fd. -EPIPE once the gateway is gone.
static int
s_serve_one (s_self_t *self, int sock)
{
    static uint8_t buf [GW_PRIVMSG_MAX];
    union { struct cmsghdr h; char space [CMSG_SPACE (2 * sizeof (int))]; } in;
    struct iovec iov = { buf, sizeof buf };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = in.space,
                         .msg_controllen = sizeof in.space };
    ssize_t n = recvmsg (sock, &mh, MSG_CMSG_CLOEXEC);
    if (n <= 0)
        return n < 0 && errno == EINTR ? 0 : -EPIPE;
    int fds [2] = { -1, -1 }, fd_out = -1;
    struct cmsghdr *c = CMSG_FIRSTHDR (&mh);
    if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
        memcpy (fds, CMSG_DATA (c), c->cmsg_len - CMSG_LEN (0) >= sizeof fds ? sizeof fds
                : c->cmsg_len - CMSG_LEN (0));
    gw_privmsg_t msg;
    gw_privreply_t r = { 0 };
    r.rc = (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ? -EMSGSIZE
         : gw_privmsg_decode (&msg, buf, (size_t) n);
    if (r.rc == 0)
        r.rc = s_request (self, &msg, fds, &r, &fd_out);
    else
        snprintf (r.text, sizeof r.text, "privd: a malformed request");
    union { struct cmsghdr h; char space [CMSG_SPACE (sizeof (int))]; } out;
    struct iovec oiov = { &r, sizeof r };
    struct msghdr om = { .msg_iov = &oiov, .msg_iovlen = 1 };
    if (fd_out >= 0) {
        om.msg_control = out.space;
        om.msg_controllen = sizeof out.space;
        struct cmsghdr *oc = CMSG_FIRSTHDR (&om);
        *oc = (struct cmsghdr) { .cmsg_len = CMSG_LEN (sizeof (int)), .cmsg_level = SOL_SOCKET,
                                 .cmsg_type = SCM_RIGHTS };
        memcpy (CMSG_DATA (oc), &fd_out, sizeof fd_out);
    }
    ssize_t sent = sendmsg (sock, &om, MSG_NOSIGNAL);
    for (int i = 0; i < 2; i++)
        if (fds [i] >= 0)
            close (fds [i]);
    if (fd_out >= 0)
        close (fd_out);
    return sent == (ssize_t) sizeof r ? 0 : -EPIPE;
}

//  A VM that exited is passed on once: the gateway's SIGCHLD path reaps it.
static void
s_on_child (s_self_t *self)
{
    bool any = false;
    for (int i = 0; i < GW_PRIVD_VMS; i++) {
        s_vm_t *vm = &self->vms [i];
        siginfo_t si = { 0 };
        if (vm->pid && !vm->told
        &&  waitid (P_PID, (id_t) vm->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0
        &&  si.si_pid == vm->pid)
            any = vm->told = true;
    }
    if (any)
        kill (self->cfg->gateway, SIGCHLD);
}

//  privd's own signals, whatever the gateway had (a fork keeps them all, and
//  the other modes fork privd before any signal set-up): SIGCHLD through a
//  signalfd, nothing else blocked. SIGINT, SIGTERM and SIGHUP, which reach the
//  gateway's whole process group, are ignored: privd ends with the gateway
//  (its socket, PR_SET_PDEATHSIG), after the gateway's shutdown needed it.
static int
s_signals (void)
{
    struct sigaction sa;
    memset (&sa, 0, sizeof sa);
    for (int sig = 1; sig < NSIG; sig++) {
        bool ignore = sig == SIGINT || sig == SIGTERM || sig == SIGHUP;
        sa.sa_handler = ignore ? SIG_IGN : SIG_DFL;
        sigaction (sig, &sa, NULL);
    }
    return ch_sig_fd ((const int []) { SIGCHLD, 0 }, true);
}

int
gw_privd_run (int sock, const gw_privd_cfg_t *cfg)
{
    assert (cfg && cfg->qemu);
    static s_self_t self;
    self.cfg = cfg;
    int sfd = s_signals ();
    gw_log (GW_LOG_INFO, "privd.started", "pid=%d gateway=%d uid=%u", (int) getpid (),
            (int) cfg->gateway, (unsigned) cfg->uid);
    for (;;) {
        struct pollfd pf [2] = { { sock, POLLIN, 0 }, { sfd, POLLIN, 0 } };
        if (poll (pf, 2, -1) < 0 && errno != EINTR)
            break;
        struct signalfd_siginfo si;
        while (sfd >= 0 && read (sfd, &si, sizeof si) == (ssize_t) sizeof si)
            s_on_child (&self);
        if ((pf [0].revents & (POLLIN | POLLHUP | POLLERR)) && s_serve_one (&self, sock) < 0)
            break;
    }
    for (int i = 0; i < GW_PRIVD_VMS; i++)      //  the gateway is gone: so are its VMs
        if (self.vms [i].pid) {
            killpg (self.vms [i].pid, SIGKILL);
            kill (self.vms [i].pid, SIGKILL);
            int status = 0;
            while (waitpid (self.vms [i].pid, &status, 0) < 0 && errno == EINTR)
                ;
            s_release (&self.vms [i], status, NULL, 0);
        }
    gw_log (GW_LOG_INFO, "privd.exit", "pid=%d", (int) getpid ());
    return 0;
}
