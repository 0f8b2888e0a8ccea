/*  gw_xfer - moving whole files through a backend, one chunk per turn. */
#include "files/gw_xfer.h"
#include "ch_io.h"
#include "ch_util.h"

#include <assert.h>
#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct s_op_t {
    struct s_op_t *next;
    bool put;                                   //  put, else get
    char *path;
    bool append;                                //  put: the first chunk appends
    uint8_t *data;                              //  put: the bytes; get to memory: so far
    ch_free_fn *free_fn;                        //  how data is released (NULL: free)
    void *hint;
    size_t len;                                 //  put: total; get: bytes so far
    size_t off;                                 //  put: bytes sent and acknowledged
    size_t max;                                 //  get: the cap
    int fd;                                     //  get: written here, -1: to memory
    json_int_t size;                            //  the file's size, last reported
    char far_path [1100];                       //  the path as the far side spells it
    EVP_MD_CTX *md;                             //  SHA-256 of what moved
    gw_xfer_done_fn *done;
    void *arg;
} s_op_t;

//  A chunk on its way into a host file, on the worker's thread; or, with fd
//  -1, a put's finished buffer to release there.
typedef struct {
    gw_xfer_t *xfer;
    int fd;
    uint8_t *data;
    size_t len;
    int err;                                    //  errno of a failed write, 0: ok
    bool eof;                                   //  the last chunk
    uint8_t *spent;                             //  released on the worker thread
    ch_free_fn *spent_free;
    void *spent_hint;
} s_write_t;

//  Releasing a buffer this large unmaps thousands of pages: tens of ms that
//  the reactor, with a heartbeat and output to serve, must not spend.
#define S_RELEASE_OFF_REACTOR (1u << 20)

struct _gw_xfer_t {
    gw_backend_t *backend;                      //  borrowed
    gw_worker_t *worker;                        //  borrowed: host file writes
    s_op_t *head, *tail;                        //  head is running
    size_t queued;
    bool in_flight;                             //  head has a chunk out
    bool running;                               //  s_run is on the stack
};

static void s_run (gw_xfer_t *self);
static void s_write_free (void *arg);
static void s_write_work (void *arg);
static void s_write_done (void *arg);

gw_xfer_t *
gw_xfer_new (gw_backend_t *backend, gw_worker_t *worker)
{
    assert (backend && worker);
    gw_xfer_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->backend = backend;
    self->worker = worker;
    return self;
}

static void
s_op_free (s_op_t **op_p)
{
    s_op_t *op = *op_p;
    if (!op)
        return;
    free (op->path);
    ch_buf_release (op->data, op->free_fn, op->hint);
    EVP_MD_CTX_free (op->md);
    free (op);
    *op_p = NULL;
}

void
gw_xfer_destroy (gw_xfer_t **self_p)
{
    assert (self_p);
    gw_xfer_t *self = *self_p;
    if (!self)
        return;
    if (self->in_flight)
        gw_backend_cancel_chunks (self->backend);
    gw_worker_cancel (self->worker, s_write_work, NULL, s_write_free);
    while (self->head) {
        s_op_t *op = self->head;
        self->head = op->next;
        s_op_free (&op);
    }
    free (self);
    *self_p = NULL;
}

size_t
gw_xfer_queued (const gw_xfer_t *self)
{
    assert (self);
    return self->queued;
}

static s_op_t *
s_op_new (gw_xfer_t *self, bool put, const char *path, gw_xfer_done_fn *done, void *arg)
{
    s_op_t *op = calloc (1, sizeof *op);
    if (!op || !(op->path = strdup (path)) || !(op->md = EVP_MD_CTX_new ()))
        abort ();
    EVP_DigestInit_ex (op->md, EVP_sha256 (), NULL);
    op->put = put;
    op->fd = -1;
    op->done = done;
    op->arg = arg;
    if (self->tail)
        self->tail->next = op;
    else
        self->head = op;
    self->tail = op;
    self->queued++;
    return op;
}

//  A get hands its bytes to its owner; a large put's bytes go to the worker,
//  which releases them off the reactor.
static void
s_release_later (gw_xfer_t *self, s_op_t *op)
{
    if (op->put) {
        s_write_t *w = calloc (1, sizeof *w);
        if (!w)
            abort ();
        *w = (s_write_t) { .xfer = self, .fd = -1, .spent = op->data,
                           .spent_free = op->free_fn, .spent_hint = op->hint };
        gw_worker_submit (self->worker, s_write_work, s_write_done, w);
    }
    op->data = NULL;
    op->free_fn = NULL;
}

//  The head transfer is over: hand its result to its owner, start the next.
static void
s_finish (gw_xfer_t *self, json_t *content)
{
    s_op_t *op = self->head;
    assert (op);
    if (!(self->head = op->next))
        self->tail = NULL;
    self->queued--;
    self->in_flight = false;
    uint8_t *data = op->put ? NULL : op->data;
    size_t len = op->put ? 0 : op->len;
    if (!op->put || op->len >= S_RELEASE_OFF_REACTOR)
        s_release_later (self, op);
    op->done (op->arg, &content, &data, len);
    json_decref (content);
    free (data);
    s_op_free (&op);
}

static json_t *
s_error (const char *path, const char *err)
{
    char text [768];
    snprintf (text, sizeof text, "%.200s: %s", path, err);
    return json_pack ("{s:s, s:s, s:s, s:[]}", "status", "error", "ename", "FileTransferError",
                      "evalue", text, "traceback");
}

static json_t *
s_ok (s_op_t *op)
{
    unsigned char md [32];
    char hex [65];
    EVP_DigestFinal_ex (op->md, md, NULL);
    ch_hex32 (md, hex);
    json_t *c = json_pack ("{s:s, s:s, s:I, s:s}", "status", "ok", "path",
                           op->far_path [0] ? op->far_path : op->path, "size", op->size,
                           "sha256", hex);
    if (op->put)
        json_object_set_new (c, "written", json_integer ((json_int_t) op->len));
    return c;
}

//  A get chunk arrived: keep it (memory or fd), and say whether it was the last.
static int
s_take_chunk (s_op_t *op, const json_t *reply, const uint8_t *data, size_t len,
              bool *eof, char *err, size_t errlen)
{
    op->size = json_integer_value (json_object_get (reply, "size"));
    *eof = json_is_true (json_object_get (reply, "eof")) || len == 0;
    if (op->size < 0 || (size_t) op->size > op->max || op->len + len > op->max) {
        snprintf (err, errlen, "the file is %lld bytes, over the %zu-byte cap",
                  (long long) op->size, op->max);
        return -EFBIG;
    }
    EVP_DigestUpdate (op->md, data, len);
    if (op->fd >= 0)
        ;                                       //  the worker writes it (s_write_chunk)
    else if (len) {
        uint8_t *grown = realloc (op->data, op->len + len);
        if (!grown)
            abort ();
        op->data = grown;
        memcpy (op->data + op->len, data, len);
    }
    op->len += len;
    return 0;
}

static void
s_write_free (void *arg)
{
    s_write_t *w = arg;
    free (w->data);
    if (w->spent)
        ch_buf_release (w->spent, w->spent_free, w->spent_hint);
    free (w);
}

//  On the worker thread: the chunk into the host file, or a buffer released.
static void
s_write_work (void *arg)
{
    s_write_t *w = arg;
    if (w->fd >= 0)
        w->err = -ch_write_bytes (w->fd, w->data, w->len);
    if (w->spent)
        ch_buf_release (w->spent, w->spent_free, w->spent_hint);
    w->spent = NULL;
}

//  Back on the reactor: the chunk is in the file; on to the next one.
static void
s_write_done (void *arg)
{
    s_write_t *w = arg;
    gw_xfer_t *self = w->xfer;
    if (w->fd < 0) {
        s_write_free (w);                       //  a release: the transfer went on
        return;
    }
    self->in_flight = false;
    if (w->err) {
        char why [200];
        snprintf (why, sizeof why, "cannot write the copy: %s", strerror (w->err));
        s_finish (self, s_error (self->head->path, why));
    }
    else if (w->eof)
        s_finish (self, s_ok (self->head));
    s_write_free (w);
    s_run (self);
}

//  Hand a chunk for a host file to the worker; the transfer waits for it.
static void
s_write_chunk (gw_xfer_t *self, s_op_t *op, const uint8_t *data, size_t len, bool eof)
{
    s_write_t *w = calloc (1, sizeof *w);
    uint8_t *copy = malloc (len + 1);
    if (!w || !copy)
        abort ();
    memcpy (copy, data, len);
    *w = (s_write_t) { .xfer = self, .fd = op->fd, .data = copy, .len = len, .eof = eof };
    self->in_flight = true;
    gw_worker_submit (self->worker, s_write_work, s_write_done, w);
}

//  A chunk of the head transfer ended (the backend calls this later).
static void
s_on_chunk (void *arg, int rc, const json_t *reply, const uint8_t *data, size_t len,
            const char *err)
{
    gw_xfer_t *self = arg;
    s_op_t *op = self->head;
    assert (op && self->in_flight);
    self->in_flight = false;
    char why [300] = "";
    bool eof = true;
    const char *far = json_string_value (json_object_get (reply, "path"));
    if (rc == 0 && far)
        snprintf (op->far_path, sizeof op->far_path, "%s", far);
    if (rc < 0)
        snprintf (why, sizeof why, "%s", err && *err ? err : strerror (-rc));
    else if (op->put) {
        op->size = json_integer_value (json_object_get (reply, "size"));
        eof = op->off >= op->len;
    }
    else if (s_take_chunk (op, reply, data, len, &eof, why, sizeof why) < 0)
        rc = -EIO;
    if (rc < 0)
        s_finish (self, s_error (op->path, why));
    else if (!op->put && op->fd >= 0)
        s_write_chunk (self, op, data, len, eof);
    else if (eof)
        s_finish (self, s_ok (op));
    s_run (self);
}

//  Send the head transfer's next chunk. 0, or -errno with err.
static int
s_next_chunk (gw_xfer_t *self, s_op_t *op, char *err, size_t errlen)
{
    if (op->put) {
        size_t n = op->len - op->off < GW_CHUNK_MAX ? op->len - op->off : GW_CHUNK_MAX;
        bool append = op->off > 0 || op->append;
        int rc = gw_backend_put_chunk (self->backend, op->path, append, op->data + op->off, n,
                                       s_on_chunk, self, err, errlen);
        if (rc == 0) {
            EVP_DigestUpdate (op->md, op->data + op->off, n);
            op->off += n;
        }
        return rc;
    }
    return gw_backend_get_chunk (self->backend, op->path, op->len, GW_CHUNK_MAX, s_on_chunk,
                                 self, err, errlen);
}

//  Keep the head transfer moving; a transfer that cannot start ends here.
static void
s_run (gw_xfer_t *self)
{
    if (self->running)
        return;
    self->running = true;
    while (self->head && !self->in_flight) {
        char err [300] = "";
        if (s_next_chunk (self, self->head, err, sizeof err) == 0)
            self->in_flight = true;
        else
            s_finish (self, s_error (self->head->path, err));
    }
    self->running = false;
}

void
gw_xfer_put (gw_xfer_t *self, const char *path, bool append, uint8_t *data, size_t len,
             ch_free_fn *free_fn, void *hint, gw_xfer_done_fn *done, void *arg)
{
    assert (self && path && done);
    s_op_t *op = s_op_new (self, true, path, done, arg);
    op->append = append;
    op->data = data;
    op->len = len;
    op->free_fn = free_fn;
    op->hint = hint;
    s_run (self);
}

void
gw_xfer_get (gw_xfer_t *self, const char *path, size_t max, int fd, gw_xfer_done_fn *done,
             void *arg)
{
    assert (self && path && done);
    s_op_t *op = s_op_new (self, false, path, done, arg);
    op->max = max;
    op->fd = fd;
    s_run (self);
}

void
gw_xfer_abort (gw_xfer_t *self, const char *why)
{
    assert (self && why);
    if (self->in_flight)
        gw_backend_cancel_chunks (self->backend);
    gw_worker_cancel (self->worker, s_write_work, NULL, s_write_free);
    self->in_flight = false;
    self->running = true;                       //  a done must not start the next
    while (self->head)
        s_finish (self, s_error (self->head->path, why));
    self->running = false;
}
