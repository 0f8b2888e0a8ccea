/*  gw_poold - the warm pool daemon and its clone holders (see gw_poold.h,
    docs/snapshots.md).
*/
#include "snap/gw_poold.h"
#include "base/gw_fdpass.h"
#include "base/gw_log.h"
#include "ch_clock.h"
#include "ch_sig.h"

#include <assert.h>
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define S_MAX_CLONES 64
#define S_LINE 2048

//  ==========================================================================
//  The holder: one clone, its lifeline.

//  After hand-out: the gateway's connection is the clone's lifeline.
static void
s_holder_serve (const gw_poold_ops_t *ops, void *clone, int conn)
{
    while (true) {
        struct pollfd p = { conn, POLLIN, 0 };
        poll (&p, 1, 100);
        int status = 0;
        if (ops->reap (ops->ctx, clone, &status) == 0) {
            char line [64];
            snprintf (line, sizeof line, "{\"exited\": %d}\n", status);
            gw_fdpass_send (conn, line, NULL, 0);
            return;
        }
        if (p.revents) {
            char buf [64];
            ssize_t n = read (conn, buf, sizeof buf);
            if (n <= 0)
                return;                         //  the gateway is gone: so is its VM
            if (n >= 4 && memcmp (buf, "kill", 4) == 0)
                ops->kill (ops->ctx, clone);
        }
    }
}

//  Hand the clone to the gateway on conn: pid, paths, and its two ports.
static int
s_holder_hand_out (const gw_poold_ops_t *ops, void *clone, int conn)
{
    gw_poold_info_t info = { 0 };
    ops->describe (ops->ctx, clone, &info);
    json_t *j = json_pack ("{s:b, s:i, s:s, s:s}", "ok", 1, "pid", info.pid,
                           "run_dir", info.run_dir ?: "", "console", info.console ?: "");
    char *text = json_dumps (j, JSON_COMPACT);
    json_decref (j);
    char line [S_LINE];
    snprintf (line, sizeof line, "%s\n", text);
    free (text);
    int fds [2] = { -1, -1 };
    int rc = ops->take_ports (ops->ctx, clone, &fds [0], &fds [1]);
    if (rc == 0)
        rc = gw_fdpass_send (conn, line, fds, 2);
    for (int i = 0; i < 2; i++)
        if (fds [i] >= 0)
            close (fds [i]);                    //  the gateway has its own copies now
    return rc;
}

//  Wait for the hand-out (or the daemon's end), then serve the lifeline.
static void
s_holder_wait (const gw_poold_ops_t *ops, void *clone, int sock)
{
    char line [S_LINE];
    int fds [GW_FDPASS_MAX];
    ssize_t n = gw_fdpass_recv (sock, line, sizeof line, fds);     //  blocks
    if (fds [1] >= 0)
        close (fds [1]);
    if (n > 0 && fds [0] >= 0 && s_holder_hand_out (ops, clone, fds [0]) == 0) {
        close (sock);                           //  the daemon may go now
        s_holder_serve (ops, clone, fds [0]);
    }
    if (fds [0] >= 0)
        close (fds [0]);
}

static void
s_holder_main (const gw_poold_ops_t *ops, unsigned serial, int sock)
{
    char err [512] = "", line [S_LINE];
    void *clone = NULL;
    int rc = ops->restore (ops->ctx, serial, &clone, err, sizeof err);
    if (rc == 0)
        rc = ops->warm (ops->ctx, clone, err, sizeof err);
    gw_poold_info_t info = { 0 };
    if (rc == 0)
        ops->describe (ops->ctx, clone, &info);
    if (rc == 0)
        snprintf (line, sizeof line, "ready %d\n", info.pid);
    else
        snprintf (line, sizeof line, "failed %.400s\n", err [0] ? err : strerror (-rc));
    if (gw_fdpass_send (sock, line, NULL, 0) == 0 && rc == 0)
        s_holder_wait (ops, clone, sock);
    if (clone)
        ops->destroy (ops->ctx, &clone);
    _exit (rc == 0 ? 0 : 1);
}

//  ==========================================================================
//  The daemon.

typedef struct {
    pid_t pid;                      //  the holder
    int sock;                       //  our end of its socketpair
    int qemu;                       //  its QEMU, once ready
    bool ready;
    unsigned ready_seq;             //  hand-out order: the lowest first
    int64_t since;
} s_clone_t;

typedef struct {
    const gw_poold_ops_t *ops;
    gw_poold_opts_t opts;
    int listen_fd, sig_fd;
    s_clone_t clones [S_MAX_CLONES];
    unsigned n;
    unsigned serial, ready_seq;     //  holders started, clones made ready
    int64_t last_use;
    unsigned handed, failed;
} s_daemon_t;

static long
s_pool_pss (s_daemon_t *d)
{
    long mib = 0;
    for (unsigned i = 0; i < d->n; i++)
        mib += d->clones [i].ready ? d->ops->pss_mib (d->ops->ctx, d->clones [i].qemu)
                                   : GW_POOLD_EST_MIB;
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

//  In the new holder: nothing of the daemon's but its own socket.
static void
s_holder_start (s_daemon_t *d, int sock)
{
    setpgid (0, 0);                             //  a Ctrl-C at the daemon spares sessions
    close (d->listen_fd);
    close (d->sig_fd);
    for (unsigned i = 0; i < d->n; i++)
        close (d->clones [i].sock);
    sigset_t none;
    sigemptyset (&none);
    sigprocmask (SIG_SETMASK, &none, NULL);
    signal (SIGTERM, SIG_DFL);
    s_holder_main (d->ops, d->serial, sock);
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
        s_holder_start (d, sp [1]);             //  does not return
    }
    close (sp [1]);
    if (pid < 0) {
        close (sp [0]);
        return;
    }
    d->serial++;
    d->clones [d->n++] = (s_clone_t) { .pid = pid, .sock = sp [0], .since = ch_clock_mono_ms () };
}

//  Keep size clones, within the memory budget.
static void
s_refill (s_daemon_t *d)
{
    bool added = false;
    while (d->n < d->opts.size && d->n < S_MAX_CLONES
       &&  s_pool_pss (d) + GW_POOLD_EST_MIB <= (long) d->opts.budget_mib) {
        unsigned before = d->n;
        s_fork_holder (d);
        if (d->n == before)
            break;                              //  no fork: try again on the next step
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

//  A holder said "ready PID" or "failed WHY", or went away.
static void
s_on_holder (s_daemon_t *d, unsigned i)
{
    char line [S_LINE];
    int fds [GW_FDPASS_MAX];
    s_clone_t *c = &d->clones [i];
    ssize_t n = gw_fdpass_recv (c->sock, line, sizeof line, fds);
    for (int k = 0; k < GW_FDPASS_MAX; k++)
        if (fds [k] >= 0)
            close (fds [k]);
    int qemu = 0;
    if (n > 0 && !c->ready && sscanf (line, "ready %d", &qemu) == 1 && qemu > 0) {
        *c = (s_clone_t) { .pid = c->pid, .sock = c->sock, .qemu = qemu, .ready = true,
                           .ready_seq = d->ready_seq++, .since = c->since };
        gw_log (GW_LOG_INFO, "pool.clone_ready", "holder=%d qemu=%d ms=%lld", (int) c->pid,
                qemu, (long long) (ch_clock_mono_ms () - c->since));
        s_log_size (d, "ready");
        return;
    }
    line [n > 0 ? strcspn (line, "\n") : 0] = 0;
    gw_log (GW_LOG_WARN, "pool.clone_failed", "holder=%d reason=\"%.300s\"", (int) c->pid,
            n > 0 ? line : "the holder exited");
    d->failed++;
    kill (c->pid, SIGKILL);                     //  replaced on the next refill
    s_drop_clone (d, i);
}

//  The ready clone that has waited longest, or d->n when none is ready.
static unsigned
s_oldest_ready (const s_daemon_t *d)
{
    unsigned best = d->n;
    for (unsigned i = 0; i < d->n; i++)
        if (d->clones [i].ready
        &&  (best == d->n || d->clones [i].ready_seq < d->clones [best].ready_seq))
            best = i;
    return best;
}

//  Pass conn, a gateway's "take", to a ready holder, or answer that none is.
static void
s_hand_out (s_daemon_t *d, int conn)
{
    unsigned i = s_oldest_ready (d);
    if (i == d->n) {
        gw_fdpass_send (conn, "{\"ok\": false, \"error\": \"no clone ready\"}\n", NULL, 0);
        gw_log (GW_LOG_INFO, "pool.empty", "starting=%u", d->n);
    }
    else if (gw_fdpass_send (d->clones [i].sock, "take", &conn, 1) == 0) {
        d->handed++;
        gw_log (GW_LOG_INFO, "pool.handed_out", "holder=%d qemu=%d", (int) d->clones [i].pid,
                d->clones [i].qemu);
        s_drop_clone (d, i);                    //  the holder serves the gateway now
        s_log_size (d, "hand-out");
    }
}

//  A gateway connects and asks for a clone.
static void
s_on_client (s_daemon_t *d)
{
    int conn = accept4 (d->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (conn < 0)
        return;
    char buf [16] = "";
    struct pollfd p = { conn, POLLIN, 0 };
    if (poll (&p, 1, 1000) > 0 && read (conn, buf, sizeof buf - 1) >= 4
    &&  strncmp (buf, "take", 4) == 0) {
        d->last_use = ch_clock_mono_ms ();
        s_hand_out (d, conn);
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
    if (d->opts.idle_s && ch_clock_mono_ms () - d->last_use > (int64_t) d->opts.idle_s * 1000) {
        gw_log (GW_LOG_INFO, "pool.idle", "idle_s=%u", d->opts.idle_s);
        stop = true;
    }
    return !stop;
}

int
gw_poold_run (const gw_poold_opts_t *opts, const gw_poold_ops_t *ops)
{
    assert (opts && opts->socket_path && ops);
    s_daemon_t d = { .ops = ops, .opts = *opts, .last_use = ch_clock_mono_ms () };
    d.sig_fd = ch_sig_fd ((const int []) { SIGTERM, SIGINT, SIGHUP, SIGCHLD, 0 }, false);
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
