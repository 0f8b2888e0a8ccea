/*  test_gw_xfer - whole files through a backend, a chunk at a time, and the
    worker that writes host copies. The backend is a mock: its chunks end
    only when the test says so, as a real one's end on a later reactor turn.
*/
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <openssl/evp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ch_util.h"
#include "base/gw_worker.h"
#include "files/gw_xfer.h"

#define MIB (1u << 20)

//  The mock backend: one file, chunks wait in `pending` until s_complete.
typedef struct {
    uint8_t *file;                              //  what /workspace/f holds
    size_t size;
    int puts, gets, cancels;
    bool pending;                               //  a chunk waits
    bool pending_put, pending_append;
    uint64_t offset;
    size_t len;
    const uint8_t *data;
    gw_chunk_fn *done;
    void *arg;
    int fail_with;                              //  next chunk fails with this
} mock_t;

static int
mock_put (void *ctx, const char *path, bool append, const uint8_t *data, size_t len,
          gw_chunk_fn *done, void *arg, char *err, size_t errlen)
{
    (void) path, (void) err, (void) errlen;
    mock_t *m = ctx;
    assert_false (m->pending);                  //  one chunk at a time
    assert_true (len <= GW_CHUNK_MAX);
    *m = (mock_t) { .file = m->file, .size = m->size, .puts = m->puts + 1, .gets = m->gets,
                    .cancels = m->cancels, .pending = true, .pending_put = true,
                    .pending_append = append, .len = len, .data = data, .done = done,
                    .arg = arg, .fail_with = m->fail_with };
    return 0;
}

static int
mock_get (void *ctx, const char *path, uint64_t offset, size_t len, gw_chunk_fn *done,
          void *arg, char *err, size_t errlen)
{
    (void) path, (void) err, (void) errlen;
    mock_t *m = ctx;
    assert_false (m->pending);
    m->gets++;
    m->pending = true;
    m->pending_put = false;
    m->offset = offset;
    m->len = len;
    m->done = done;
    m->arg = arg;
    return 0;
}

static void
mock_cancel (void *ctx)
{
    mock_t *m = ctx;
    m->cancels++;
    m->pending = false;
}

//  End the waiting chunk as the far side would.
static void
s_complete (mock_t *m)
{
    assert_true (m->pending);
    m->pending = false;
    if (m->fail_with) {
        m->done (m->arg, -m->fail_with, NULL, NULL, 0, "the far side refused");
        return;
    }
    if (m->pending_put) {
        if (!m->pending_append)
            m->size = 0;
        m->file = realloc (m->file, m->size + m->len + 1);
        memcpy (m->file + m->size, m->data, m->len);
        m->size += m->len;
        json_t *r = json_pack ("{s:s, s:I}", "path", "/workspace/f", "size", (json_int_t) m->size);
        m->done (m->arg, 0, r, NULL, 0, "");
        json_decref (r);
        return;
    }
    size_t start = m->offset < m->size ? m->offset : m->size;
    size_t n = m->size - start < m->len ? m->size - start : m->len;
    json_t *r = json_pack ("{s:I, s:b}", "size", (json_int_t) m->size, "eof", start + n >= m->size);
    m->done (m->arg, 0, r, m->file + start, n, "");
    json_decref (r);
}

typedef struct {
    int calls;
    json_t *content;
    uint8_t *data;
    size_t len;
} result_t;

static void
s_done (void *arg, json_t **content_p, uint8_t **data_p, size_t len)
{
    result_t *r = arg;
    r->calls++;
    r->content = *content_p;
    *content_p = NULL;
    r->data = *data_p;
    *data_p = NULL;
    r->len = len;
}

typedef struct {
    mock_t mock;
    gw_backend_t be;
    gw_worker_t *worker;
    gw_xfer_t *xfer;
} fixture_t;

static int
s_setup (void **state)
{
    fixture_t *f = calloc (1, sizeof *f);
    f->be = (gw_backend_t) { .name = "mock", .put_chunk = mock_put, .get_chunk = mock_get,
                             .cancel_chunks = mock_cancel, .ctx = &f->mock };
    f->worker = gw_worker_new ();
    f->xfer = gw_xfer_new (&f->be, f->worker);
    *state = f;
    return 0;
}

static int
s_teardown (void **state)
{
    fixture_t *f = *state;
    gw_xfer_destroy (&f->xfer);
    gw_worker_destroy (&f->worker);
    free (f->mock.file);
    free (f);
    return 0;
}

static const char *
s_str (const json_t *c, const char *key)
{
    return json_string_value (json_object_get (c, key));
}

static void
test_gw_xfer_put_moves_a_chunk_per_completion (void **state)
{
    fixture_t *f = *state;
    size_t len = 10 * MIB + 5;
    uint8_t *data = malloc (len);
    for (size_t i = 0; i < len; i++)
        data [i] = (uint8_t) (i * 7);
    char want [65];
    ch_sha256_hex (data, len, want);
    result_t r = { 0 };
    gw_xfer_put (f->xfer, "f", false, data, len, NULL, NULL, s_done, &r);
    for (int chunk = 0; chunk < 3; chunk++) {
        assert_int_equal (r.calls, 0);          //  never inside the call that started it
        assert_int_equal (f->mock.puts, chunk + 1);
        assert_int_equal (f->mock.pending_append, chunk > 0);
        s_complete (&f->mock);
    }
    assert_int_equal (r.calls, 1);
    assert_string_equal (s_str (r.content, "status"), "ok");
    assert_string_equal (s_str (r.content, "sha256"), want);
    assert_string_equal (s_str (r.content, "path"), "/workspace/f");
    assert_int_equal (json_integer_value (json_object_get (r.content, "size")), len);
    assert_int_equal (f->mock.size, len);
    assert_int_equal (gw_xfer_queued (f->xfer), 0);
    json_decref (r.content);
}

static void
test_gw_xfer_get_into_memory_stops_at_eof (void **state)
{
    fixture_t *f = *state;
    f->mock.size = 5 * MIB;
    f->mock.file = malloc (f->mock.size);
    memset (f->mock.file, 'z', f->mock.size);
    result_t r = { 0 };
    gw_xfer_get (f->xfer, "f", 64 * MIB, -1, s_done, &r);
    s_complete (&f->mock);
    assert_int_equal (r.calls, 0);
    assert_int_equal (f->mock.offset, GW_CHUNK_MAX);   //  the second chunk follows the first
    s_complete (&f->mock);
    assert_int_equal (f->mock.gets, 2);
    assert_int_equal (r.calls, 1);
    assert_string_equal (s_str (r.content, "status"), "ok");
    assert_int_equal (r.len, 5 * MIB);
    assert_int_equal (r.data [r.len - 1], 'z');
    free (r.data);
    json_decref (r.content);
}

static void
test_gw_xfer_get_over_the_cap_is_refused_with_the_sizes (void **state)
{
    fixture_t *f = *state;
    f->mock.size = 3 * MIB;
    f->mock.file = calloc (1, f->mock.size);
    result_t r = { 0 };
    gw_xfer_get (f->xfer, "f", MIB, -1, s_done, &r);
    s_complete (&f->mock);
    assert_int_equal (r.calls, 1);
    assert_string_equal (s_str (r.content, "status"), "error");
    assert_string_equal (s_str (r.content, "ename"), "FileTransferError");
    assert_non_null (strstr (s_str (r.content, "evalue"), "over the 1048576-byte cap"));
    assert_null (r.data);
    json_decref (r.content);
}

static void
test_gw_xfer_a_failed_chunk_ends_the_transfer_and_the_next_runs (void **state)
{
    fixture_t *f = *state;
    result_t a = { 0 }, b = { 0 };
    gw_xfer_put (f->xfer, "f", false, (uint8_t *) strdup ("one"), 3, NULL, NULL, s_done, &a);
    gw_xfer_put (f->xfer, "f", true, (uint8_t *) strdup ("two"), 3, NULL, NULL, s_done, &b);
    assert_int_equal (gw_xfer_queued (f->xfer), 2);
    f->mock.fail_with = EPERM;
    s_complete (&f->mock);
    assert_int_equal (a.calls, 1);
    assert_non_null (strstr (s_str (a.content, "evalue"), "the far side refused"));
    f->mock.fail_with = 0;
    s_complete (&f->mock);                      //  the second one was started meanwhile
    assert_int_equal (b.calls, 1);
    assert_string_equal (s_str (b.content, "status"), "ok");
    json_decref (a.content);
    json_decref (b.content);
}

static void
test_gw_xfer_abort_ends_everything_now_and_cancels_the_chunk (void **state)
{
    fixture_t *f = *state;
    result_t a = { 0 }, b = { 0 };
    gw_xfer_put (f->xfer, "f", false, calloc (1, 9 * MIB), 9 * MIB, NULL, NULL, s_done, &a);
    gw_xfer_get (f->xfer, "g", MIB, -1, s_done, &b);
    gw_xfer_abort (f->xfer, "the kernel died");
    assert_int_equal (f->mock.cancels, 1);
    assert_int_equal (a.calls, 1);
    assert_int_equal (b.calls, 1);
    assert_non_null (strstr (s_str (b.content, "evalue"), "the kernel died"));
    assert_int_equal (gw_xfer_queued (f->xfer), 0);
    json_decref (a.content);
    json_decref (b.content);
}

//  Wait for the worker's eventfd and run what finished.
static void
s_drain (gw_worker_t *w)
{
    struct pollfd pf = { gw_worker_fd (w), POLLIN, 0 };
    assert_int_equal (poll (&pf, 1, 5000), 1);
    gw_worker_drain (w);
}

static void
test_gw_xfer_get_into_a_file_writes_on_the_worker (void **state)
{
    fixture_t *f = *state;
    f->mock.size = GW_CHUNK_MAX + 100;
    f->mock.file = malloc (f->mock.size);
    memset (f->mock.file, 'q', f->mock.size);
    FILE *tmp = tmpfile ();
    result_t r = { 0 };
    gw_xfer_get (f->xfer, "f", 64 * MIB, fileno (tmp), s_done, &r);
    s_complete (&f->mock);
    s_drain (f->worker);                        //  the first chunk is in the file
    s_complete (&f->mock);
    assert_int_equal (r.calls, 0);              //  the last write is still on the worker
    s_drain (f->worker);
    assert_int_equal (r.calls, 1);
    assert_string_equal (s_str (r.content, "status"), "ok");
    assert_null (r.data);
    fseek (tmp, 0, SEEK_END);
    assert_int_equal (ftell (tmp), (long) f->mock.size);
    char hex [65];
    ch_sha256_hex (f->mock.file, f->mock.size, hex);
    assert_string_equal (s_str (r.content, "sha256"), hex);
    fclose (tmp);
    json_decref (r.content);
}

//  Which thread released a put's buffer.
typedef struct {
    pthread_t by;
    int calls;
} released_t;

static void
s_release (void *data, void *hint)
{
    released_t *r = hint;
    r->by = pthread_self ();
    r->calls++;
    free (data);
}

static void
test_gw_xfer_a_large_puts_bytes_are_released_on_the_worker (void **state)
{
    fixture_t *f = *state;
    result_t r = { 0 };
    released_t rel = { 0 };
    gw_xfer_put (f->xfer, "f", false, calloc (1, 2 * MIB), 2 * MIB, s_release, &rel, s_done, &r);
    s_complete (&f->mock);
    assert_int_equal (r.calls, 1);              //  the owner hears at once
    s_drain (f->worker);
    assert_int_equal (rel.calls, 1);
    assert_false (pthread_equal (rel.by, pthread_self ()));
    json_decref (r.content);
}

static void s_foreign_work (void *arg) { (void) arg; }
static void s_foreign_done (void *arg) { ++*(int *) arg; }

static void
test_gw_xfer_abort_leaves_another_modules_job_on_the_worker (void **state)
{
    fixture_t *f = *state;
    int foreign = 0;
    result_t r = { 0 };
    gw_worker_submit (f->worker, s_foreign_work, s_foreign_done, &foreign);
    gw_xfer_put (f->xfer, "f", false, calloc (1, 9 * MIB), 9 * MIB, NULL, NULL, s_done, &r);
    gw_xfer_abort (f->xfer, "the kernel died");
    s_drain (f->worker);
    assert_int_equal (foreign, 1);              //  its done ran: nobody freed its arg
    json_decref (r.content);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_setup_teardown (test_gw_xfer_put_moves_a_chunk_per_completion,
                                         s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_xfer_get_into_memory_stops_at_eof,
                                         s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_xfer_get_over_the_cap_is_refused_with_the_sizes,
                                         s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_xfer_a_failed_chunk_ends_the_transfer_and_the_next_runs,
                                         s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_xfer_abort_ends_everything_now_and_cancels_the_chunk,
                                         s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_xfer_get_into_a_file_writes_on_the_worker,
                                         s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_xfer_a_large_puts_bytes_are_released_on_the_worker,
                                         s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_gw_xfer_abort_leaves_another_modules_job_on_the_worker,
                                         s_setup, s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
