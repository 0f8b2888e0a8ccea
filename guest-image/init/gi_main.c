/*  cellvm-init - PID 1 of the cellvm guest (docs/init.md).
 *
 *  Sets the system up (mounts, hostname, lo, the kernel's cgroup), starts
 *  cellvm-kernel as the unprivileged kernel user, reaps every child, tells
 *  the host over the control port how the kernel died, and serves the
 *  host's requests (restart, files, clock, entropy). Single-threaded: one
 *  poll() loop over a signalfd and the control port.
 */
#include "gi_ctl.h"
#include "gi_kernel.h"
#include "gi_log.h"
#include "gi_ops.h"
#include "gi_sys.h"
#include "ch_frame.h"
#include "ch_sig.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/reboot.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#define S_CTL_PORT "cellvm.init"

//  PID 1 must never exit: the guest kernel would panic. Power off instead.
static void
s_halt (const char *why)
{
    gi_log (CH_LOG_INFO, "init.power_off", "reason=\"%s\"", why);
    sync ();
    reboot (RB_POWER_OFF);
    for (;;)
        pause ();
}

static void
s_setup (uint64_t *limit, char *workspace, size_t wlen)
{
    int rc = gi_sys_mount_base ();
    if (rc < 0)
        s_halt ("cannot mount /proc, /sys or /dev");
    //  Only critical kernel messages on the serial console: a fork bomb's OOM
    //  kills would print hundreds of lines, and under TCG that stalls the guest.
    //  They all stay in /dev/kmsg.
    gi_sys_write_file ("/proc/sys/kernel/printk", "3 4 1 3");
    gi_sys_cgroup (limit);
    gi_sys_network ();
    if (gi_sys_workspace (workspace, wlen) < 0)
        gi_log (CH_LOG_ERROR, "init.no_workspace", NULL);
    gi_sys_port_links ();
    if (gi_sys_wait_port (GI_KERNEL_PORT, 2000) < 0)
        gi_log (CH_LOG_ERROR, "init.no_kernel_port", "port=%s reason=\"the kernel will fail to "
                "start\"", GI_KERNEL_PORT);
}

//  Collect every dead child; report the kernel's death, log the egress
//  proxy's (orphans the kernel left are reaped here too, and forgotten).
static void
s_reap (gi_kernel_t *kernel, gi_ops_t *ops)
{
    pid_t pid;
    int status;
    while ((pid = waitpid (-1, &status, WNOHANG)) > 0)
        if (gi_kernel_reaped (kernel, pid, status))
            gi_ops_kernel_exited (ops);
        else
            gi_ops_reaped (ops, pid, status);
}

static void
s_drain_signals (int sigfd)
{
    struct signalfd_siginfo si [8];
    while (read (sigfd, si, sizeof si) > 0)
        ;
}

static void
s_loop (int sigfd, gi_ctl_t *ctl, gi_kernel_t *kernel, gi_ops_t *ops)
{
    for (;;) {
        struct pollfd pfd [2] = { { sigfd, POLLIN, 0 } };
        int timeout = gi_ctl_pollfd (ctl, &pfd [1]);
        if (poll (pfd, 2, timeout) < 0 && errno != EINTR)
            s_halt ("poll failed");
        if (pfd [0].revents) {
            s_drain_signals (sigfd);
            s_reap (kernel, ops);
        }
        ch_msg_t *msg = NULL;
        int rc = gi_ctl_io (ctl, pfd [1].revents, &msg);
        while (rc == 0 && msg) {
            if (gi_ops_handle (ops, &msg) == 1) {
                gi_ctl_io (ctl, POLLOUT, &msg);   //  the reply goes before we do
                ch_msg_destroy (&msg);
                s_halt ("shutdown_request");
            }
            rc = gi_ctl_io (ctl, 0, &msg);
        }
        if (rc < 0)
            gi_log (CH_LOG_WARN, "ctl.error", "reason=\"%s\"", strerror (-rc));
    }
}

int
main (void)
{
    if (getpid () != 1)
        gi_log (CH_LOG_WARN, "init.not_pid1", NULL);
    //  Signals arrive on a signalfd; the kernel child resets its mask.
    int sigfd = ch_sig_fd ((const int []) { SIGCHLD, SIGIO, SIGTERM, SIGINT, SIGHUP, SIGPWR,
                                            SIGUSR1, SIGUSR2, 0 }, false);
    if (sigfd < 0)
        s_halt ("no signalfd");
    uint64_t limit = 0;
    char workspace [16] = "none";
    s_setup (&limit, workspace, sizeof workspace);
    gi_kernel_t *kernel = gi_kernel_new (limit);
    if (gi_kernel_start (kernel) < 0)
        gi_log (CH_LOG_ERROR, "kernel.start_failed", NULL);
    char port [128] = "/dev/virtio-ports/" S_CTL_PORT;
    if (gi_sys_wait_port (S_CTL_PORT, 2000) < 0)
        gi_log (CH_LOG_WARN, "ctl.no_port", "port=%s", port);
    gi_ctl_t *ctl = gi_ctl_new (port, CH_FRAME_MAX_DEFAULT);
    if (!ctl)
        gi_log (CH_LOG_ERROR, "ctl.open_failed", "port=%s reason=\"%s\" action=supervise_without",
                port, strerror (errno));
    gi_ops_t *ops = ctl ? gi_ops_new (ctl, kernel, workspace) : NULL;
    gi_log (CH_LOG_INFO, "init.ready", "workspace=%s kernel_pid=%d", workspace,
            (int) gi_kernel_pid (kernel));
    if (ctl)
        s_loop (sigfd, ctl, kernel, ops);
    //  No control port: still reap, forever.
    for (;;) {
        struct pollfd pfd = { sigfd, POLLIN, 0 };
        poll (&pfd, 1, -1);
        s_drain_signals (sigfd);
        while (waitpid (-1, NULL, WNOHANG) > 0)
            ;
    }
}
