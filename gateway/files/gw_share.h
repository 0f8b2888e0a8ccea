/*  gw_share - the launch folder, copied into the session (cellvm-notebook).

    Jupyter starts a kernel in its notebook's folder, and notebooks read the
    files beside them (`pd.read_csv('data.csv')`, `Image('python.png')`).
    With --share-cwd the gateway copies that folder into the VM's /notebook
    at every kernel start, before any request reaches the kernel, and the
    kernel starts in it. In the guest the copy is root's: the kernel reads
    it and cannot change it; the host's files are never written. Nothing
    else of the host is copied.

    What is left out, and counted: hidden entries (.git,
    .ipynb_checkpoints, dotfiles), symlinks (they could point anywhere on
    the host), special files, anything past the caps (bytes, files, depth).
    The walk and the reads run on the worker thread; the bytes move through
    gw_xfer, like cellvm_put_request.
*/
#ifndef GW_SHARE_H
#define GW_SHARE_H

#include "backend/gw_backend.h"
#include "base/gw_worker.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GW_SHARE_ROOT "/notebook"               //  in the guest
#define GW_SHARE_MAX_BYTES (64ull << 20)        //  default --share-max: ~7 s under TCG
#define GW_SHARE_MAX_FILES 10000u
#define GW_SHARE_MAX_DEPTH 16u
#define GW_SHARE_MAX_VISITS 100000u             //  entries looked at: a launch from / or ~ ends
#define GW_SHARE_PATH_MAX 1000u                 //  a relative path, in bytes

//  What a walk found (gw_share_scan) and what a copy did.
typedef struct {
    size_t files, bytes;                        //  taken
    size_t hidden, links, special, over_cap;    //  left out
    size_t failed;                              //  taken, but the copy failed
    char error [256];                           //  the first failure, in words
} gw_share_stats_t;

//  One file taken: its path below the folder and its bytes (malloc'ed).
typedef struct {
    char *rel;
    uint8_t *data;
    size_t len;
} gw_share_file_t;

//  Walk dir and read what is taken, within max_bytes; *files_p gets an
//  array of *count_p entries (free with gw_share_files_free). 0, or -errno
//  when dir itself cannot be opened. Pure file system work: no socket.
int gw_share_scan (const char *dir, size_t max_bytes, gw_share_file_t **files_p,
                   size_t *count_p, gw_share_stats_t *stats);
void gw_share_files_free (gw_share_file_t *files, size_t count);

//  One line in words for a user: "" when everything was copied.
void gw_share_summary (const gw_share_stats_t *stats, char *out, size_t len);

typedef struct _gw_share_t gw_share_t;

//  The copy ended; stats says what was done. Runs on the reactor thread.
typedef void (gw_share_done_fn) (void *arg, const gw_share_stats_t *stats);

//  A share of dir (copied) through backend and worker (borrowed).
gw_share_t *gw_share_new (const char *dir, size_t max_bytes, gw_backend_t *backend,
                          gw_worker_t *worker);
void gw_share_destroy (gw_share_t **self_p);

//  Copy the folder now; a copy under way is stopped first. done runs once
//  every file has landed or failed, unless gw_share_stop comes first.
void gw_share_start (gw_share_t *self, gw_share_done_fn *done, void *arg);

//  Stop a copy under way (its done never runs).
void gw_share_stop (gw_share_t *self);

#endif
