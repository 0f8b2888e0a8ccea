/*  gw_fdpass - text and fds over a unix socket (see gw_fdpass.h). */
#include "base/gw_fdpass.h"

#include <assert.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef union {
    char buf [CMSG_SPACE (GW_FDPASS_MAX * sizeof (int))];
    struct cmsghdr align;
} s_cmsg_t;

int
gw_fdpass_send (int sock, const char *text, const int *fds, int nfd)
{
    assert (text && nfd >= 0 && nfd <= GW_FDPASS_MAX);
    s_cmsg_t u;
    struct iovec iov = { (void *) text, strlen (text) };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
    if (nfd > 0) {
        memset (&u, 0, sizeof u);
        mh.msg_control = u.buf;
        mh.msg_controllen = CMSG_SPACE (nfd * sizeof (int));
        struct cmsghdr *c = CMSG_FIRSTHDR (&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN (nfd * sizeof (int));
        memcpy (CMSG_DATA (c), fds, nfd * sizeof (int));
    }
    ssize_t n = sendmsg (sock, &mh, MSG_NOSIGNAL);
    return n == (ssize_t) iov.iov_len ? 0 : -EPIPE;
}

//  The fds of one SCM_RIGHTS header into fds; more than we asked for are closed.
static void
s_take_fds (struct cmsghdr *c, int fds [GW_FDPASS_MAX])
{
    size_t k = (c->cmsg_len - CMSG_LEN (0)) / sizeof (int);
    for (size_t i = 0; i < k; i++) {
        int fd;
        memcpy (&fd, CMSG_DATA (c) + i * sizeof (int), sizeof fd);
        if (i < GW_FDPASS_MAX)
            fds [i] = fd;
        else
            close (fd);
    }
}

ssize_t
gw_fdpass_recv (int sock, char *text, size_t cap, int fds [GW_FDPASS_MAX])
{
    assert (text && cap > 0 && fds);
    s_cmsg_t u;
    struct iovec iov = { text, cap - 1 };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                         .msg_controllen = sizeof u.buf };
    for (int i = 0; i < GW_FDPASS_MAX; i++)
        fds [i] = -1;
    ssize_t n = recvmsg (sock, &mh, MSG_CMSG_CLOEXEC);
    if (n < 0)
        return -errno;
    text [n] = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR (&mh); c; c = CMSG_NXTHDR (&mh, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
            s_take_fds (c, fds);
    return n;
}
