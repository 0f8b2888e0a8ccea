/*  gw_procstat - what /proc/PID/stat says (see gw_procstat.h). */
#include "base/gw_procstat.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

int
gw_procstat_parse_starttime (const char *stat_text, unsigned long long *start_p)
{
    assert (stat_text && start_p);
    //  "pid (comm) S ppid ...": comm may hold spaces and ')', so count
    //  fields after the last ')'. State is field 3, start time field 22.
    const char *p = strrchr (stat_text, ')');
    if (!p)
        return -EINVAL;
    p++;
    for (int field = 3; field < 22; field++) {
        p += strspn (p, " ");
        p += strcspn (p, " ");
        if (!*p)
            return -EINVAL;
    }
    p += strspn (p, " ");
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull (p, &end, 10);
    if (errno || end == p || (*end && *end != ' ' && *end != '\n'))
        return -EINVAL;
    *start_p = v;
    return 0;
}
