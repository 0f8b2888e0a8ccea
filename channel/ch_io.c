/*  ch_io - writing channel messages to a file descriptor. */
#include "ch_io.h"
#include "ch_clock.h"
#include "ch_frame.h"

#include <assert.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>


//  Wait for POLLOUT until deadline (-1: none). 0 or -ETIMEDOUT.
static int
s_wait_writable (int fd, int64_t deadline)
{
    int left = deadline < 0 ? -1 : (int) (deadline - ch_clock_mono_ms ());
    if (deadline >= 0 && left <= 0)
        return -ETIMEDOUT;
    struct pollfd pf = { fd, POLLOUT, 0 };
    int rc = poll (&pf, 1, left);
    return rc == 0 ? -ETIMEDOUT : 0;
}

//  ch_write_all's loop, with the failed write's own errno (-EIO when it
//  wrote nothing).
static int
s_writev_all (int fd, struct iovec *iov, int iovcnt, int timeout_ms)
{
    int64_t deadline = timeout_ms < 0 ? -1 : ch_clock_mono_ms () + timeout_ms;
    for (ssize_t n = 0; ; ) {
        while (iovcnt > 0 && (size_t) n >= iov->iov_len) {
            n -= (ssize_t) iov->iov_len;
            iov++;
            iovcnt--;
        }
        if (iovcnt == 0)
            return 0;
        iov->iov_base = (uint8_t *) iov->iov_base + n;
        iov->iov_len -= (size_t) n;
        n = writev (fd, iov, iovcnt);
        if (n > 0)
            continue;
        if (n == 0)
            return -EIO;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (s_wait_writable (fd, deadline) < 0)
                return -ETIMEDOUT;
        }
        else if (errno != EINTR)
            return -errno;
        n = 0;
    }
}

int
ch_write_all (int fd, struct iovec *iov, int iovcnt, int timeout_ms)
{
    int rc = s_writev_all (fd, iov, iovcnt, timeout_ms);
    return rc == -ETIMEDOUT ? rc : rc < 0 ? -EPIPE : 0;
}

int
ch_write_bytes (int fd, const void *data, size_t len)
{
    struct iovec iov = { (void *) data, len };
    return len ? s_writev_all (fd, &iov, 1, -1) : 0;
}

size_t
ch_wire_size (const ch_msg_t *msg, size_t json_len, uint32_t max_frame)
{
    if (json_len == 0 || json_len > max_frame)
        return 0;
    size_t total = CH_FRAME_HDR + json_len;
    for (size_t i = 0; i < ch_msg_nbuffers (msg); i++) {
        size_t len = 0;
        ch_msg_buffer (msg, i, &len);
        if (len == 0 || len > max_frame)
            return 0;
        total += CH_FRAME_HDR + len;
    }
    return total;
}

int
ch_wire_iov (const ch_msg_t *msg, const char *json, size_t json_len, bool sync,
             uint8_t hdrs [][CH_FRAME_HDR], struct iovec *iov)
{
    int n = 0;
    if (sync)
        iov [n++] = (struct iovec) { (void *) CH_FRAME_SYNC, CH_FRAME_SYNC_LEN };
    ch_frame_encode_header (hdrs [0], json_len, UINT32_MAX);
    iov [n++] = (struct iovec) { hdrs [0], CH_FRAME_HDR };
    iov [n++] = (struct iovec) { (void *) json, json_len };
    for (size_t i = 0; i < ch_msg_nbuffers (msg); i++) {
        size_t len = 0;
        const uint8_t *buf = ch_msg_buffer (msg, i, &len);
        ch_frame_encode_header (hdrs [i + 1], len, UINT32_MAX);
        iov [n++] = (struct iovec) { hdrs [i + 1], CH_FRAME_HDR };
        iov [n++] = (struct iovec) { (void *) buf, len };
    }
    return n;
}

int
ch_write_msg (int fd, const ch_msg_t *msg, uint32_t max_frame, bool sync, int timeout_ms)
{
    assert (msg);
    size_t json_len = 0;
    char *json = ch_msg_encode (msg, &json_len);
    int rc = -EMSGSIZE;
    if (ch_wire_size (msg, json_len, max_frame)) {
        uint8_t hdrs [CH_MSG_MAX_BUFFERS + 1][CH_FRAME_HDR];
        struct iovec iov [CH_WIRE_IOV_MAX];
        int n = ch_wire_iov (msg, json, json_len, sync, hdrs, iov);
        rc = ch_write_all (fd, iov, n, timeout_ms);
    }
    free (json);
    return rc;
}
