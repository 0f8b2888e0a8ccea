/*  cellvm-jailshim.so - preloaded into a jailed QEMU by gw_jail.

    A clone maps its template's RAM file privately (copy-on-write), which
    needs only a read-only descriptor. QEMU 7.2 opens that file read-write
    all the same (8.2 falls back to read-only), and a read-write descriptor
    would let a compromised QEMU write into the template every other clone
    maps. So the jail mounts the file read-only, and this shim makes the one
    open QEMU makes of it ($CELLVM_JAIL_RO_RAM) read-only. Unjailed, the
    read-write open would also break the gateway's read lease on a
    snapshot's RAM (gw_readlease), which stops the VM.

    Free page reporting discards the pages a guest has freed. QEMU 7.2 does
    that with fallocate(PUNCH_HOLE) on the RAM block's file, private mapping
    or not (8.1 fixed it), then madvise(MADV_DONTNEED). On a clone the punch
    would zero those pages in the file every other clone maps; through a
    read-only descriptor it fails and QEMU discards nothing. So a punch of
    the RAM file succeeds here without touching it, and the madvise alone
    drops the clone's private copies: what 8.1 does. Unjailed clones get
    this shim too (gw_vm), so none ever punches its template. Nothing else
    changes.

    Not a gw_ module: it must never be linked into the gateway itself.
*/
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

typedef int (s_open_fn) (const char *, int, ...);
typedef int (s_fallocate_fn) (int, int, off_t, off_t);
typedef int (s_openat_fn) (int, const char *, int, ...);

int open (const char *path, int flags, ...);
int open64 (const char *path, int flags, ...);
int openat (int dirfd, const char *path, int flags, ...);
int openat64 (int dirfd, const char *path, int flags, ...);
int __open_2 (const char *path, int flags);
int __open64_2 (const char *path, int flags);
int fallocate (int fd, int mode, off_t offset, off_t len);
int fallocate64 (int fd, int mode, off_t offset, off_t len);

//  QEMU's read-write open of the RAM file: read-only instead.
static int
s_flags (const char *path, int flags)
{
    const char *ram = getenv ("CELLVM_JAIL_RO_RAM");
    if (ram && path && strcmp (path, ram) == 0 && (flags & O_ACCMODE) == O_RDWR
    &&  !(flags & (O_CREAT | O_TRUNC)))
        return (flags & ~O_ACCMODE) | O_RDONLY;
    return flags;
}

static mode_t
s_mode (int flags, va_list ap)
{
    return flags & (O_CREAT | O_TMPFILE) ? (mode_t) va_arg (ap, int) : 0;
}

static int
s_open (const char *name, const char *path, int flags, mode_t mode)
{
    s_open_fn *real = (s_open_fn *) dlsym (RTLD_NEXT, name);
    return real (path, s_flags (path, flags), mode);
}

static int
s_openat (const char *name, int dirfd, const char *path, int flags, mode_t mode)
{
    s_openat_fn *real = (s_openat_fn *) dlsym (RTLD_NEXT, name);
    return real (dirfd, path, s_flags (path, flags), mode);
}

int
open (const char *path, int flags, ...)
{
    va_list ap;
    va_start (ap, flags);
    mode_t mode = s_mode (flags, ap);
    va_end (ap);
    return s_open ("open", path, flags, mode);
}

int
open64 (const char *path, int flags, ...)
{
    va_list ap;
    va_start (ap, flags);
    mode_t mode = s_mode (flags, ap);
    va_end (ap);
    return s_open ("open64", path, flags, mode);
}

//  What _FORTIFY_SOURCE turns open () into when the flags are not constant
//  (Debian's QEMU: file_ram_open).
int
__open_2 (const char *path, int flags)
{
    return s_open ("__open_2", path, flags, 0);
}

int
__open64_2 (const char *path, int flags)
{
    return s_open ("__open64_2", path, flags, 0);
}

int
openat (int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start (ap, flags);
    mode_t mode = s_mode (flags, ap);
    va_end (ap);
    return s_openat ("openat", dirfd, path, flags, mode);
}

int
openat64 (int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start (ap, flags);
    mode_t mode = s_mode (flags, ap);
    va_end (ap);
    return s_openat ("openat64", dirfd, path, flags, mode);
}

//  True for a hole punched in the RAM file (the same inode as the path).
static bool
s_ram_punch (int fd, int mode)
{
    const char *ram = getenv ("CELLVM_JAIL_RO_RAM");
    struct stat st_fd, st_ram;
    return (mode & FALLOC_FL_PUNCH_HOLE) && ram && fstat (fd, &st_fd) == 0
        && stat (ram, &st_ram) == 0 && st_fd.st_dev == st_ram.st_dev
        && st_fd.st_ino == st_ram.st_ino;
}

static int
s_fallocate (const char *name, int fd, int mode, off_t offset, off_t len)
{
    if (s_ram_punch (fd, mode))
        return 0;
    s_fallocate_fn *real = (s_fallocate_fn *) dlsym (RTLD_NEXT, name);
    return real (fd, mode, offset, len);
}

int
fallocate (int fd, int mode, off_t offset, off_t len)
{
    return s_fallocate ("fallocate", fd, mode, offset, len);
}

//  What Debian's QEMU calls (large-file build).
int
fallocate64 (int fd, int mode, off_t offset, off_t len)
{
    return s_fallocate ("fallocate64", fd, mode, offset, len);
}
