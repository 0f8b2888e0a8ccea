/*  gw_readlease - a read lease on a file that a VM maps: nobody changes it
    unseen while we hold it.

    A resumed session maps its snapshot's RAM file privately: a page the
    guest has not touched yet is read from the file when it first touches
    it. A file changed under a running VM would hand the guest wrong memory.
    A read lease (fcntl F_SETLEASE) makes any other open for writing, and
    any truncate, wait (up to /proc/sys/fs/lease-break-time) until the
    holder lets go, and tells the holder first, with a signal. The gateway
    stops the VM, and lets go only once QEMU is gone: the writer proceeds,
    and no guest ever reads what it wrote. A lease cannot be taken while the
    file is open for writing anywhere: such a file is refused.

    The lease signal (SIGRTMIN+3, and SIGIO, which the kernel sends when it
    cannot queue that one) must be blocked in every thread before the first
    lease (gw_readlease_block_signal, at a program's start, before any
    thread exists): it arrives through one signalfd (gw_readlease_signal_fd)
    that the reactor polls, and gw_readlease_dispatch asks each lease whether
    it is going (F_GETLEASE), marks those broken and calls their callbacks,
    on the reactor's thread. A callback must not call this module.
*/
#ifndef GW_READLEASE_H
#define GW_READLEASE_H

#include <stdbool.h>
#include <stddef.h>

typedef struct _gw_readlease_t gw_readlease_t;

//  Called from gw_readlease_dispatch when a writer waits for the lease.
typedef void (gw_readlease_fn) (void *arg);

//  Block the lease signal in the calling thread (threads started later
//  inherit it). Once per program, before any thread.
void gw_readlease_block_signal (void);

//  A read lease on path. NULL with -errno in *rc_p and the reason in err:
//  -EAGAIN when the file is open for writing somewhere, -ENOTSUP when this
//  process has not blocked the signal or the file system has no leases.
gw_readlease_t *gw_readlease_new (const char *path, int *rc_p, char *err, size_t errlen);

//  Let go (a waiting writer proceeds) and close; nulls *self_p.
void gw_readlease_destroy (gw_readlease_t **self_p);

//  The leased file, open read-only (borrowed).
int gw_readlease_fd (const gw_readlease_t *self);

//  Whether a writer has asked for it since it was taken.
bool gw_readlease_broken (const gw_readlease_t *self);

//  Who hears of a break: fn (NULL: nobody; gw_readlease_broken still says).
//  A break that came before is reported at once.
void gw_readlease_on_break (gw_readlease_t *self, gw_readlease_fn *fn, void *arg);

//  The process's signalfd for lease breaks (made on first use), or -1.
int gw_readlease_signal_fd (void);

//  Read the signalfd dry; mark and report each broken lease.
void gw_readlease_dispatch (void);

#endif
