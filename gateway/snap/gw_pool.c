/*  gw_pool - the gateway's side of a hand-out from the warm pool (see
    gw_pool.h; the daemon is gw_poold, docs/snapshots.md).
*/
#include "snap/gw_pool.h"
#include "base/gw_fdpass.h"
#include "base/gw_runbase.h"
#include "snap/gw_tplmeta.h"

#include <assert.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

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
    char key [GW_TPLMETA_KEY_LEN + 1], err [256], base [PATH_MAX];
    int rc = gw_tplmeta_key (cfg, key, sizeof key, err, sizeof err);
    if (rc == 0)
        rc = gw_runbase_default (base, sizeof base);
    if (rc == 0 && snprintf (out, cap, "%s/pool-%.12s.sock", base, key) >= (int) cap)
        rc = -ENAMETOOLONG;
    return rc;
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
    ssize_t n = rc == 0 ? gw_fdpass_recv (self->conn, line, sizeof line, fds) : 0;
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
