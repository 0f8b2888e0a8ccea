/*  gw_xfer - moving whole files through a backend, one chunk per turn.

    A file transfer can be hundreds of MiB; the reactor may not wait for it.
    gw_xfer queues transfers and runs the head one as a chain of chunk
    operations (gw_backend put_chunk/get_chunk, at most GW_CHUNK_MAX each):
    each chunk's completion, reported through the backend's event fd,
    starts the next. Between two chunks the reactor serves everything else:
    interrupts, output, other requests. Transfers run one at a time, in the
    order they were queued.

    The SHA-256 of what moved is computed as it moves, a chunk at a time.
*/
#ifndef GW_XFER_H
#define GW_XFER_H

#include "backend/gw_backend.h"
#include "ch_msg.h"
#include "base/gw_worker.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct _gw_xfer_t gw_xfer_t;

//  A transfer ended. *content_p (taken) is
//    {"status": "ok", "path", "size" (the file's), "sha256" (of the bytes moved)}
//  or {"status": "error", "ename": "FileTransferError", "evalue", "traceback": []}.
//  For a get into memory *data_p (taken; NULL when empty) holds len bytes.
//  done runs on the reactor thread; for a transfer that cannot even start
//  (the backend cannot move files), before gw_xfer_put/get returns.
typedef void (gw_xfer_done_fn) (void *arg, json_t **content_p, uint8_t **data_p,
                                size_t len);

//  Transfers through backend; what goes into a host file is written by
//  worker's thread (a disk can stall a write). Both are borrowed and must
//  outlive this.
gw_xfer_t *gw_xfer_new (gw_backend_t *backend, gw_worker_t *worker);

//  Cancel what is in flight (no done runs) and free; nulls *self_p.
void gw_xfer_destroy (gw_xfer_t **self_p);

//  Write len bytes to path, after what is there when append, else
//  replacing it. data is taken, released by free_fn (data, hint) (NULL:
//  free()) once the transfer ends: no copy of a 256 MiB upload is made.
void gw_xfer_put (gw_xfer_t *self, const char *path, bool append, uint8_t *data, size_t len,
                  ch_free_fn *free_fn, void *hint, gw_xfer_done_fn *done, void *arg);

//  Read the file at path, at most max bytes (more is an error that says
//  so), into memory (fd -1) or written to fd as it comes (fd stays the
//  caller's; it must stay open until done).
void gw_xfer_get (gw_xfer_t *self, const char *path, size_t max, int fd,
                  gw_xfer_done_fn *done, void *arg);

//  End every queued transfer now with an error saying why; each done runs
//  before this returns.
void gw_xfer_abort (gw_xfer_t *self, const char *why);

//  Transfers queued or running.
size_t gw_xfer_queued (const gw_xfer_t *self);

#endif
