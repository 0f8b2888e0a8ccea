/*  gw_backend_local - the unsafe-local backend: the kernel as a child process.

    NO ISOLATION. The kernel runs as the gateway's own user on the host, with
    the host's files and network. It exists for development and fast tests,
    and the gateway only uses it when asked for by name.

    Each start forks and execs KERNEL --fd 3 --max-frame N with one end of a
    socketpair on fd 3, in its own process group (so kill reaches whatever
    the cell started) and with a parent-death signal (so a gateway killed
    with SIGKILL leaves no kernel behind).
*/
#ifndef GW_BACKEND_LOCAL_H
#define GW_BACKEND_LOCAL_H

#include "gw_backend.h"

#include <stdint.h>

//  New backend that runs kernel_path (checked: must be an executable file).
//  NULL with a reason in err otherwise.
gw_backend_t *gw_backend_local_new (const char *kernel_path, uint32_t max_frame,
                                    char *err, size_t errlen);

#endif
