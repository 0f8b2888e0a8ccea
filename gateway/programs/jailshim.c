/*  cellvm-jailshim.so - preloaded into a jailed QEMU by gw_jail.

    A clone maps its template's RAM file privately (copy-on-write), which
    needs only a read-only descriptor. QEMU 7.2 opens that file read-write
    all the same (8.2 falls back to read-only), and a read-write descriptor
    would let a compromised QEMU write into the template every other clone
    maps. So the jail mounts the file read-only, and this shim retries the
    one open QEMU makes of it ($CELLVM_JAIL_RO_RAM) read-only when the
    read-write open is refused. Nothing else changes.

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
#include <sys/types.h>

typedef int (s_open_fn) (const char *, int, ...);
typedef int (s_openat_fn) (int, const char *, int, ...);

int open (const char *path, int flags, ...);
int open64 (const char *path, int flags, ...);
int openat (int dirfd, const char *path, int flags, ...);
int openat64 (int dirfd, const char *path, int flags, ...);
int __open_2 (const char *path, int flags);
int __open64_2 (const char *path, int flags);

//  The refused read-write open of the RAM file: worth one read-only try.
static bool
s_retry (const char *path, int flags, int fd)
{
    const char *ram = getenv ("CELLVM_JAIL_RO_RAM");
    return fd < 0 && (errno == EROFS || errno == EACCES) && ram && path
        && strcmp (path, ram) == 0 && (flags & O_ACCMODE) == O_RDWR
        && !(flags & (O_CREAT | O_TRUNC));
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
    int fd = real (path, flags, mode);
    if (s_retry (path, flags, fd))
        fd = real (path, (flags & ~O_ACCMODE) | O_RDONLY, mode);
    return fd;
}

static int
s_openat (const char *name, int dirfd, const char *path, int flags, mode_t mode)
{
    s_openat_fn *real = (s_openat_fn *) dlsym (RTLD_NEXT, name);
    int fd = real (dirfd, path, flags, mode);
    if (s_retry (path, flags, fd))
        fd = real (dirfd, path, (flags & ~O_ACCMODE) | O_RDONLY, mode);
    return fd;
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
