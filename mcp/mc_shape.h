/*  mc_shape - one cell's outputs, shaped into an MCP tool result for a model.

    Pure. Feed it the cell's IOPub messages (mc_shape_iopub) and its
    execute_reply (mc_shape_reply), tell it how long it took and, when the
    cell did not end normally, how it ended; then mc_shape_result builds the
    CallToolResult:

    - content: one text block with labelled sections (stdout, stderr, each
      capped head and tail with "[... N bytes omitted ...]"; displays as
      text, HTML tables as rows; the last expression's text/plain; the error
      with its traceback free of ANSI codes; a death or timeout in words;
      files written), then images (PNG, JPEG, GIF, WebP) up to a count and
      a size cap, then one resource_link per output file;
    - structuredContent: the same as data (status, execution_count,
      elapsed_s, stdout, stderr, result, error, output_files...);
    - isError: true unless the cell succeeded.
*/
#ifndef MC_SHAPE_H
#define MC_SHAPE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct {
    size_t stream_cap;      //  bytes of stdout, and of stderr, kept (head + tail)
    size_t text_cap;        //  bytes of the result, displays, traceback
    size_t image_cap;       //  largest image returned, decoded bytes
    size_t max_images;      //  images returned per call
    bool links;             //  resource_link blocks (MCP 2025-06-18 and later)
    bool structured;        //  structuredContent (MCP 2025-06-18 and later)
} mc_shape_opts_t;

//  Defaults: 20,000 / 20,000 / 1 MiB / 4, links and structured on.
void mc_shape_opts_default (mc_shape_opts_t *opts);

typedef enum {
    MC_END_REPLY,           //  the execute_reply came (ok, error, or the kernel died)
    MC_END_TIMEOUT,         //  timed out, interrupted; the reply came after
    MC_END_TIMEOUT_RESTART, //  timed out, did not stop, the interpreter was restarted
    MC_END_LOST,            //  the session itself ended (words say how)
} mc_end_t;

typedef struct _mc_shape_t mc_shape_t;

//  New result for a cell of session (named in file links and words).
mc_shape_t *mc_shape_new (const mc_shape_opts_t *opts, const char *session);
void mc_shape_destroy (mc_shape_t **self_p);

//  One IOPub message of the cell: stream, execute_result, display_data,
//  update_display_data, error, clear_output (others are ignored). Content
//  is borrowed; missing or mistyped fields are skipped.
void mc_shape_iopub (mc_shape_t *self, const char *msg_type, const json_t *content);

//  The execute_reply's content (execution_count, status, output_files).
void mc_shape_reply (mc_shape_t *self, const json_t *content);

//  How long the cell took, in seconds.
void mc_shape_elapsed (mc_shape_t *self, double seconds);

//  How it ended, when not by its reply alone: limit_s is the time limit
//  (timeouts), words say what happened for MC_END_LOST (copied).
void mc_shape_end (mc_shape_t *self, mc_end_t end, double limit_s, const char *words);

//  The CallToolResult (new reference).
json_t *mc_shape_result (mc_shape_t *self);

//  Bytes stdout carried in all so far (progress messages).
size_t mc_shape_stdout_bytes (const mc_shape_t *self);

#endif
