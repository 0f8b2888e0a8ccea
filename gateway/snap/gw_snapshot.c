/*  gw_snapshot - a VM's device state to and from a file (see gw_snapshot.h). */
#include "snap/gw_snapshot.h"
#include "vm/gw_qmp.h"

#include <czmq.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define S_QMP_MS 5000               //  one QMP command; QEMU answers in milliseconds

//  Run a QMP command that must succeed; args is borrowed.
static int
s_qmp (gw_qmp_t *qmp, const char *cmd, json_t *args, char *err, size_t errlen)
{
    return gw_qmp_execute (qmp, cmd, args, NULL, S_QMP_MS, err, errlen);
}

static gw_qmp_t *
s_connect (gw_vm_t *vm, int timeout_ms, char *err, size_t errlen)
{
    int fd = -1;
    int rc = gw_vm_wait_port (vm, "qmp", timeout_ms, &fd);
    if (rc < 0) {
        snprintf (err, errlen, "QMP port: %s", strerror (-rc));
        return NULL;
    }
    gw_qmp_t *qmp = gw_qmp_new (fd, 0);
    if (gw_qmp_handshake (qmp, S_QMP_MS, err, errlen) < 0)
        gw_qmp_destroy (&qmp);
    return qmp;
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

//  Give QEMU path as fd "state" and run cmd (migrate / migrate-incoming).
static int
s_migrate_fd (gw_qmp_t *qmp, const char *cmd, const char *path, int flags, char *err,
              size_t errlen)
{
    int fd = open (path, flags | O_CLOEXEC, 0600);
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

static int
s_wait_migration (gw_qmp_t *qmp, int64_t deadline, char *err, size_t errlen)
{
    char status [32] = "";
    while (zclock_mono () < deadline) {
        int rc = gw_qmp_query_migrate (qmp, status, sizeof status, S_QMP_MS, err, errlen);
        if (rc < 0)
            return rc;
        if (strcmp (status, "completed") == 0)
            return 0;
        if (strcmp (status, "failed") == 0 || strcmp (status, "cancelled") == 0) {
            snprintf (err, errlen, "migration %s", status);
            return -EIO;
        }
        struct timespec ts = { 0, 2 * 1000 * 1000 };
        nanosleep (&ts, NULL);
    }
    snprintf (err, errlen, "migration still \"%s\" at the deadline", status);
    return -ETIMEDOUT;
}

int
gw_snapshot_save (gw_vm_t *vm, const char *path, int timeout_ms, char *err, size_t errlen)
{
    assert (vm && path);
    int64_t deadline = zclock_mono () + timeout_ms;
    gw_qmp_t *qmp = s_connect (vm, S_QMP_MS, err, errlen);
    int rc = qmp ? s_ignore_shared (qmp, err, errlen) : -EIO;
    if (rc == 0)
        rc = s_qmp (qmp, "stop", NULL, err, errlen);
    if (rc == 0)
        rc = s_migrate_fd (qmp, "migrate", path, O_WRONLY | O_CREAT | O_TRUNC, err, errlen);
    if (rc == 0)
        rc = s_wait_migration (qmp, deadline, err, errlen);
    gw_qmp_destroy (&qmp);
    return rc;
}

int
gw_snapshot_load (gw_vm_t *vm, const char *path, int timeout_ms, char *err, size_t errlen)
{
    assert (vm && path);
    int64_t deadline = zclock_mono () + timeout_ms;
    gw_qmp_t *qmp = s_connect (vm, timeout_ms, err, errlen);
    int rc = qmp ? s_ignore_shared (qmp, err, errlen) : -EIO;
    if (rc == 0)
        rc = s_migrate_fd (qmp, "migrate-incoming", path, O_RDONLY, err, errlen);
    if (rc == 0)
        rc = s_wait_migration (qmp, deadline, err, errlen);
    if (rc == 0)
        rc = s_qmp (qmp, "cont", NULL, err, errlen);
    gw_qmp_destroy (&qmp);
    return rc;
}
