/*  kn_capture - fd-level capture of stdout and stderr.
 *
 *  Pipes replace fd 1 and 2, so output from Python, C extensions and child
 *  processes is all caught the same way. A thread reads the pipes and emits
 *  stream text within a short coalescing window; kn_capture_flush drains
 *  everything already written, so callers can order output before displays.
 */
#ifndef KN_CAPTURE_H
#define KN_CAPTURE_H

#include <stddef.h>

#define KN_CAPTURE_WINDOW_MS 10     //  coalescing window; well inside 50 ms
#define KN_CAPTURE_CHUNK 65536      //  emit at least this often when busy

typedef struct _kn_capture_t kn_capture_t;

//  Receives valid UTF-8 text for "stdout" or "stderr". Called with the
//  capture lock held, from the capture thread or a flushing thread.
typedef void (kn_capture_emit_fn) (void *arg, const char *name, const char *text, size_t len);

//  Take over fd 1 and 2 and start the reader thread. NULL on failure.
kn_capture_t *kn_capture_new (kn_capture_emit_fn *emit, void *arg);

//  Emit everything written so far. Safe from any thread.
void kn_capture_flush (kn_capture_t *self);

//  Stop the thread, flush, and put the original fds back.
void kn_capture_destroy (kn_capture_t **self_p);

//  Make text valid UTF-8 in place: invalid bytes become U+FFFD. in[0..len)
//  is converted into out (capacity 3*len). A trailing incomplete sequence
//  is not emitted: *keep is set to its length so the caller holds it back.
//  Returns bytes written to out. Pure, for tests.
size_t kn_utf8_sanitize (const unsigned char *in, size_t len, char *out, size_t *keep);

#endif
