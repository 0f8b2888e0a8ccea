/*  gw_fdborrow - another process's descriptor of a file, borrowed.

    pidfd_getfd gives us a descriptor that shares the other process's open
    file description (offset and flags), so setting O_APPEND on ours makes
    its writes go to the end of the file too: how QEMU's console log is
    cut back in place (gw_watch). Needs the right to ptrace that process:
    a gateway running as a service user asks its root helper (gw_privd),
    which calls this.
*/
#ifndef GW_FDBORROW_H
#define GW_FDBORROW_H

//  pid's descriptor of the regular file at path: 0 and *fd_p (ours, with
//  O_APPEND set on the description both share), or -errno (-ENOENT: pid
//  has no such file open).
int gw_fdborrow (int pid, const char *path, int *fd_p);

#endif
