/*  gw_files - files between the client and the session's /workspace.

    cellvm_put_request / cellvm_get_request (control channel, docs/files.md)
    are answered by the gateway itself through the backend; the kernel never
    sees them. And every execute_reply's output_files are copied to a host
    artifacts directory, each entry gaining host_path, or skipped with a
    reason when over a cap or not what the kernel said it was.

    Nothing here blocks: the bytes move through gw_xfer a chunk per reactor
    turn, and each answer comes back through a callback.
*/
#ifndef GW_FILES_H
#define GW_FILES_H

#include "backend/gw_backend.h"
#include "base/gw_worker.h"
#include "ch_msg.h"

#include <stdbool.h>
#include <stddef.h>

#define GW_FILES_MAX_FILE (100ULL << 20)      //  default per-file artifact cap
#define GW_FILES_MAX_SESSION (1ULL << 30)     //  default per-session artifact cap
#define GW_FILES_MAX_PUT (256ULL << 20)       //  largest cellvm_put / get

typedef struct _gw_files_t gw_files_t;

//  The answer to a file request: its reply content (taken) and, for a get,
//  the file's bytes (taken; NULL when empty).
typedef void (gw_files_reply_fn) (void *arg, json_t **content_p, uint8_t **data_p, size_t len);

//  Every output_files entry now has host_path or skipped.
typedef void (gw_files_collected_fn) (void *arg);

//  Files through backend, host copies written on worker's thread (both
//  borrowed; they must outlive this). dir: where artifacts go (a
//  per-session subdirectory is made there on first use); NULL: no copying.
//  Caps of 0 take the defaults.
gw_files_t *gw_files_new (gw_backend_t *backend, gw_worker_t *worker, const char *dir,
                          const char *session, size_t max_file, size_t max_session);

//  Cancel what is in flight (no callback runs) and free; nulls *self_p.
void gw_files_destroy (gw_files_t **self_p);

//  Is this msg_type one the gateway answers itself?
bool gw_files_is_request (const char *msg_type);

//  Answer req (cellvm_put_request or cellvm_get_request; a put's buffer is
//  taken out of it). reply runs once: later, or before this returns when
//  the request is refused at once.
void gw_files_request (gw_files_t *self, ch_msg_t *req, gw_files_reply_fn *reply, void *arg);

//  Copy what output_files (an array in an execute_reply's content) lists
//  from the kernel's outdir into the artifacts dir, annotating each entry
//  in place: output_files must stay alive until done runs. Returns false
//  (done never runs) when there is nothing to copy.
bool gw_files_collect (gw_files_t *self, const char *outdir, json_t *output_files,
                       gw_files_collected_fn *done, void *arg);

//  End everything in flight now, saying why (the kernel died, shutdown):
//  every callback runs before this returns.
void gw_files_abort (gw_files_t *self, const char *why);

//  Transfers queued or running.
size_t gw_files_busy (const gw_files_t *self);

#endif
