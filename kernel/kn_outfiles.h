/*  kn_outfiles - which files under the output directory a cell created or
 *  changed. Snapshot before the cell, compare after. Symlinks are never
 *  followed and never listed; only regular files count.
 */
#ifndef KN_OUTFILES_H
#define KN_OUTFILES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define KN_OUTFILES_CAP 1000        //  entries listed per cell
#define KN_OUTFILES_WALK_CAP 100000 //  entries walked per scan

typedef struct _kn_outfiles_t kn_outfiles_t;

//  Watch dir (absolute). Creates it if missing. NULL (errno set) on failure.
kn_outfiles_t *kn_outfiles_new (const char *dir, size_t cap);
void kn_outfiles_destroy (kn_outfiles_t **self_p);

//  Record the current state; call before a cell runs.
void kn_outfiles_snapshot (kn_outfiles_t *self);

//  Files created or modified since the snapshot, as a new JSON array of
//  {path, size, mime, sha256}, sorted by path. *truncated is set when more
//  than cap changed (or the walk hit its cap). The snapshot moves forward.
json_t *kn_outfiles_changes (kn_outfiles_t *self, bool *truncated);

//  MIME type for a file name, by extension. Pure.
const char *kn_outfiles_mime (const char *name);

#endif
