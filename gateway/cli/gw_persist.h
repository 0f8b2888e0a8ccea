/*  gw_persist - what one gateway process does so its session outlives it
    (docs/sessions.md): the session's identity; adopting the /workspace a
    restarted predecessor kept; checking a --from-snapshot before any port
    opens; the status file `cellvm ls` reads; and, at the end, keeping
    /workspace for the successor when the client asked for a restart.
*/
#ifndef GW_PERSIST_H
#define GW_PERSIST_H

#include "cli/gw_args.h"
#include "backend/gw_backend_microvm.h"
#include "wire/gw_conn.h"
#include "disk/gw_keep.h"
#include "session/gw_session.h"

typedef struct _gw_persist_t gw_persist_t;

//  A named session's lease lasts this long unrenewed (--lease-ttl).
#define GW_PERSIST_LEASE_TTL_S 30.0

//  What a session takes from its connection file: read before the gateway
//  drops to a service user (gw_priv), who may not reach the file.
typedef struct {
    char identity [GW_KEEP_ID_LEN + 8];         //  of the file's real path and key
    char kernel_name [128];                     //  jupyter_client's, "" unknown
} gw_persist_conn_t;

//  Those facts of conn_file, whose key conn holds. 0, or -errno with one
//  line in err.
int gw_persist_conn_read (const gw_conn_t *conn, const char *conn_file, gw_persist_conn_t *out,
                          char *err, size_t errlen);

//  From the identity, sweep old kept workspaces, claim this identity's,
//  resolve the snapshot store and the snapshot to start from
//  (--from-snapshot, else CELLVM_FROM_SNAPSHOT) and check it (it exists,
//  is whole, and matches these VM options). NULL with one line in err that
//  says which.
gw_persist_t *gw_persist_new (gw_args_t *args, const gw_persist_conn_t *facts,
                              const char *conn_file, char *err, size_t errlen);
void gw_persist_destroy (gw_persist_t **self_p);

//  A claimed kept workspace (a directory) for the backend to adopt, or NULL.
const char *gw_persist_adopt_dir (const gw_persist_t *self);
//  The client egress list the snapshot it starts from was taken with, NULL none.
const char *gw_persist_egress (const gw_persist_t *self);
void gw_persist_microvm_opts (const gw_persist_t *self, gw_microvm_opts_t *opts);
void gw_persist_session_opts (const gw_persist_t *self, const gw_args_t *args,
                              gw_session_opts_t *opts);

//  Each reactor tick: the status file follows the session.
void gw_persist_tick (gw_persist_t *self, gw_session_t *session);
//  The session finished: keep /workspace for the next gateway when the
//  client asked for a restart. Before the session is destroyed.
void gw_persist_end (gw_persist_t *self, gw_session_t *session);

//  --snapshot-gc: trim the store, then exit. The exit code.
int gw_persist_gc_main (gw_args_t *args);

#endif
