/*  gw_runbase - this user's default state directory (see gw_runbase.h). */
#include "base/gw_runbase.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <unistd.h>

int
gw_runbase_default (char *out, size_t cap)
{
    assert (out && cap);
    //  Not /run or $XDG_RUNTIME_DIR: the run dir holds the session's
    //  /workspace disk, and those are tmpfs, i.e. RAM. /var/tmp is on disk.
    int n = snprintf (out, cap, "/var/tmp/cellvm-%u", (unsigned) geteuid ());
    return n < 0 || (size_t) n >= cap ? -ENAMETOOLONG : 0;
}
