/*  gw_runbase - where this user's gateways keep their state by default:
    run dirs, kept workspaces, status files, templates, pool sockets.
*/
#ifndef GW_RUNBASE_H
#define GW_RUNBASE_H

#include <stddef.h>

//  /var/tmp/cellvm-<uid>. Not $XDG_RUNTIME_DIR or /run: those are tmpfs,
//  and the run dir holds the /workspace disk. 0 or -ENAMETOOLONG.
int gw_runbase_default (char *out, size_t cap);

#endif
