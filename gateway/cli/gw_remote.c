/*  gw_remote - cellvm-remote's set-up: ports, connection file, the gateway
    child and the reply to the front (see gw_remote.h; the comm port and
    signals are gw_remote_serve.c).
*/
#include "cli/gw_remote_int.h"
#include "snap/gw_lease.h"
#include "base/gw_log.h"
#include "ch_child.h"
#include "ch_clock.h"
#include "ch_msg.h"
#include "ch_sig.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#define S_RETRY_MS 250                          //  between connects to the response address
#define S_TERM_WAIT_MS 5000                     //  SIGTERM, then SIGKILL, when we end the child

static const char *const s_port_names [GW_RARGS_PORTS] = {
    "shell_port", "iopub_port", "stdin_port", "control_port", "hb_port", "comm_port"
};

//  A listening socket on ip:port, or -errno.
static int
s_listen (const char *ip, int port)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) port) };
    if (inet_pton (AF_INET, ip, &sa.sin_addr) != 1)
        return -EINVAL;                         //  gw_rargs checked it: not reached
    int one = 1, fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (setsockopt (fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0
    ||  bind (fd, (struct sockaddr *) &sa, sizeof sa) < 0 || listen (fd, SOMAXCONN) < 0) {
        int rc = -errno;
        close (fd);
        return rc;
    }
    return fd;
}

static int
s_port_of (int fd)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    return getsockname (fd, (struct sockaddr *) &sa, &len) == 0 ? ntohs (sa.sin_port) : -1;
}

//  Six listening ports in the range: every port of it tried at most once,
//  from a random start, so a free one is found whenever there is one.
static int
s_bind_ports (gw_remote_t *self, char *err, size_t errlen)
{
    const gw_rargs_t *a = self->args;
    uint32_t span = a->port_hi ? (uint32_t) (a->port_hi - a->port_lo + 1) : 1, start = 0;
    RAND_bytes ((unsigned char *) &start, sizeof start);
    uint32_t next = start % span;
    for (int i = 0; i < GW_RARGS_PORTS; i++) {
        int fd = -EADDRINUSE;
        for (uint32_t tries = 0; fd < 0 && tries < span; tries++, next = (next + 1) % span)
            fd = s_listen (a->ip, a->port_hi ? a->port_lo + (int) next : 0);
        if (fd < 0) {
            snprintf (err, errlen, "no free port for %s in %d..%d on %s: %s", s_port_names [i],
                      a->port_lo, a->port_hi, a->ip, strerror (-fd));
            return fd;
        }
        self->fds [i] = fd;
        self->ports [i] = s_port_of (fd);
    }
    return 0;
}

//  The connection file's content (also the reply's, with more added).
static json_t *
s_conn_json (const gw_remote_t *self)
{
    json_t *info = json_pack ("{s:s, s:s, s:s, s:s, s:s}", "ip", self->args->ip, "key",
                              self->key, "transport", "tcp", "signature_scheme", "hmac-sha256",
                              "kernel_name", "");
    for (int i = 0; info && i < GW_PORT_COUNT; i++)
        json_object_set_new (info, s_port_names [i], json_integer (self->ports [i]));
    if (info && self->curve_public [0]) {      //  one keypair for both ends, as jupyter_client's
        json_object_set_new (info, "curve_publickey", json_string (self->curve_public));
        json_object_set_new (info, "curve_secretkey", json_string (self->curve_secret));
    }
    return info;
}

//  A private directory with the connection file in it.
static int
s_write_conn (gw_remote_t *self, char *err, size_t errlen)
{
    const char *tmp = getenv ("TMPDIR");
    snprintf (self->dir, sizeof self->dir, "%s/cellvm-remote-%s-XXXXXX",
              tmp && tmp [0] == '/' ? tmp : "/tmp", self->args->kernel_id);
    if (!mkdtemp (self->dir)) {                 //  0700, a new name
        snprintf (err, errlen, "cannot make a private directory %s: %s", self->dir,
                  strerror (errno));
        self->dir [0] = 0;
        return -EIO;
    }
    int n = snprintf (self->conn_path, sizeof self->conn_path, "%s/kernel-%s.json", self->dir,
                      self->args->kernel_id);
    if (n < 0 || (size_t) n >= sizeof self->conn_path) {
        snprintf (err, errlen, "private directory path too long: %s", self->dir);
        self->conn_path [0] = 0;
        return -ENAMETOOLONG;
    }
    json_t *info = s_conn_json (self);
    int rc = info ? json_dump_file (info, self->conn_path, JSON_COMPACT) : -1;
    json_decref (info);
    if (rc != 0) {
        snprintf (err, errlen, "cannot write %s", self->conn_path);
        return -EIO;
    }
    chmod (self->conn_path, 0600);
    return 0;
}

gw_remote_t *
gw_remote_new (const gw_rargs_t *args, gw_egreply_t **reply_p, char *err, size_t errlen)
{
    assert (args && reply_p && *reply_p && err);
    gw_remote_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->args = args;
    self->reply = *reply_p;
    *reply_p = NULL;
    self->sig_fd = -1;
    for (int i = 0; i < GW_RARGS_PORTS; i++)
        self->fds [i] = -1;
    ch_uuid4 (self->key);
    ch_uuid4 (self->session);
    if (args->curve && (!zmq_has ("curve")
                        || zmq_curve_keypair (self->curve_public, self->curve_secret) != 0)) {
        snprintf (err, errlen, "--encryption curve: this libzmq has no CurveZMQ");
        goto fail;
    }
    if (s_bind_ports (self, err, errlen) < 0 || s_write_conn (self, err, errlen) < 0)
        goto fail;
    self->comm = gw_rcomm_new (self->fds [GW_REMOTE_COMM]);
    self->fds [GW_REMOTE_COMM] = -1;            //  the comm port's now
    return self;
fail:
    gw_remote_destroy (&self);
    return NULL;
}

//  Every child that has ended, not only the gateway: as a pod's PID 1 the
//  launcher inherits orphans (a QEMU whose gateway died), and must not
//  leave them zombies.
bool
gw_remote__reap (gw_remote_t *self)
{
    if (self->child <= 0 || self->reaped)
        return self->reaped;
    int status = 0;
    pid_t got;
    while ((got = waitpid (-1, &status, WNOHANG)) > 0)
        if (got == self->child) {
            self->reaped = true;
            self->status = status;
        }
    if (got < 0 && errno == ECHILD && !self->reaped) {
        self->reaped = true;                    //  collected elsewhere: status unknown
        self->status = 0;
    }
    return self->reaped;
}

//  SIGTERM, S_TERM_WAIT_MS, then SIGKILL; collect it.
static void
s_end_child (gw_remote_t *self)
{
    if (self->child <= 0 || gw_remote__reap (self))
        return;
    kill (self->child, SIGTERM);
    int64_t until = ch_clock_mono_ms () + S_TERM_WAIT_MS;
    while (!gw_remote__reap (self) && ch_clock_mono_ms () < until)
        usleep (20 * 1000);
    if (!self->reaped) {
        kill (self->child, SIGKILL);
        waitpid (self->child, &self->status, 0);
        self->reaped = true;
    }
}

void
gw_remote_destroy (gw_remote_t **self_p)
{
    assert (self_p);
    gw_remote_t *self = *self_p;
    if (!self)
        return;
    s_end_child (self);
    zsock_destroy (&self->control);
    gw_wire_destroy (&self->wire);
    gw_rcomm_destroy (&self->comm);
    for (int i = 0; i < GW_RARGS_PORTS; i++)
        if (self->fds [i] >= 0)
            close (self->fds [i]);
    if (self->sig_fd >= 0)
        close (self->sig_fd);
    if (self->conn_path [0])
        unlink (self->conn_path);
    if (self->dir [0])
        rmdir (self->dir);
    gw_egreply_destroy (&self->reply);
    OPENSSL_cleanse (self->key, sizeof self->key);
    OPENSSL_cleanse (self->curve_secret, sizeof self->curve_secret);
    free (self);
    *self_p = NULL;
}

//  --------------------------------------------------------------------------
//  Does the launcher name the session after the kernel id? Only a microVM
//  session can move (unsafe-local has no snapshots); not when the kernelspec
//  names it, nor for an id that is not a session name.
static bool
s_names_session (const gw_rargs_t *args)
{
    bool microvm = false;
    for (int i = 0; i < args->npass; i++) {
        const char *a = args->pass [i], *next = i + 1 < args->npass ? args->pass [i + 1] : "";
        if (strncmp (a, "--session-name", 14) == 0)
            return false;
        if ((strcmp (a, "--backend") == 0 && strcmp (next, "microvm") == 0)
        ||  strcmp (a, "--backend=microvm") == 0)
            microvm = true;
    }
    return microvm && gw_lease_name_ok (args->kernel_id);
}

//  The gateway child.

static void
s_child_exec (gw_remote_t *self, const char *gateway, pid_t parent, int report_fd)
{
    //  Our signalfd's mask and dispositions are not the gateway's to inherit,
    //  but SIGTERM and SIGHUP stay blocked across exec: one that comes before
    //  the gateway has its own signalfd waits for it, instead of killing it
    //  by the default action (its mask then takes exactly its own set).
    ch_sig_defaults ();
    sigset_t early;
    sigemptyset (&early);
    sigaddset (&early, SIGTERM);
    sigaddset (&early, SIGHUP);
    sigprocmask (SIG_BLOCK, &early, NULL);
    if (ch_child_tie (parent, SIGTERM) < 0)
        _exit (127);                            //  the launcher already died
    report_fd = fcntl (report_fd, F_DUPFD_CLOEXEC, 64);
    int fds [3 + GW_PORT_COUNT] = { -1, -1, -1 };
    for (int i = 0; i < GW_PORT_COUNT; i++)
        fds [3 + i] = self->fds [i];
    int rc = report_fd < 0 ? -errno : ch_child_fds (fds, 3 + GW_PORT_COUNT, true);
    //  calloc after fork is safe here: the launcher has one thread until the
    //  first control message (ZeroMQ's threads start then, after this).
    const char **argv = calloc ((size_t) self->args->npass + 8, sizeof *argv);
    if (rc == 0 && argv) {
        int n = 0;
        argv [n++] = gateway;
        argv [n++] = "--connection-file";
        argv [n++] = self->conn_path;
        argv [n++] = "--listen-fds";
        argv [n++] = "3,4,5,6,7";
        if (s_names_session (self->args)) {
            argv [n++] = "--session-name";
            argv [n++] = self->args->kernel_id;
        }
        for (int i = 0; i < self->args->npass; i++)
            argv [n++] = self->args->pass [i];
        execv (gateway, (char **) argv);
        rc = -errno;
    }
    errno = rc < 0 ? -rc : ENOMEM;
    ch_child_exec_failed (report_fd);
}

static int
s_spawn (gw_remote_t *self, const char *gateway, char *err, size_t errlen)
{
    int report [2];
    if (pipe2 (report, O_CLOEXEC) < 0)
        return -errno;
    pid_t parent = getpid (), pid = fork ();
    if (pid == 0)
        s_child_exec (self, gateway, parent, report [1]);
    int rc = pid < 0 ? -errno : 0;
    close (report [1]);
    if (pid > 0) {
        self->child = pid;
        rc = ch_child_wait_exec (report [0]);
    }
    close (report [0]);
    if (rc < 0)
        snprintf (err, errlen, "cannot run %s: %s", gateway, strerror (-rc));
    for (int i = 0; i < GW_PORT_COUNT; i++) {    //  the gateway's now
        close (self->fds [i]);
        self->fds [i] = -1;
    }
    return rc;
}

//  --------------------------------------------------------------------------
//  The reply.

//  The address to report: the one the ports are bound to, or for every
//  address (0.0.0.0) the one this host reaches the response address from,
//  which the front can most likely reach back (EG puts in the pod's own;
//  other fronts use what they are told). A UDP connect sends nothing.
static void
s_reported_ip (const gw_remote_t *self, char *out, size_t cap)
{
    const gw_rargs_t *a = self->args;
    snprintf (out, cap, "%s", a->ip);
    if (strcmp (a->ip, "0.0.0.0") != 0)
        return;
    struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_DGRAM }, *ai = NULL;
    char port [8];
    snprintf (port, sizeof port, "%d", a->response_port);
    int fd = getaddrinfo (a->response_host, port, &hints, &ai) == 0
           ? socket (AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0) : -1;
    struct sockaddr_in me;
    socklen_t len = sizeof me;
    if (fd >= 0 && connect (fd, ai->ai_addr, ai->ai_addrlen) == 0
    &&  getsockname (fd, (struct sockaddr *) &me, &len) == 0 && me.sin_addr.s_addr != 0)
        inet_ntop (AF_INET, &me.sin_addr, out, (socklen_t) cap);
    if (fd >= 0)
        close (fd);
    if (ai)
        freeaddrinfo (ai);
}

//  The version-1 payload: the connection file and who we are, encrypted.
static char *
s_payload (gw_remote_t *self, char *err, size_t errlen)
{
    uint8_t aes [GW_EGREPLY_AES_KEY];
    char ip [INET_ADDRSTRLEN];
    s_reported_ip (self, ip, sizeof ip);
    json_t *info = s_conn_json (self);
    json_object_set_new (info, "ip", json_string (ip));
    json_object_set_new (info, "comm_port", json_integer (self->ports [GW_REMOTE_COMM]));
    json_object_set_new (info, "kernel_id", json_string (self->args->kernel_id));
    json_object_set_new (info, "pid", json_integer (getpid ()));
    json_object_set_new (info, "pgid", json_integer (getpgid (0)));
    char *text = json_dumps (info, JSON_COMPACT), *out = NULL;
    json_decref (info);
    if (RAND_bytes (aes, sizeof aes) == 1 && text)
        out = gw_egreply_build (self->reply, text, aes, err, errlen);
    else
        snprintf (err, errlen, "cannot draw an AES key");
    if (text)
        OPENSSL_cleanse (text, strlen (text));
    free (text);
    OPENSSL_cleanse (aes, sizeof aes);
    return out;
}

//  Wait up to ms for fd to be ready for events: 1 ready, 0 not yet.
static int
s_wait_fd (int fd, short events, int64_t ms)
{
    struct pollfd p = { .fd = fd, .events = events };
    return poll (&p, 1, ms > 0 ? (int) ms : 0) > 0 ? 1 : 0;
}

//  One attempt: connect (within the deadline), send it all, close. 0 or -errno.
static int
s_send_once (const struct addrinfo *ai, const char *payload, int64_t deadline)
{
    int fd = socket (ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), so = 0;
    socklen_t sl = sizeof so;
    if (fd < 0)
        return -errno;
    int rc = connect (fd, ai->ai_addr, ai->ai_addrlen) == 0 || errno == EINPROGRESS ? 0 : -errno;
    if (rc == 0 && !s_wait_fd (fd, POLLOUT, deadline - ch_clock_mono_ms ()))
        rc = -ETIMEDOUT;
    if (rc == 0 && (getsockopt (fd, SOL_SOCKET, SO_ERROR, &so, &sl) < 0 || so))
        rc = so ? -so : -errno;
    for (size_t off = 0, n = strlen (payload); rc == 0 && off < n; ) {
        ssize_t w = send (fd, payload + off, n - off, MSG_NOSIGNAL);
        if (w > 0)
            off += (size_t) w;
        else if (w < 0 && errno != EAGAIN)
            rc = -errno;
        else if (!s_wait_fd (fd, POLLOUT, deadline - ch_clock_mono_ms ()))
            rc = -ETIMEDOUT;
    }
    close (fd);
    return rc;
}

//  SIGTERM or SIGHUP while the reply is still on its way (the front gave up,
//  or the pod is being deleted): no point waiting out the launch timeout.
static bool
s_told_to_stop (gw_remote_t *self)
{
    struct signalfd_siginfo si;
    bool stop = false;
    while (read (self->sig_fd, &si, sizeof si) == (ssize_t) sizeof si)
        stop |= si.ssi_signo == SIGTERM || si.ssi_signo == SIGHUP;
    return stop;
}

//  Retry until the deadline, while the gateway lives.
static int
s_deliver (gw_remote_t *self, const char *payload, char *err, size_t errlen)
{
    const gw_rargs_t *a = self->args;
    int64_t deadline = ch_clock_mono_ms () + (int64_t) (a->launch_timeout * 1000);
    char port [8], why [160] = "no attempt";
    snprintf (port, sizeof port, "%d", a->response_port);
    while (ch_clock_mono_ms () < deadline) {
        if (s_told_to_stop (self)) {
            snprintf (err, errlen, "stopped by a signal before the reply reached %s:%d",
                      a->response_host, a->response_port);
            return -EINTR;
        }
        if (gw_remote__reap (self)) {
            snprintf (err, errlen, "cellvm-gateway exited (status %d) before the reply was "
                      "sent; see its lines above", self->status);
            return -ECHILD;
        }
        struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *ai = NULL;
        int g = getaddrinfo (a->response_host, port, &hints, &ai);
        int rc = g == 0 ? s_send_once (ai, payload, deadline) : -EHOSTUNREACH;
        snprintf (why, sizeof why, "%s", g ? gai_strerror (g) : strerror (-rc));
        if (ai)
            freeaddrinfo (ai);
        if (rc == 0)
            return 0;
        usleep (S_RETRY_MS * 1000);
    }
    snprintf (err, errlen, "response address %s:%d unreachable within the launch timeout "
              "(%g s): %s", a->response_host, a->response_port, a->launch_timeout, why);
    return -ETIMEDOUT;
}

int
gw_remote_start (gw_remote_t *self, const char *gateway, char *err, size_t errlen)
{
    assert (self && gateway && err && self->child == 0);
    //  An inherited SIG_IGN for SIGCHLD would reap the gateway unasked and lose
    //  its exit status; SIGTERM and SIGINT to default too, as the gateway does
    //  (they arrive on the signalfd). A nohup'd SIGHUP stays ignored.
    struct sigaction sa = { .sa_handler = SIG_DFL };
    sigaction (SIGCHLD, &sa, NULL);
    sigaction (SIGTERM, &sa, NULL);
    sigaction (SIGINT, &sa, NULL);
    self->sig_fd = ch_sig_fd ((const int []) { SIGCHLD, SIGTERM, SIGHUP, SIGINT, 0 }, true);
    if (self->sig_fd < 0) {
        snprintf (err, errlen, "cannot take signals: %s", strerror (-self->sig_fd));
        return self->sig_fd;
    }
    int rc = s_spawn (self, gateway, err, errlen);
    char *payload = rc == 0 ? s_payload (self, err, errlen) : NULL;
    if (rc == 0 && !payload)
        rc = -EIO;
    if (rc == 0)
        rc = s_deliver (self, payload, err, errlen);
    if (rc == 0)
        gw_log (GW_LOG_INFO, "remote.replied", "kernel_id=%s response=%s:%d gateway_pid=%d "
                "comm_port=%d", self->args->kernel_id, self->args->response_host,
                self->args->response_port, (int) self->child, self->ports [GW_REMOTE_COMM]);
    free (payload);
    return rc;
}
