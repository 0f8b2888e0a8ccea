/*  ch_util - small helpers the kernel, the gateway and init all need. */
#ifndef CH_UTIL_H
#define CH_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

//  Lowercase hex SHA-256 of data into hex (65 bytes with the NUL).
void ch_sha256_hex (const uint8_t *data, size_t len, char hex [65]);

//  Hex SHA-256 of the file at path, opened with extra_flags added (say
//  O_NOFOLLOW); *size_p gets its byte count when not NULL. 0, -errno from
//  open, or -EIO on a read error.
int ch_sha256_file (const char *path, int extra_flags, char hex [65], off_t *size_p);

//  The digest of 32 bytes as lowercase hex (65 bytes with the NUL).
void ch_hex32 (const unsigned char md [32], char hex [65]);

//  mkdir -p: path and every missing parent, with mode. Existing ones are
//  left as they are. 0 or -errno.
int ch_mkdir_p (const char *path, mode_t mode);

//  Read a small file (not through a symlink) into buf, NUL-terminated.
//  Bytes read, or -errno.
ssize_t ch_read_small (const char *path, char *buf, size_t cap);

#endif
