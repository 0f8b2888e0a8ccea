/*  gw_snapshot - a VM's device state to and from a file (see gw_snapshot.h). */
#include "snap/gw_snapshot.h"
#include "ch_clock.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define S_QMP_MS 5000               //  one QMP command; QEMU answers in milliseconds

//  Run a QMP command that must succeed; args is borrowed.
static int
s_qmp (gw_qmp_t *qmp, const char *cmd, json_t *args, char *err, size_t errlen)
{
    return gw_qmp_execute (qmp, cmd, args, NULL, S_QMP_MS, err, errlen);
}

//  The handshake on a connected fd (taken): the connection, or NULL + err.
static gw_qmp_t *
s_open (int fd, char *err, size_t errlen)
{
    gw_qmp_t *qmp = gw_qmp_new (fd, 0);
    if (gw_qmp_handshake (qmp, S_QMP_MS, err, errlen) < 0)
        gw_qmp_destroy (&qmp);
    return qmp;
}

gw_qmp_t *
gw_snapshot_qmp (gw_vm_t *vm, int wait_ms, char *err, size_t errlen)
{
    assert (vm && err);
    int fd = -1;
    int rc = gw_vm_wait_port (vm, "qmp", wait_ms, &fd);
    if (rc < 0) {
        snprintf (err, errlen, "QEMU's QMP port: %s", strerror (-rc));
        return NULL;
    }
    return s_open (fd, err, errlen);
}

gw_qmp_t *
gw_snapshot_qmp_at (const char *run_dir, char *err, size_t errlen)
{
    assert (run_dir && err);
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    int n = snprintf (addr.sun_path, sizeof addr.sun_path, "%s/qmp.sock", run_dir);
    int fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (n < 0 || (size_t) n >= sizeof addr.sun_path || fd < 0
    ||  connect (fd, (struct sockaddr *) &addr, sizeof addr) < 0) {
        snprintf (err, errlen, "the VM's QMP socket in %s: %s", run_dir, strerror (errno));
        if (fd >= 0)
            close (fd);
        return NULL;
    }
    return s_open (fd, err, errlen);
}

//  RAM stays out of the state: it lives in its own file.
static int
s_ignore_shared (gw_qmp_t *qmp, char *err, size_t errlen)
{
    json_t *args = json_pack ("{s:[{s:s, s:b}]}", "capabilities", "capability",
                              "x-ignore-shared", "state", 1);
    int rc = s_qmp (qmp, "migrate-set-capabilities", args, err, errlen);
    json_decref (args);
    return rc;
}

int
gw_snapshot_migrate_fd (gw_qmp_t *qmp, const char *cmd, const char *path, int flags,
                        char *err, size_t errlen)
{
    assert (qmp && cmd && path && err);
    int fd = open (path, flags | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        snprintf (err, errlen, "open %s: %s", path, strerror (errno));
        return -errno;
    }
    int rc = gw_qmp_getfd (qmp, "state", fd, S_QMP_MS, err, errlen);
    close (fd);                                 //  QEMU holds its own copy
    json_t *args = json_pack ("{s:s}", "uri", "fd:state");
    if (rc == 0)
        rc = s_qmp (qmp, cmd, args, err, errlen);
    json_decref (args);
    return rc;
}

//  One query-migrate: its status ("none" before any) into status.
static int
s_migrate_status (gw_qmp_t *qmp, char *status, size_t cap, char *err, size_t errlen)
{
    json_t *ret = NULL;
    int rc = gw_qmp_execute (qmp, "query-migrate", NULL, &ret, S_QMP_MS, err, errlen);
    const char *s = json_string_value (json_object_get (ret, "status"));
    if (rc == 0)
        snprintf (status, cap, "%s", s ? s : "none");
    if (rc == 0 && (strcmp (status, "failed") == 0 || strcmp (status, "cancelled") == 0)) {
        snprintf (err, errlen, "QEMU's migration %s: %s", status, json_string_value (
                  json_object_get (ret, "error-desc")) ?: "no reason given");
        rc = -EIO;
    }
    json_decref (ret);
    return rc;
}

int
gw_snapshot_wait (gw_qmp_t *qmp, const char *want, gw_patience_t *patience, char *err,
                  size_t errlen)
{
    assert (qmp && want && patience && err);
    char status [32] = "";
    while (gw_patience_left_ms (patience) > 0) {
        int rc = s_migrate_status (qmp, status, sizeof status, err, errlen);
        if (rc < 0)
            return rc;
        if (strcmp (status, want) == 0)
            return 0;
        struct timespec ts = { 0, 2 * 1000 * 1000 };
        nanosleep (&ts, NULL);
    }
    snprintf (err, errlen, "the migration was still \"%s\" at the deadline", status);
    return -ETIMEDOUT;
}

int
gw_snapshot_save (gw_vm_t *vm, const char *path, int timeout_ms, char *err, size_t errlen)
{
    assert (vm && path);
    gw_patience_t *patience = gw_patience_new (0, timeout_ms);     //  the wall: a build's save
    gw_qmp_t *qmp = gw_snapshot_qmp (vm, S_QMP_MS, err, errlen);
    int rc = qmp ? s_ignore_shared (qmp, err, errlen) : -EIO;
    if (rc == 0)
        rc = s_qmp (qmp, "stop", NULL, err, errlen);
    if (rc == 0)
        rc = gw_snapshot_migrate_fd (qmp, "migrate", path, O_WRONLY | O_CREAT | O_TRUNC, err,
                                     errlen);
    if (rc == 0)
        rc = gw_snapshot_wait (qmp, "completed", patience, err, errlen);
    gw_qmp_destroy (&qmp);
    gw_patience_destroy (&patience);
    return rc;
}

int
gw_snapshot_load (gw_vm_t *vm, const char *path, int timeout_ms, char *err, size_t errlen)
{
    assert (vm && path);
    //  QEMU's progress, not the wall: a restore in a burst is not a broken one.
    gw_patience_t *patience = gw_patience_new (gw_vm_pid (vm), timeout_ms);
    gw_qmp_t *qmp = gw_snapshot_qmp (vm, timeout_ms, err, errlen);
    int rc = qmp ? s_ignore_shared (qmp, err, errlen) : -EIO;
    if (rc == 0)
        rc = gw_snapshot_migrate_fd (qmp, "migrate-incoming", path, O_RDONLY, err, errlen);
    if (rc == 0)
        rc = gw_snapshot_wait (qmp, "completed", patience, err, errlen);
    if (rc == 0)
        rc = s_qmp (qmp, "cont", NULL, err, errlen);
    gw_qmp_destroy (&qmp);
    gw_patience_destroy (&patience);
    return rc;
}
