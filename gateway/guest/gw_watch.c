/*  gw_watch - a frozen or runaway guest is noticed in bounded time.

    The console cap borrows QEMU's descriptor of console.log: QEMU opened it
    without O_APPEND (`-serial file:`), so a file cut back under it would
    grow again as a sparse file from QEMU's old offset. A descriptor got
    with pidfd_getfd shares QEMU's open file description, so setting
    O_APPEND on it makes QEMU's writes go to the end, wherever that is now.
*/
#include "guest/gw_watch.h"
#include "base/gw_fdborrow.h"
#include "base/gw_log.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_CHECK_MS 250              //  work at most this often
#define S_WINDOW_MS 60000           //  the console's flood window
#define S_BORROW_TRIES 40           //  ~10 s for QEMU to open its console
#define S_KEEP_MAX (1u << 20)       //  the most a rotation copies to console.log.1
#define S_SENT 32                   //  requests to init whose replies are expected

struct _gw_watch_t {
    gw_watch_borrow_fn *borrow;     //  how QEMU's console descriptor is had
    void *borrow_ctx;
    int pid;
    char console [PATH_MAX];
    int64_t next_check;
    char ping_id [37];              //  the status_request in flight, "" none
    int64_t ping_at, last_ok;
    char sent [S_SENT][37];         //  ids of other requests we made (a ring)
    int sent_next;
    struct {
        char type [32];
        int n;
    } owed [4];                     //  replies due by type (gw_watch_owed)
    int unasked;                    //  this VM's unasked-for messages
    int logged;                     //  ... of which logged
    int con_fd;                     //  QEMU's console.log description, -1 none
    int con_tries;                  //  borrow attempts left
    int64_t con_size;               //  its size at the last check
    int64_t win_at, win_bytes;      //  bytes written since win_at
};

static int64_t
s_env (const char *name, int64_t dflt, int64_t lo, int64_t hi)
{
    const char *v = getenv (name);
    char *end = NULL;
    long long n = v && *v ? strtoll (v, &end, 10) : 0;
    return end && !*end && n >= lo && n <= hi ? (int64_t) n : dflt;
}

int64_t
gw_watch_stall_ms (void)
{
    static int64_t ms;
    if (!ms)
        ms = s_env ("CELLVM_STALL_MS", GW_WATCH_STALL_MS, 1000, 3600000);
    return ms;
}

//  The console log's cap in bytes: $CELLVM_CONSOLE_MAX (64 KiB..1 GiB), read
//  once, else GW_WATCH_CONSOLE_MAX.
static int64_t
s_console_max (void)
{
    static int64_t max;
    if (!max)
        max = s_env ("CELLVM_CONSOLE_MAX", GW_WATCH_CONSOLE_MAX, 65536, 1LL << 30);
    return max;
}

//  The seam's default: this process may ptrace QEMU.
static int
s_borrow_here (void *ctx, int pid, const char *path, int *fd_p)
{
    (void) ctx;
    return gw_fdborrow (pid, path, fd_p);
}

gw_watch_t *
gw_watch_new (gw_watch_borrow_fn *borrow, void *ctx)
{
    gw_watch_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->borrow = borrow ? borrow : s_borrow_here;
    self->borrow_ctx = ctx;
    self->con_fd = -1;
    return self;
}

void
gw_watch_destroy (gw_watch_t **self_p)
{
    assert (self_p);
    gw_watch_t *self = *self_p;
    if (!self)
        return;
    if (self->con_fd >= 0)
        close (self->con_fd);
    free (self);
    *self_p = NULL;
}

void
gw_watch_reset (gw_watch_t *self, int pid, const char *console)
{
    assert (self);
    if (self->con_fd >= 0)
        close (self->con_fd);
    gw_watch_borrow_fn *borrow = self->borrow;
    void *ctx = self->borrow_ctx;
    memset (self, 0, sizeof *self);
    self->borrow = borrow;
    self->borrow_ctx = ctx;
    self->con_fd = -1;
    self->pid = pid;
    self->con_tries = pid > 0 && console ? S_BORROW_TRIES : 0;
    snprintf (self->console, sizeof self->console, "%s", console ? console : "");
}

//  ---------------------------------------------------------------------------
//  Pings and the requests init owes an answer

void
gw_watch_pinged (gw_watch_t *self, const char *id, int64_t now)
{
    assert (self && id);
    snprintf (self->ping_id, sizeof self->ping_id, "%s", id);
    self->ping_at = now;
}

//  Remember a request whose reply is expected (a hello, a restart, a kill).
void
gw_watch_sent (gw_watch_t *self, const char *id)
{
    assert (self && id);
    snprintf (self->sent [self->sent_next], sizeof self->sent [0], "%s", id);
    self->sent_next = (self->sent_next + 1) % S_SENT;
}

void
gw_watch_owed (gw_watch_t *self, const char *reply_type)
{
    assert (self && reply_type);
    for (int i = 0; i < 4; i++)
        if (!self->owed [i].type [0] || strcmp (self->owed [i].type, reply_type) == 0) {
            snprintf (self->owed [i].type, sizeof self->owed [i].type, "%s", reply_type);
            self->owed [i].n++;
            return;
        }
}

//  A reply of a type gw_watch_owed counts: true once per count.
static bool
s_owed (gw_watch_t *self, const char *type)
{
    for (int i = 0; i < 4; i++)
        if (self->owed [i].n > 0 && strcmp (self->owed [i].type, type) == 0) {
            self->owed [i].n--;
            return true;
        }
    return false;
}

bool
gw_watch_answer (gw_watch_t *self, const ch_msg_t *msg)
{
    assert (self && msg);
    const char *pid = ch_msg_parent_id (msg);
    if (!*pid)
        return false;
    if (s_owed (self, ch_msg_type (msg)))
        return true;
    if (strcmp (pid, self->ping_id) == 0) {
        self->ping_id [0] = '\0';
        return true;
    }
    for (int i = 0; i < S_SENT; i++)
        if (strcmp (pid, self->sent [i]) == 0) {
            self->sent [i][0] = '\0';           //  each answers once
            return true;
        }
    return false;
}

int
gw_watch_unasked (gw_watch_t *self, const char *what, bool quiet, char *why, size_t whylen)
{
    assert (self && what);
    self->unasked++;
    if (!quiet && ++self->logged <= GW_WATCH_LOGGED)
        gw_log (GW_LOG_WARN, "vm.init_unasked", "what=\"%s\" count=%d%s", what, self->unasked,
                self->logged == GW_WATCH_LOGGED ? " more=\"not logged\"" : "");
    if (self->unasked < GW_WATCH_FLOOD)
        return GW_WATCH_OK;
    snprintf (why, whylen, "its init sent %d messages nobody asked for (a flood of its control "
              "port; the last: %s)", self->unasked, what);
    return GW_WATCH_DEAD;
}

//  A ping in flight too long: the VM is frozen.
static int
s_check_ping (gw_watch_t *self, int64_t now, bool can_ping, char *why, size_t whylen)
{
    if (!can_ping) {                            //  a save stops the VM on purpose
        if (self->ping_id [0])
            gw_watch_sent (self, self->ping_id);    //  its reply may still come
        self->ping_id [0] = '\0';
        self->last_ok = now;
        return GW_WATCH_OK;
    }
    if (self->ping_id [0] && now - self->ping_at >= gw_watch_stall_ms ()) {
        snprintf (why, whylen, "its init has not answered a status request for %.1f s: QEMU "
                  "is stopped, the guest hung, or init stopped reading its port",
                  (double) (now - self->ping_at) / 1000);
        return GW_WATCH_DEAD;
    }
    int64_t every = gw_watch_stall_ms () / 4 < 5000 ? gw_watch_stall_ms () / 4 : 5000;
    if (!self->ping_id [0] && now - self->last_ok >= every) {
        self->last_ok = now;
        return GW_WATCH_PING;
    }
    return GW_WATCH_OK;
}

static int s_console (gw_watch_t *self, int64_t now, char *why, size_t whylen);

int
gw_watch_tick (gw_watch_t *self, int64_t now, bool can_ping, char *why, size_t whylen)
{
    assert (self && why);
    if (now < self->next_check)
        return GW_WATCH_OK;
    self->next_check = now + S_CHECK_MS;
    if (!self->last_ok)
        self->last_ok = now;
    if (s_console (self, now, why, whylen) == GW_WATCH_DEAD)
        return GW_WATCH_DEAD;
    return s_check_ping (self, now, can_ping, why, whylen);
}

//  ---------------------------------------------------------------------------
//  The console

static void
s_try_borrow (gw_watch_t *self)
{
    int rc = self->borrow (self->borrow_ctx, self->pid, self->console, &self->con_fd);
    if (rc == 0) {
        fcntl (self->con_fd, F_SETFD, FD_CLOEXEC);
        return;
    }
    self->con_fd = -1;
    if (--self->con_tries == 0)
        gw_log (GW_LOG_WARN, "vm.console_uncapped", "console=%s reason=\"%s\" bound=\"the "
                "VM's file size limit\"", self->console, strerror (-rc));
}

//  The last keep bytes of the console into console.log.1 (made afresh: a
//  name the VM could have planted is removed first, never followed).
static void
s_keep_tail (gw_watch_t *self, int64_t size)
{
    char old [PATH_MAX + 4], buf [65536];
    int64_t keep = size < S_KEEP_MAX ? size : S_KEEP_MAX, off = size - keep;
    snprintf (old, sizeof old, "%s.1", self->console);
    unlink (old);
    int in = open (self->console, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    int out = open (old, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640);
    while (in >= 0 && out >= 0 && keep > 0) {
        ssize_t n = pread (in, buf, keep < (int64_t) sizeof buf ? (size_t) keep : sizeof buf, off);
        if (n <= 0 || write (out, buf, (size_t) n) != n)
            break;
        off += n;
        keep -= n;
    }
    if (in >= 0)
        close (in);
    if (out >= 0)
        close (out);
}

//  Over the cap: keep the tail aside, cut the file back, say so in it.
static void
s_rotate (gw_watch_t *self, int64_t size)
{
    s_keep_tail (self, size);
    char line [256];
    int n = snprintf (line, sizeof line, "\n[cellvm: console.log reached %lld bytes (the cap "
                      "is %lld); its last part is in console.log.1, the rest was dropped]\n",
                      (long long) size, (long long) s_console_max ());
    if (ftruncate (self->con_fd, 0) == 0 && write (self->con_fd, line, (size_t) n) == n)
        self->con_size = n;
    gw_log (GW_LOG_WARN, "vm.console_rotated", "console=%s bytes=%lld", self->console,
            (long long) size);
}

//  Check the console now (the cap, the flood): GW_WATCH_OK or GW_WATCH_DEAD.
static int
s_console (gw_watch_t *self, int64_t now, char *why, size_t whylen)
{
    assert (self && why);
    if (self->con_fd < 0 && self->con_tries > 0)
        s_try_borrow (self);
    struct stat st;
    if (self->con_fd < 0 || fstat (self->con_fd, &st) < 0)
        return GW_WATCH_OK;
    int64_t size = st.st_size, max = s_console_max ();
    if (!self->win_at || now - self->win_at >= S_WINDOW_MS) {
        self->win_at = now;
        self->win_bytes = 0;
    }
    self->win_bytes += size >= self->con_size ? size - self->con_size : size;
    self->con_size = size;
    if (size > max)
        s_rotate (self, size);
    if (self->win_bytes <= 4 * max)
        return GW_WATCH_OK;
    snprintf (why, whylen, "it wrote %lld bytes to its console in %.1f s (a flood: at most "
              "%lld bytes a minute are allowed)", (long long) self->win_bytes,
              (double) (now - self->win_at) / 1000, (long long) (4 * max));
    return GW_WATCH_DEAD;
}
