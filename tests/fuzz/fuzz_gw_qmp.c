/*  fuzz_gw_qmp - the QMP client's reader on whatever "QEMU" sends.

    The input is the whole byte stream QEMU would send on the QMP socket:
    it is written into one end of a socketpair, whose write side is then
    shut, and the client on the other end runs the commands a snapshot save
    runs (the ids are 1, 2, ... in this order, as the seeds, recorded from a
    real QEMU answering this sequence, have them):

        1 qmp_capabilities (handshake)   7 query-migrate
        2 query-version                  8 migrate-continue
        3 migrate-set-capabilities       9 query-migrate
        4 stop                          10 query-status
        5 getfd (a fd passed)           11 cont
        6 migrate                       12 quit

    then polls for events. Twice: with the default line bound, and with a
    small one, so lines over the bound are reachable. Every call must end
    (the stream has an end, so no wait outlasts it), with 0 or an error the
    header names, an error explained in err, and a broken client must stay
    broken.
*/
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "vm/gw_qmp.h"

#define S_MS 1000                               //  per call; only a blank-line flood waits
#define S_SMALL_LINE 200                        //  a greeting fits, a migration's stats do not

static void
s_on_event (void *arg, const char *event, json_t *data)
{
    if (!event)
        abort ();
    (*(int *) arg)++;
    char *text = data ? json_dumps (data, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    free (text);
}

static void
s_check (int rc, const char *err)
{
    if (rc != 0 && rc != -EIO && rc != -ETIMEDOUT && rc != -EPIPE && rc != -EPROTO)
        abort ();                               //  an error the header does not name
    if (rc != 0 && !err [0])
        abort ();                               //  a failure must say why
}

//  One command (by name, no arguments), its return value looked at.
static int
s_run (gw_qmp_t *qmp, const char *command, json_t *args)
{
    char err [256] = "";
    json_t *ret = NULL;
    int rc = gw_qmp_execute (qmp, command, args, &ret, S_MS, err, sizeof err);
    s_check (rc, err);
    if ((rc == 0) != (ret != NULL))
        abort ();                               //  a value exactly when it succeeded
    json_decref (ret);
    json_decref (args);
    return rc;
}

static void
s_session (gw_qmp_t *qmp, int pass_fd)
{
    char err [256] = "", status [32] = "";
    bool running;
    int rc = gw_qmp_handshake (qmp, S_MS, err, sizeof err);
    s_check (rc, err);
    s_run (qmp, "query-version", NULL);
    s_run (qmp, "migrate-set-capabilities", json_pack ("{s:[{s:s, s:b}]}", "capabilities",
           "capability", "pause-before-switchover", "state", 1));
    s_run (qmp, "stop", NULL);
    err [0] = 0;
    s_check (gw_qmp_getfd (qmp, "state", pass_fd, S_MS, err, sizeof err), err);
    s_run (qmp, "migrate", json_pack ("{s:s}", "uri", "fd:state"));
    err [0] = 0;
    s_check (gw_qmp_query_migrate (qmp, status, sizeof status, S_MS, err, sizeof err), err);
    s_run (qmp, "migrate-continue", json_pack ("{s:s}", "state", "pre-switchover"));
    err [0] = 0;
    s_check (gw_qmp_query_migrate (qmp, status, sizeof status, S_MS, err, sizeof err), err);
    err [0] = 0;
    rc = gw_qmp_query_status (qmp, status, sizeof status, &running, S_MS, err, sizeof err);
    s_check (rc, err);
    if (rc == 0 && !memchr (status, 0, sizeof status))
        abort ();
    s_run (qmp, "cont", NULL);
    err [0] = 0;
    s_check (gw_qmp_quit (qmp, S_MS, err, sizeof err), err);
    rc = gw_qmp_poll (qmp, 0);
    if (rc != 0 && rc != -EPIPE && rc != -EPROTO)
        abort ();
    if (rc < 0 && gw_qmp_poll (qmp, 0) != rc)
        abort ();                               //  broken stays broken
}

static void
s_one (const uint8_t *data, size_t size, size_t max_line, int pass_fd)
{
    int sv [2];
    if (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        abort ();
    //  Whatever fits in the socket's buffer is the stream (non-blocking: never stuck).
    fcntl (sv [1], F_SETFL, O_NONBLOCK);
    size_t off = 0;
    while (off < size) {
        ssize_t n = write (sv [1], data + off, size - off);
        if (n <= 0)
            break;
        off += (size_t) n;
    }
    shutdown (sv [1], SHUT_WR);                 //  the client reads the end; its writes still go
    gw_qmp_t *qmp = gw_qmp_new (sv [0], max_line);
    int events = 0;
    gw_qmp_set_event_fn (qmp, s_on_event, &events);
    s_session (qmp, pass_fd);
    gw_qmp_destroy (&qmp);
    close (sv [1]);
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    static int pass_fd = -1;
    if (pass_fd < 0)
        pass_fd = open ("/dev/null", O_RDONLY | O_CLOEXEC);
    s_one (data, size, 0, pass_fd);
    s_one (data, size, S_SMALL_LINE, pass_fd);
    return 0;
}
