/*  mc_args - cellvm-mcp's options: the one table, parsing, usage. */
#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mc_args.h"

typedef enum { T_STR, T_LIST, T_BOOL, T_SECS, T_LIFE, T_BYTES, T_COUNT, T_LEVEL } type_t;

static const struct {
    const char *name;
    type_t type;
    size_t offset;
    const char *help;
} s_opts [] = {
    { "--kernelspec", T_STR, offsetof (mc_options_t, kernelspec),
      "kernelspec whose argv starts each session's gateway (default cellvm)" },
    { "--allow-unsafe-local", T_BOOL, offsetof (mc_options_t, allow_unsafe),
      "accept a kernelspec with the unsafe-local backend (no isolation: tests only)" },
    { "--cell-timeout", T_SECS, offsetof (mc_options_t, cell_timeout_s),
      "seconds a cell may run when run_python gives no timeout_s (default 120)" },
    { "--max-timeout", T_SECS, offsetof (mc_options_t, max_timeout_s),
      "largest timeout_s a call may ask for (default 3600)" },
    { "--interrupt-grace", T_SECS, offsetof (mc_options_t, interrupt_grace_s),
      "seconds an interrupted cell has to stop before Python is restarted (default 5)" },
    { "--start-timeout", T_SECS, offsetof (mc_options_t, start_timeout_s),
      "seconds a session may take to start (default 180)" },
    { "--progress-interval", T_SECS, offsetof (mc_options_t, progress_s),
      "seconds between progress notifications of a running cell (default 2)" },
    { "--idle-timeout", T_LIFE, offsetof (mc_options_t, idle_timeout_s),
      "end a session after S idle seconds, in the gateway's words; 0: never (default: the "
      "kernelspec's own, else 1800)" },
    { "--ttl", T_LIFE, offsetof (mc_options_t, ttl_s),
      "end a session S seconds after its gateway started; 0: never (default: the "
      "kernelspec's own, else never)" },
    { "--max-stream", T_BYTES, offsetof (mc_options_t, stream_cap),
      "bytes of stdout, and of stderr, returned: head and tail (default 20k)" },
    { "--max-text", T_BYTES, offsetof (mc_options_t, text_cap),
      "bytes of the result, the displays and the traceback returned (default 20k)" },
    { "--max-image", T_BYTES, offsetof (mc_options_t, image_cap),
      "largest image returned as image content (default 1M)" },
    { "--max-images", T_COUNT, offsetof (mc_options_t, max_images),
      "images returned by one call (default 4)" },
    { "--max-download", T_BYTES, offsetof (mc_options_t, max_download),
      "largest file download_file returns (default 16M)" },
    { "--max-request", T_BYTES, offsetof (mc_options_t, max_request),
      "largest JSON-RPC message accepted from the client (default 64M)" },
    { "--max-sessions", T_COUNT, offsetof (mc_options_t, max_sessions),
      "sessions one client may hold at once (default 8)" },
    { "--state-dir", T_STR, offsetof (mc_options_t, state_dir),
      "where the private 0700 run directory goes (default $XDG_RUNTIME_DIR, else /tmp)" },
    { "--log-level", T_LEVEL, offsetof (mc_options_t, log_level),
      "error, warn, info or debug, on stderr (default info)" },
    { "--egress-allow", T_LIST, offsetof (mc_options_t, egress_allow),
      "what each session's cells may reach, passed to its gateway (docs/network.md; "
      "default: the kernelspec's own, else no network)" },
    { "--egress-deny", T_LIST, offsetof (mc_options_t, egress_deny),
      "refused even when allowed, passed to each gateway" },
};
#define N_OPTS (sizeof s_opts / sizeof s_opts [0])

void
mc_args_default (mc_options_t *opts)
{
    assert (opts);
    memset (opts, 0, sizeof *opts);
    snprintf (opts->kernelspec, sizeof opts->kernelspec, "cellvm");
    opts->cell_timeout_s = 120;
    opts->max_timeout_s = 3600;
    opts->interrupt_grace_s = 5;
    opts->start_timeout_s = 180;
    opts->progress_s = 2;
    opts->idle_timeout_s = -1;
    opts->ttl_s = -1;
    opts->stream_cap = 20000;
    opts->text_cap = 20000;
    opts->image_cap = 1u << 20;
    opts->max_images = 4;
    opts->max_download = 16u << 20;
    opts->max_request = 64u << 20;
    opts->max_sessions = 8;
    opts->log_level = 2;
}

static void
s_usage (FILE *out)
{
    fprintf (out, "usage: cellvm-mcp [options]\n\nAn MCP server (stdio) whose tools run Python in "
             "cellvm sessions (docs/mcp.md).\n\n");
    for (size_t i = 0; i < N_OPTS; i++)
        fprintf (out, "  %-22s %s\n", s_opts [i].name, s_opts [i].help);
    fprintf (out, "  %-22s %s\n  %-22s %s\n", "--help", "this text", "--version", "the version");
}

//  "20k", "64M", "1G", "512": bytes. -1 when bad.
static int64_t
s_bytes (const char *s)
{
    char *end;
    double v = strtod (s, &end);
    double mul = *end == 'k' || *end == 'K' ? 1024 : *end == 'M' ? 1 << 20
               : *end == 'G' ? 1 << 30 : *end == 0 ? 1 : -1;
    if (end == s || mul < 0 || (*end && end [1]) || !(v >= 0) || v * mul > (double) INT64_MAX / 2)
        return -1;
    return (int64_t) (v * mul);
}

static int
s_level (const char *s)
{
    static const char *const names [] = { "error", "warn", "info", "debug" };
    for (int i = 0; i < 4; i++)
        if (strcmp (s, names [i]) == 0)
            return i;
    return -1;
}

//  Store value into the option at i. 0 or -EINVAL.
static int
s_set (mc_options_t *opts, size_t i, const char *value)
{
    char *field = (char *) opts + s_opts [i].offset;
    char *end = NULL;
    double secs;
    int64_t bytes;
    switch (s_opts [i].type) {
        case T_STR:
        case T_LIST:
            if (strlen (value) == 0 || strlen (value) >= (s_opts [i].type == T_STR ? 256
                                                          : MC_EGRESS_LIST_MAX))
                return -EINVAL;
            snprintf (field, s_opts [i].type == T_STR ? 256 : MC_EGRESS_LIST_MAX, "%s", value);
            return 0;
        case T_SECS:
            secs = strtod (value, &end);
            if (end == value || *end || !(secs > 0) || secs > 86400 * 7)
                return -EINVAL;
            *(double *) (void *) field = secs;
            return 0;
        case T_LIFE:            //  as the gateway takes them: 0 is off
            secs = strtod (value, &end);
            if (end == value || *end || !(secs >= 0) || secs > 1e9)
                return -EINVAL;
            *(double *) (void *) field = secs;
            return 0;
        case T_LEVEL:
            return (*(int *) (void *) field = s_level (value)) < 0 ? -EINVAL : 0;
        default:
            bytes = s_bytes (value);
            if (bytes <= 0 || (s_opts [i].type == T_COUNT && bytes > 1000))
                return -EINVAL;
            *(size_t *) (void *) field = (size_t) bytes;
            return 0;
    }
}

//  One option at argv [*k] (and its value); advances *k.
static int
s_one (mc_options_t *opts, int argc, char **argv, int *k)
{
    const char *arg = argv [*k];
    size_t i = 0;
    while (i < N_OPTS && strcmp (arg, s_opts [i].name) != 0)
        i++;
    if (i == N_OPTS) {
        fprintf (stderr, "cellvm-mcp: unknown option %s (see --help)\n", arg);
        return -EINVAL;
    }
    if (s_opts [i].type == T_BOOL) {
        *(bool *) ((char *) opts + s_opts [i].offset) = true;
        return 0;
    }
    if (*k + 1 >= argc || s_set (opts, i, argv [*k + 1]) != 0) {
        fprintf (stderr, "cellvm-mcp: %s needs a valid value: %s\n", arg, s_opts [i].help);
        return -EINVAL;
    }
    (*k)++;
    return 0;
}

int
mc_args_parse (mc_options_t *opts, int argc, char **argv)
{
    assert (opts);
    mc_args_default (opts);
    for (int k = 1; k < argc; k++) {
        if (strcmp (argv [k], "--help") == 0 || strcmp (argv [k], "-h") == 0) {
            s_usage (stdout);
            return 1;
        }
        if (strcmp (argv [k], "--version") == 0) {
            printf ("cellvm-mcp %s\n", MC_VERSION);
            return 1;
        }
        if (s_one (opts, argc, argv, &k) != 0)
            return -EINVAL;
    }
    if (opts->cell_timeout_s > opts->max_timeout_s)
        opts->max_timeout_s = opts->cell_timeout_s;
    return 0;
}
