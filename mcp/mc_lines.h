/*  mc_lines - newline-delimited messages from a byte stream, each capped.

    Pure: bytes go in (mc_lines_feed), whole lines come out (mc_lines_next).
    MCP's stdio transport is one JSON-RPC message per line. A line longer
    than the cap is not kept: its first bytes are remembered (so an id can
    still be found in them), the rest is skipped up to its newline, and
    mc_lines_next reports it once as oversize with its full length.

        while (len > 0) {
            size_t used = mc_lines_feed (lines, data, len);
            data += used; len -= used;
            while ((rc = mc_lines_next (lines, &line, &n, &total)) > 0)
                handle (rc, line, n, total);
        }
*/
#ifndef MC_LINES_H
#define MC_LINES_H

#include <stdbool.h>
#include <stddef.h>

typedef struct _mc_lines_t mc_lines_t;

//  How many leading bytes of an oversize line are kept for the error reply.
#define MC_LINES_HEAD 4096

//  New splitter; max_line caps one line, newline excluded (at least 1).
mc_lines_t *mc_lines_new (size_t max_line);
void mc_lines_destroy (mc_lines_t **self_p);

//  Take bytes from data, up to and including the first newline; returns
//  how many were taken. Call mc_lines_next until it returns 0 before
//  feeding the rest.
size_t mc_lines_feed (mc_lines_t *self, const void *data, size_t len);

//  The line just completed (without "\n" or a trailing "\r"): 1 and *line_p
//  borrowed until the next feed, *len_p its length; or, for an oversize
//  line, 2 with *line_p its first bytes (at most MC_LINES_HEAD), *len_p
//  how many of them, and *total_p the whole line's length. 0 when no line
//  is complete. total_p may be NULL.
int mc_lines_next (mc_lines_t *self, const char **line_p, size_t *len_p, size_t *total_p);

//  Bytes of the incomplete line buffered or skipped so far (end of stream).
size_t mc_lines_pending (const mc_lines_t *self);

#endif
