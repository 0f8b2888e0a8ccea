/*  cellvm-mcp - an MCP server (stdio) whose tools run Python in cellvm
    sessions. See docs/mcp.md.

    One thread, one poll loop: stdin (JSON-RPC lines), a signalfd (SIGTERM,
    SIGINT, SIGHUP) and each session's sockets, with a 50 ms tick for
    timers and reaping. End of stdin or a signal ends every session (a
    shutdown_request, then SIGTERM, then SIGKILL) before the process exits.
*/
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <czmq.h>

#include "ch_clock.h"
#include "mc_args.h"
#include "mc_lines.h"
#include "mc_log.h"
#include "mc_spec.h"
#include "mc_server.h"
#include "ch_io.h"
#include "ch_sig.h"

#define TICK_MS 50
#define READ_CHUNK (1u << 20)
#define MAX_ITEMS 4096
//  After the client is gone: the longest the sessions get to end (each
//  escalates to SIGKILL at 6 s by itself).
#define SHUTDOWN_MS 8000

typedef struct {
    mc_server_t *server;
    mc_lines_t *lines;
    bool stdin_open;
    bool stdout_ok;
    int sigfd;
    int64_t shutdown_ms;        //  when the shutdown began, 0 before
} app_t;

static void
s_write (void *ctx, const char *line, size_t len)
{
    app_t *app = ctx;
    int rc = app->stdout_ok ? ch_write_bytes (STDOUT_FILENO, line, len) : 0;
    if (rc < 0) {
        mc_log (CH_LOG_INFO, "client.gone", "why=\"stdout: %s\"", strerror (-rc));
        app->stdout_ok = false;
    }
}

static void
s_shutdown (app_t *app, const char *why)
{
    if (app->shutdown_ms)
        return;
    app->shutdown_ms = ch_clock_mono_ms ();
    mc_log (CH_LOG_INFO, "mcp.shutdown", "why=\"%s\" sessions=%zu", why,
            mc_server_sessions (app->server));
    mc_server_shutdown (app->server, app->shutdown_ms);
}

static void
s_read_stdin (app_t *app, char *buf)
{
    ssize_t n = read (STDIN_FILENO, buf, READ_CHUNK);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (n <= 0) {
        app->stdin_open = false;
        s_shutdown (app, n == 0 ? "end of stdin" : "stdin error");
        return;
    }
    const char *p = buf, *line;
    size_t len = (size_t) n, llen, total;
    while (len > 0) {
        size_t used = mc_lines_feed (app->lines, p, len);
        p += used;
        len -= used;
        int rc;
        while ((rc = mc_lines_next (app->lines, &line, &llen, &total)) > 0)
            if (rc == 1)
                mc_server_line (app->server, line, llen);
            else
                mc_server_oversize (app->server, line, llen, total);
    }
}

static void
s_on_signal (app_t *app)
{
    struct signalfd_siginfo si;
    if (read (app->sigfd, &si, sizeof si) == (ssize_t) sizeof si)
        s_shutdown (app, strsignal ((int) si.ssi_signo));
}

//  The loop: until the client is gone and every session has ended.
static void
s_run (app_t *app)
{
    zmq_pollitem_t *items = calloc (MAX_ITEMS, sizeof *items);
    char *buf = malloc (READ_CHUNK);
    if (!items || !buf)
        abort ();
    while (true) {
        int64_t now = ch_clock_mono_ms ();
        if (!app->stdout_ok)
            s_shutdown (app, "stdout closed");
        if (app->shutdown_ms && (mc_server_sessions (app->server) == 0
                                 || now - app->shutdown_ms > SHUTDOWN_MS))
            break;
        items [0] = (zmq_pollitem_t) { NULL, app->stdin_open && !app->shutdown_ms
                                       ? STDIN_FILENO : -1, ZMQ_POLLIN, 0 };
        items [1] = (zmq_pollitem_t) { NULL, app->sigfd, ZMQ_POLLIN, 0 };
        size_t n = 2 + mc_server_pollitems (app->server, items + 2, MAX_ITEMS - 2);
        if (zmq_poll (items, (int) n, TICK_MS) < 0 && errno != EINTR)
            break;
        now = ch_clock_mono_ms ();
        mc_server_on_poll (app->server, items + 2, n - 2, now);
        if (items [1].revents & ZMQ_POLLIN)
            s_on_signal (app);
        if (items [0].revents & (ZMQ_POLLIN | ZMQ_POLLERR)) {
            s_read_stdin (app, buf);
            //  Start what was just asked for now, not at the next tick (50 ms).
            mc_server_on_poll (app->server, NULL, 0, ch_clock_mono_ms ());
        }
    }
    free (items);
    free (buf);
}

static int
s_rm (const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void) st;
    (void) flag;
    (void) ftw;
    return remove (path);
}

//  The private run directory: BASE/cellvm-mcp-XXXXXX, mode 0700.
static int
s_make_dir (const mc_options_t *opts, char *dir, size_t cap)
{
    const char *base = opts->state_dir [0] ? opts->state_dir : getenv ("XDG_RUNTIME_DIR");
    if (!base || !*base || access (base, W_OK) != 0)
        base = "/tmp";
    snprintf (dir, cap, "%s/cellvm-mcp-XXXXXX", base);
    if (!mkdtemp (dir)) {
        fprintf (stderr, "cellvm-mcp: cannot make a private directory under %s: %s\n", base,
                 strerror (errno));
        return -errno;
    }
    return 0;
}

//  The kernelspec, refused when it is unsafe-local and not allowed.
static mc_spec_t *
s_spec (const mc_options_t *opts)
{
    char err [1024];
    mc_spec_t *spec = mc_spec_load (opts->kernelspec, err, sizeof err);
    if (!spec)
        fprintf (stderr, "cellvm-mcp: %s\n", err);
    else if (mc_spec_unsafe (spec) && !opts->allow_unsafe) {
        fprintf (stderr, "cellvm-mcp: kernelspec %s runs the unsafe-local backend (no isolation: "
                 "code would run on this host as you). Pass --allow-unsafe-local to accept it, "
                 "for tests only.\n", mc_spec_path (spec));
        mc_spec_destroy (&spec);
    }
    return spec;
}

int
main (int argc, char **argv)
{
    mc_options_t opts;
    int rc = mc_args_parse (&opts, argc, argv);
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    mc_log_set_level (opts.log_level);
    zsys_handler_set (NULL);
    char dir [PATH_MAX];
    int sigfd = ch_sig_fd ((const int []) { SIGTERM, SIGINT, SIGHUP, 0 }, false);
    app_t app = { NULL, mc_lines_new (opts.max_request), true, true, sigfd, 0 };
    mc_spec_t *spec = s_spec (&opts);
    if (!spec || app.sigfd < 0 || s_make_dir (&opts, dir, sizeof dir) != 0) {
        rc = 1;
        goto fail;
    }
    if (mc_spec_unsafe (spec))
        mc_log (CH_LOG_WARN, "backend.unsafe", "kernelspec=%s isolation=none", mc_spec_path (spec));
    app.server = mc_server_new (&opts, spec, dir, s_write, &app);
    mc_log (CH_LOG_INFO, "mcp.start", "pid=%d kernelspec=%s dir=%s", (int) getpid (),
            mc_spec_path (spec), dir);
    s_run (&app);
    mc_server_destroy (&app.server);
    nftw (dir, s_rm, 16, FTW_DEPTH | FTW_PHYS);
    mc_log (CH_LOG_INFO, "mcp.exit", "status=0");
fail:
    mc_spec_destroy (&spec);
    mc_lines_destroy (&app.lines);
    if (app.sigfd >= 0)
        close (app.sigfd);
    zsys_shutdown ();
    return rc;
}
