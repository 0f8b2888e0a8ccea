/*  cellvm-gateway - a Jupyter kernel front for kernels that run elsewhere.

    cellvm-gateway --connection-file FILE --backend unsafe-local|microvm
                   [--kernel PATH] [--log-level L] [--max-msg BYTES]
                   [--max-frame BYTES] [--cell-timeout S]

    Process-wide concerns live here and only here: arguments, logging
    level, signal dispositions, standard fds. Signals are taken through a
    signalfd so that no handler ever interrupts the reactor.
*/
#include "gw_backend_local.h"
#include "gw_backend_microvm.h"
#include "gw_pool.h"
#include "gw_template.h"
#include "gw_tplsweep.h"
#include "gw_rundir.h"
#include "gw_conn.h"
#include "gw_listen.h"
#include "gw_log.h"
#include "gw_server.h"
#include "gw_wire.h"
#include "kn_frame.h"

#include <czmq.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <sys/stat.h>
#include <limits.h>
#include <sys/stat.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#define S_EXIT_USAGE 2

typedef struct {
    const char *connection_file;
    const char *backend;
    const char *kernel;                         //  NULL: cellvm-kernel next to us
    const char *log_level;
    size_t max_msg;
    uint32_t max_frame;
    double cell_timeout;
    const char *image;                          //  NULL: image/ beside this binary
    const char *qemu;
    const char *accel;
    const char *run_dir;
    unsigned memory_mib, vcpus;
    unsigned long long disk_bytes;
    const char *artifacts_dir;
    unsigned long long artifact_max_file, artifact_max_session;
    const char *template_dir;                   //  NULL: gw_template_default_dir
    bool no_templates;                          //  cold boot every VM
    bool build_template;                        //  build the template, then exit
    bool pool_daemon;                           //  run the warm pool daemon
    unsigned pool, pool_budget_mib, pool_idle_s;
    const char *listen_fds;                     //  from cellvm-launch (gw_listen)
    char **argv;                                //  ours, for the background build
} s_args_t;

static void
s_usage (FILE *out)
{
    fprintf (out,
        "usage: cellvm-gateway --connection-file FILE --backend unsafe-local|microvm\n"
        "                      [--kernel PATH] [--log-level error|warn|info|debug]\n"
        "                      [--max-msg BYTES] [--max-frame BYTES] [--cell-timeout S]\n"
        "\n"
        "  --backend microvm       each session in its own microVM\n"
        "  --backend unsafe-local  the kernel as a local child process: NO isolation\n"
        "  --kernel PATH           kernel binary (default: cellvm-kernel beside this one)\n"
        "  --max-msg BYTES         largest client or kernel message (default 64 MiB)\n"
        "  --max-frame BYTES       largest channel frame (default 64 MiB)\n"
        "  --cell-timeout S        interrupt, then restart, a cell running longer (default off)\n"
        "  --artifacts-dir DIR     where output_files are copied (default:\n"
        "                          $XDG_DATA_HOME/cellvm/artifacts, or ~/.local/share/...)\n"
        "  --artifact-max-file B   largest artifact copied (default 100M)\n"
        "  --artifact-max-session B  artifact bytes per session (default 1G)\n"
        "microvm options:\n"
        "  --image DIR             guest image (default: image/ beside this binary)\n"
        "  --memory MIB            guest memory (default 512)\n"
        "  --vcpus N               guest vCPUs (default 1)\n"
        "  --disk-size BYTES       the session's /workspace disk (default 1G)\n"
        "  --accel auto|kvm|tcg    accelerator (default auto: KVM only on real vmx/svm)\n"
        "  --qemu PATH             QEMU binary (default qemu-system-x86_64)\n"
        "  --run-dir DIR           where session run directories go\n"
        "  --template-dir DIR      snapshot templates (default $CELLVM_TEMPLATE_DIR or\n"
        "                          /var/tmp/cellvm-<uid>/templates); see docs/snapshots.md\n"
        "  --no-templates          cold-boot every VM (no snapshot restore)\n"
        "  --build-template        build the template for these options unless an intact\n"
        "                          one exists, then exit (3: another process builds it)\n"
        "  --pool N                take clones from a warm pool of N (started on demand;\n"
        "                          default 0: restore directly)\n"
        "  --pool-daemon           run the pool daemon (with --pool N)\n"
        "  --pool-budget MIB       host memory the pool's clones may use (default 4096)\n"
        "  --pool-idle S           the daemon exits after S s without a hand-out (default 1800)\n"
        "  CELLVM_LOG_LEVEL        log level when --log-level is not given (default info)\n");
}

//  A positive size with an optional k/M/G suffix.
static int
s_parse_size (const char *text, unsigned long long max, unsigned long long *out)
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
    if (*end || v == 0 || v > max)
        return -EINVAL;
    *out = v;
    return 0;
}

static int
s_parse_option (s_args_t *args, int opt, const char *val)
{
    unsigned long long v = 0;
    char *end = NULL;
    switch (opt) {
        case 'f': args->connection_file = val; return 0;
        case 'L': args->listen_fds = val; return 0;
        case 'b': args->backend = val; return 0;
        case 'k': args->kernel = val; return 0;
        case 'l': args->log_level = val; return 0;
        case 'm':
            if (s_parse_size (val, (unsigned long long) SIZE_MAX / 4, &v) < 0)
                return -EINVAL;
            args->max_msg = (size_t) v;
            return 0;
        case 'F':
            if (s_parse_size (val, UINT32_MAX, &v) < 0)
                return -EINVAL;
            args->max_frame = (uint32_t) v;
            return 0;
        case 't':
            args->cell_timeout = strtod (val, &end);
            return end == val || *end || args->cell_timeout < 0 ? -EINVAL : 0;
        case 'i': args->image = val; return 0;
        case 'A': args->artifacts_dir = val; return 0;
        case 'X':
            return s_parse_size (val, 1ULL << 40, &args->artifact_max_file);
        case 'Y':
            return s_parse_size (val, 1ULL << 44, &args->artifact_max_session);
        case 'q': args->qemu = val; return 0;
        case 'a': args->accel = val; return gw_accel_parse (val) < 0 ? -EINVAL : 0;
        case 'r': args->run_dir = val; return 0;
        case 'T': args->template_dir = val; return 0;
        case 'N': args->no_templates = true; return 0;
        case 'B': args->build_template = true; return 0;
        case 'D': args->pool_daemon = true; return 0;
        case 'P': case 'U': case 'I':
            if (s_parse_size (val, 1 << 20, &v) < 0 && strcmp (val, "0"))
                return -EINVAL;
            *(opt == 'P' ? &args->pool : opt == 'U' ? &args->pool_budget_mib
                                                    : &args->pool_idle_s) = (unsigned) v;
            return 0;
        case 'M':
            if (s_parse_size (val, 1 << 20, &v) < 0 || v < 128)
                return -EINVAL;
            args->memory_mib = (unsigned) v;
            return 0;
        case 'c':
            if (s_parse_size (val, 64, &v) < 0)
                return -EINVAL;
            args->vcpus = (unsigned) v;
            return 0;
        case 'd':
            if (s_parse_size (val, 1ULL << 42, &v) < 0 || v < (64ULL << 20))
                return -EINVAL;
            args->disk_bytes = v;
            return 0;
        default:
            return -EINVAL;
    }
}

static int
s_parse_args (int argc, char **argv, s_args_t *args)
{
    static const struct option options [] = {
        { "connection-file", required_argument, NULL, 'f' },
        { "backend", required_argument, NULL, 'b' },
        { "kernel", required_argument, NULL, 'k' },
        { "log-level", required_argument, NULL, 'l' },
        { "max-msg", required_argument, NULL, 'm' },
        { "max-frame", required_argument, NULL, 'F' },
        { "cell-timeout", required_argument, NULL, 't' },
        { "image", required_argument, NULL, 'i' },
        { "artifacts-dir", required_argument, NULL, 'A' },
        { "artifact-max-file", required_argument, NULL, 'X' },
        { "artifact-max-session", required_argument, NULL, 'Y' },
        { "qemu", required_argument, NULL, 'q' },
        { "accel", required_argument, NULL, 'a' },
        { "run-dir", required_argument, NULL, 'r' },
        { "memory", required_argument, NULL, 'M' },
        { "vcpus", required_argument, NULL, 'c' },
        { "disk-size", required_argument, NULL, 'd' },
        { "template-dir", required_argument, NULL, 'T' },
        { "no-templates", no_argument, NULL, 'N' },
        { "build-template", no_argument, NULL, 'B' },
        { "pool", required_argument, NULL, 'P' },
        { "pool-daemon", no_argument, NULL, 'D' },
        { "pool-budget", required_argument, NULL, 'U' },
        { "pool-idle", required_argument, NULL, 'I' },
        { "listen-fds", required_argument, NULL, 'L' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    int opt;
    while ((opt = getopt_long (argc, argv, "f:", options, NULL)) != -1) {
        if (opt == 'h') {
            s_usage (stdout);
            exit (0);
        }
        if (opt == '?' || s_parse_option (args, opt, optarg) < 0) {
            if (opt != '?')
                fprintf (stderr, "cellvm-gateway: bad value for an option: %s\n", optarg);
            return -EINVAL;
        }
    }
    if (optind < argc) {
        fprintf (stderr, "cellvm-gateway: unexpected argument: %s\n", argv [optind]);
        return -EINVAL;
    }
    return 0;
}

static int
s_setup_logging (const s_args_t *args)
{
    const char *name = args->log_level ? args->log_level : getenv ("CELLVM_LOG_LEVEL");
    int level = name && *name ? gw_log_level_parse (name) : GW_LOG_INFO;
    if (level < 0) {
        fprintf (stderr, "cellvm-gateway: unknown log level '%s' (use error, warn, info or "
                 "debug)\n", name);
        return -EINVAL;
    }
    gw_log_init ((gw_log_level_t) level, NULL);
    return 0;
}

//  Keep 0, 1 and 2 open, or the first socket we make would become "stdout".
static void
s_ensure_std_fds (void)
{
    for (int fd = 0; fd < 3; fd++)
        if (fcntl (fd, F_GETFD) < 0) {
            int null_fd = open ("/dev/null", O_RDWR);
            if (null_fd > 2)
                close (null_fd);
        }
}

//  SIGINT is ignored: in Jupyter's "signal" interrupt mode it hits the whole
//  process group, and our interrupts travel as messages. SIGTERM, SIGHUP
//  and SIGCHLD arrive through a signalfd. Runs before any thread exists, so
//  every thread (ZeroMQ's included) inherits the blocked mask.
static int
s_setup_signals (void)
{
    zsys_handler_set (NULL);                    //  no czmq handler, no zsys_interrupted
    struct sigaction ignore;
    memset (&ignore, 0, sizeof ignore);
    ignore.sa_handler = SIG_IGN;
    sigaction (SIGINT, &ignore, NULL);
    sigaction (SIGPIPE, &ignore, NULL);
    sigset_t set;
    sigemptyset (&set);
    sigaddset (&set, SIGTERM);
    sigaddset (&set, SIGHUP);
    sigaddset (&set, SIGCHLD);
    sigprocmask (SIG_BLOCK, &set, NULL);
    return signalfd (-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
}

//  name in the directory of this executable.
static char *
s_beside_me (const char *name)
{
    char path [PATH_MAX];
    ssize_t n = readlink ("/proc/self/exe", path, sizeof path - 1);
    char *slash = n > 0 ? (path [n] = 0, strrchr (path, '/')) : NULL;
    char *out = malloc (PATH_MAX + 16);
    if (!out)
        abort ();
    if (slash)
        snprintf (out, PATH_MAX + 16, "%.*s/%s", (int) (slash - path), path, name);
    else
        snprintf (out, PATH_MAX + 16, "%s", name);
    return out;
}

//  --artifacts-dir, or $XDG_DATA_HOME/cellvm/artifacts, or ~/.local/share/...
static void
s_default_artifacts (const s_args_t *args, char *out, size_t cap)
{
    const char *xdg = getenv ("XDG_DATA_HOME"), *home = getenv ("HOME");
    out [0] = 0;
    if (args->artifacts_dir)
        snprintf (out, cap, "%s", args->artifacts_dir);
    else if (xdg && xdg [0] == '/')
        snprintf (out, cap, "%s/cellvm/artifacts", xdg);
    else if (home && home [0] == '/')
        snprintf (out, cap, "%s/.local/share/cellvm/artifacts", home);
    //  Make the parents; the session makes its own subdirectory.
    for (char *p = out + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir (out, 0700);
            *p = '/';
        }
    mkdir (out, 0700);
}

//  The same options, with --build-template: how a missing template gets
//  built in the background. The strings live as long as the process.
static char **
s_child_argv (const s_args_t *args, const char *template_dir, bool daemon)
{
    static char *argvs [2][64];
    static char dir [PATH_MAX], pool [16];
    char **argv = argvs [daemon];
    //  Not --run-dir: a session's run base is its own (tests count what is
    //  left in it); builds and pool clones use the default one.
    const char *pass [] = { "--image", args->image, "--qemu", args->qemu, "--accel",
                            args->accel };
    int n = 0;
    snprintf (dir, sizeof dir, "%s", template_dir);
    argv [n++] = "cellvm-gateway";
    argv [n++] = daemon ? "--pool-daemon" : "--build-template";
    if (daemon) {
        snprintf (pool, sizeof pool, "%u", args->pool);
        argv [n++] = "--pool";
        argv [n++] = pool;
    }
    argv [n++] = "--template-dir";
    argv [n++] = dir;
    for (size_t i = 0; i < sizeof pass / sizeof pass [0]; i += 2)
        if (pass [i + 1]) {
            argv [n++] = (char *) pass [i];
            argv [n++] = (char *) pass [i + 1];
        }
    //  Numbers are passed through as the user wrote them.
    for (int i = 1; args->argv [i] && n < 60; i++) {
        const char *o = args->argv [i];
        if ((!strcmp (o, "--memory") || !strcmp (o, "--vcpus") || !strcmp (o, "--disk-size")
          || (daemon && (!strcmp (o, "--pool-budget") || !strcmp (o, "--pool-idle"))))
        &&  args->argv [i + 1]) {
            argv [n++] = (char *) o;
            argv [n++] = args->argv [++i];
        }
    }
    argv [n] = NULL;
    return argv;
}

static void
s_vm_config (const s_args_t *args, gw_vm_config_t *cfg)
{
    static char *image = NULL;                  //  lives as long as the process
    gw_vm_config_defaults (cfg);
    if (!image)
        image = args->image ? strdup (args->image) : s_beside_me ("image");
    //  QEMU runs in the session's run dir: a relative image path must not reach it.
    char *real = realpath (image, NULL);
    if (real) {
        free (image);
        image = real;
    }
    cfg->image_dir = image;
    if (args->qemu)
        cfg->qemu = args->qemu;
    if (args->accel)
        cfg->accel = (gw_accel_t) gw_accel_parse (args->accel);
    if (args->run_dir)
        cfg->run_base = args->run_dir;
    if (args->memory_mib)
        cfg->mem_mib = args->memory_mib;
    if (args->vcpus)
        cfg->vcpus = args->vcpus;
    if (args->disk_bytes)
        cfg->disk_bytes = args->disk_bytes;
}

static const char *
s_template_dir (const s_args_t *args)
{
    static char dir [PATH_MAX];
    if (args->template_dir)
        return args->template_dir;
    return gw_template_default_dir (dir, sizeof dir) == 0 ? dir : NULL;
}

//  The accelerator and clock rate resolved as a session would (they are
//  part of the template key).
static int
s_resolved (gw_vm_config_t *cfg)
{
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

//  --pool-daemon: keep --pool N clones ready for kernel-mode gateways.
static int
s_pool_daemon (const s_args_t *args)
{
    gw_vm_config_t cfg;
    s_vm_config (args, &cfg);
    char sock [PATH_MAX];
    gw_pool_opts_t opts = { .template_dir = s_template_dir (args), .socket_path = sock,
                            .size = args->pool,
                            .budget_mib = args->pool_budget_mib ? args->pool_budget_mib : 4096,
                            .idle_s = args->pool_idle_s ? args->pool_idle_s : 1800 };
    if (!opts.template_dir || s_resolved (&cfg) < 0
    ||  gw_pool_socket_path (&cfg, sock, sizeof sock) < 0)
        return 1;
    return gw_pool_daemon_run (&cfg, &opts);
}

//  --build-template: resolve the accelerator as a session would, build.
//  Templates superseded by ours, or unused for 30 days, go (gw_tplsweep.h).
static void
s_sweep_templates (const char *dir, const gw_vm_config_t *cfg)
{
    char key [GW_TEMPLATE_KEY_LEN + 1], err [256];
    if (gw_template_key (cfg, key, sizeof key, err, sizeof err) == 0)
        gw_tplsweep (dir, key, GW_TPLSWEEP_IDLE_S);
}

static int
s_build_template (const s_args_t *args)
{
    gw_vm_config_t cfg;
    s_vm_config (args, &cfg);
    char err [600] = "";
    const char *dir = s_template_dir (args);
    int rc = s_resolved (&cfg) < 0 ? -EINVAL : !dir ? -ENAMETOOLONG : 0;
    gw_template_t *t = rc == 0 ? gw_template_open (dir, &cfg, &rc, err, sizeof err) : NULL;
    if (t) {                                    //  up to date: nothing to build
        printf ("template %s is up to date\n", gw_template_path (t));
        gw_template_destroy (&t);
        s_sweep_templates (dir, &cfg);
        return 0;
    }
    err [0] = 0;
    if (rc == -ENOENT || rc == -ESTALE)
        rc = gw_template_build (dir, &cfg, err, sizeof err);
    if (rc == 0)
        s_sweep_templates (dir, &cfg);
    if (rc < 0)
        fprintf (stderr, "cellvm-gateway: template build failed: %s\n",
                 err [0] ? err : strerror (-rc));
    else
        printf ("template built under %s\n", dir);
    return rc == 0 ? 0 : rc == -EBUSY ? 3 : 1;
}

static gw_backend_t *
s_make_microvm (const s_args_t *args, char *err, size_t errlen)
{
    gw_vm_config_t cfg;
    s_vm_config (args, &cfg);
    gw_microvm_opts_t opts = { 0 };
    static char pool_socket [PATH_MAX];
    if (!args->no_templates && (opts.template_dir = s_template_dir (args)))
        opts.build_argv = s_child_argv (args, opts.template_dir, false);
    if (opts.template_dir && args->pool > 0 && s_resolved (&cfg) == 0
    &&  gw_pool_socket_path (&cfg, pool_socket, sizeof pool_socket) == 0) {
        opts.pool_socket = pool_socket;
        opts.pool_argv = s_child_argv (args, opts.template_dir, true);
    }
    char base [PATH_MAX];
    if (!cfg.run_base && gw_rundir_default_base (base, sizeof base) == 0)
        gw_rundir_sweep (base);
    else if (cfg.run_base)
        gw_rundir_sweep (cfg.run_base);
    return gw_backend_microvm_new_opts (&cfg, &opts, err, errlen);
}

static gw_backend_t *
s_make_backend (const s_args_t *args, char *err, size_t errlen)
{
    if (!args->backend) {
        snprintf (err, errlen, "--backend is required: name it explicitly, microvm or "
                  "unsafe-local (no isolation)");
        return NULL;
    }
    if (strcmp (args->backend, "microvm") == 0)
        return s_make_microvm (args, err, errlen);
    if (strcmp (args->backend, "unsafe-local") != 0) {
        snprintf (err, errlen, "unknown backend '%.64s' (use microvm or unsafe-local)",
                  args->backend);
        return NULL;
    }
    gw_log (GW_LOG_WARN, "backend.unsafe", "backend=unsafe-local isolation=none "
            "note=\"the kernel runs as this user on this host, with its files and network; "
            "for development and tests only\"");
    char *path = args->kernel ? strdup (args->kernel) : s_beside_me ("cellvm-kernel");
    if (!path)
        abort ();
    gw_backend_t *backend = gw_backend_local_new (path, args->max_frame, err, errlen);
    free (path);
    return backend;
}

//  --listen-fds from cellvm-launch: sockets already listening on the
//  connection file's ports, which the server adopts (gw_listen.h).
static int
s_adopt_listen_fds (const s_args_t *args, gw_conn_t *conn, char *err, size_t errlen)
{
    int fds [GW_PORT_COUNT];
    if (!args->listen_fds)
        return 0;
    if (gw_listen_parse (args->listen_fds, fds) < 0) {
        snprintf (err, errlen, "--listen-fds wants five fds, as A,B,C,D,E (cellvm-launch "
                  "passes them)");
        return -EINVAL;
    }
    int rc = gw_listen_check (conn, fds, err, errlen);
    if (rc < 0)
        return rc;
    for (int i = 0; i < GW_PORT_COUNT; i++)
        fcntl (fds [i], F_SETFD, FD_CLOEXEC);   //  ours alone, not QEMU's or a kernel's
    gw_conn_set_listen_fds (conn, fds);
    return 0;
}

int
main (int argc, char **argv)
{
    s_args_t args = { .max_msg = GW_WIRE_MAX_DEFAULT, .max_frame = KN_FRAME_MAX_DEFAULT };
    s_ensure_std_fds ();
    args.argv = argv;
    if (s_parse_args (argc, argv, &args) < 0 || s_setup_logging (&args) < 0) {
        s_usage (stderr);
        return S_EXIT_USAGE;
    }
    if (args.build_template)
        return s_build_template (&args);
    if (args.pool_daemon)
        return s_pool_daemon (&args);
    int signal_fd = s_setup_signals ();
    int rc = 1;
    char err [600] = "";
    gw_conn_t *conn = NULL;
    gw_backend_t *backend = NULL;
    gw_server_t *server = NULL;
    if (!args.connection_file) {
        snprintf (err, sizeof err, "--connection-file is required");
        goto fail;
    }
    if (!(conn = gw_conn_load (args.connection_file, err, sizeof err))
    ||  s_adopt_listen_fds (&args, conn, err, sizeof err) < 0
    ||  !(backend = s_make_backend (&args, err, sizeof err)))
        goto fail;
    char artifacts [PATH_MAX];
    s_default_artifacts (&args, artifacts, sizeof artifacts);
    gw_session_opts_t opts = { .max_frame = args.max_frame, .max_msg = args.max_msg,
                               .cell_timeout = args.cell_timeout,
                               .artifacts_dir = artifacts [0] ? artifacts : NULL,
                               .artifact_max_file = (size_t) args.artifact_max_file,
                               .artifact_max_session = (size_t) args.artifact_max_session };
    server = gw_server_new (conn, &backend, &opts, args.max_msg, signal_fd, err, sizeof err);
    gw_conn_destroy (&conn);                    //  the key lives on in the signer only
    if (!server)
        goto fail;
    const char *parent = getenv ("JPY_PARENT_PID");     //  started by a Jupyter client
    if (parent && atoi (parent) > 1)
        gw_server_watch_parent (server, atoi (parent));
    rc = gw_server_run (server);
    gw_server_destroy (&server);
    gw_log (GW_LOG_INFO, "gateway.exit", "code=%d", rc);
    close (signal_fd);
    return rc;
fail:
    gw_log (GW_LOG_ERROR, "gateway.refused", "reason=\"%s\"", err);
    fprintf (stderr, "cellvm-gateway: %s\n", err);
    gw_conn_destroy (&conn);
    gw_backend_destroy (&backend);
    if (signal_fd >= 0)
        close (signal_fd);
    return rc;
}
