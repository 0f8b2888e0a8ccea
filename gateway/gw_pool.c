/*  gw_pool - the warm pool daemon, its clone holders, and the gateway's
    side of a hand-out (see gw_pool.h, docs/snapshots.md).

    The daemon is single-threaded (no ZeroMQ), so it may fork holders
    without exec: a holder runs gw_template_restore itself, which makes it
    QEMU's parent and the thread its death signal is tied to.
*/
#include "gw_pool.h"
#include "gw_init.h"
#include "gw_log.h"
#include "gw_rundir.h"
#include "gw_template.h"

#include <czmq.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define S_MAX_CLONES 64
#define S_RESTORE_MS 15000          //  a holder's restore + reseed deadline
#define S_EST_PSS_MIB 64            //  assumed for a clone not yet measured
#define S_LINE 2048

struct _gw_pool_lease_t {
    int conn;                       //  the lifeline to the holder
    int kernel_fd, init_fd;
    int pid;                        //  QEMU
    char run_dir [PATH_MAX], console [PATH_MAX];
    bool ended;
};

int
gw_pool_socket_path (const gw_vm_config_t *cfg, char *out, size_t cap)
{
    char key [GW_TEMPLATE_KEY_LEN + 1], err [256], base [PATH_MAX];
    int rc = gw_template_key (cfg, key, sizeof key, err, sizeof err);
    if (rc == 0)
        rc = gw_rundir_default_base (base, sizeof base);
    if (rc == 0 && snprintf (out, cap, "%s/pool-%.12s.sock", base, key) >= (int) cap)
        rc = -ENAMETOOLONG;
    return rc;
}

//  ==========================================================================
//  Fd passing.

//  Send text with up to 2 fds (nfd may be 0).
static int
s_send_fds (int sock, const char *text, const int *fds, int nfd)
{
    union { char buf [CMSG_SPACE (2 * sizeof (int))]; struct cmsghdr align; } u;
    struct iovec iov = { (void *) text, strlen (text) };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
    if (nfd > 0) {
        memset (&u, 0, sizeof u);
        mh.msg_control = u.buf;
        mh.msg_controllen = CMSG_SPACE (nfd * sizeof (int));
        struct cmsghdr *c = CMSG_FIRSTHDR (&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN (nfd * sizeof (int));
        memcpy (CMSG_DATA (c), fds, nfd * sizeof (int));
    }
    ssize_t n = sendmsg (sock, &mh, MSG_NOSIGNAL);
    return n == (ssize_t) iov.iov_len ? 0 : -EPIPE;
}

//  One message: text (NUL-terminated) and the fds that came with it
//  (unused slots -1). Bytes read, 0 at end of stream, or -errno.
static ssize_t
s_recv_fds (int sock, char *text, size_t cap, int fds [2])
{
    union { char buf [CMSG_SPACE (2 * sizeof (int))]; struct cmsghdr align; } u;
    struct iovec iov = { text, cap - 1 };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                         .msg_controllen = sizeof u.buf };
    fds [0] = fds [1] = -1;
    ssize_t n = recvmsg (sock, &mh, MSG_CMSG_CLOEXEC);
    if (n < 0)
        return -errno;
    text [n] = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR (&mh); c; c = CMSG_NXTHDR (&mh, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            size_t k = (c->cmsg_len - CMSG_LEN (0)) / sizeof (int);
            for (size_t i = 0; i < k; i++) {
                int fd;
                memcpy (&fd, CMSG_DATA (c) + i * sizeof (int), sizeof fd);
                if (i < 2)
                    fds [i] = fd;
                else
                    close (fd);                 //  more than we asked for
            }
        }
    return n;
}

//  ==========================================================================
//  The holder: one clone, its lifeline.

//  After hand-out: the gateway's connection is the clone's lifeline.
static void
s_holder_serve (gw_vm_t *vm, int conn)
{
    while (true) {
        struct pollfd p = { conn, POLLIN, 0 };
        poll (&p, 1, 100);
        int status = 0;
        if (gw_vm_reap (vm, &status) == 0) {
            char line [64];
            snprintf (line, sizeof line, "{\"exited\": %d}\n", status);
            s_send_fds (conn, line, NULL, 0);
            return;
        }
        if (p.revents) {
            char buf [64];
            ssize_t n = read (conn, buf, sizeof buf);
            if (n <= 0)
                return;                         //  the gateway is gone: so is its VM
            if (n >= 4 && memcmp (buf, "kill", 4) == 0)
                gw_vm_kill (vm);
        }
    }
}

//  Hand the clone to the gateway on conn: ports, pid, paths.
static int
s_holder_hand_out (gw_vm_t *vm, gw_init_t **init_p, int *kfd, int conn)
{
    json_t *j = json_pack ("{s:b, s:i, s:s, s:s}", "ok", 1, "pid", gw_vm_pid (vm),
                           "run_dir", gw_vm_run_dir (vm), "console", gw_vm_console_log (vm));
    char *text = json_dumps (j, JSON_COMPACT);
    json_decref (j);
    char line [S_LINE];
    snprintf (line, sizeof line, "%s\n", text);
    free (text);
    int fds [2] = { *kfd, gw_init_fd (*init_p) };
    int rc = s_send_fds (conn, line, fds, 2);
    gw_init_destroy (init_p);                   //  the gateway has its own copies now
    close (*kfd);
    *kfd = -1;
    return rc;
}

static void
s_holder_main (const gw_vm_config_t *cfg, const char *template_dir, int sock)
{
    char err [512] = "";
    int rc = -EIO, kfd = -1;
    gw_init_t *init = NULL;
    gw_vm_t *vm = NULL;
    gw_template_t *t = gw_template_open (template_dir, cfg, &rc, err, sizeof err);
    if (t)
        vm = gw_template_restore (t, cfg, S_RESTORE_MS, err, sizeof err);
    rc = vm ? gw_template_reseed (vm, S_RESTORE_MS, &init, &kfd, err, sizeof err) : -EIO;
    if (rc == 0)
        rc = gw_template_warm (kfd, init, S_RESTORE_MS, err, sizeof err);
    gw_template_destroy (&t);
    char line [S_LINE];
    if (rc == 0)
        snprintf (line, sizeof line, "ready %d\n", gw_vm_pid (vm));
    else
        snprintf (line, sizeof line, "failed %.400s\n", err);
    if (s_send_fds (sock, line, NULL, 0) < 0 || rc < 0)
        goto done;
    int fds [2];
    ssize_t n = s_recv_fds (sock, line, sizeof line, fds);   //  blocks until hand-out
    close (fds [1] >= 0 ? fds [1] : -1);
    if (n > 0 && fds [0] >= 0 && s_holder_hand_out (vm, &init, &kfd, fds [0]) == 0) {
        close (sock);                           //  the daemon may go now
        sock = -1;
        s_holder_serve (vm, fds [0]);
    }
    if (fds [0] >= 0)
        close (fds [0]);
done:
    gw_init_destroy (&init);
    if (kfd >= 0)
        close (kfd);
    gw_vm_destroy (&vm);
    _exit (rc == 0 ? 0 : 1);
}

//  ==========================================================================
//  The daemon.

typedef struct {
    pid_t pid;                      //  the holder
    int sock;                       //  our end of its socketpair
    int qemu;                       //  its QEMU, once ready
    bool ready;
    int64_t since;
} s_clone_t;

typedef struct {
    const gw_vm_config_t *cfg;
    gw_pool_opts_t opts;
    int listen_fd, sig_fd;
    s_clone_t clones [S_MAX_CLONES];
    unsigned n;
    int64_t last_use;
    unsigned handed, failed;
} s_daemon_t;

static long
s_pss_mib (int pid)
{
    char path [64], line [256];
    long kib = 0;
    snprintf (path, sizeof path, "/proc/%d/smaps_rollup", pid);
    FILE *f = fopen (path, "re");
    while (f && fgets (line, sizeof line, f))
        if (strncmp (line, "Pss:", 4) == 0)
            kib = atol (line + 4);
    if (f)
        fclose (f);
    return kib / 1024;
}

static long
s_pool_pss (s_daemon_t *d)
{
    long mib = 0;
    for (unsigned i = 0; i < d->n; i++)
        mib += d->clones [i].ready ? s_pss_mib (d->clones [i].qemu) : S_EST_PSS_MIB;
    return mib;
}

static void
s_log_size (s_daemon_t *d, const char *why)
{
    unsigned ready = 0;
    for (unsigned i = 0; i < d->n; i++)
        ready += d->clones [i].ready;
    gw_log (GW_LOG_INFO, "pool.size", "why=%s ready=%u starting=%u target=%u pss_mib=%ld "
            "budget_mib=%u handed_out=%u failed=%u", why, ready, d->n - ready, d->opts.size,
            s_pool_pss (d), d->opts.budget_mib, d->handed, d->failed);
}

static void
s_fork_holder (s_daemon_t *d)
{
    int sp [2];
    if (socketpair (AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
        return;
    pid_t pid = fork ();
    if (pid == 0) {
        close (sp [0]);
        setpgid (0, 0);                         //  a Ctrl-C at the daemon spares sessions
        close (d->listen_fd);
        close (d->sig_fd);
        for (unsigned i = 0; i < d->n; i++)
            close (d->clones [i].sock);
        sigset_t none;
        sigemptyset (&none);
        sigprocmask (SIG_SETMASK, &none, NULL);
        signal (SIGTERM, SIG_DFL);
        s_holder_main (d->cfg, d->opts.template_dir, sp [1]);
    }
    close (sp [1]);
    if (pid < 0) {
        close (sp [0]);
        return;
    }
    d->clones [d->n++] = (s_clone_t) { .pid = pid, .sock = sp [0], .since = zclock_mono () };
}

//  Keep size clones, within the memory budget.
static void
s_refill (s_daemon_t *d)
{
    bool added = false;
    while (d->n < d->opts.size && d->n < S_MAX_CLONES
       &&  s_pool_pss (d) + S_EST_PSS_MIB <= (long) d->opts.budget_mib) {
        s_fork_holder (d);
        added = true;
    }
    if (added)
        s_log_size (d, "refill");
}

static void
s_drop_clone (s_daemon_t *d, unsigned i)
{
    close (d->clones [i].sock);                 //  a holder not handed out dies of this
    d->clones [i] = d->clones [--d->n];
}

//  A holder said "ready PID" or "failed why", or went away.
static void
s_on_holder (s_daemon_t *d, unsigned i)
{
    char line [S_LINE];
    int fds [2];
    ssize_t n = s_recv_fds (d->clones [i].sock, line, sizeof line, fds);
    for (int k = 0; k < 2; k++)
        if (fds [k] >= 0)
            close (fds [k]);
    int qemu = 0;
    if (n > 0 && sscanf (line, "ready %d", &qemu) == 1 && qemu > 0) {
        d->clones [i].ready = true;
        d->clones [i].qemu = qemu;
        gw_log (GW_LOG_INFO, "pool.clone_ready", "holder=%d qemu=%d ms=%lld",
                (int) d->clones [i].pid, qemu, (long long) (zclock_mono () - d->clones [i].since));
        s_log_size (d, "ready");
        return;
    }
    line [strcspn (line, "\n")] = 0;
    gw_log (GW_LOG_WARN, "pool.clone_failed", "holder=%d reason=\"%.300s\"",
            (int) d->clones [i].pid, n > 0 ? line : "the holder exited");
    d->failed++;
    kill (d->clones [i].pid, SIGKILL);          //  replaced on the next refill
    s_drop_clone (d, i);
}

//  A gateway asks for a clone: pass its connection to a ready holder.
static void
s_on_client (s_daemon_t *d)
{
    int conn = accept4 (d->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (conn < 0)
        return;
    char buf [16] = "";
    struct pollfd p = { conn, POLLIN, 0 };
    if (poll (&p, 1, 1000) <= 0 || read (conn, buf, sizeof buf - 1) < 4
    ||  strncmp (buf, "take", 4) != 0) {
        close (conn);
        return;
    }
    d->last_use = zclock_mono ();
    unsigned i = 0;
    while (i < d->n && !d->clones [i].ready)
        i++;
    if (i == d->n) {
        s_send_fds (conn, "{\"ok\": false, \"error\": \"no clone ready\"}\n", NULL, 0);
        gw_log (GW_LOG_INFO, "pool.empty", "starting=%u", d->n);
    }
    else if (s_send_fds (d->clones [i].sock, "take", &conn, 1) == 0) {
        d->handed++;
        gw_log (GW_LOG_INFO, "pool.handed_out", "holder=%d qemu=%d", (int) d->clones [i].pid,
                d->clones [i].qemu);
        s_drop_clone (d, i);                    //  the holder serves the gateway now
        s_log_size (d, "hand-out");
    }
    close (conn);
    s_refill (d);
}

static int
s_listen (const char *path)
{
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    if (strlen (path) >= sizeof addr.sun_path)
        return -ENAMETOOLONG;
    strcpy (addr.sun_path, path);
    int fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    //  A live daemon answers on it; a dead one's socket file is replaced.
    if (connect (fd, (struct sockaddr *) &addr, sizeof addr) == 0) {
        close (fd);
        return -EADDRINUSE;
    }
    unlink (path);
    char dir [sizeof addr.sun_path];
    snprintf (dir, sizeof dir, "%s", path);
    if (strrchr (dir, '/'))
        *strrchr (dir, '/') = 0;
    mkdir (dir, 0700);                          //  a fresh host: no run base yet
    mode_t old = umask (0077);
    int rc = bind (fd, (struct sockaddr *) &addr, sizeof addr) < 0 || listen (fd, 64) < 0
           ? -errno : 0;
    umask (old);
    if (rc < 0) {
        close (fd);
        return rc;
    }
    return fd;
}

static bool
s_daemon_step (s_daemon_t *d)
{
    struct pollfd p [S_MAX_CLONES + 2];
    p [0] = (struct pollfd) { d->listen_fd, POLLIN, 0 };
    p [1] = (struct pollfd) { d->sig_fd, POLLIN, 0 };
    unsigned n = d->n;
    for (unsigned i = 0; i < n; i++)
        p [i + 2] = (struct pollfd) { d->clones [i].sock, POLLIN, 0 };
    poll (p, n + 2, 1000);
    struct signalfd_siginfo si;
    bool stop = false;
    while (read (d->sig_fd, &si, sizeof si) == sizeof si)
        stop |= si.ssi_signo != SIGCHLD;
    while (waitpid (-1, NULL, WNOHANG) > 0)
        ;                                       //  holders that finished
    for (unsigned i = n; i-- > 0;)              //  backwards: drop moves the last one
        if (p [i + 2].revents)
            s_on_holder (d, i);
    if (p [0].revents)
        s_on_client (d);
    s_refill (d);
    if (d->opts.idle_s && zclock_mono () - d->last_use > (int64_t) d->opts.idle_s * 1000) {
        gw_log (GW_LOG_INFO, "pool.idle", "idle_s=%u", d->opts.idle_s);
        stop = true;
    }
    return !stop;
}

int
gw_pool_daemon_run (const gw_vm_config_t *cfg, const gw_pool_opts_t *opts)
{
    assert (cfg && opts && opts->socket_path && opts->template_dir);
    s_daemon_t d = { .cfg = cfg, .opts = *opts, .last_use = zclock_mono () };
    sigset_t set;
    sigemptyset (&set);
    sigaddset (&set, SIGTERM);
    sigaddset (&set, SIGINT);
    sigaddset (&set, SIGHUP);
    sigaddset (&set, SIGCHLD);
    sigprocmask (SIG_BLOCK, &set, NULL);
    signal (SIGPIPE, SIG_IGN);
    d.sig_fd = signalfd (-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    d.listen_fd = s_listen (opts->socket_path);
    if (d.listen_fd < 0) {
        gw_log (GW_LOG_ERROR, "pool.refused", "socket=%s reason=\"%s\"", opts->socket_path,
                strerror (-d.listen_fd));
        close (d.sig_fd);
        return d.listen_fd == -EADDRINUSE ? 3 : 1;
    }
    gw_log (GW_LOG_INFO, "pool.listening", "socket=%s size=%u budget_mib=%u pid=%d",
            opts->socket_path, opts->size, opts->budget_mib, (int) getpid ());
    s_refill (&d);
    while (s_daemon_step (&d))
        ;
    while (d.n)                                 //  clones not handed out go with us
        s_drop_clone (&d, d.n - 1);
    unlink (opts->socket_path);
    close (d.listen_fd);
    close (d.sig_fd);
    gw_log (GW_LOG_INFO, "pool.stopped", "handed_out=%u failed=%u", d.handed, d.failed);
    return 0;
}

//  ==========================================================================
//  The gateway's side.

static int
s_parse_grant (gw_pool_lease_t *self, const char *line, char *err, size_t errlen)
{
    json_t *j = json_loads (line, 0, NULL);
    const char *run_dir = json_string_value (json_object_get (j, "run_dir"));
    const char *console = json_string_value (json_object_get (j, "console"));
    json_int_t pid = json_integer_value (json_object_get (j, "pid"));
    int rc = 0;
    if (!json_is_true (json_object_get (j, "ok"))) {
        snprintf (err, errlen, "pool: %s", json_string_value (json_object_get (j, "error"))
                  ?: "bad answer");
        rc = j ? -EAGAIN : -EPROTO;
    }
    else if (!run_dir || !console || pid <= 1 || pid > INT32_MAX
         ||  self->kernel_fd < 0 || self->init_fd < 0) {
        snprintf (err, errlen, "pool: malformed hand-out");
        rc = -EPROTO;
    }
    else {
        self->pid = (int) pid;
        snprintf (self->run_dir, sizeof self->run_dir, "%s", run_dir);
        snprintf (self->console, sizeof self->console, "%s", console);
    }
    json_decref (j);
    return rc;
}

int
gw_pool_take (const char *socket_path, int timeout_ms, gw_pool_lease_t **lease_p,
              char *err, size_t errlen)
{
    assert (socket_path && lease_p);
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    if (strlen (socket_path) >= sizeof addr.sun_path)
        return -ENAMETOOLONG;
    strcpy (addr.sun_path, socket_path);
    gw_pool_lease_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->kernel_fd = self->init_fd = -1;
    self->conn = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int rc = self->conn < 0 || connect (self->conn, (struct sockaddr *) &addr, sizeof addr) < 0
           ? -errno : 0;
    if (rc == 0 && write (self->conn, "take\n", 5) != 5)
        rc = -EPIPE;
    struct pollfd p = { self->conn, POLLIN, 0 };
    if (rc == 0 && poll (&p, 1, timeout_ms) <= 0)
        rc = -ETIMEDOUT;
    char line [S_LINE];
    int fds [2] = { -1, -1 };
    ssize_t n = rc == 0 ? s_recv_fds (self->conn, line, sizeof line, fds) : 0;
    self->kernel_fd = fds [0];
    self->init_fd = fds [1];
    if (rc == 0 && n <= 0)
        rc = -EPIPE;
    if (rc == 0)
        rc = s_parse_grant (self, line, err, errlen);
    if (rc < 0)
        goto fail;
    *lease_p = self;
    return 0;
fail:
    if (!err [0])
        snprintf (err, errlen, "pool %s: %s", socket_path, strerror (-rc));
    gw_pool_lease_destroy (&self);
    return rc;
}

void
gw_pool_lease_destroy (gw_pool_lease_t **self_p)
{
    assert (self_p);
    gw_pool_lease_t *self = *self_p;
    if (!self)
        return;
    int fds [3] = { self->conn, self->kernel_fd, self->init_fd };
    for (int i = 0; i < 3; i++)
        if (fds [i] >= 0)
            close (fds [i]);
    free (self);
    *self_p = NULL;
}

int gw_pool_lease_fd (const gw_pool_lease_t *self) { return self->conn; }
int gw_pool_lease_pid (const gw_pool_lease_t *self) { return self->ended ? 0 : self->pid; }
const char *gw_pool_lease_run_dir (const gw_pool_lease_t *self) { return self->run_dir; }
const char *gw_pool_lease_console (const gw_pool_lease_t *self) { return self->console; }

int
gw_pool_lease_take_kernel_fd (gw_pool_lease_t *self)
{
    int fd = self->kernel_fd;
    self->kernel_fd = -1;
    return fd;
}

int
gw_pool_lease_take_init_fd (gw_pool_lease_t *self)
{
    int fd = self->init_fd;
    self->init_fd = -1;
    return fd;
}

int
gw_pool_lease_kill (gw_pool_lease_t *self)
{
    assert (self);
    if (self->ended)
        return -ESRCH;
    return write (self->conn, "kill\n", 5) == 5 ? 0 : -EPIPE;
}

int
gw_pool_lease_reap (gw_pool_lease_t *self, int *wstatus)
{
    assert (self);
    if (self->ended)
        return -ECHILD;
    char line [256];
    ssize_t n = recv (self->conn, line, sizeof line - 1, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return -EAGAIN;
    int status = SIGKILL;                       //  the holder vanished: so did QEMU
    if (n > 0) {
        line [n] = 0;
        json_t *j = json_loads (line, JSON_DISABLE_EOF_CHECK, NULL);
        json_t *st = json_object_get (j, "exited");
        if (json_is_integer (st))
            status = (int) json_integer_value (st);
        json_decref (j);
    }
    self->ended = true;
    if (wstatus)
        *wstatus = status;
    return 0;
}
