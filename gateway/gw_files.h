/*  gw_files - files between the client and the session's /workspace.

    cellvm_put_request / cellvm_get_request (control channel, docs/files.md)
    are answered by the gateway itself through the backend; the kernel never
    sees them. And every execute_reply's output_files are copied to a host
    artifacts directory, each entry gaining host_path, or skipped with a
    reason when over a cap or not what the kernel said it was.
*/
#ifndef GW_FILES_H
#define GW_FILES_H

#include "gw_backend.h"
#include "kn_msg.h"

#include <stdbool.h>
#include <stddef.h>

#define GW_FILES_MAX_FILE (100ULL << 20)      //  default per-file artifact cap
#define GW_FILES_MAX_SESSION (1ULL << 30)     //  default per-session artifact cap
#define GW_FILES_MAX_PUT (256ULL << 20)       //  largest cellvm_put / get

typedef struct _gw_files_t gw_files_t;

//  dir: where artifacts go (a per-session subdirectory is made there on
//  first use); NULL: no copying. Caps of 0 take the defaults.
gw_files_t *gw_files_new (const char *dir, const char *session, size_t max_file,
                          size_t max_session);
void gw_files_destroy (gw_files_t **self_p);

//  Is this msg_type one the gateway answers itself?
bool gw_files_is_request (const char *msg_type);

//  Answer req (cellvm_put_request or cellvm_get_request) through backend:
//  returns the reply content (new); for a get, the bytes in *buf_p/*len_p.
json_t *gw_files_handle (gw_files_t *self, gw_backend_t *backend, const kn_msg_t *req,
                         uint8_t **buf_p, size_t *len_p);

//  Copy what output_files (an array in an execute_reply's content) lists
//  from the kernel's outdir into the artifacts dir, annotating each entry.
void gw_files_collect (gw_files_t *self, gw_backend_t *backend, const char *outdir,
                       json_t *output_files);

#endif
