/*  gw_procstat - what /proc/PID/stat says (see gw_procstat.h). */
#include "base/gw_procstat.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

//  Field `field` (1-based, as proc(5) numbers them; 3 or more). "pid (comm)
//  S ppid ...": comm may hold spaces and ')', so fields are counted after
//  the last ')'. 0 or -EINVAL.
static int
s_field (const char *stat_text, int field, unsigned long long *v_p)
{
    const char *p = strrchr (stat_text, ')');
    if (!p)
        return -EINVAL;
    p++;
    for (int k = 3; k < field; k++) {
        p += strspn (p, " ");
        p += strcspn (p, " ");
        if (!*p)
            return -EINVAL;
    }
    p += strspn (p, " ");
    if (*p < '0' || *p > '9')                   //  strtoull would take a sign
        return -EINVAL;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull (p, &end, 10);
    if (errno || end == p || (*end && *end != ' ' && *end != '\n'))
        return -EINVAL;
    *v_p = v;
    return 0;
}

int
gw_procstat_parse_starttime (const char *stat_text, unsigned long long *start_p)
{
    assert (stat_text && start_p);
    return s_field (stat_text, 22, start_p);
}

int
gw_procstat_parse_schedstat (const char *text, int64_t *run_ns_p, int64_t *wait_ns_p)
{
    assert (text && run_ns_p && wait_ns_p);
    unsigned long long run = 0, wait = 0;
    char end = 0;
    if (sscanf (text, "%llu %llu %*u%c", &run, &wait, &end) != 3 || end != '\n'
        || run > INT64_MAX || wait > INT64_MAX)
        return -EINVAL;
    *run_ns_p = (int64_t) run;
    *wait_ns_p = (int64_t) wait;
    return 0;
}

//  One thread's schedstat added to *run_p and *wait_p. 0 or -errno.
static int
s_add_task (int dir_fd, const char *tid, int64_t *run_p, int64_t *wait_p)
{
    char path [300], text [128];
    snprintf (path, sizeof path, "%s/schedstat", tid);
    int fd = openat (dir_fd, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = read (fd, text, sizeof text - 1);
    close (fd);
    int64_t run = 0, wait = 0;
    text [n > 0 ? n : 0] = '\0';
    if (n <= 0 || gw_procstat_parse_schedstat (text, &run, &wait) < 0)
        return -EINVAL;
    *run_p += run;
    *wait_p += wait;
    return 0;
}

int
gw_procstat_sched (int pid, int64_t *run_ms_p, int64_t *wait_ms_p)
{
    assert (run_ms_p && wait_ms_p);
    char path [64];
    snprintf (path, sizeof path, "/proc/%d/task", pid);
    DIR *dir = opendir (path);
    if (!dir)
        return -errno;
    int64_t run = 0, wait = 0;
    int tasks = 0;
    for (struct dirent *e; (e = readdir (dir)); )
        if (e->d_name [0] != '.' && s_add_task (dirfd (dir), e->d_name, &run, &wait) == 0)
            tasks++;                            //  a thread that just ended is skipped
    closedir (dir);
    if (tasks == 0)
        return -ENOENT;
    *run_ms_p = run / 1000000;
    *wait_ms_p = wait / 1000000;
    return 0;
}
