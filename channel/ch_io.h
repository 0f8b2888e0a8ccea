/*  ch_io - writing channel messages to a file descriptor.

    Two ways out, for two kinds of writer:
    - ch_write_all / ch_write_msg here: the whole message now, for threads
      that may wait (the kernel, blocking drivers such as the template
      builder), and ch_write_bytes, the same loop for plain bytes (files,
      logs);
    - ch_outq: a queue that a reactor flushes when the fd is writable, for
      the gateway and init, which must never wait on their peer. It frames
      messages with ch_wire_size and ch_wire_iov.
    A message is checked whole before any byte leaves (every frame 1..max),
    so a refusal never leaves half a message in the stream.
*/
#ifndef CH_IO_H
#define CH_IO_H

#include "ch_frame.h"
#include "ch_msg.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

//  Write all of iov (modified as it goes), riding out EINTR and short
//  writes. On a non-blocking fd, waits for POLLOUT up to timeout_ms in all
//  (-1: no limit). 0, -ETIMEDOUT, or -EPIPE (the peer is gone, or any other
//  write error).
int ch_write_all (int fd, struct iovec *iov, int iovcnt, int timeout_ms);

//  All of data[0..len) into fd (a file, a pipe, a log) as ch_write_all
//  writes, with no time limit. 0, or the failed write's -errno (-ENOSPC,
//  -EFBIG, ...; -EIO when it wrote nothing).
int ch_write_bytes (int fd, const void *data, size_t len);

//  Bytes msg takes on the wire with its JSON of json_len bytes: 0 when a
//  frame is out of 1..max_frame (an empty buffer cannot be framed).
size_t ch_wire_size (const ch_msg_t *msg, size_t json_len, uint32_t max_frame);

//  Most iovecs ch_wire_iov fills: the sync marker, then a header and a body
//  per frame.
#define CH_WIRE_IOV_MAX (2 * (CH_MSG_MAX_BUFFERS + 1) + 1)

//  msg as iovecs, its JSON (json, json_len) the first frame: the sync marker
//  when sync is true, then header and body per frame. hdrs holds the
//  headers; iov has room for CH_WIRE_IOV_MAX. Returns the iovec count.
int ch_wire_iov (const ch_msg_t *msg, const char *json, size_t json_len, bool sync,
                 uint8_t hdrs [][CH_FRAME_HDR], struct iovec *iov);

//  Write msg whole (JSON frame, then its buffer frames), after the sync
//  marker when sync is true. -EMSGSIZE (nothing written) or ch_write_all's.
int ch_write_msg (int fd, const ch_msg_t *msg, uint32_t max_frame, bool sync,
                  int timeout_ms);

#endif
