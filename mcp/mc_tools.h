/*  mc_tools - the tools cellvm-mcp offers: their definitions, and the
    arguments of a tools/call checked and decoded.

    Pure. Each tool's inputSchema is closed (no unknown arguments), and
    mc_tools_parse checks every argument itself: the schema is advice to the
    client, not a guarantee. Paths are normalised to absolute paths under
    /workspace; anything that leaves it is refused in words.
*/
#ifndef MC_TOOLS_H
#define MC_TOOLS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    MC_TOOL_RUN_PYTHON, MC_TOOL_UPLOAD_FILE, MC_TOOL_DOWNLOAD_FILE, MC_TOOL_LIST_FILES,
    MC_TOOL_RESTART, MC_TOOL_CLOSE, MC_TOOL_COUNT
} mc_tool_t;

#define MC_SESSION_MAX 64
#define MC_PATH_MAX 4096
#define MC_TIMEOUT_MAX 86400.0

//  One decoded call. Strings are owned by it.
typedef struct {
    mc_tool_t tool;
    char session [MC_SESSION_MAX + 1];  //  "" when not given (the default session)
    char *code;             //  run_python
    double timeout_s;       //  run_python; 0 when not given
    char *path;             //  the files tools: absolute, normalised, under /workspace
    uint8_t *data;          //  upload_file: the bytes (decoded from base64, or the text)
    size_t len;
} mc_call_t;

void mc_call_destroy (mc_call_t **self_p);

//  The tools array for tools/list (new). annotations: add MCP 2025-03-26's
//  annotations (readOnlyHint...) and titles.
json_t *mc_tools_list (bool annotations);

//  The name of a tool.
const char *mc_tools_name (mc_tool_t tool);

//  Decode tools/call params {name, arguments}. 0 and a new *call_p; or
//  -ENOENT (no such tool), -EINVAL (missing or mistyped argument: a JSON-RPC
//  invalid-params error), -EACCES (a path outside /workspace: a tool error
//  the model reads), each with the reason in why.
int mc_tools_parse (const json_t *params, mc_call_t **call_p, char *why, size_t cap);

//  Normalise path (relative to /workspace, or absolute under it) into out:
//  "/workspace" or "/workspace/a/b". 0, or -EACCES with the reason in why.
//  "." parts and repeated slashes go; ".." is refused, as are control
//  characters and paths over MC_PATH_MAX.
int mc_tools_path (const char *path, char *out, size_t cap, char *why, size_t why_cap);

#endif
