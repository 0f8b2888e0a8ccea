/*  gw_qmp - a small QEMU Machine Protocol client.

    QMP is line-delimited JSON over a unix socket: a greeting, then
    qmp_capabilities, then commands each answered by {"return": ...} or
    {"error": ...} with the id we sent, interleaved with asynchronous
    {"event": ...} messages. QEMU runs the guest, so what it says is treated
    as hostile input: every line is bounded, must be a JSON object, and a
    line that is not one ends the connection (-EPROTO).

    Calls block on the socket up to a deadline the caller gives (QMP answers
    in milliseconds; the deadline only matters when QEMU is wedged). Events
    that arrive meanwhile go to the event callback, or are dropped.

    A fd can travel with a command (SCM_RIGHTS), which `getfd` needs: with
    `-sandbox spawn=deny` QEMU cannot run `exec:` migration URIs, so
    snapshots are written and restored through `fd:NAME` after getfd.
*/
#ifndef GW_QMP_H
#define GW_QMP_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

typedef struct _gw_qmp_t gw_qmp_t;

#define GW_QMP_MAX_LINE_DEFAULT 65536           //  bytes in one QMP message

//  An asynchronous event: name and data (borrowed, may be NULL).
typedef void (gw_qmp_event_fn) (void *arg, const char *event, json_t *data);

//  Wrap a connected stream socket, taking ownership (closed on destroy);
//  makes it non-blocking. max_line bounds one message (0: the default).
gw_qmp_t *gw_qmp_new (int fd, size_t max_line);

//  Close the socket and free everything; nulls *self_p. NULL-safe.
void gw_qmp_destroy (gw_qmp_t **self_p);

//  Events go to fn from now on (NULL: dropped).
void gw_qmp_set_event_fn (gw_qmp_t *self, gw_qmp_event_fn *fn, void *arg);

//  Read the greeting and negotiate capabilities. 0, or as gw_qmp_execute.
int gw_qmp_handshake (gw_qmp_t *self, int timeout_ms, char *err, size_t errlen);

//  Run one command. args (an object, may be NULL) is borrowed. On success
//  returns 0 and, if return_p is not NULL, gives the "return" value to the
//  caller (json_decref it). Errors: -EIO when QEMU answered with an error
//  (class and desc in err), -ETIMEDOUT, -EPIPE (QEMU closed the socket),
//  -EPROTO (QEMU sent something that is not QMP; the connection is done).
int gw_qmp_execute (gw_qmp_t *self, const char *command, json_t *args,
                    json_t **return_p, int timeout_ms, char *err, size_t errlen);

//  Read what has arrived, waiting up to timeout_ms (0: do not wait), and
//  hand events to the callback. Replies nobody waits for are dropped.
//  0, -EPIPE or -EPROTO.
int gw_qmp_poll (gw_qmp_t *self, int timeout_ms);

//  getfd: give QEMU a copy of fd under fdname (for "fd:fdname" URIs).
int gw_qmp_getfd (gw_qmp_t *self, const char *fdname, int fd, int timeout_ms,
                  char *err, size_t errlen);

//  query-status: the run state ("running", "paused", "inmigrate", ...) into
//  status (bounded copy) and whether the guest runs.
int gw_qmp_query_status (gw_qmp_t *self, char *status, size_t cap, bool *running_p,
                         int timeout_ms, char *err, size_t errlen);

//  query-migrate: the migration status ("active", "completed", "failed",
//  ...; "none" when there is none) into status.
int gw_qmp_query_migrate (gw_qmp_t *self, char *status, size_t cap, int timeout_ms,
                          char *err, size_t errlen);

//  quit: QEMU exits right after answering (a kill is faster: ~7 ms vs 165).
int gw_qmp_quit (gw_qmp_t *self, int timeout_ms, char *err, size_t errlen);

#endif
