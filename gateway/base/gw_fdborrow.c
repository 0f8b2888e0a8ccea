/*  gw_fdborrow - another process's descriptor of a file (see gw_fdborrow.h). */
#include "base/gw_fdborrow.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int
gw_fdborrow (int pid, const char *path, int *fd_p)
{
    struct stat want, st;
    if (lstat (path, &want) < 0 || !S_ISREG (want.st_mode))
        return -ENOENT;
    int pidfd = (int) syscall (SYS_pidfd_open, pid, 0), rc = -ENOENT;
    char dir [64], link [320];
    snprintf (dir, sizeof dir, "/proc/%d/fd", pid);
    DIR *d = pidfd >= 0 ? opendir (dir) : NULL;
    struct dirent *e;
    while (d && rc == -ENOENT && (e = readdir (d))) {
        snprintf (link, sizeof link, "%s/%s", dir, e->d_name);
        if (e->d_name [0] == '.' || stat (link, &st) < 0 || st.st_dev != want.st_dev
        ||  st.st_ino != want.st_ino)
            continue;
        *fd_p = (int) syscall (SYS_pidfd_getfd, pidfd, atoi (e->d_name), 0);
        rc = *fd_p < 0 ? -errno : 0;
    }
    if (pidfd < 0 || !d)
        rc = -errno;
    if (d)
        closedir (d);
    if (pidfd >= 0)
        close (pidfd);
    if (rc == 0 && fcntl (*fd_p, F_SETFL, fcntl (*fd_p, F_GETFL) | O_APPEND) < 0) {
        rc = -errno;
        close (*fd_p);
    }
    return rc;
}
