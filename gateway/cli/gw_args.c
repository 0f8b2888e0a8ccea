/*  gw_args - cellvm-gateway's options (see gw_args.h). */
#include "cli/gw_args.h"
#include "snap/gw_template.h"
#include "base/gw_mem.h"

#include <assert.h>
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_VM (GW_ARGS_BUILDER | GW_ARGS_POOL)  //  the VM options: both children
#define S_HELP_COLUMN 26                        //  where --help puts an option's help
#define S_HELP_WIDTH (80 - S_HELP_COLUMN)       //  and how wide it may be

//  Where an option's line goes in --help.
#define S_MAIN GW_ARGS_HELP_MAIN
#define S_MV GW_ARGS_HELP_MICROVM
#define S_SESS GW_ARGS_HELP_SESSIONS
#define S_NET GW_ARGS_HELP_EGRESS

static const gw_opt_t s_table [GW_OPT_COUNT] = {
    [GW_OPT_CONNECTION_FILE] = { "connection-file", GW_OPTKIND_STR, 0, 0, 0, S_MAIN, "FILE",
        "the connection file Jupyter wrote for this kernel (also -f FILE)" },
    [GW_OPT_BACKEND] = { "backend", GW_OPTKIND_STR, 0, 0, 0, S_MAIN, "microvm|unsafe-local",
        "microvm: each session in its own microVM; unsafe-local: the kernel as "
        "a local child process, with NO isolation" },
    [GW_OPT_KERNEL] = { "kernel", GW_OPTKIND_STR, 0, 0, 0, S_MAIN, "PATH",
        "kernel binary for unsafe-local (default: cellvm-kernel beside this one)" },
    [GW_OPT_LOG_LEVEL] = { "log-level", GW_OPTKIND_STR, 0, 0, 0, S_MAIN, "L",
        "error, warn, info or debug (default $CELLVM_LOG_LEVEL, else warn)" },
    [GW_OPT_MAX_MSG] = { "max-msg", GW_OPTKIND_SIZE, 1, SIZE_MAX / 4, 0, S_MAIN, "BYTES",
        "largest client or kernel message (default 64M)" },
    [GW_OPT_MAX_FRAME] = { "max-frame", GW_OPTKIND_SIZE, 1, UINT32_MAX, 0, S_MAIN, "BYTES",
        "largest channel frame (default 64M)" },
    [GW_OPT_CELL_TIMEOUT] = { "cell-timeout", GW_OPTKIND_SECONDS, 0, 0, 0, S_MAIN, "S",
        "interrupt, then restart, a cell running longer (default 0: off)" },
    [GW_OPT_IMAGE] = { "image", GW_OPTKIND_STR, 0, 0, S_VM, S_MV, "DIR",
        "guest image (default: image/ beside this binary)" },
    [GW_OPT_ARTIFACTS_DIR] = { "artifacts-dir", GW_OPTKIND_STR, 0, 0, 0, S_MAIN, "DIR",
        "where output_files are copied (default $XDG_DATA_HOME/cellvm/artifacts, "
        "else ~/.local/share/cellvm/artifacts)" },
    [GW_OPT_ARTIFACT_MAX_FILE] = { "artifact-max-file", GW_OPTKIND_SIZE, 1, 1ULL << 40, 0,
        S_MAIN, "BYTES", "largest artifact copied (default 100M)" },
    [GW_OPT_ARTIFACT_MAX_SESSION] = { "artifact-max-session", GW_OPTKIND_SIZE, 1, 1ULL << 44, 0,
        S_MAIN, "BYTES", "artifact bytes per session (default 1G)" },
    [GW_OPT_QEMU] = { "qemu", GW_OPTKIND_STR, 0, 0, S_VM, S_MV, "PATH",
        "QEMU binary (default qemu-system-x86_64)" },
    [GW_OPT_ACCEL] = { "accel", GW_OPTKIND_ACCEL, 0, 0, S_VM, S_MV, "auto|kvm|tcg",
        "accelerator (default auto: KVM only on real vmx/svm)" },
    [GW_OPT_RUN_DIR] = { "run-dir", GW_OPTKIND_STR, 0, 0, 0, S_MV, "DIR",
        "where session run directories go" },
    [GW_OPT_MEMORY] = { "memory", GW_OPTKIND_SIZE, 128, 1 << 20, S_VM, S_MV, "MIB",
        "guest memory (default 512)" },
    [GW_OPT_VCPUS] = { "vcpus", GW_OPTKIND_SIZE, 1, 64, S_VM, S_MV, "N",
        "guest vCPUs (default 1)" },
    [GW_OPT_TCG_TB] = { "tcg-tb-mib", GW_OPTKIND_SIZE, 0, 4096, S_VM, S_MV, "MIB",
        "under TCG, the most host memory one VM's translated code may hold (default 32; "
        "0: QEMU's own, up to 1 GiB; docs/snapshots.md)" },
    [GW_OPT_DISK_SIZE] = { "disk-size", GW_OPTKIND_SIZE, 64ULL << 20, 1ULL << 42, S_VM, S_MV,
        "BYTES", "the session's /workspace disk (default 1G)" },
    //  Always passed, resolved (gw_args_child_argv).
    [GW_OPT_TEMPLATE_DIR] = { "template-dir", GW_OPTKIND_STR, 0, 0, S_VM, S_MV, "DIR",
        "snapshot templates (default $CELLVM_TEMPLATE_DIR, else "
        "/var/tmp/cellvm-<uid>/templates; docs/snapshots.md)" },
    [GW_OPT_NO_TEMPLATES] = { "no-templates", GW_OPTKIND_FLAG, 0, 0, 0, S_MV, NULL,
        "cold-boot every VM (no snapshot restore)" },
    [GW_OPT_BUILD_TEMPLATE] = { "build-template", GW_OPTKIND_FLAG, 0, 0, 0, S_MV, NULL,
        "build the template for these options unless an intact one exists, "
        "then exit (3: another process builds it)" },
    [GW_OPT_POOL] = { "pool", GW_OPTKIND_SIZE, 0, 1 << 20, GW_ARGS_POOL, S_MV, "N",
        "take clones from a warm pool of N (started on demand; default 0: "
        "restore directly)" },
    [GW_OPT_POOL_DAEMON] = { "pool-daemon", GW_OPTKIND_FLAG, 0, 0, 0, S_MV, NULL,
        "run the pool daemon (with --pool N)" },
    [GW_OPT_POOL_BUDGET] = { "pool-budget", GW_OPTKIND_SIZE, 0, 1 << 20, GW_ARGS_POOL, S_MV,
        "MIB", "host memory the pool's clones may use (default 4096)" },
    [GW_OPT_POOL_IDLE] = { "pool-idle", GW_OPTKIND_SIZE, 0, 1 << 20, GW_ARGS_POOL, S_MV, "S",
        "the daemon exits after S seconds without a hand-out (default 1800)" },
    [GW_OPT_LISTEN_FDS] = { "listen-fds", GW_OPTKIND_STR, 0, 0, 0, S_MAIN, "A,B,C,D,E",
        "the five ports' sockets, already listening (cellvm-launch passes them)" },
    [GW_OPT_IDLE_PAUSE] = { "idle-pause", GW_OPTKIND_SECONDS, 0, 0, 0, S_SESS, "S",
        "after S idle seconds save the VM to disk and stop it; the next request "
        "resumes it (microvm)" },
    [GW_OPT_IDLE_TIMEOUT] = { "idle-timeout", GW_OPTKIND_SECONDS, 0, 0, 0, S_SESS, "S",
        "end the session after S idle seconds" },
    [GW_OPT_TTL] = { "ttl", GW_OPTKIND_SECONDS, 0, 0, 0, S_SESS, "S",
        "end the session S seconds after it started" },
    [GW_OPT_SNAPSHOT_DIR] = { "snapshot-dir", GW_OPTKIND_STR, 0, 0, 0, S_SESS, "DIR",
        "the snapshot store (default $CELLVM_SNAPSHOT_DIR, else "
        "/var/lib/cellvm/snapshots as root, else $XDG_DATA_HOME/cellvm/snapshots)" },
    [GW_OPT_FROM_SNAPSHOT] = { "from-snapshot", GW_OPTKIND_STR, 0, 0, 0, S_SESS, "NAME",
        "start from this snapshot (also CELLVM_FROM_SNAPSHOT=NAME)" },
    [GW_OPT_SNAPSHOT_GC] = { "snapshot-gc", GW_OPTKIND_FLAG, 0, 0, 0, S_SESS, NULL,
        "delete snapshots beyond --snapshot-max-age and --snapshot-max-bytes "
        "(oldest first), then exit" },
    [GW_OPT_SNAPSHOT_MAX_AGE] = { "snapshot-max-age", GW_OPTKIND_SECONDS, 0, 0, 0, S_SESS, "S",
        "with --snapshot-gc: delete snapshots older than S seconds" },
    [GW_OPT_SNAPSHOT_MAX_BYTES] = { "snapshot-max-bytes", GW_OPTKIND_SIZE, 1, 1ULL << 50, 0,
        S_SESS, "BYTES", "with --snapshot-gc: then the oldest, until the store holds at most "
        "BYTES" },
    //  The jail (gw_jail): not in the template key, but every QEMU gets it.
    [GW_OPT_JAIL] = { "jail", GW_OPTKIND_JAIL, 0, 0, S_VM, S_MV, "auto|on|off",
        "QEMU in a jail: own uid, namespaces, minimal root, cgroup (default "
        "auto: jailed when root or user namespaces allow; docs/security.md)" },
    [GW_OPT_JAIL_UID_BASE] = { "jail-uid-base", GW_OPTKIND_SIZE, 1, UINT32_MAX - 65536, S_VM,
        S_MV, "UID", "the jail's uids: UID..UID+1023 (default 64000)" },
    [GW_OPT_CPUS] = { "cpus", GW_OPTKIND_SECONDS, 0, 0, S_VM, S_MV, "N",
        "each VM's host CPU time, in CPUs (cgroup cpu.max; e.g. 0.5)" },
    //  Jupyter protocol 5.3 (default) or 5.5: XPUB IOPub with iopub_welcome.
    [GW_OPT_PROTOCOL] = { "protocol", GW_OPTKIND_STR, 0, 0, 0, S_MAIN, "5.3|5.5",
        "Jupyter protocol (default 5.3; 5.5: XPUB IOPub that sends "
        "iopub_welcome, supported_features in kernel_info_reply)" },
    //  cellvm-notebook: the launch folder copied into the VM's /notebook (gw_share).
    [GW_OPT_SHARE_CWD] = { "share-cwd", GW_OPTKIND_FLAG, 0, 0, 0, S_MV, NULL,
        "copy the launch folder into the VM's /notebook (read-only), the "
        "kernel's working directory (cellvm-notebook)" },
    [GW_OPT_SHARE_MAX] = { "share-max", GW_OPTKIND_SIZE, 1, 1ULL << 32, 0, S_MV, "BYTES",
        "at most this much of it (default 64M)" },
    //  Privilege separation (gw_priv): as root, run as this user; only the jail stays root.
    [GW_OPT_USER] = { "user", GW_OPTKIND_STR, 0, 0, 0, S_MV, "NAME",
        "as root: run as NAME, a root helper only jails QEMU" },
    //  The cgroup's io.max on the run dir's disk (both children run VMs too).
    [GW_OPT_DISK_BPS] = { "disk-bps", GW_OPTKIND_SIZE, 4096, 1ULL << 40, S_VM, S_MV, "BYTES",
        "each VM's disk bytes per second, per direction (cgroup io.max)" },
    [GW_OPT_DISK_IOPS] = { "disk-iops", GW_OPTKIND_SIZE, 1, 1ULL << 24, S_VM, S_MV, "N",
        "each VM's disk operations per second, per direction (cgroup io.max)" },
    //  A session that moves between hosts through a shared store (docs/cluster.md).
    [GW_OPT_SESSION_NAME] = { "session-name", GW_OPTKIND_STR, 0, 0, 0, S_SESS, "NAME",
        "a session known by NAME in the store (also CELLVM_SESSION_NAME): held by one "
        "host at a time, suspended there by SIGTERM, resumed by the next launch of NAME" },
    [GW_OPT_LEASE_TTL] = { "lease-ttl", GW_OPTKIND_SECONDS, 0, 0, 0, S_SESS, "S",
        "how long a named session's lease lasts unrenewed: a dead host's session can be "
        "taken over after that (default 30)" },
    [GW_OPT_CHECKPOINT_EVERY] = { "checkpoint-every", GW_OPTKIND_SECONDS, 0, 0, 0, S_SESS, "S",
        "a named session is snapshotted into the store every S seconds between cells: a host "
        "that dies loses at most that (default 0: off)" },
    [GW_OPT_LEASE_WAIT] = { "lease-wait", GW_OPTKIND_SECONDS, 0, 0, 0, S_SESS, "S",
        "a named session whose lease another host holds: wait up to S seconds for it to be "
        "released or to expire (a host that died) before refusing (default 0)" },
    [GW_OPT_ADMIT] = { "admit", GW_OPTKIND_SIZE, 0, 4096, 0, S_MV, "N",
        "restores and resumes on this host run N at a time, the rest waiting in line "
        "(default: four per CPU; 0: no line; docs/sessions.md)" },
    [GW_OPT_START_TIMEOUT] = { "start-timeout", GW_OPTKIND_SECONDS, 0, 0, 0, S_MV, "S",
        "each step of a restore or resume (the snapshot loaded, init's and the kernel's "
        "answers) may take S seconds before the guest is judged stuck; one kept off the CPUs "
        "waits on, up to 12 times that (default 5)" },
    //  Egress (docs/network.md): the operator's policy, the ceiling of a client's.
    [GW_OPT_EGRESS_ALLOW] = { "egress-allow", GW_OPTKIND_STR, 0, 0, 0, S_NET, "LIST",
        "the destinations a session's cells may reach through its proxy: names, *.domain, "
        "addresses, networks, * (any public address), each with an optional :PORT, e.g. "
        "pypi.org,*.pythonhosted.org:443 (default: none, no network at all)" },
    [GW_OPT_EGRESS_DENY] = { "egress-deny", GW_OPTKIND_STR, 0, 0, 0, S_NET, "LIST",
        "refused even when an allow rule matches" },
    [GW_OPT_EGRESS_STREAMS] = { "egress-streams", GW_OPTKIND_SIZE, 1, 4096, 0, S_NET, "N",
        "connections a session may have open at once (default 64)" },
    [GW_OPT_EGRESS_CONNS] = { "egress-conns", GW_OPTKIND_SIZE, 1, 1000000, 0, S_NET, "N",
        "new connections a session may open a minute (default 600)" },
    [GW_OPT_EGRESS_MAX] = { "egress-max", GW_OPTKIND_SIZE, 1, 1ULL << 50, 0, S_NET, "BYTES",
        "bytes a session may move both ways, then new connections are refused (default 4G)" },
    [GW_OPT_EGRESS_PORT] = { "egress-port", GW_OPTKIND_SIZE, 1024, 65535, 0, S_NET, "PORT",
        "the proxy's port on the guest's loopback (default 3128)" },
    [GW_OPT_HELP] = { "help", GW_OPTKIND_FLAG, 0, 0, 0, S_MAIN, NULL, "print this and exit" },
};

const gw_opt_t *
gw_args_table (void)
{
    return s_table;
}

//  The length of text's next line: at most S_HELP_WIDTH, cut at a space
//  (a longer word goes whole).
static size_t
s_help_line (const char *text)
{
    size_t len = strlen (text), cut = S_HELP_WIDTH;
    if (len <= S_HELP_WIDTH)
        return len;
    while (cut > 0 && text [cut] != ' ')
        cut--;
    return cut ? cut : strcspn (text, " ");
}

//  One option: "--name ARG", then its help in a column, wrapped.
static void
s_usage_option (FILE *out, const gw_opt_t *o)
{
    int n = fprintf (out, "  --%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
    if (n >= S_HELP_COLUMN - 1)
        n = fprintf (out, "\n") - 1;           //  too wide: its help on the next line
    for (const char *p = o->help; *p; ) {
        size_t len = s_help_line (p);
        fprintf (out, "%*s%.*s\n", S_HELP_COLUMN - n, "", (int) len, p);
        for (p += len; *p == ' '; p++)
            ;
        n = 0;
    }
}

void
gw_args_usage (FILE *out)
{
    static const char *const heads [] = {
        [GW_ARGS_HELP_MAIN] = "",
        [GW_ARGS_HELP_MICROVM] = "\nmicrovm options:\n",
        [GW_ARGS_HELP_SESSIONS] = "\nsessions that outlive a process (docs/sessions.md):\n",
        [GW_ARGS_HELP_EGRESS] = "\negress, microvm (docs/network.md; also CELLVM_EGRESS_ALLOW=LIST, "
                                "which only narrows):\n",
    };
    fprintf (out, "usage: cellvm-gateway --connection-file FILE --backend microvm|unsafe-local\n"
             "                      [OPTION...]\n\n");
    for (gw_args_help_t group = GW_ARGS_HELP_MAIN; group <= GW_ARGS_HELP_EGRESS; group++) {
        fputs (heads [group], out);
        for (int id = 0; id < GW_OPT_COUNT; id++)
            if (s_table [id].group == group)
                s_usage_option (out, &s_table [id]);
    }
    fprintf (out, "\nand, as ipykernel takes them:\n"
             "  --Class.trait=value     one of IPython's shell (InteractiveShell and its\n"
             "                          configurables) goes to the kernel; others are ignored\n"
             "\nenvironment:\n"
             "  CELLVM_LOG_LEVEL        the log level when --log-level is not given\n");
}

//  ==========================================================================
//  Parsing.

//  A number in [min, max] with an optional k/M/G suffix.
static int
s_parse_size (const char *text, unsigned long long min, unsigned long long max,
              unsigned long long *out)
{
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull (text, &end, 10);
    if (errno || end == text || text [0] == '-')
        return -EINVAL;
    if (*end == 'k' || *end == 'K')
        v <<= 10, end++;
    else if (*end == 'M')
        v <<= 20, end++;
    else if (*end == 'G')
        v <<= 30, end++;
    if (*end || v < min || v > max)
        return -EINVAL;
    *out = v;
    return 0;
}

//  Put a checked number where it belongs.
static void
s_store (gw_args_t *args, gw_opt_id_t id, unsigned long long v)
{
    switch (id) {
        case GW_OPT_MAX_MSG: args->max_msg = (size_t) v; break;
        case GW_OPT_MAX_FRAME: args->max_frame = (uint32_t) v; break;
        case GW_OPT_ARTIFACT_MAX_FILE: args->artifact_max_file = v; break;
        case GW_OPT_ARTIFACT_MAX_SESSION: args->artifact_max_session = v; break;
        case GW_OPT_MEMORY: args->memory_mib = (unsigned) v; break;
        case GW_OPT_VCPUS: args->vcpus = (unsigned) v; break;
        case GW_OPT_TCG_TB: args->tcg_tb_mib = (unsigned) v; break;
        case GW_OPT_DISK_SIZE: args->disk_bytes = v; break;
        case GW_OPT_POOL: args->pool = (unsigned) v; break;
        case GW_OPT_POOL_BUDGET: args->pool_budget_mib = (unsigned) v; break;
        case GW_OPT_POOL_IDLE: args->pool_idle_s = (unsigned) v; break;
        case GW_OPT_JAIL_UID_BASE: args->jail_uid_base = (unsigned) v; break;
        case GW_OPT_SNAPSHOT_MAX_BYTES: args->snapshot_max_bytes = v; break;
        case GW_OPT_SHARE_MAX: args->share_max = v; break;
        case GW_OPT_DISK_BPS: args->disk_bps = v; break;
        case GW_OPT_DISK_IOPS: args->disk_iops = v; break;
        case GW_OPT_ADMIT: args->admit = (unsigned) v; break;
        case GW_OPT_EGRESS_STREAMS: args->egress_streams = (unsigned) v; break;
        case GW_OPT_EGRESS_CONNS: args->egress_conns = (unsigned) v; break;
        case GW_OPT_EGRESS_MAX: args->egress_max = v; break;
        case GW_OPT_EGRESS_PORT: args->egress_port = (unsigned) v; break;
        default: assert (false);                //  a GW_OPTKIND_SIZE entry without a field
    }
}

//  Where a GW_OPTKIND_SECONDS option's value goes.
static double *
s_seconds_slot (gw_args_t *args, gw_opt_id_t id)
{
    return id == GW_OPT_IDLE_PAUSE ? &args->idle_pause
         : id == GW_OPT_IDLE_TIMEOUT ? &args->idle_timeout
         : id == GW_OPT_TTL ? &args->ttl
         : id == GW_OPT_SNAPSHOT_MAX_AGE ? &args->snapshot_max_age
         : id == GW_OPT_CPUS ? &args->cpus
         : id == GW_OPT_LEASE_TTL ? &args->lease_ttl
         : id == GW_OPT_CHECKPOINT_EVERY ? &args->checkpoint_every
         : id == GW_OPT_LEASE_WAIT ? &args->lease_wait
         : id == GW_OPT_START_TIMEOUT ? &args->start_timeout
         : &args->cell_timeout;
}

static int
s_parse_value (gw_args_t *args, gw_opt_id_t id, const char *val)
{
    const gw_opt_t *o = &s_table [id];
    unsigned long long v = 0;
    char *end = NULL;
    switch (o->kind) {
        case GW_OPTKIND_SIZE:
            if (s_parse_size (val, o->min, o->max, &v) < 0)
                return -EINVAL;
            s_store (args, id, v);
            break;
        case GW_OPTKIND_SECONDS: {
            double *slot = s_seconds_slot (args, id);
            *slot = strtod (val, &end);
            if (end == val || *end || !(*slot >= 0) || *slot > 1e9
            ||  (id == GW_OPT_CPUS && *slot && (*slot < 0.01 || *slot > 1024)))
                return -EINVAL;                 //  cpu.max takes 1 ms in 100 at least
            break;
        }
        case GW_OPTKIND_ACCEL:
            if (gw_accel_parse (val) < 0)
                return -EINVAL;
            break;
        case GW_OPTKIND_JAIL:
            if (gw_jail_mode_parse (val) < 0)
                return -EINVAL;
            break;
        default:
            if (id == GW_OPT_PROTOCOL && strcmp (val, "5.3") != 0 && strcmp (val, "5.5") != 0)
                return -EINVAL;
            break;
    }
    args->text [id] = o->kind == GW_OPTKIND_FLAG ? "" : val;
    return 0;
}

//  getopt_long's view of the table: each option's val is its id + 256.
static const struct option *
s_long_options (void)
{
    static struct option options [GW_OPT_COUNT + 1];
    for (int i = 0; i < GW_OPT_COUNT; i++)
        options [i] = (struct option) { s_table [i].name, s_table [i].kind == GW_OPTKIND_FLAG
                                        ? no_argument : required_argument, NULL, 256 + i };
    return options;
}

//  "--Class.trait=value", "--Outer.Inner.trait=value": traitlets' form.
static bool
s_is_trait (const char *arg)
{
    if (strncmp (arg, "--", 2) != 0)
        return false;
    int dots = 0;
    bool start = true;                          //  at the start of an identifier
    for (const char *p = arg + 2; *p; p++) {
        if (*p == '=')
            return dots > 0 && !start;
        if (*p == '.' && !start)
            dots++, start = true;
        else if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || *p == '_'
             || (!start && *p >= '0' && *p <= '9'))
            start = false;
        else
            return false;
    }
    return false;
}

//  argv without the traitlets options (counted into args); a NULL-ended
//  copy the caller frees.
static char **
s_without_traits (gw_args_t *args, int argc, char **argv, int *argc_p)
{
    char **out = calloc ((size_t) argc + 1, sizeof *out);
    if (!out)
        abort ();
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (i > 0 && s_is_trait (argv [i])) {
            if (!args->traits)
                args->first_trait = argv [i];
            if (args->traits < GW_ARGS_MAX_TRAITS)
                args->trait [args->traits] = argv [i];
            args->traits++;
            continue;
        }
        out [n++] = argv [i];
    }
    *argc_p = n;
    return out;
}

bool
gw_args_ipython (const char *trait)
{
    //  The shell's configurables (InteractiveShell.configurables) and formatters.
    static const char *classes [] = {
        "InteractiveShell", "HistoryManager", "HistoryAccessor", "IPCompleter", "Completer",
        "DisplayFormatter", "PlainTextFormatter", "BaseFormatter", "DisplayHook",
        "DisplayPublisher", "PrefilterManager", "AliasManager", "ExtensionManager",
        "MagicsManager", "PayloadManager", "ScriptMagics", "LoggingMagics", "OSMagics", NULL
    };
    const char *name = trait + 2, *dot = strchr (name, '.');
    for (int i = 0; dot && classes [i]; i++)
        if (strlen (classes [i]) == (size_t) (dot - name)
        &&  strncmp (classes [i], name, (size_t) (dot - name)) == 0)
            return true;
    return false;
}

int
gw_args_parse (gw_args_t *args, int argc_in, char **argv_in)
{
    assert (args && argv_in);
    memset (args, 0, sizeof *args);
    int argc = 0, rc = 0;
    char **argv = s_without_traits (args, argc_in, argv_in, &argc);
    const struct option *options = s_long_options ();
    int opt;
    optind = 0;                                 //  a full re-scan, each call
    while ((opt = getopt_long (argc, argv, "f:", options, NULL)) != -1) {
        gw_opt_id_t id = opt == 'f' ? GW_OPT_CONNECTION_FILE : (gw_opt_id_t) (opt - 256);
        if (opt != '?' && id == GW_OPT_HELP) {
            rc = 1;
            goto done;
        }
        if (opt == '?' || s_parse_value (args, id, optarg) < 0) {
            if (opt != '?')
                fprintf (stderr, "cellvm-gateway: bad value for an option: %s\n", optarg);
            rc = -EINVAL;
            goto done;
        }
    }
    if (optind < argc) {
        fprintf (stderr, "cellvm-gateway: unexpected argument: %s\n", argv [optind]);
        rc = -EINVAL;
    }
done:
    free (argv);
    return rc;
}

bool
gw_args_has (const gw_args_t *args, gw_opt_id_t id)
{
    assert (args && id < GW_OPT_COUNT);
    return args->text [id] != NULL;
}

//  ==========================================================================
//  What the options mean.

void
gw_args_beside_me (const char *name, char *out, size_t cap)
{
    assert (name && out);
    char path [PATH_MAX];
    ssize_t n = readlink ("/proc/self/exe", path, sizeof path - 1);
    char *slash = n > 0 ? (path [n] = 0, strrchr (path, '/')) : NULL;
    if (slash)
        snprintf (out, cap, "%.*s/%s", (int) (slash - path), path, name);
    else
        snprintf (out, cap, "%s", name);
}

void
gw_args_vm_config (gw_args_t *args, gw_vm_config_t *cfg)
{
    assert (args && cfg);
    gw_vm_config_defaults (cfg);
    char given [PATH_MAX];
    if (args->text [GW_OPT_IMAGE])
        snprintf (given, sizeof given, "%s", args->text [GW_OPT_IMAGE]);
    else
        gw_args_beside_me ("image", given, sizeof given);
    //  QEMU runs in the session's run dir: a relative image path must not reach it.
    if (!realpath (given, args->image_dir))
        snprintf (args->image_dir, sizeof args->image_dir, "%s", given);
    cfg->image_dir = args->image_dir;
    if (args->text [GW_OPT_QEMU])
        cfg->qemu = args->text [GW_OPT_QEMU];
    if (args->text [GW_OPT_ACCEL])
        cfg->accel = (gw_accel_t) gw_accel_parse (args->text [GW_OPT_ACCEL]);
    if (args->text [GW_OPT_RUN_DIR])
        cfg->run_base = args->text [GW_OPT_RUN_DIR];
    if (args->memory_mib)
        cfg->mem_mib = args->memory_mib;
    if (args->vcpus)
        cfg->vcpus = args->vcpus;
    if (gw_args_has (args, GW_OPT_TCG_TB))
        cfg->tcg_tb_mib = args->tcg_tb_mib;
    if (args->disk_bytes)
        cfg->disk_bytes = args->disk_bytes;
    cfg->jail = (gw_jail_opts_t) { .mode = GW_JAIL_AUTO, .uid_base = args->jail_uid_base,
                                   .cpus = args->cpus, .disk_bps = args->disk_bps,
                                   .disk_iops = args->disk_iops };
    if (args->text [GW_OPT_JAIL])
        cfg->jail.mode = gw_jail_mode_parse (args->text [GW_OPT_JAIL]);
}

int
gw_args_vm_config_resolved (gw_args_t *args, gw_vm_config_t *cfg)
{
    gw_args_vm_config (args, cfg);
    char why [256];
    gw_accel_probe_t probe;
    gw_accel_probe (&probe);
    int acc = gw_accel_choose (cfg->accel, &probe, why, sizeof why);
    if (acc < 0) {
        fprintf (stderr, "cellvm-gateway: %s\n", why);
        return acc;
    }
    cfg->accel = (gw_accel_t) acc;
    cfg->tsc_khz = gw_accel_tsc_khz ();
    return 0;
}

const char *
gw_args_template_dir (const gw_args_t *args, char *out, size_t cap)
{
    assert (args && out);
    if (args->text [GW_OPT_TEMPLATE_DIR])
        return args->text [GW_OPT_TEMPLATE_DIR];
    return gw_template_default_dir (out, cap) == 0 ? out : NULL;
}

//  ==========================================================================
//  Children.

char **
gw_args_child_argv (const gw_args_t *args, unsigned child, const char *template_dir)
{
    assert (args && template_dir && (child == GW_ARGS_BUILDER || child == GW_ARGS_POOL));
    char **argv = calloc (2 * GW_OPT_COUNT + 3, sizeof *argv);
    if (!argv)
        abort ();
    int n = 0;
    argv [n++] = gw_strdup ("cellvm-gateway");
    argv [n++] = gw_strdup (child == GW_ARGS_POOL ? "--pool-daemon" : "--build-template");
    for (int id = 0; id < GW_OPT_COUNT; id++) {
        const char *val = id == GW_OPT_TEMPLATE_DIR ? template_dir : args->text [id];
        if (!(s_table [id].inherit & child) || !val)
            continue;
        char name [64];
        snprintf (name, sizeof name, "--%s", s_table [id].name);
        argv [n++] = gw_strdup (name);
        if (s_table [id].kind != GW_OPTKIND_FLAG)
            argv [n++] = gw_strdup (val);
    }
    return argv;
}

void
gw_args_free_argv (char ***argv_p)
{
    assert (argv_p);
    for (char **a = *argv_p; a && *a; a++)
        free (*a);
    free (*argv_p);
    *argv_p = NULL;
}
