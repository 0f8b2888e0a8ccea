/*  cellvm - what runs on this host: sessions and snapshots (gw_cli.h).

    Options may come before or after the command words; each command says
    which ones apply, and any other is a usage error rather than silently
    ignored. Exit status: 0 done, 1 failed, 2 usage.
*/
#include "cli/gw_cli.h"
#include "base/gw_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_ARGS 256

//  The options, as bits: what was given, and what a command accepts.
enum {
    S_JSON = 1u << 0, S_RUN_BASE = 1u << 1, S_SNAPSHOT_DIR = 1u << 2, S_WAIT = 1u << 3,
    S_MAX_AGE = 1u << 4, S_MAX_BYTES = 1u << 5, S_HELP = 1u << 6
};

static const struct {
    const char *name;                           //  without the leading --
    unsigned bit;
    bool has_value;
} s_options [] = {
    { "json", S_JSON, false }, { "run-base", S_RUN_BASE, true },
    { "snapshot-dir", S_SNAPSHOT_DIR, true }, { "wait", S_WAIT, true },
    { "max-age", S_MAX_AGE, true }, { "max-bytes", S_MAX_BYTES, true },
    { "help", S_HELP, false },
};

static const struct {
    const char *words [2];                      //  the command; words [1] may be NULL
    int min_args, max_args;
    unsigned options;
    gw_cli_fn_t *run;
} s_commands [] = {
    { { "ls", NULL }, 0, 0, S_JSON | S_RUN_BASE, gw_cli_ls },
    { { "rm", NULL }, 1, 1, S_RUN_BASE | S_WAIT, gw_cli_rm },
    { { "snapshot", "ls" }, 0, 0, S_JSON | S_SNAPSHOT_DIR, gw_cli_snap_ls },
    { { "snapshot", "rm" }, 1, S_MAX_ARGS, S_SNAPSHOT_DIR, gw_cli_snap_rm },
    { { "snapshot", "gc" }, 0, 0, S_SNAPSHOT_DIR | S_MAX_AGE | S_MAX_BYTES, gw_cli_snap_gc },
};

#define S_COUNT(a) (sizeof (a) / sizeof (a) [0])

typedef struct {
    gw_cli_opts_t opts;
    unsigned given;                             //  S_* bits
    char *words [S_MAX_ARGS];                   //  everything that is not an option
    int count;
} s_args_t;

static void
s_usage (FILE *out)
{
    fprintf (out,
        "usage: cellvm ls [--json] [--run-base DIR]\n"
        "       cellvm rm ID|PID [--wait S] [--run-base DIR]\n"
        "       cellvm snapshot ls [--json] [--snapshot-dir DIR]\n"
        "       cellvm snapshot rm NAME... [--snapshot-dir DIR]\n"
        "       cellvm snapshot gc [--max-age S] [--max-bytes B] [--snapshot-dir DIR]\n"
        "\n"
        "  ls             the sessions running on this host (their gateways' status files)\n"
        "  rm ID|PID      stop one: SIGTERM, then wait up to --wait S (default 10; 0: no wait)\n"
        "                 ID is any unique prefix of the ID column\n"
        "  snapshot ls    the snapshots in the store\n"
        "  snapshot rm    delete snapshots (waiting up to 5 s for sessions starting from them)\n"
        "  snapshot gc    delete snapshots older than S seconds, then the oldest while the\n"
        "                 store holds more than B bytes (suffixes k, M, G, T)\n"
        "\n"
        "  --json              machine-readable output (raw numbers)\n"
        "  --run-base DIR      where gateways keep sessions/ (default /var/tmp/cellvm-UID)\n"
        "  --snapshot-dir DIR  the store (default $CELLVM_SNAPSHOT_DIR, else\n"
        "                      ~/.local/share/cellvm/snapshots; see docs/sessions.md)\n"
        "\n"
        "exit status: 0 done, 1 failed, 2 usage\n");
}

//  Store an option's value in a. 0, or -1 with the reason printed.
static int
s_set_value (s_args_t *a, unsigned bit, const char *name, const char *value)
{
    int rc = *value ? 0 : -1;
    const char *want = "seconds, e.g. 3600";
    switch (bit) {
        case S_RUN_BASE:
            a->opts.run_base = value;
            want = "a directory";
            break;
        case S_SNAPSHOT_DIR:
            a->opts.snapshot_dir = value;
            want = "a directory";
            break;
        case S_WAIT:
            rc = gw_cli_parse_seconds (value, &a->opts.wait_s);
            break;
        case S_MAX_AGE:
            rc = gw_cli_parse_seconds (value, &a->opts.max_age_s);
            break;
        default:
            rc = gw_cli_parse_bytes (value, &a->opts.max_bytes);
            want = "bytes, e.g. 10G";
    }
    if (rc < 0)
        gw_cli_error ("--%s '%.64s' is not valid (want %s); see cellvm --help", name, value,
                      want);
    return rc < 0 ? -1 : 0;
}

//  One option at argv [*i] (--name or --name=value); its value may be the
//  next argument. 0, or -1 with the reason printed.
static int
s_option (s_args_t *a, int argc, char **argv, int *i)
{
    const char *arg = argv [*i] + 2, *eq = strchr (arg, '=');
    size_t len = eq ? (size_t) (eq - arg) : strlen (arg);
    for (size_t k = 0; k < S_COUNT (s_options); k++) {
        if (strlen (s_options [k].name) != len || strncmp (arg, s_options [k].name, len))
            continue;
        a->given |= s_options [k].bit;
        if (!s_options [k].has_value && !eq)
            return 0;
        const char *value = eq ? eq + 1 : *i + 1 < argc ? argv [++*i] : NULL;
        if (value && s_options [k].has_value)
            return s_set_value (a, s_options [k].bit, s_options [k].name, value);
        gw_cli_error ("--%s %s; see cellvm --help", s_options [k].name,
                      value ? "takes no value" : "needs a value");
        return -1;
    }
    gw_cli_error ("unknown option '%.64s'; see cellvm --help", argv [*i]);
    return -1;
}

static int
s_parse (s_args_t *a, int argc, char **argv)
{
    memset (a, 0, sizeof *a);
    a->opts.wait_s = GW_CLI_WAIT_S;
    bool options = true;
    for (int i = 1; i < argc; i++) {
        if (options && strcmp (argv [i], "--") == 0)
            options = false;
        else if (options && strcmp (argv [i], "-h") == 0)
            a->given |= S_HELP;
        else if (options && strncmp (argv [i], "--", 2) == 0) {
            if (s_option (a, argc, argv, &i) < 0)
                return -1;
        }
        else if (a->count == S_MAX_ARGS) {
            gw_cli_error ("too many arguments (at most %d)", S_MAX_ARGS);
            return -1;
        }
        else
            a->words [a->count++] = argv [i];
    }
    a->opts.json = a->given & S_JSON;
    return 0;
}

//  The command a's words name, or -1 with the reason printed.
static int
s_command (const s_args_t *a)
{
    for (size_t k = 0; k < S_COUNT (s_commands); k++) {
        const char *const *w = s_commands [k].words;
        int n = w [1] ? 2 : 1;
        if (a->count >= n && strcmp (a->words [0], w [0]) == 0
        &&  (!w [1] || strcmp (a->words [1], w [1]) == 0))
            return (int) k;
    }
    if (a->count == 0)
        gw_cli_error ("no command given; see cellvm --help");
    else if (strcmp (a->words [0], "snapshot") == 0)
        gw_cli_error ("snapshot wants ls, rm or gc; see cellvm --help");
    else
        gw_cli_error ("unknown command '%.64s' (use ls, rm or snapshot); see cellvm --help",
                      a->words [0]);
    return -1;
}

//  Do the command's arguments and options fit it? 0, or -1 with the reason printed.
static int
s_check (const s_args_t *a, int k, int *first_p)
{
    const char *const *w = s_commands [k].words;
    int first = w [1] ? 2 : 1, n = a->count - first;
    char name [32];
    snprintf (name, sizeof name, "%s%s%s", w [0], w [1] ? " " : "", w [1] ? w [1] : "");
    unsigned extra = a->given & ~s_commands [k].options;
    for (size_t o = 0; o < S_COUNT (s_options); o++)
        if (extra & s_options [o].bit) {
            gw_cli_error ("--%s does not apply to `cellvm %s`; see cellvm --help",
                          s_options [o].name, name);
            return -1;
        }
    if (n < s_commands [k].min_args || n > s_commands [k].max_args) {
        gw_cli_error ("`cellvm %s` takes %s; see cellvm --help", name,
                      strcmp (name, "rm") == 0 ? "one ID or PID"
                      : s_commands [k].min_args ? "one or more names" : "no arguments");
        return -1;
    }
    *first_p = first;
    return 0;
}

int
main (int argc, char **argv)
{
    s_args_t a;
    const char *level = getenv ("CELLVM_LOG_LEVEL");
    int parsed = level && *level ? gw_log_level_parse (level) : -1;
    //  The store logs what it deletes at info; a command says so itself.
    gw_log_init (parsed >= 0 ? (gw_log_level_t) parsed : GW_LOG_WARN, NULL);
    if (s_parse (&a, argc, argv) < 0)
        return GW_CLI_USAGE;
    if (a.given & S_HELP) {
        s_usage (stdout);
        return GW_CLI_OK;
    }
    int first = 0, k = s_command (&a);
    if (k < 0 || s_check (&a, k, &first) < 0)
        return GW_CLI_USAGE;
    return s_commands [k].run (&a.opts, a.words + first, a.count - first);
}
