/*  gw_qcow2 - an empty qcow2 disk, made in-process: the same bytes
    `qemu-img create -f qcow2 [-b backing -F fmt] path size` writes (v3,
    64 KiB clusters, 16-bit refcounts), checked byte for byte against it
    by test_gw_qcow2.

    Why not run qemu-img: a session's disk is made on the reactor's turn
    that starts its VM, and a jailed qemu-img took 8-45 ms there (a fork, a
    jail, an exec, libraries), past the reactor's 50 ms budget under load.
    This takes well under a millisecond and runs nothing.

    gw_qcow2_encode is pure; gw_qcow2_create writes a new file.
*/
#ifndef GW_QCOW2_H
#define GW_QCOW2_H

#include <stddef.h>
#include <stdint.h>

#define GW_QCOW2_BACKING_MAX 1023               //  qemu's limit on the name
#define GW_QCOW2_SIZE_MAX (1ULL << 50)          //  1 PiB, well inside qemu's L1 cap

//  The whole image for a disk of size bytes (rounded up to 512, as
//  qemu-img does) over backing of format backing_fmt (both NULL: none)
//  into *image (malloc'd, caller frees) and *len. -EINVAL for a size of 0
//  or over GW_QCOW2_SIZE_MAX, a backing without a format or the reverse,
//  or a name too long; -ENOMEM.
int gw_qcow2_encode (uint64_t size, const char *backing, const char *backing_fmt,
                     uint8_t **image, size_t *len);

//  Write that image as a new file at path (mode 0644 less the umask; never
//  over an existing file or through a symlink). Not synced: a live disk
//  dies with its VM anyway. The backing file is not opened (like qemu-img
//  -u). 0 or -errno (-EEXIST if path is there).
int gw_qcow2_create (const char *path, uint64_t size, const char *backing,
                     const char *backing_fmt);

#endif
