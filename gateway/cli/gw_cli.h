/*  gw_cli - the commands of `cellvm` (gateway/cellvm.c holds its main):
    the sessions running on this host, from their status files
    (gw_status.h), and the snapshot store (gw_snapstore.h).

        cellvm ls [--json]                 live sessions
        cellvm rm ID|PID [--wait S]        SIGTERM one, wait for it to go
        cellvm snapshot ls [--json]
        cellvm snapshot rm NAME...
        cellvm snapshot gc [--max-age S] [--max-bytes B]

    Each command returns the process's exit status (GW_CLI_OK, _FAILED,
    _USAGE) and has said what went wrong, in one line on stderr, when it
    is not GW_CLI_OK.
*/
#ifndef GW_CLI_H
#define GW_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GW_CLI_OK 0
#define GW_CLI_FAILED 1
#define GW_CLI_USAGE 2

#define GW_CLI_WAIT_S 10.0                      //  rm: how long SIGTERM may take
#define GW_CLI_SNAP_WAIT_MS 5000                //  snapshot rm: for starts reading it

typedef struct {
    const char *run_base;                       //  --run-base; NULL: gw_runbase_default
    const char *snapshot_dir;                   //  --snapshot-dir; NULL: the store's default
    bool json;                                  //  --json
    double wait_s;                              //  rm --wait
    double max_age_s;                           //  snapshot gc --max-age (0: none)
    uint64_t max_bytes;                         //  snapshot gc --max-bytes (0: none)
} gw_cli_opts_t;

//  A command: its arguments after the command words.
typedef int (gw_cli_fn_t) (const gw_cli_opts_t *opts, char **args, int count);

gw_cli_fn_t gw_cli_ls;                          //  no arguments
gw_cli_fn_t gw_cli_rm;                          //  ID or PID
gw_cli_fn_t gw_cli_snap_ls;                     //  no arguments
gw_cli_fn_t gw_cli_snap_rm;                     //  names
gw_cli_fn_t gw_cli_snap_gc;                     //  no arguments

//  "cellvm: " and the message, one line on stderr.
void gw_cli_error (const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));

//  Human units: "41s", "3m12s", "2h05m", "3d04h"; "812 B", "41.2 MiB".
void gw_cli_duration (double seconds, char *out, size_t cap);
void gw_cli_bytes (double bytes, char *out, size_t cap);

//  text fit for a terminal: at most max characters (and cap - 1), made
//  printable ASCII by ch_text_printable. NULL becomes "-".
void gw_cli_clean (const char *text, size_t max, char *out, size_t cap);

//  Seconds ("2.5": non-negative, finite) and byte counts ("10G", "512k",
//  "4096"; binary units). 0 or -EINVAL.
int gw_cli_parse_seconds (const char *text, double *out);
int gw_cli_parse_bytes (const char *text, uint64_t *out);

#endif
