/*  cellvm-gateway - a Jupyter kernel front for kernels that run elsewhere.

    cellvm-gateway --connection-file FILE --backend microvm|unsafe-local [OPTION...]

    `cellvm-gateway --help` lists every option: it prints gw_args' table, the
    one place an option is declared, with its value and what it does.

    Process-wide concerns live here and only here: arguments (gw_args),
    logging level, signal dispositions, standard fds. Signals are taken
    through a signalfd so that no handler ever interrupts the reactor. The
    same binary also runs the template builder (--build-template,
    gw_cmd_build) and the pool daemon (--pool-daemon, gw_cmd_pool).
*/
#include "cli/gw_args.h"
#include "backend/gw_backend_local.h"
#include "backend/gw_backend_microvm.h"
#include "cli/gw_cmd_build.h"
#include "cli/gw_cmd_pool.h"
#include "cli/gw_persist.h"
#include "cli/gw_netopt.h"
#include "snap/gw_pool.h"
#include "vm/gw_rundir.h"
#include "base/gw_runbase.h"
#include "wire/gw_conn.h"
#include "wire/gw_listen.h"
#include "base/gw_admit.h"
#include "base/gw_log.h"
#include "base/gw_readlease.h"
#include "jail/gw_priv.h"
#include "vm/gw_vm.h"
#include "server/gw_server.h"
#include "session/gw_session.h"
#include "wire/gw_wire.h"
#include "ch_frame.h"
#include "ch_sig.h"

#include <czmq.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_EXIT_USAGE 2

static int
s_setup_logging (const gw_args_t *args)
{
    const char *name = args->text [GW_OPT_LOG_LEVEL];
    if (!name)
        name = getenv ("CELLVM_LOG_LEVEL");
    //  Quiet unless something is wrong, as ipykernel: a client's terminal and a
    //  runner's captured log get no lines from a clean session.
    int level = name && *name ? gw_log_level_parse (name) : GW_LOG_WARN;
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
//  every thread (ZeroMQ's included) inherits the mask: exactly that set,
//  whatever the launcher blocked. An ignored signal is dropped, never queued:
//  SIGTERM and SIGCHLD are set to default first (an inherited SIG_IGN for
//  SIGCHLD also reaps our children unasked, their exit status lost); an
//  inherited SIGHUP ignore is nohup's, and honoured.
static int
s_setup_signals (void)
{
    zsys_handler_set (NULL);                    //  no czmq handler, no zsys_interrupted
    struct sigaction sa;
    memset (&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    sigaction (SIGINT, &sa, NULL);
    sa.sa_handler = SIG_DFL;
    sigaction (SIGTERM, &sa, NULL);
    sigaction (SIGCHLD, &sa, NULL);
    int fd = ch_sig_fd ((const int []) { SIGTERM, SIGHUP, SIGCHLD, 0 }, true);
    gw_readlease_block_signal ();               //  lease breaks: their own signalfd
    return fd;
}

//  --artifacts-dir, or $XDG_DATA_HOME/cellvm/artifacts, or ~/.local/share/...
static void
s_default_artifacts (const gw_args_t *args, char *out, size_t cap)
{
    const char *xdg = getenv ("XDG_DATA_HOME"), *home = getenv ("HOME");
    out [0] = 0;
    if (args->text [GW_OPT_ARTIFACTS_DIR])
        snprintf (out, cap, "%s", args->text [GW_OPT_ARTIFACTS_DIR]);
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

//  The children a session may start: a template build, the pool daemon.
//  Their argv lives as long as the process.
static void
s_children (gw_args_t *args, gw_microvm_opts_t *opts, gw_vm_config_t *cfg)
{
    static char pool_socket [PATH_MAX];
    static char **build_argv, **pool_argv;
    if (!build_argv)
        build_argv = gw_args_child_argv (args, GW_ARGS_BUILDER, opts->template_dir);
    opts->build_argv = build_argv;
    if (args->pool == 0 || gw_args_vm_config_resolved (args, cfg) < 0
    ||  gw_pool_socket_path (cfg, pool_socket, sizeof pool_socket) < 0)
        return;
    if (!pool_argv)
        pool_argv = gw_args_child_argv (args, GW_ARGS_POOL, opts->template_dir);
    opts->pool_socket = pool_socket;
    opts->pool_argv = pool_argv;
}

//  The host's admission queue: in this user's run base (every gateway of
//  the user shares it; another user's cannot hold its slots), four slots
//  per CPU unless --admit says otherwise. A restore waits on its guest
//  part of the time, so a few per CPU interleave; measured on 2 CPUs, 24
//  at once did as well with no line as with 8 slots (bench/burst_bench.py),
//  and the line is there for the bursts past that.
static void
s_admission (const gw_args_t *args, const gw_vm_config_t *cfg, gw_microvm_opts_t *opts)
{
    static char dir [PATH_MAX];
    char base [PATH_MAX];
    const char *root = cfg->run_base;
    if (!root && gw_runbase_default (base, sizeof base) == 0)
        root = base;
    opts->admit_slots = gw_args_has (args, GW_OPT_ADMIT) ? (int) args->admit
                                                          : 4 * gw_admit_default_slots ();
    if (root && snprintf (dir, sizeof dir, "%s/admission", root) < (int) sizeof dir)
        opts->admit_dir = dir;
    if (args->start_timeout > 0)
        opts->start_timeout_ms = args->start_timeout * 1000 < 1 ? 1
                               : args->start_timeout > 86400 ? 86400000
                               : (int) (args->start_timeout * 1000);
}

//  The session's egress policy (gw_netopt), for the process's life: the
//  backend reads it at each connection, a live change edits it.
static gw_egress_t *s_policy;

static int
s_egress (const gw_args_t *args, const gw_persist_t *persist, char *err, size_t errlen)
{
    const char *backend = args->text [GW_OPT_BACKEND] ? args->text [GW_OPT_BACKEND] : "";
    int rc = gw_netopt_policy (args, getenv (GW_NETOPT_ENV), gw_persist_egress (persist),
                               &s_policy, err, errlen);
    if (rc == 0 && s_policy && strcmp (backend, "microvm") != 0) {
        gw_log (GW_LOG_WARN, "egress.ignored", "backend=%s reason=\"the kernel runs on this "
                "host with all of its network: egress options apply to --backend microvm\"",
                backend);
        gw_egress_destroy (&s_policy);
    }
    return rc;
}

//  A session with egress: its policy, caps and port. Not from the pool: a
//  clone's ports are its holder's.
static void
s_egress_opts (const gw_args_t *args, gw_microvm_opts_t *opts)
{
    if (!s_policy)
        return;
    opts->egress = s_policy;
    gw_netopt_caps (args, &opts->egress_caps);
    opts->egress_port = args->egress_port;
    if (opts->pool_socket)
        gw_log (GW_LOG_INFO, "egress.no_pool", "reason=\"a session with egress restores its "
                "own VM: a pool clone's ports are the pool's\"");
    opts->pool_socket = NULL;
}

static gw_backend_t *
s_make_microvm (gw_args_t *args, const gw_persist_t *persist, char *err, size_t errlen)
{
    gw_vm_config_t cfg;
    gw_args_vm_config (args, &cfg);
    gw_microvm_opts_t opts = { 0 };
    gw_persist_microvm_opts (persist, &opts);
    static char tdir [PATH_MAX];
    if (!gw_args_has (args, GW_OPT_NO_TEMPLATES)
    &&  (opts.template_dir = gw_args_template_dir (args, tdir, sizeof tdir)))
        s_children (args, &opts, &cfg);
    char base [PATH_MAX];
    if (!cfg.run_base && gw_runbase_default (base, sizeof base) == 0)
        gw_rundir_sweep (base);
    else if (cfg.run_base)
        gw_rundir_sweep (cfg.run_base);
    s_admission (args, &cfg, &opts);
    s_egress_opts (args, &opts);
    return gw_backend_microvm_new_opts (&cfg, &opts, err, errlen);
}

static gw_backend_t *
s_make_backend (gw_args_t *args, const gw_persist_t *persist, char *err, size_t errlen)
{
    const char *name = args->text [GW_OPT_BACKEND];
    if (!name) {
        snprintf (err, errlen, "--backend is required: name it explicitly, microvm or "
                  "unsafe-local (no isolation)");
        return NULL;
    }
    if (strcmp (name, "microvm") == 0)
        return s_make_microvm (args, persist, err, errlen);
    if (strcmp (name, "unsafe-local") != 0) {
        snprintf (err, errlen, "unknown backend '%.64s' (use microvm or unsafe-local)",
                  name);
        return NULL;
    }
    //  Info, not a warning: choosing the backend (its kernelspec says "unsafe") is
    //  not something going wrong, and a clean session is silent.
    gw_log (GW_LOG_INFO, "backend.unsafe", "backend=unsafe-local isolation=none "
            "note=\"the kernel runs as this user on this host, with its files and network; "
            "for development and tests only\"");
    char path [PATH_MAX + 16];
    if (args->text [GW_OPT_KERNEL])
        snprintf (path, sizeof path, "%s", args->text [GW_OPT_KERNEL]);
    else
        gw_args_beside_me ("cellvm-kernel", path, sizeof path);
    return gw_backend_local_new_opts (path, args->max_frame, gw_persist_adopt_dir (persist),
                                      err, errlen);
}

//  --listen-fds from cellvm-launch: sockets already listening on the
//  connection file's ports, which the server adopts (gw_listen.h).
static int
s_adopt_listen_fds (const gw_args_t *args, gw_conn_t *conn, char *err, size_t errlen)
{
    int fds [GW_PORT_COUNT];
    const char *text = args->text [GW_OPT_LISTEN_FDS];
    if (!text)
        return 0;
    if (gw_listen_parse (text, fds) < 0) {
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

//  --Class.trait=value options: those of IPython's shell go to the kernel
//  (into out, at most GW_ARGS_MAX_TRAITS); one warning names the rest.
static size_t
s_ipython_options (const gw_args_t *args, const char **out)
{
    size_t n = 0, others = 0;
    const char *first = NULL;
    for (unsigned i = 0; i < args->traits; i++) {
        const char *t = i < GW_ARGS_MAX_TRAITS ? args->trait [i] : NULL;
        if (t && gw_args_ipython (t))
            out [n++] = t;
        else if (!others++)
            first = t ? t : "(past the first 32)";
    }
    if (others)
        gw_log (GW_LOG_WARN, "gateway.options_ignored", "count=%zu first=\"%.200s\" reason=\""
                "not an option of IPython's shell (those are passed to the kernel); "
                "ipykernel's own (app, session, kernel) have no meaning here\"", others, first);
    if (n)
        gw_log (GW_LOG_INFO, "gateway.ipython_options", "count=%zu first=\"%.200s\"", n,
                out [0]);
    return n;
}

//  The server for one session; takes *conn_p and *backend_p.
static gw_server_t *
s_server (const gw_args_t *args, const gw_persist_t *persist, gw_conn_t **conn_p,
          gw_backend_t **backend_p, int signal_fd, char *err, size_t errlen)
{
    static char artifacts [PATH_MAX];           //  the session borrows it
    static const char *ipython [GW_ARGS_MAX_TRAITS];    //  ... and these
    s_default_artifacts (args, artifacts, sizeof artifacts);
    gw_session_opts_t opts = { .max_frame = args->max_frame, .max_msg = args->max_msg,
                               .cell_timeout = args->cell_timeout,
                               .artifacts_dir = artifacts [0] ? artifacts : NULL,
                               .artifact_max_file = (size_t) args->artifact_max_file,
                               .artifact_max_session = (size_t) args->artifact_max_session,
                               .ipython_options = ipython, .egress = s_policy,
                               .egress_port = args->egress_port ? args->egress_port
                                                             : GW_EGPROXY_GUEST_PORT };
    opts.n_ipython_options = s_ipython_options (args, ipython);
    gw_persist_session_opts (persist, args, &opts);
    gw_server_t *server = gw_server_new (*conn_p, backend_p, &opts, args->max_msg,
                                         args->text [GW_OPT_PROTOCOL], signal_fd, err, errlen);
    gw_conn_destroy (conn_p);                   //  the key lives on in the signer only
    const char *parent = getenv ("JPY_PARENT_PID");     //  started by a Jupyter client
    if (server && parent && atoi (parent) > 1)
        gw_server_watch_parent (server, atoi (parent));
    return server;
}

static void
s_tick (void *arg, gw_session_t *session)
{
    gw_persist_tick ((gw_persist_t *) arg, session);
}

//  --user: from here on this process is that user, and a root helper jails
//  its VMs (gw_priv). Before any thread, after the root-only reads (the
//  connection file).
static int
s_drop_privileges (const gw_args_t *args, char *err, size_t errlen)
{
    const char *user = args->text [GW_OPT_USER];
    if (!user)
        return 0;
    const char *backend = args->text [GW_OPT_BACKEND];
    if (backend && strcmp (backend, "microvm") != 0) {
        snprintf (err, errlen, "--user is for --backend microvm (it separates QEMU's jail)");
        return -EINVAL;
    }
    gw_vm_config_t cfg;
    gw_args_vm_config ((gw_args_t *) args, &cfg);
    const char *qemu = args->text [GW_OPT_QEMU] ? args->text [GW_OPT_QEMU] : cfg.qemu;
    static char *exe;                           //  the helper's, for the process's life
    free (exe);
    exe = gw_vm_which (qemu);
    return gw_priv_drop (user, &cfg.jail, exe, err, errlen);
}

//  The gateway itself: one session, until it ends. The exit code.
//  A kernel that could not be started: the clients were told in a reply;
//  whoever reads the gateway's output (a launcher, a provisioner's log) gets
//  the same words.
static void
s_say_gave_up (gw_server_t *server)
{
    const char *gave_up = gw_session_gave_up (gw_server_session (server));
    if (gave_up)
        fprintf (stderr, "cellvm-gateway: %s\n", gave_up);
}

static int
s_gateway (gw_args_t *args)
{
    int signal_fd = s_setup_signals ();
    int rc = 1;
    char err [600] = "";
    gw_conn_t *conn = NULL;
    gw_backend_t *backend = NULL;
    gw_server_t *server = NULL;
    gw_persist_t *persist = NULL;
    gw_persist_conn_t facts;
    const char *file = args->text [GW_OPT_CONNECTION_FILE];
    if (!file)
        snprintf (err, sizeof err, "--connection-file is required");
    if (!file || !(conn = gw_conn_load (file, err, sizeof err))
    ||  s_adopt_listen_fds (args, conn, err, sizeof err) < 0
    ||  gw_persist_conn_read (conn, file, &facts, err, sizeof err) < 0
    ||  s_drop_privileges (args, err, sizeof err) < 0
    ||  !(persist = gw_persist_new (args, &facts, file, err, sizeof err))
    ||  s_egress (args, persist, err, sizeof err) < 0
    ||  !(backend = s_make_backend (args, persist, err, sizeof err))
    ||  !(server = s_server (args, persist, &conn, &backend, signal_fd, err, sizeof err)))
        goto fail;
    gw_server_set_tick_fn (server, s_tick, persist);
    rc = gw_server_run (server);
    s_say_gave_up (server);
    gw_persist_end (persist, gw_server_session (server));
    gw_server_destroy (&server);
    gw_persist_destroy (&persist);
    gw_egress_destroy (&s_policy);
    gw_log (GW_LOG_INFO, "gateway.exit", "code=%d", rc);
    close (signal_fd);
    return rc;
fail:
    gw_log (GW_LOG_ERROR, "gateway.refused", "reason=\"%s\"", err);
    fprintf (stderr, "cellvm-gateway: %s\n", err);
    gw_conn_destroy (&conn);
    gw_backend_destroy (&backend);
    gw_persist_destroy (&persist);
    if (signal_fd >= 0)
        close (signal_fd);
    return rc;
}

int
main (int argc, char **argv)
{
    gw_args_t args;
    s_ensure_std_fds ();
    int rc = gw_args_parse (&args, argc, argv);
    if (rc == 1) {
        gw_args_usage (stdout);
        return 0;
    }
    if (rc < 0 || s_setup_logging (&args) < 0) {
        gw_args_usage (stderr);
        return S_EXIT_USAGE;
    }
    if (!args.max_msg)
        args.max_msg = GW_WIRE_MAX_DEFAULT;
    if (!args.max_frame)
        args.max_frame = CH_FRAME_MAX_DEFAULT;
    char err [600];
    bool other = gw_args_has (&args, GW_OPT_BUILD_TEMPLATE) || gw_args_has (&args,
                 GW_OPT_POOL_DAEMON) || gw_args_has (&args, GW_OPT_SNAPSHOT_GC);
    if (other && s_drop_privileges (&args, err, sizeof err) < 0) {
        fprintf (stderr, "cellvm-gateway: %s\n", err);
        return 1;
    }
    if (gw_args_has (&args, GW_OPT_BUILD_TEMPLATE))
        return gw_cmd_build_main (&args);
    if (gw_args_has (&args, GW_OPT_POOL_DAEMON))
        return gw_cmd_pool_main (&args);
    if (gw_args_has (&args, GW_OPT_SNAPSHOT_GC))
        return gw_persist_gc_main (&args);
    return s_gateway (&args);
}
