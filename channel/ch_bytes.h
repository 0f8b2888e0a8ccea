/*  ch_bytes - a bounded byte queue: what a non-blocking writer keeps until
    its fd takes it (the egress proxy's port and sockets, both sides). The
    bytes stay contiguous, so a codec can peek at all of them at once.
*/
#ifndef CH_BYTES_H
#define CH_BYTES_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct _ch_bytes_t ch_bytes_t;

//  A queue that holds at most cap bytes (it grows to that as needed).
ch_bytes_t *ch_bytes_new (size_t cap);
void ch_bytes_destroy (ch_bytes_t **self_p);

size_t ch_bytes_len (const ch_bytes_t *self);
//  How many more bytes put would take.
size_t ch_bytes_room (const ch_bytes_t *self);

//  Append len bytes whole: 0, or -ENOBUFS (over cap; nothing queued).
int ch_bytes_put (ch_bytes_t *self, const void *data, size_t len);

//  The queued bytes, contiguous; *len_p gets their count.
const uint8_t *ch_bytes_peek (const ch_bytes_t *self, size_t *len_p);

//  Forget the first n (at most all) bytes.
void ch_bytes_drop (ch_bytes_t *self, size_t n);

//  Write what fd takes now without blocking, and drop it: the bytes written
//  (0 when the fd is full), or a negative errno (-EPIPE, -ECONNRESET...).
ssize_t ch_bytes_write (ch_bytes_t *self, int fd);

#endif
