/*  gw_keep - a session's /workspace handed from one gateway process to the
    next across a client restart (docs/sessions.md, "Restarts keep
    /workspace").

    Layout: BASE/kept/ (0700, a real directory we own) holding
        <identity>/                 a kept workspace, waiting for the next gateway
        .stage-<identity>-<pid>/    being filled by gateway <pid>
    The old gateway stages a directory, lets its backend move the workspace
    in (gw_backend_keep_workspace), and commits; the next gateway with the
    same identity claims it with a rename, so a workspace is always in
    exactly one place. Whatever is in kept/ may have been tampered with
    meanwhile: nothing there is followed through a symlink, and what is not
    a directory we own is deleted, never used.
*/
#ifndef GW_KEEP_H
#define GW_KEEP_H

#include <stddef.h>

#define GW_KEEP_ID_LEN 24                       //  hex characters of an identity
#define GW_KEEP_MAX_AGE_S 600                   //  kept workspaces nobody took are swept

//  The session's identity: the first 24 hex chars of SHA-256 over
//  realpath(connection_file) "\n" key, into out (cap > GW_KEEP_ID_LEN).
//  0 or -errno (the file must exist).
int gw_keep_identity (const char *connection_file, const char *key, char *out, size_t cap);

//  Make BASE/kept/.stage-<identity>-<pid> (0700, emptied if an earlier
//  stage of ours left it) and put its path in out. base NULL:
//  gw_runbase_default. BASE and kept/ are created 0700 and checked to
//  be real directories we own. 0 or -errno with the reason in err.
int gw_keep_stage (const char *base, const char *identity, char *out, size_t cap, char *err,
                   size_t errlen);

//  fsync what is in staged (regular files and directories, following no
//  symlink), rename it to BASE/kept/<identity> (an older one there is
//  swapped out atomically and removed), fsync kept/. On failure staged is
//  removed. 0 or -errno with the reason in err.
int gw_keep_commit (const char *base, const char *identity, const char *staged, char *err,
                    size_t errlen);

//  Rename BASE/kept/<identity> to dst, which must not exist (-EEXIST) and
//  be on the same filesystem (-EXDEV). 0; -ENOENT when nothing is kept;
//  -EACCES when what is kept is not a directory we own (a symlink, a file,
//  another user's): it is deleted. Other -errno. err says why.
int gw_keep_claim (const char *base, const char *identity, const char *dst, char *err,
                   size_t errlen);

//  Delete, under BASE/kept, kept workspaces and the .stage- dirs of dead
//  gateways whose mtime is more than max_age_s before now (seconds since
//  the epoch). Each deletion is logged (keep.swept). The number deleted
//  (0 when there is no kept/), or -errno.
int gw_keep_sweep (const char *base, double max_age_s, double now);

//  Rename src to dst without replacing anything there (-EEXIST) or
//  following a symlink at either end. 0 or -errno.
int gw_keep_move (const char *src, const char *dst);

#endif
