/*  gw_backend_local - the unsafe-local backend: the kernel as a child process.

    NO ISOLATION. The kernel runs as the gateway's own user on the host, with
    the host's files and network. It exists for development and fast tests,
    and the gateway only uses it when asked for by name.

    Each start forks and execs KERNEL --fd 3 --max-frame N with one end of a
    socketpair on fd 3, in its own process group (so kill reaches whatever
    the cell started) and with a parent-death signal (so a gateway killed
    with SIGKILL leaves no kernel behind).

    The session's workspace is a private directory, RUN/workspace (the
    kernel's --outdir is RUN/workspace/out), deleted with the backend unless
    keep_workspace moved it out first (gw_backend.h): that kills the kernel
    and its process group, waits for it and for a file chunk in flight,
    then renames the workspace to DIR/workspace. After it the backend is
    only destroyed.
*/
#ifndef GW_BACKEND_LOCAL_H
#define GW_BACKEND_LOCAL_H

#include "backend/gw_backend.h"

#include <stdint.h>

//  New backend that runs kernel_path (checked: must be an executable file).
//  NULL with a reason in err otherwise. When adopt_dir is not NULL it adopts
//  a kept workspace: adopt_dir/workspace (what gw_keep_claim handed over)
//  is moved in (a rename) in place of a fresh one. When it is missing, a
//  symlink or not a directory we own, a fresh one is made and the reason
//  logged (keep.adopt_fresh). adopt_dir is removed either way, unless it is
//  another user's directory.
gw_backend_t *gw_backend_local_new_opts (const char *kernel_path, uint32_t max_frame,
                                         const char *adopt_dir, char *err, size_t errlen);

//  The session's workspace directory on the host; NULL when backend is not
//  an unsafe-local one. For tests and log lines.
const char *gw_backend_local_workspace (const gw_backend_t *backend);

#endif
