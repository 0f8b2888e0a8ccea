/*  fuzz_mc_rpc - cellvm-mcp's request decoder on arbitrary stdin bytes.

    The input is what a client writes on stdin: it goes through the line
    splitter (capped at 4 KiB here, so oversize lines happen), each line
    through mc_rpc_decode, each tools/call's params through mc_tools_parse
    (base64 and path checks included), and each oversize line's head through
    mc_rpc_sniff_id. Replies are encoded too. Nothing may crash or leak, and
    a decoded request must keep what the decoder promised.
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mc_lines.h"
#include "mc_rpc.h"
#include "mc_tools.h"

static void
s_request (mc_rpc_t *msg)
{
    const char *method = mc_rpc_method (msg);
    if (mc_rpc_kind (msg) != MC_RPC_RESPONSE && (!method || !*method))
        abort ();
    json_t *id = mc_rpc_id (msg);
    if (mc_rpc_kind (msg) == MC_RPC_REQUEST && !json_is_string (id) && !json_is_integer (id))
        abort ();
    mc_rpc_progress_token (msg);
    if (method && strcmp (method, "tools/call") == 0) {
        mc_call_t *call = NULL;
        char why [512];
        if (mc_tools_parse (mc_rpc_params (msg), &call, why, sizeof why) == 0
            && call->path && strncmp (call->path, "/workspace", 10) != 0)
            abort ();
        mc_call_destroy (&call);
    }
    json_t *result = json_object ();
    size_t len;
    free (mc_rpc_result (id, &result, &len));
}

static void
s_line (int kind, const char *line, size_t len, size_t total)
{
    if (kind == 2) {
        json_t *id = mc_rpc_sniff_id (line, len);
        json_decref (id);
        (void) total;
        return;
    }
    mc_rpc_t *msg = NULL;
    json_t *id = NULL;
    int code;
    char why [256];
    if (mc_rpc_decode (line, len, &msg, &code, &id, why, sizeof why) == 0)
        s_request (msg);
    else {
        size_t n;
        free (mc_rpc_error (id, code, why, &n));
    }
    json_decref (id);
    mc_rpc_destroy (&msg);
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    mc_lines_t *lines = mc_lines_new (4096);
    const char *p = (const char *) data, *line;
    size_t len = size, n, total;
    while (len > 0) {
        size_t used = mc_lines_feed (lines, p, len);
        p += used;
        len -= used;
        int kind;
        while ((kind = mc_lines_next (lines, &line, &n, &total)) > 0)
            s_line (kind, line, n, total);
    }
    //  What is left at end of stream is one more (unterminated) line.
    mc_lines_feed (lines, "\n", 1);
    int kind = mc_lines_next (lines, &line, &n, &total);
    if (kind > 0)
        s_line (kind, line, n, total);
    mc_lines_destroy (&lines);
    return 0;
}
