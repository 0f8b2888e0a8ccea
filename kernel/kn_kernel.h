/*  kn_kernel - the kernel's protocol core: dispatch, busy/idle, the shell
 *  queue, control on its own thread, stdin, stop_on_error, output files.
 *
 *  It knows nothing of CPython: the interpreter sits behind kn_interp_t, so
 *  tests can drive the core with a mock.
 */
#ifndef KN_KERNEL_H
#define KN_KERNEL_H

#include "kn_chan.h"
#include "ch_msg.h"

#include <stdbool.h>
#include <sys/uio.h>

//  The interpreter seam. Every call but interrupt runs on the main thread.
typedef struct {
    void *ctx;
    //  Reply content for a shell request (new reference). For msg_types the
    //  interpreter does not know, a reply with status "error".
    json_t *(*handle) (void *ctx, const char *msg_type, const json_t *content);
    //  kernel_info_reply content (new reference); asked once at start.
    json_t *(*info) (void *ctx);
    //  Drop an interrupt that arrived after the cell ended.
    void (*discard_interrupt) (void *ctx);
    //  A comm_open, comm_msg or comm_close from the client, whole (header,
    //  metadata, content, buffers); it gets no reply. NULL: no comms, and a
    //  comm_open is answered by closing it.
    void (*comm) (void *ctx, const ch_msg_t *msg);
    //  A debug_request's reply content (new reference), called on the
    //  kernel's debug thread (one request at a time), also while a cell runs
    //  or is stopped at a breakpoint. header is the request's. NULL: no
    //  debugger.
    json_t *(*debug) (void *ctx, const json_t *header, const json_t *content);
} kn_interp_t;

typedef struct _kn_kernel_t kn_kernel_t;

typedef struct {
    const char *outdir;         //  watched for output_files; NULL = none
    const char *implementation_version;
} kn_kernel_config_t;

//  chan is borrowed and must outlive the kernel.
kn_kernel_t *kn_kernel_new (kn_chan_t *chan, const kn_kernel_config_t *config);
void kn_kernel_destroy (kn_kernel_t **self_p);

//  The interpreter to use; copied. Must be set before kn_kernel_run.
void kn_kernel_set_interp (kn_kernel_t *self, const kn_interp_t *interp);

//  Run until shutdown or the channel closes: starts the reader thread,
//  sends hello, serves shell requests on the calling thread (which must be
//  the one that receives interrupts). Returns the process exit status.
int kn_kernel_run (kn_kernel_t *self);

//  --- Called by the interpreter while it handles a request ---------------

//  Publish on iopub with the current request as parent. Takes *content_p.
//  Flushes captured output first (except for streams). Silent requests
//  publish nothing.
void kn_kernel_publish (kn_kernel_t *self, const char *msg_type, json_t **content_p);

//  Publish with content given as JSON text (an object), spliced into the
//  message as it is: never parsed, never escaped again. Flushes first like
//  kn_kernel_publish. 0, or -EINVAL when content is not an object.
int kn_kernel_publish_json (kn_kernel_t *self, const char *msg_type, const char *content,
                            size_t len);

//  A message the interpreter put together whole (comms, session.send).
//  JSON texts, objects: metadata NULL for {}; parent NULL for the running
//  request's header. Nothing goes out with a silent request as parent.
//  Buffers are copied.
typedef struct {
    const char *content;
    size_t content_len;
    const char *metadata;
    const char *parent;
    const struct iovec *buffers;
    size_t nbuffers;
} kn_publish_t;

//  Publish p on iopub (flushing output first, as kn_kernel_publish). 0;
//  -EINVAL when a JSON text is not an object; -E2BIG over CH_MSG_MAX_BUFFERS.
int kn_kernel_publish_msg (kn_kernel_t *self, const char *msg_type, const kn_publish_t *p);

//  The running request's header as compact JSON, "{}" when none; caller frees.
char *kn_kernel_parent_json (kn_kernel_t *self);

//  Stream text to iopub (the capture's emit callback): text[0..len) is
//  already JSON-escaped (the inside of a JSON string) and goes out as it is.
void kn_kernel_stream (void *self, const char *name, const char *text, size_t len);
//  The same for text as bytes (the capture's raw callback): it goes as the
//  message's one buffer, and the driver escapes it (docs/channel.md).
void kn_kernel_stream_raw (void *self, const char *name, const void *text, size_t len);

//  Emit captured output now (set by main once capture is up).
void kn_kernel_set_flush (kn_kernel_t *self, void (*flush) (void *arg), void *arg);
void kn_kernel_flush (kn_kernel_t *self);

//  input(): send input_request (0, or -EPIPE) then wait in slices so the
//  caller can check for interrupts between them.
int kn_kernel_input_begin (kn_kernel_t *self, const char *prompt, bool password);
//  0 with *value (caller frees), -ETIMEDOUT after timeout_ms, -EPIPE if the
//  channel closed.
int kn_kernel_input_wait (kn_kernel_t *self, int timeout_ms, char **value);
void kn_kernel_input_end (kn_kernel_t *self);

//  The kernel's session id (new every process).
const char *kn_kernel_session (const kn_kernel_t *self);

#endif
