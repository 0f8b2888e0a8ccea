/*  mc_args - cellvm-mcp's options: the one table, parsing, usage.

    Every limit is an option; the defaults are documented in docs/mcp.md
    and in --help.
*/
#ifndef MC_ARGS_H
#define MC_ARGS_H

#include <stdbool.h>
#include <stddef.h>

#define MC_EGRESS_LIST_MAX 4096        //  an egress list, with its NUL

typedef struct {
    char kernelspec [256];      //  --kernelspec NAME (or a path to a kernel.json)
    bool allow_unsafe;          //  --allow-unsafe-local: a spec whose backend is unsafe-local
    double cell_timeout_s;      //  --cell-timeout: run_python's default timeout_s
    double max_timeout_s;       //  --max-timeout: the largest timeout_s accepted
    double interrupt_grace_s;   //  --interrupt-grace: after the interrupt, before a restart
    double start_timeout_s;     //  --start-timeout: a session's start, restart
    double progress_s;          //  --progress-interval: between notifications/progress
    double idle_timeout_s;      //  --idle-timeout: passed to each gateway; -1 when not given
    double ttl_s;               //  --ttl: passed to each gateway; -1 when not given
    size_t stream_cap;          //  --max-stream: stdout, and stderr, bytes kept
    size_t text_cap;            //  --max-text: result, displays, traceback
    size_t image_cap;           //  --max-image: bytes of one image returned
    size_t max_images;          //  --max-images: images per call
    size_t max_download;        //  --max-download: largest file download_file returns
    size_t max_request;         //  --max-request: one JSON-RPC message from the client
    size_t max_sessions;        //  --max-sessions: per MCP connection
    char state_dir [512];       //  --state-dir: parent of the private run directory
    int log_level;              //  --log-level error|warn|info|debug (0..3)
    //  Egress (docs/network.md): passed to each gateway, "" when not given.
    char egress_allow [MC_EGRESS_LIST_MAX];    //  --egress-allow LIST
    char egress_deny [MC_EGRESS_LIST_MAX];     //  --egress-deny LIST
} mc_options_t;

//  Fill opts from argv. 0; 1 when --help or --version was printed (exit
//  0); -EINVAL with the reason printed on stderr (exit 2).
int mc_args_parse (mc_options_t *opts, int argc, char **argv);

//  Defaults only.
void mc_args_default (mc_options_t *opts);

#define MC_VERSION "0.1.0"

#endif
