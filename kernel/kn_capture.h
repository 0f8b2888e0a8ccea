/*  kn_capture - the kernel's stdout and stderr: Python text buffered
 *  in-process, fd-level output caught in pipes, both sent as few stream
 *  texts, in order, within the streaming window.
 *
 *  Two ways in:
 *  - Python-level writes (sys.stdout / sys.stderr, through kn_py) are copied
 *    into an in-process queue: no system call, no thread wake-up per write.
 *  - Pipes replace fd 1 and 2, so C code and child processes are caught as
 *    before; a thread reads them into the same queue.
 *
 *  The queue is a list of runs (stream, source, bytes) in the order they
 *  were written, so stdout and stderr keep their interleaving. It is sent
 *  (the emit callback: JSON-escaped text, escaped once, in the fewest
 *  messages the text cap allows; a large write goes unescaped through the
 *  raw callback, when set) when the oldest byte in it is
 *  window_ms old, when it grows over KN_CAPTURE_PENDING_MAX, and on
 *  kn_capture_flush (flush(), input(), a display, an error, the end of a
 *  cell), which first drains the pipes so everything written before it goes
 *  out before it returns.
 *
 *  Python text versus fd-level output: before a write opens a new Python
 *  run, the pipes are drained (one poll), so fd output already written comes
 *  first. A Python run stays open across writes (that is what makes writes
 *  cheap); kn_capture_fence closes it (after a child process is reaped, or
 *  when fileno() is given out), so the next Python text goes after whatever
 *  the pipes hold by then.
 *
 *  After fork() the child's Python writes go straight to the fds (the
 *  pipes), where the parent's thread catches them.
 */
#ifndef KN_CAPTURE_H
#define KN_CAPTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/uio.h>

#define KN_CAPTURE_WINDOW_MS 30             //  oldest byte -> sent; margin for the 50 ms promise
#define KN_CAPTURE_PENDING_MAX (16u << 20)  //  queued this much: send now
#define KN_CAPTURE_DIRECT (1u << 20)        //  one write this large is sent as it is, uncopied
#define KN_CAPTURE_QUEUE_TEXT (256u << 10)  //  the cap on a text of queued output
#define KN_CAPTURE_TEXT_MIN 256             //  the smallest text cap accepted

enum { KN_STDOUT = 0, KN_STDERR = 1 };

typedef struct _kn_capture_t kn_capture_t;

//  Receives one stream text: name is "stdout" or "stderr"; text[0..len) is
//  the inside of a JSON string (escaped, valid UTF-8, no quotes), at most
//  the text cap. Called in order, one call at a time, from the capture
//  thread or from a thread that flushes.
typedef void (kn_capture_emit_fn) (void *arg, const char *name, const char *text, size_t len);

//  Receives one stream text as bytes (a raw text, docs/channel.md): the
//  driver escapes it. text[0..len) is at most the text cap, and never ends
//  or begins inside a character that was whole. Called as emit is.
typedef void (kn_capture_raw_fn) (void *arg, const char *name, const void *text, size_t len);

typedef struct {
    int fds [2];                //  descriptors taken over: stdout's, stderr's (1 and 2)
    int window_ms;              //  0: KN_CAPTURE_WINDOW_MS
    size_t max_text;            //  escaped bytes per text; 0: 1 MiB
} kn_capture_config_t;

//  Take over the fds and start the reader thread. config NULL: fds 1 and 2,
//  the default window and cap. NULL on failure. One per process.
kn_capture_t *kn_capture_new (const kn_capture_config_t *config, kn_capture_emit_fn *emit,
                              void *arg);

//  The text cap (escaped bytes per stream text), from the frame cap.
void kn_capture_set_max_text (kn_capture_t *self, size_t max_text);

//  Large writes (kn_capture_write_now) go out through raw, as bytes, not
//  escaped here (NULL: escaped, through emit).
void kn_capture_set_raw (kn_capture_t *self, kn_capture_raw_fn *raw);

//  A Python-level write of len bytes (UTF-8; bytes from a binary write may
//  be anything: they are made valid on the way out). Never waits on the
//  channel. True when the queue is over KN_CAPTURE_PENDING_MAX: the caller
//  should kn_capture_flush (without holding locks others need, i.e. the GIL).
bool kn_capture_write (kn_capture_t *self, int stream, const void *data, size_t len);

//  The same for pieces written as one (no other text lands between them).
bool kn_capture_writev (kn_capture_t *self, int stream, const struct iovec *iov, int n);

//  Send everything queued, then data as a text of its own (not copied into
//  the queue): for large writes. Waits for the channel.
void kn_capture_write_now (kn_capture_t *self, int stream, const void *data, size_t len);

//  fd-level output may have been written up to here: the next Python write
//  looks at the pipes first. No system call.
void kn_capture_fence (kn_capture_t *self);

//  Send everything written so far (Python text, and what the pipes hold).
//  Safe from any thread; returns once it is on the channel.
void kn_capture_flush (kn_capture_t *self);

//  The fd a stream was taken over at (1 or 2 by default).
int kn_capture_fd (const kn_capture_t *self, int stream);

//  Stop the thread, flush, and put the original fds back.
void kn_capture_destroy (kn_capture_t **self_p);

#endif
