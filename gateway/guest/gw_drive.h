/*  gw_drive - a blocking driver for one VM's init port and kernel channel.

    For code off the reactor that talks to a guest and waits for it: the
    template build (hellos after a cold boot, the warm-up cell), a restore's
    reseed (gw_template_reseed) and the pool's holders (a clone's warm-up).
    Sessions never block: they drive gw_init and gw_chan from the reactor.

    The channel library does the talking: driver hellos come from
    ch_hello_driver and the peers' hellos are checked with ch_hello_check;
    init is asked through gw_init_call; the kernel's messages come through
    gw_chan, on a dup of its port. Every call waits until the driver's
    deadline at most. While it waits on the kernel, init (when connected)
    is watched: a kernel_exited notice ends the wait at once (-ECONNRESET)
    with init's own description, instead of a timeout.
*/
#ifndef GW_DRIVE_H
#define GW_DRIVE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "guest/gw_init.h"
#include "vm/gw_vm.h"

typedef struct _gw_drive_t gw_drive_t;

//  A driver for vm's ports (vm borrowed; each port is connected on first
//  use, the kernel's hunting for the sync marker), with its deadline
//  timeout_ms from now.
gw_drive_t *gw_drive_new (gw_vm_t *vm, int timeout_ms);

//  A driver over ports already connected and greeted (a clone after
//  gw_template_reseed): takes *init_p (nulled; may be NULL) and kernel_fd.
gw_drive_t *gw_drive_adopt (gw_init_t **init_p, int kernel_fd, int timeout_ms);

//  Close what it still holds; nulls *self_p. NULL-safe.
void gw_drive_destroy (gw_drive_t **self_p);

//  A new deadline, timeout_ms from now.
void gw_drive_set_timeout (gw_drive_t *self, int timeout_ms);

//  Init's hello: a driver hello plus extra's members (borrowed, may be
//  NULL) and buf (may be NULL), repeated every 250 ms until init answers (a
//  hello sent before init opened its port is lost). 0 and, when reply_p is
//  not NULL, *reply_p (init's hello content, owned); or -errno + err.
int gw_drive_init_hello (gw_drive_t *self, const json_t *extra, const uint8_t *buf, size_t len,
                         json_t **reply_p, char *err, size_t errlen);

//  The kernel's hello: a driver hello, with "entropy" when entropy_b64 is
//  not NULL, then the kernel's own hello, checked. 0 or -errno + err.
int gw_drive_kernel_hello (gw_drive_t *self, const char *entropy_b64, char *err,
                           size_t errlen);

//  A kernel_info round trip, until its idle. 0 or -errno + err.
int gw_drive_kernel_info (gw_drive_t *self, char *err, size_t errlen);

//  Run code as a silent cell (no history, no output, no count) and wait for
//  its execute_reply and its idle, so the kernel is back in a read on its
//  channel with no frame half written. A reply other than ok is -EIO.
//  0 or -errno + err.
int gw_drive_silent_cell (gw_drive_t *self, const char *code, char *err, size_t errlen);

//  Give up the ports (each once): init's (NULL when none) and the kernel's
//  fd (-1 when none). The caller owns what it gets.
gw_init_t *gw_drive_take_init (gw_drive_t *self);
int gw_drive_take_kernel_fd (gw_drive_t *self);

//  Send init a request and wait for its reply (as gw_init_call). 0 and
//  *reply_p (its content, new reference) when the reply says "ok"; else
//  -errno with the reply's ename and evalue (or the failure) in err.
int gw_drive_init_request (gw_drive_t *self, const char *msg_type, json_t *content,
                           json_t **reply_p, char *err, size_t errlen);

#endif
