/*  mc_fileres - the files tools' requests and results, pure.

    list_files runs a small cell (built here) that walks the directory in
    the kernel, maps /workspace to the kernel's own workspace (the parent of
    $CELLVM_OUTDIR, so it also works on unsafe-local), refuses symlinks out
    of it, and prints one JSON line; this module turns that line into the
    result. upload_file and download_file results are built from the
    gateway's cellvm_put_reply / cellvm_get_reply.
*/
#ifndef MC_FILERES_H
#define MC_FILERES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

//  At most this many entries are listed.
#define MC_LIST_MAX 1000

//  The code of the listing cell for path (absolute, under /workspace). New.
char *mc_fileres_list_code (const char *path);

//  The list_files result from the cell's stdout (its JSON line).
json_t *mc_fileres_list_result (const char *path, const char *out, bool structured);

//  A result for a gateway error reply (or any failure) in words: "what
//  failed: ename: evalue". reply may be NULL.
json_t *mc_fileres_error (const char *what, const json_t *reply, bool structured);

//  upload_file's result: bytes written in parts; reply is the last part's.
json_t *mc_fileres_upload (const json_t *reply, size_t written, bool structured);

//  download_file's result (or, with as_resource, resources/read's): the
//  bytes of the get reply for path in session.
typedef struct {
    size_t image_cap;           //  images up to this size come back as images
    size_t max_download;        //  larger files are refused, in words
    bool structured;
    bool as_resource;
} mc_download_opts_t;

json_t *mc_fileres_download (const json_t *reply, const uint8_t *data, size_t len,
                             const char *session, const char *path,
                             const mc_download_opts_t *opts);

//  "cellvm://SESSION/workspace/x" for a path (percent-encoded); new.
char *mc_fileres_uri (const char *session, const char *path);

#endif
