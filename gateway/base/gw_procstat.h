/*  gw_procstat - what /proc/PID/stat says of a process.

    A process is identified by pid *and* start time (field 22), so a
    recycled pid is not taken for the process that had it before (a run
    dir's owner, a status file's gateway). Its threads' schedstat (time on
    a CPU, time waiting for one) is how a start's deadlines tell a guest
    that is stuck from one that is waiting for a CPU (gw_drive).
*/
#ifndef GW_PROCSTAT_H
#define GW_PROCSTAT_H

#include <stdint.h>

//  Pure: the start time (field 22) from the text of /proc/PID/stat.
//  0 or -EINVAL.
int gw_procstat_parse_starttime (const char *stat_text, unsigned long long *start_p);

//  Pure: a thread's time on a CPU and time runnable but waiting for one,
//  in ns, from the text of /proc/PID/task/TID/schedstat. 0 or -EINVAL.
int gw_procstat_parse_schedstat (const char *text, int64_t *run_ns_p, int64_t *wait_ns_p);

//  Process pid's time on a CPU and time waiting for one, in ms, summed
//  over its threads. 0, or -errno (-ENOENT: no such process).
int gw_procstat_sched (int pid, int64_t *run_ms_p, int64_t *wait_ms_p);

#endif
