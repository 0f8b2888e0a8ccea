/*  gw_backend_local - the unsafe-local backend: the kernel as a child process.

    The child side of fork() runs in a process that has other threads (the
    ZeroMQ I/O threads), so between fork and exec it only makes
    async-signal-safe calls; everything it needs is prepared beforehand.
*/
#include "backend/gw_backend_local.h"
#include "ch_sig.h"
#include "disk/gw_keep.h"
#include "vm/gw_rundir.h"
#include "base/gw_fs.h"
#include "base/gw_runbase.h"
#include "backend/gw_wsfiles.h"
#include "base/gw_log.h"
#include "base/gw_worker.h"
#include "ch_child.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define S_CHAN_FD 3                             //  the kernel's --fd
#define S_BARRIER_S 60                          //  how long keep waits for a file chunk

//  A file chunk operation, run on the worker thread (gw_backend.h).
typedef struct {
    const char *root;                           //  the workspace (the backend's)
    bool put, append;
    char *path;
    uint8_t *data;                              //  put: a copy (the caller may go first)
    size_t len;
    uint64_t offset;                            //  get
    gw_chunk_fn *done;
    void *arg;
    int rc;                                     //  results, for done
    json_t *reply;
    uint8_t *got;
    size_t got_len;
    char err [512];
    sem_t ran;                                  //  a barrier (keep_workspace): posted when run
} s_chunk_op_t;

typedef struct {
    char *path;                                 //  kernel executable
    char max_frame [16];                        //  --max-frame value
    pid_t pid;                                  //  running kernel, 0 = none
    gw_rundir_t *run;                           //  holds workspace/ for this session
    char workspace [4096];                      //  run/workspace; the kernel's outdir below
    char outdir [4200];
    gw_worker_t *worker;                        //  file chunks, off the reactor
} s_local_t;

//  --------------------------------------------------------------------------
//  Child side, between fork and exec: async-signal-safe calls only.

static void
s_child_reset_signals (void)
{
    //  The gateway ignores SIGINT and blocks SIGTERM/SIGCHLD, and whoever
    //  started it may have ignored more (nohup: SIGHUP): the kernel starts
    //  from the ordinary dispositions, every one, as QEMU does (gw_vmspawn).
    ch_sig_defaults ();
}

static void
s_child_exec (s_local_t *self, pid_t parent, int chan_fd, int report_fd, char **argv)
{
    setpgid (0, 0);
    if (ch_child_tie (parent, SIGKILL) < 0)
        _exit (127);                            //  the gateway already died
    s_child_reset_signals ();
    //  stdin /dev/null, stdout and stderr the gateway's, the channel on 3 and
    //  the report pipe on 4; no gateway socket leaks in.
    int fds [] = { open ("/dev/null", O_RDONLY | O_CLOEXEC), -1, -1, chan_fd, report_fd };
    int rc = ch_child_fds (fds, S_CHAN_FD + 2, false);
    report_fd = rc < 0 ? report_fd : S_CHAN_FD + 1;
    fcntl (report_fd, F_SETFD, FD_CLOEXEC);
    if (rc == 0)
        execv (self->path, argv);
    else
        errno = -rc;
    ch_child_exec_failed (report_fd);
}

//  --------------------------------------------------------------------------
//  Parent side.

//  Wait for the child to exec (the report pipe closes) or to report why it
//  could not (an errno on the pipe).
static void
s_close_fds (int *fds, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (fds [i] >= 0) {
            close (fds [i]);
            fds [i] = -1;
        }
}

//  The kernel's own lines share our stderr: the same level as ours.
static char *
s_log_level (void)
{
    return gw_log_enabled (GW_LOG_DEBUG) ? "debug" : gw_log_enabled (GW_LOG_INFO) ? "info"
         : gw_log_enabled (GW_LOG_WARN) ? "warn" : "error";
}

static int
s_start (void *ctx, int *fd_p, char *err, size_t errlen)
{
    s_local_t *self = (s_local_t *) ctx;
    assert (self && fd_p && self->pid == 0);
    int fds [4] = { -1, -1, -1, -1 }, rc = 0;   //  socketpair, report pipe
    char fd_arg [8];
    snprintf (fd_arg, sizeof fd_arg, "%d", S_CHAN_FD);
    char *argv [] = { self->path, "--fd", fd_arg, "--max-frame", self->max_frame,
                      "--outdir", self->outdir, "--log-level", s_log_level (), NULL };
    if (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) < 0
    ||  pipe2 (fds + 2, O_CLOEXEC) < 0) {
        rc = -errno;
        goto fail;
    }
    pid_t parent = getpid ();
    pid_t pid = fork ();
    if (pid < 0) {
        rc = -errno;
        goto fail;
    }
    if (pid == 0)
        s_child_exec (self, parent, fds [1], fds [3], argv);
    self->pid = pid;
    setpgid (pid, pid);                         //  also here: no race with killpg
    s_close_fds (fds + 3, 1);
    rc = ch_child_wait_exec (fds [2]);
    s_close_fds (fds + 1, 2);
    if (rc < 0)
        goto fail;
    gw_log (GW_LOG_INFO, "kernel.spawned", "backend=unsafe-local pid=%d path=%s",
            (int) pid, self->path);
    *fd_p = fds [0];
    return 0;
fail:
    snprintf (err, errlen, "cannot start the kernel %s: %s", self->path, strerror (-rc));
    s_close_fds (fds, 4);
    if (self->pid > 0) {                        //  exec failed: collect the child
        waitpid (self->pid, NULL, 0);
        self->pid = 0;
    }
    return rc;
}

static int
s_kill (void *ctx)
{
    s_local_t *self = (s_local_t *) ctx;
    if (self->pid <= 0)
        return -ESRCH;
    if (killpg (self->pid, SIGKILL) < 0 && kill (self->pid, SIGKILL) < 0)
        return -errno;
    return 0;
}

static void
s_fill_exit (int status, gw_exit_t *exit_p)
{
    memset (exit_p, 0, sizeof *exit_p);
    exit_p->exit_code = -1;
    if (WIFEXITED (status))
        exit_p->exit_code = WEXITSTATUS (status);
    else if (WIFSIGNALED (status)) {
        exit_p->signal = WTERMSIG (status);
        exit_p->core_dumped = WCOREDUMP (status);
    }
}

static int
s_reap (void *ctx, gw_exit_t *exit_p)
{
    s_local_t *self = (s_local_t *) ctx;
    assert (exit_p);
    if (self->pid <= 0)
        return -ECHILD;
    int status = 0;
    pid_t r = waitpid (self->pid, &status, WNOHANG);
    if (r == 0)
        return -EAGAIN;
    if (r < 0 && errno == EINTR)
        return -EAGAIN;
    if (r < 0)
        status = 0;                             //  lost it (should not happen)
    s_fill_exit (status, exit_p);
    killpg (self->pid, SIGKILL);                //  whatever the cell left running
    gw_log (GW_LOG_INFO, "kernel.reaped", "pid=%d exit_code=%d signal=%d",
            (int) self->pid, exit_p->exit_code, exit_p->signal);
    self->pid = 0;
    return 0;
}

static int
s_pid (void *ctx)
{
    return (int) ((s_local_t *) ctx)->pid;
}

//  Kill the kernel and wait for it, blocking.
static void
s_stop_kernel (s_local_t *self)
{
    pid_t pid = self->pid;
    if (pid <= 0)
        return;
    s_kill (self);
    while (waitpid (pid, NULL, 0) < 0 && errno == EINTR)
        ;
    killpg (pid, SIGKILL);                      //  what the cell forked meanwhile
    self->pid = 0;
}

static void s_cancel_chunks (void *ctx);

static void
s_destroy (void *ctx)
{
    s_local_t *self = (s_local_t *) ctx;
    if (!self)
        return;
    s_stop_kernel (self);
    if (self->worker)
        s_cancel_chunks (self);
    gw_worker_destroy (&self->worker);
    gw_rundir_destroy (&self->run);
    free (self->path);
    free (self);
}

//  --------------------------------------------------------------------------
//  Files: each chunk runs on its own reactor turn, at most GW_CHUNK_MAX bytes,
//  so a 256 MiB transfer never holds the reactor.

static void
s_op_free (void *arg)
{
    s_chunk_op_t *op = arg;
    json_decref (op->reply);
    free (op->got);
    free (op->data);
    free (op->path);
    free (op);
}

//  On the worker thread.
static void
s_op_work (void *arg)
{
    s_chunk_op_t *op = arg;
    op->rc = op->put ? gw_wsfiles_put (op->root, op->path, op->append, op->data, op->len,
                                       &op->reply, op->err, sizeof op->err)
                     : gw_wsfiles_get (op->root, op->path, op->offset, op->len, &op->got,
                                       &op->got_len, &op->reply, op->err, sizeof op->err);
}

//  Back on the reactor.
static void
s_op_done (void *arg)
{
    s_chunk_op_t *op = arg;
    op->done (op->arg, op->rc, op->reply, op->got, op->got_len, op->err);
    s_op_free (op);
}

static int
s_queue_chunk (s_local_t *self, const s_chunk_op_t *proto)
{
    s_chunk_op_t *op = malloc (sizeof *op);
    if (!op)
        abort ();
    *op = *proto;
    op->root = self->workspace;
    op->data = NULL;
    if (!(op->path = strdup (proto->path)))
        abort ();
    if (proto->put && !(op->data = malloc (proto->len + 1)))
        abort ();
    if (proto->put && proto->len)
        memcpy (op->data, proto->data, proto->len);
    gw_worker_submit (self->worker, s_op_work, s_op_done, op);
    return 0;
}

static int
s_put_chunk (void *ctx, const char *path, bool append, const uint8_t *data, size_t len,
             gw_chunk_fn *done, void *arg, char *err, size_t errlen)
{
    (void) err, (void) errlen;
    s_chunk_op_t op = { .put = true, .append = append, .path = (char *) path,
                        .data = (uint8_t *) data, .len = len, .done = done, .arg = arg };
    return s_queue_chunk ((s_local_t *) ctx, &op);
}

static int
s_get_chunk (void *ctx, const char *path, uint64_t offset, size_t len, gw_chunk_fn *done,
             void *arg, char *err, size_t errlen)
{
    (void) err, (void) errlen;
    s_chunk_op_t op = { .path = (char *) path, .offset = offset, .len = len, .done = done,
                        .arg = arg };
    return s_queue_chunk ((s_local_t *) ctx, &op);
}

static void
s_cancel_chunks (void *ctx)
{
    gw_worker_cancel (((s_local_t *) ctx)->worker, NULL, NULL, s_op_free);
}

static int
s_event_fd (void *ctx)
{
    return gw_worker_fd (((s_local_t *) ctx)->worker);
}

static int
s_on_event (void *ctx)
{
    gw_worker_drain (((s_local_t *) ctx)->worker);
    return 0;
}

//  --------------------------------------------------------------------------
//  Restarts keep /workspace (docs/sessions.md): handing it over, adopting it.

static void
s_barrier_work (void *arg)
{
    sem_post (&((s_chunk_op_t *) arg)->ran);
}

//  Queued after every chunk operation: when it runs, none runs any more.
//  An empty chunk op, so whatever releases ops (cancel, destroy, its done)
//  frees it; never this function: the worker may touch it after the post.
static int
s_worker_barrier (s_local_t *self)
{
    s_chunk_op_t *barrier = calloc (1, sizeof *barrier);
    if (!barrier || sem_init (&barrier->ran, 0, 0) < 0)
        abort ();
    gw_worker_submit (self->worker, s_barrier_work, s_op_free, barrier);
    struct timespec deadline;
    clock_gettime (CLOCK_REALTIME, &deadline);
    deadline.tv_sec += S_BARRIER_S;
    int rc;
    while ((rc = sem_timedwait (&barrier->ran, &deadline)) < 0 && errno == EINTR)
        ;
    return rc < 0 ? -errno : 0;
}

static bool
s_own_dir (const char *path)
{
    struct stat st;
    return lstat (path, &st) == 0 && S_ISDIR (st.st_mode) && st.st_uid == geteuid ();
}

//  Nothing may write into the workspace once it is handed over: the kernel
//  (and its process group) dies first, and a file chunk in flight ends.
static int
s_keep_workspace (void *ctx, const char *dir, char *err, size_t errlen)
{
    s_local_t *self = (s_local_t *) ctx;
    assert (self && dir);
    char dst [4200];
    const char *why = NULL;
    int rc = 0;
    s_stop_kernel (self);
    if ((rc = s_worker_barrier (self)) < 0)
        why = "a file transfer into it is still running";
    else if (!s_own_dir (dir))
        why = "the destination is not a directory we own", rc = -EACCES;
    else if (snprintf (dst, sizeof dst, "%s/workspace", dir) >= (int) sizeof dst)
        why = "the destination path is too long", rc = -ENAMETOOLONG;
    else if ((rc = gw_keep_move (self->workspace, dst)) < 0)
        why = strerror (-rc);
    if (rc < 0)
        goto fail;
    gw_log (GW_LOG_INFO, "keep.moved", "workspace=%s dir=%s", self->workspace, dir);
    return 0;
fail:
    snprintf (err, errlen, "cannot keep the workspace %s in %s: %s", self->workspace, dir, why);
    return rc;
}

//  Move adopt_dir/workspace in as ours if it is a real directory we own.
//  adopt_dir goes either way (unless it is another user's directory).
static bool
s_adopt (s_local_t *self, const char *adopt_dir)
{
    char src [4200];
    struct stat st;
    const char *why = NULL;
    int rc = 0;
    snprintf (src, sizeof src, "%s/workspace", adopt_dir);
    bool foreign = lstat (adopt_dir, &st) == 0 && S_ISDIR (st.st_mode) && st.st_uid != geteuid ();
    if (!s_own_dir (adopt_dir))
        why = "the kept dir is missing, a symlink or not ours";
    else if (!s_own_dir (src))
        why = "its workspace is missing, a symlink or not ours";
    else if ((rc = gw_keep_move (src, self->workspace)) < 0)
        why = strerror (-rc);
    if (why)
        gw_log (GW_LOG_WARN, "keep.adopt_fresh", "dir=%s reason=\"%s\"", adopt_dir, why);
    else
        gw_log (GW_LOG_INFO, "keep.adopted", "dir=%s workspace=%s", adopt_dir, self->workspace);
    if (!foreign && (rc = gw_fs_remove_tree (adopt_dir)) < 0)
        gw_log (GW_LOG_WARN, "keep.left", "dir=%s reason=\"%s\"", adopt_dir, strerror (-rc));
    return !why;
}

//  The kernel's outdir. An adopted workspace may hold anything there: what
//  is not a directory we own is replaced.
static int
s_make_outdir (s_local_t *self)
{
    if (mkdir (self->outdir, 0700) == 0)
        return 0;
    if (errno != EEXIST)
        return -errno;
    if (s_own_dir (self->outdir))
        return 0;
    int rc = gw_fs_remove_tree (self->outdir);
    if (rc == 0 && mkdir (self->outdir, 0700) < 0)
        rc = -errno;
    return rc;
}

//  A private workspace for the session: never the host's /workspace.
static int
s_make_workspace (s_local_t *self, const char *adopt_dir, char *err, size_t errlen)
{
    char base [4096];
    if (gw_runbase_default (base, sizeof base) == 0)
        gw_rundir_sweep (base);                 //  what SIGKILLed gateways left
    self->run = gw_rundir_new (NULL, err, errlen);
    if (!self->run)
        return -EIO;
    snprintf (self->workspace, sizeof self->workspace, "%s/workspace",
              gw_rundir_path (self->run));
    snprintf (self->outdir, sizeof self->outdir, "%s/out", self->workspace);
    int rc = 0;
    if (!(adopt_dir && s_adopt (self, adopt_dir)) && mkdir (self->workspace, 0700) < 0)
        rc = -errno;
    if (rc == 0)
        rc = s_make_outdir (self);
    if (rc < 0)
        snprintf (err, errlen, "cannot create %s: %s", self->outdir, strerror (-rc));
    return rc;
}

const char *
gw_backend_local_workspace (const gw_backend_t *backend)
{
    if (!backend || backend->destroy != s_destroy)
        return NULL;                            //  not ours
    return ((const s_local_t *) backend->ctx)->workspace;
}

static const char *
s_workspace (void *ctx)
{
    return ((s_local_t *) ctx)->workspace;
}

gw_backend_t *
gw_backend_local_new_opts (const char *kernel_path, uint32_t max_frame, const char *adopt_dir,
                           char *err, size_t errlen)
{
    assert (kernel_path && err);
    struct stat st;
    const char *why = NULL;
    if (stat (kernel_path, &st) < 0)
        why = strerror (errno);
    else if (!S_ISREG (st.st_mode))
        why = "not a regular file";
    else if (access (kernel_path, X_OK) < 0)
        why = strerror (errno);
    if (why) {
        snprintf (err, errlen, "kernel %s is not an executable file: %s", kernel_path, why);
        return NULL;
    }
    s_local_t *self = calloc (1, sizeof *self);
    gw_backend_t *backend = calloc (1, sizeof *backend);
    if (!self || !backend || !(self->path = strdup (kernel_path)))
        abort ();
    snprintf (self->max_frame, sizeof self->max_frame, "%u", max_frame);
    self->worker = gw_worker_new ();
    if (s_make_workspace (self, adopt_dir, err, errlen) < 0) {
        s_destroy (self);
        free (backend);
        return NULL;
    }
    *backend = (gw_backend_t) {
        .name = "unsafe-local", .start = s_start, .kill = s_kill, .reap = s_reap,
        .pid = s_pid, .destroy = s_destroy, .ctx = self, .event_fd = s_event_fd,
        .on_event = s_on_event, .put_chunk = s_put_chunk, .get_chunk = s_get_chunk,
        .cancel_chunks = s_cancel_chunks, .keep_workspace = s_keep_workspace,
        .workspace = s_workspace
    };
    return backend;
}
