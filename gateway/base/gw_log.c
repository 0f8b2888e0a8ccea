/*  gw_log - structured, leveled, one-line-per-event logging.

    Process-wide state (level, destination, prefix) lives here on purpose:
    logging is the one facility every thread shares, like czmq's zsys. The
    line itself is ch_log's, as every cellvm program writes it.
*/
#include "base/gw_log.h"
#include "ch_log.h"

#include <assert.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#define S_PREFIX_MAX 256

static atomic_int s_level = GW_LOG_INFO;
static atomic_int s_fd = STDERR_FILENO;
static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static char s_prefix [S_PREFIX_MAX];           //  guarded by s_lock

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
    return ch_log_level_parse (name);
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

void
gw_log (gw_log_level_t level, const char *event, const char *fmt, ...)
{
    if (level < GW_LOG_ERROR || level > GW_LOG_DEBUG || !gw_log_enabled (level))
        return;
    char prefix [S_PREFIX_MAX];
    pthread_mutex_lock (&s_lock);
    memcpy (prefix, s_prefix, sizeof prefix);
    pthread_mutex_unlock (&s_lock);
    va_list args;
    va_start (args, fmt);
    ch_log_vwrite (atomic_load (&s_fd), (int) level, event, prefix, fmt, args);
    va_end (args);
}
