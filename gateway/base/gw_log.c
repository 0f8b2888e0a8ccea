/*  gw_log - structured, leveled, one-line-per-event logging.

    Process-wide state (level, destination, prefix) lives here on purpose:
    logging is the one facility every thread shares, like czmq's zsys.
*/
#include "base/gw_log.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define S_LINE_MAX 4096                         //  longer lines are cut, marked "..."
#define S_PREFIX_MAX 256

static atomic_int s_level = GW_LOG_INFO;
static atomic_int s_fd = STDERR_FILENO;
static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static char s_prefix [S_PREFIX_MAX];           //  guarded by s_lock

static const char *s_level_names [] = { "error", "warn", "info", "debug" };

void
gw_log_init (gw_log_level_t level, FILE *out)
{
    assert (level >= GW_LOG_ERROR && level <= GW_LOG_DEBUG);
    if (out)
        fflush (out);                           //  we bypass stdio from now on
    atomic_store (&s_level, (int) level);
    atomic_store (&s_fd, out ? fileno (out) : STDERR_FILENO);
}

int
gw_log_level_parse (const char *name)
{
    if (!name)
        return -EINVAL;
    for (int i = GW_LOG_ERROR; i <= GW_LOG_DEBUG; i++)
        if (strcasecmp (name, s_level_names [i]) == 0)
            return i;
    if (strcasecmp (name, "warning") == 0)
        return GW_LOG_WARN;
    return -EINVAL;
}

bool
gw_log_enabled (gw_log_level_t level)
{
    return (int) level <= atomic_load (&s_level);
}

void
gw_log_set_prefix (const char *kv)
{
    pthread_mutex_lock (&s_lock);
    snprintf (s_prefix, sizeof s_prefix, "%s", kv ? kv : "");
    pthread_mutex_unlock (&s_lock);
}

//  Append the UTC timestamp with milliseconds; returns bytes written.
static size_t
s_stamp (char *out, size_t cap)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime (CLOCK_REALTIME, &ts);
    gmtime_r (&ts.tv_sec, &tm);
    size_t n = strftime (out, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    int m = snprintf (out + n, cap - n, ".%03ldZ", ts.tv_nsec / 1000000);
    return n + (m > 0 ? (size_t) m : 0);
}

//  One event is one line: no byte of it may end the line early.
static void
s_flatten (char *text, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if ((unsigned char) text [i] < 0x20 || text [i] == 0x7f)
            text [i] = ' ';
}

//  Write all of buf, retrying on EINTR and short writes.
static void
s_write_all (int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write (fd, buf, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;                             //  nowhere left to report it
        buf += n;
        len -= (size_t) n;
    }
}

void
gw_log (gw_log_level_t level, const char *event, const char *fmt, ...)
{
    if (level < GW_LOG_ERROR || level > GW_LOG_DEBUG || !gw_log_enabled (level))
        return;
    int saved_errno = errno;                    //  callers log, then use errno
    char line [S_LINE_MAX];
    size_t n = s_stamp (line, sizeof line);
    pthread_mutex_lock (&s_lock);
    int m = snprintf (line + n, sizeof line - n, " level=%s event=%s%s%s",
                      s_level_names [level], event ? event : "-",
                      s_prefix [0] ? " " : "", s_prefix);
    pthread_mutex_unlock (&s_lock);
    n += m > 0 ? (size_t) m : 0;
    if (n < sizeof line - 2 && fmt && fmt [0]) {
        line [n] = ' ';                         //  kept only if fmt wrote something
        va_list args;
        va_start (args, fmt);
        m = vsnprintf (line + n + 1, sizeof line - n - 1, fmt, args);
        va_end (args);
        if (m > 0)
            n += 1 + (size_t) m;
    }
    if (n >= sizeof line - 1) {                 //  truncated: say so, keep the newline
        n = sizeof line - 1;
        memcpy (line + n - 3, "...", 3);
    }
    s_flatten (line, n);
    line [n++] = '\n';
    s_write_all (atomic_load (&s_fd), line, n);
    errno = saved_errno;
}
