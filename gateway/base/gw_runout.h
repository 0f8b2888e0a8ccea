/*  gw_runout - run a short program and take what it prints: the loader's
    list of a binary's libraries, `qemu --version`. The child starts with
    default signal dispositions and an empty mask (the gateway's ignored
    SIGINT and blocked signals would survive exec), stdin and stderr on
    /dev/null, and is killed when it outlives its time.
*/
#ifndef GW_RUNOUT_H
#define GW_RUNOUT_H

#include <stddef.h>

//  Run argv [0] (searched on PATH when it has no slash) with envp (NULL:
//  ours), its stdout into out (NUL-terminated, cut at cap - 1), for at
//  most timeout_ms. Its exit status (0..255), -ETIMEDOUT (killed), -EINTR
//  when a signal ended it, or the errno of a spawn that failed.
int gw_runout (char *const argv [], char *const envp [], char *out, size_t cap,
               int timeout_ms);

#endif
