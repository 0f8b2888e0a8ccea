/*  gw_procstat - what /proc/PID/stat says of a process.

    A process is identified by pid *and* start time (field 22), so a
    recycled pid is not taken for the process that had it before (a run
    dir's owner, a status file's gateway).
*/
#ifndef GW_PROCSTAT_H
#define GW_PROCSTAT_H

//  Pure: the start time (field 22) from the text of /proc/PID/stat.
//  0 or -EINVAL.
int gw_procstat_parse_starttime (const char *stat_text, unsigned long long *start_p);

#endif
