/*  gi_ops - the requests init answers on the control port (docs/init.md):
 *  hello, status, restart, kill, put, get, set_time, add_entropy, shutdown;
 *  and the kernel_exited notice.
 */
#ifndef GI_OPS_H
#define GI_OPS_H

#include "gi_ctl.h"
#include "gi_kernel.h"

typedef struct _gi_ops_t gi_ops_t;

//  Borrow ctl and kernel (both outlive ops). workspace is "ext4" or "tmpfs".
gi_ops_t *gi_ops_new (gi_ctl_t *ctl, gi_kernel_t *kernel, const char *workspace);
void gi_ops_destroy (gi_ops_t **self_p);

//  Answer one message from the host; takes *msg_p. 0, or 1 when the host
//  asked for the VM to power off (the reply is queued).
int gi_ops_handle (gi_ops_t *self, kn_msg_t **msg_p);

//  The kernel died: tell the host (dropped when nobody is connected; the
//  next hello carries it in kernel.last_exit).
void gi_ops_kernel_exited (gi_ops_t *self);

#endif
