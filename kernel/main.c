/*  cellvm-kernel - a Jupyter-protocol Python kernel that embeds CPython and
 *  speaks the cellvm channel (docs/channel.md) on one file descriptor.
 *
 *  cellvm-kernel (--fd N | --device PATH) [--outdir DIR] [--max-frame BYTES]
 *                [--log-level error|warn|info|debug]
 */
#include "kn_capture.h"
#include "kn_chan.h"
#include "ch_frame.h"
#include "kn_kernel.h"
#include "kn_log.h"
#include "kn_py.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KN_VERSION "0.1.0"

typedef struct {
    int fd;
    const char *device;
    const char *outdir;
    uint32_t max_frame;
    int log_level;
} s_args_t;

static void
s_usage (FILE *out)
{
    fprintf (out, "usage: cellvm-kernel (--fd N | --device PATH) [--outdir DIR]\n"
                  "                     [--max-frame BYTES] [--log-level LEVEL]\n"
                  "Runs Python cells for one session, speaking the cellvm channel\n"
                  "(docs/channel.md) on fd N or on the port device PATH.\n");
}

static int
s_parse (int argc, char **argv, s_args_t *a)
{
    static const struct option opts [] = {
        { "fd", required_argument, NULL, 'f' }, { "device", required_argument, NULL, 'd' },
        { "outdir", required_argument, NULL, 'o' }, { "max-frame", required_argument, NULL, 'm' },
        { "log-level", required_argument, NULL, 'l' }, { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    int c;
    char *end;
    while ((c = getopt_long (argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
            case 'f': a->fd = (int) strtol (optarg, &end, 10);
                      if (*end || a->fd < 0) return -EINVAL;
                      break;
            case 'd': a->device = optarg; break;
            case 'o': a->outdir = optarg; break;
            case 'm': a->max_frame = (uint32_t) strtoul (optarg, &end, 10);
                      if (*end || a->max_frame < 1024) return -EINVAL;
                      break;
            case 'l': a->log_level = ch_log_level_parse (optarg);
                      if (a->log_level < 0) return -EINVAL;
                      break;
            case 'h': s_usage (stdout); exit (0);
            default:  return -EINVAL;
        }
    }
    if ((a->fd < 0) == (a->device == NULL) || optind != argc)
        return -EINVAL;
    return 0;
}

//  The channel fd, from --fd or by opening --device.
static int
s_open_channel (const s_args_t *a)
{
    if (a->device)
        return open (a->device, O_RDWR | O_CLOEXEC | O_NOCTTY);
    if (fcntl (a->fd, F_GETFD) < 0)
        return -1;
    fcntl (a->fd, F_SETFD, FD_CLOEXEC);     //  user subprocesses never get it
    return a->fd;
}

//  fd 0 must not be the driver's stdin: cells that read it get EOF.
static void
s_quiet_stdin (int chan_fd)
{
    if (chan_fd == 0)
        return;
    int fd = open ("/dev/null", O_RDONLY);
    if (fd > 0) {
        dup2 (fd, 0);
        close (fd);
    }
}

static void
s_capture_flush (void *arg)
{
    kn_capture_flush (arg);
}

//  The signals the kernel relies on, whatever its launcher left: dispositions
//  and the mask survive exec. A background job of a non-interactive shell (and
//  `nohup ... &`) starts with SIGINT ignored, and CPython installs its
//  KeyboardInterrupt handler only over SIG_DFL: interrupts would be lost. An
//  ignored SIGCHLD would have the system reap a cell's children before they
//  are waited for (their exit status lost). Nothing blocked: cells run on this
//  thread, and every thread starts from its mask (ours block all themselves).
//  SIGPIPE ignored: a closed pipe is an error to report, not a death. Other
//  dispositions stay as the launcher chose (nohup's SIGHUP).
static void
s_own_signals (void)
{
    struct sigaction sa;
    memset (&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigaction (SIGINT, &sa, NULL);
    sigaction (SIGCHLD, &sa, NULL);
    sa.sa_handler = SIG_IGN;
    sigaction (SIGPIPE, &sa, NULL);
    sigset_t none;
    sigemptyset (&none);
    sigprocmask (SIG_SETMASK, &none, NULL);
}

//  Log to a copy of fd 2, taken before the capture puts a pipe there.
static void
s_start_log (const s_args_t *a)
{
    int logfd = fcntl (2, F_DUPFD_CLOEXEC, 3);
    kn_log_init (logfd >= 0 ? logfd : 2, (ch_log_level_t) a->log_level);
}

//  The kernel on the channel fd, and the capture of fd 1 and 2 into it.
//  NULL when either cannot be had.
static kn_capture_t *
s_start_kernel (int fd, const s_args_t *a, kn_kernel_t **kernel_p)
{
    kn_chan_t *chan = kn_chan_new (fd, a->max_frame);
    kn_chan_set_device_mode (chan, a->device != NULL);
    kn_kernel_config_t cfg = { a->outdir, KN_VERSION };
    kn_kernel_t *kernel = kn_kernel_new (chan, &cfg);
    *kernel_p = kernel;
    kn_capture_t *capture = kernel ? kn_capture_new (NULL, kn_kernel_stream, kernel) : NULL;
    //  A stream text and its envelope (header, the client's parent header)
    //  fit in one frame, and no text is over 1 MiB: the gateway checks and
    //  re-signs one message per reactor turn (~35 ms per MiB on a TCG host),
    //  and its turns must stay short (docs/gateway.md).
    if (capture)
        kn_capture_set_max_text (capture, a->max_frame > (2u << 20) ? (1u << 20)
                                                                    : a->max_frame / 2);
    //  Large writes go as bytes, escaped by the driver at native speed
    //  (under TCG the escape cost as much as the rest of a bulk write).
    if (capture)
        kn_capture_set_raw (capture, kn_kernel_stream_raw);
    return capture;
}

//  Wire Python into the kernel and serve until the session ends.
static int
s_serve (kn_kernel_t *kernel, kn_capture_t *capture, kn_py_t *py)
{
    kn_kernel_set_flush (kernel, s_capture_flush, capture);
    kn_interp_t interp;
    kn_py_interp (py, &interp);
    kn_kernel_set_interp (kernel, &interp);
    return kn_kernel_run (kernel);
}

int
main (int argc, char **argv)
{
    s_args_t a = { -1, NULL, "/workspace/out", CH_FRAME_MAX_DEFAULT, CH_LOG_INFO };
    if (s_parse (argc, argv, &a) < 0) {
        s_usage (stderr);
        return 2;
    }
    s_own_signals ();
    s_start_log (&a);
    int fd = s_open_channel (&a);
    if (fd < 0) {
        kn_log (CH_LOG_ERROR, "chan.open", "reason=\"cannot open the channel: %s\"",
                strerror (errno));
        return 2;
    }
    s_quiet_stdin (fd);
    //  realpath needs the directory: kn_kernel_new creates it first.
    setenv ("CELLVM_OUTDIR", a.outdir, 1);
    kn_kernel_t *kernel;
    kn_capture_t *capture = s_start_kernel (fd, &a, &kernel);
    char err [512] = "";
    kn_py_t *py = capture ? kn_py_new (kernel, capture, err, sizeof err) : NULL;
    int status = 1;
    if (!py) {
        kn_log (CH_LOG_ERROR, "kernel.start", "reason=\"%s\"", err[0] ? err : "see above");
        goto done;
    }
    status = s_serve (kernel, capture, py);
done:
    //  Python may still have user threads: leave without finalising it.
    if (capture)
        kn_capture_flush (capture);
    fflush (NULL);
    _exit (status);
}
