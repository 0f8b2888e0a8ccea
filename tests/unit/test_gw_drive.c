/*  test_gw_drive - the blocking driver against a fake kernel (a thread on a
    socketpair) and a fake init: answers that arrive in one read, a failed
    cell, a kernel death reported by init, hellos checked and repeated,
    deadlines.
*/
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "ch_asm.h"
#include "ch_frame.h"
#include "ch_io.h"
#include "guest/gw_drive.h"
#include "base/gw_log.h"

//  A fake peer: reads the driver's requests, answers as `mode` says.
typedef struct {
    int fd;                                     //  the peer's end
    const char *mode;
    ch_asm_t *asm_;
    uint8_t buf [65536];
    size_t pos, len;
    json_t *seen;                               //  the last request's content
    int requests;
    pthread_t thread;
} peer_t;

//  The next message from the driver, or NULL at end of stream.
static ch_msg_t *
s_next (peer_t *p)
{
    ch_msg_t *msg = NULL;
    while (!msg) {
        if (p->pos == p->len) {
            ssize_t n = read (p->fd, p->buf, sizeof p->buf);
            if (n <= 0)
                return NULL;
            p->pos = 0;
            p->len = (size_t) n;
        }
        size_t used = 0;
        ch_asm_feed (p->asm_, p->buf + p->pos, p->len - p->pos, &used, &msg);
        p->pos += used;
    }
    return msg;
}

//  msgs (a NULL-terminated list, taken) written with a single write().
static void
s_send_at_once (int fd, ch_msg_t **msgs)
{
    int sp [2];
    uint8_t bytes [16384];
    assert_int_equal (socketpair (AF_UNIX, SOCK_STREAM, 0, sp), 0);
    for (ch_msg_t **m = msgs; *m; m++) {
        assert_int_equal (ch_write_msg (sp [1], *m, CH_FRAME_MAX_DEFAULT, false, 1000), 0);
        ch_msg_destroy (m);
    }
    close (sp [1]);
    ssize_t n = read (sp [0], bytes, sizeof bytes);
    close (sp [0]);
    assert_true (n > 0 && write (fd, bytes, (size_t) n) == n);
}

static ch_msg_t *
s_answer (const ch_msg_t *req, ch_channel_t channel, const char *type, const char *json)
{
    json_t *c = json_loads (json, 0, NULL);
    return ch_msg_new (channel, type, ch_msg_header (req), &c, "fake");
}

static void
s_kernel_turn (peer_t *p, ch_msg_t *req)
{
    const char *type = ch_msg_type (req);
    const char *status = strcmp (p->mode, "error") == 0 ? "error" : "ok";
    char reply [128];
    snprintf (reply, sizeof reply, "{\"status\": \"%s\", \"evalue\": \"boom\"}", status);
    ch_msg_t *out [4] = { NULL };
    if (strcmp (type, "hello") == 0)
        out [0] = s_answer (req, CH_CELLVM, "hello", strcmp (p->mode, "alien") == 0
            ? "{\"protocol\": \"other\", \"version\": 1, \"role\": \"kernel\"}"
            : "{\"protocol\": \"cellvm-channel\", \"version\": 1, \"role\": \"kernel\"}");
    else {                                      //  reply and idle, in one read
        out [0] = s_answer (req, CH_IOPUB, "stream", "{\"name\": \"stdout\", \"text\": \"x\"}");
        out [1] = s_answer (req, CH_SHELL, strcmp (type, "execute_request") == 0
                            ? "execute_reply" : "kernel_info_reply", reply);
        out [2] = s_answer (req, CH_IOPUB, "status", "{\"execution_state\": \"idle\"}");
    }
    s_send_at_once (p->fd, out);
}

//  req's content kept as the last seen.
static void
s_seen (peer_t *p, const ch_msg_t *req)
{
    json_decref (p->seen);
    p->seen = json_deep_copy (ch_msg_content (req));
}

static void *
s_kernel_main (void *arg)
{
    peer_t *p = arg;
    ch_msg_t *req;
    while ((req = s_next (p))) {
        s_seen (p, req);
        p->requests++;
        if (strcmp (p->mode, "mute") != 0)
            s_kernel_turn (p, req);
        ch_msg_destroy (&req);
    }
    return NULL;
}

//  A fake peer (mode) running main on one end of a new socketpair; the
//  driver's end returned.
static int
s_peer (peer_t *p, const char *mode, void *(*main_fn) (void *))
{
    int sv [2];
    assert_int_equal (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    *p = (peer_t) { .fd = sv [1], .mode = mode, .asm_ = ch_asm_new (NULL) };
    assert_int_equal (pthread_create (&p->thread, NULL, main_fn, p), 0);
    return sv [0];
}

//  A driver over a fake kernel (mode) and, when init_fd_p is not NULL, an
//  init port whose far end goes to *init_fd_p.
static gw_drive_t *
s_drive (peer_t *p, const char *mode, int *init_fd_p, int timeout_ms)
{
    int kfd = s_peer (p, mode, s_kernel_main), i [2];
    assert_int_equal (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, i), 0);
    gw_init_t *init = gw_init_new (i [0], CH_FRAME_MAX_DEFAULT);
    if (init_fd_p)
        *init_fd_p = i [1];
    else
        close (i [1]);
    return gw_drive_adopt (&init, kfd, timeout_ms);
}

static void
s_done (peer_t *p, gw_drive_t **drive_p)
{
    gw_drive_destroy (drive_p);                 //  the fake kernel sees end of stream
    shutdown (p->fd, SHUT_RDWR);
    pthread_join (p->thread, NULL);
    close (p->fd);
    ch_asm_destroy (&p->asm_);
    json_decref (p->seen);
}

static void
test_silent_cell_answered_in_one_read (void **state)
{
    (void) state;
    peer_t p;
    char err [256] = "";
    gw_drive_t *drive = s_drive (&p, "ok", NULL, 5000);
    assert_int_equal (gw_drive_silent_cell (drive, "pass", err, sizeof err), 0);
    assert_true (json_is_true (json_object_get (p.seen, "silent")));
    assert_true (json_is_false (json_object_get (p.seen, "store_history")));
    assert_int_equal (gw_drive_kernel_info (drive, err, sizeof err), 0);
    assert_int_equal (p.requests, 2);
    s_done (&p, &drive);
}

static void
test_a_failed_cell_is_eio_with_its_error (void **state)
{
    (void) state;
    peer_t p;
    char err [256] = "";
    gw_drive_t *drive = s_drive (&p, "error", NULL, 5000);
    assert_int_equal (gw_drive_silent_cell (drive, "1/0", err, sizeof err), -EIO);
    assert_non_null (strstr (err, "error: boom"));
    s_done (&p, &drive);
}

static void
test_a_kernel_death_reported_by_init_ends_the_wait (void **state)
{
    (void) state;
    peer_t p;
    int init_fd = -1;
    char err [256] = "";
    gw_drive_t *drive = s_drive (&p, "mute", &init_fd, 30000);
    json_t *c = json_pack ("{s:s}", "description", "killed by signal 9 (SIGKILL)");
    ch_msg_t *notice = ch_msg_new (CH_CELLVM, "kernel_exited", NULL, &c, "init");
    assert_int_equal (ch_write_msg (init_fd, notice, CH_FRAME_MAX_DEFAULT, false, 1000), 0);
    ch_msg_destroy (&notice);
    assert_int_equal (gw_drive_silent_cell (drive, "import time; time.sleep(99)", err,
                                            sizeof err), -ECONNRESET);
    assert_non_null (strstr (err, "the kernel died: killed by signal 9"));
    close (init_fd);
    s_done (&p, &drive);
}

static void
test_the_kernel_hello_is_checked (void **state)
{
    (void) state;
    peer_t p;
    char err [256] = "";
    gw_drive_t *drive = s_drive (&p, "ok", NULL, 5000);
    assert_int_equal (gw_drive_kernel_hello (drive, "c2VlZA==", err, sizeof err), 0);
    assert_string_equal (json_string_value (json_object_get (p.seen, "entropy")), "c2VlZA==");
    assert_string_equal (json_string_value (json_object_get (p.seen, "role")), "driver");
    s_done (&p, &drive);
    drive = s_drive (&p, "alien", NULL, 5000);
    assert_int_equal (gw_drive_kernel_hello (drive, NULL, err, sizeof err), -EPROTO);
    assert_non_null (strstr (err, "another protocol"));
    s_done (&p, &drive);
}

static void
test_a_mute_kernel_times_out_at_the_deadline (void **state)
{
    (void) state;
    peer_t p;
    char err [256] = "";
    gw_drive_t *drive = s_drive (&p, "mute", NULL, 200);
    assert_int_equal (gw_drive_kernel_info (drive, err, sizeof err), -ETIMEDOUT);
    assert_non_null (strstr (err, "kernel_info"));
    gw_drive_set_timeout (drive, 100);
    assert_int_equal (gw_drive_silent_cell (drive, "pass", err, sizeof err), -ETIMEDOUT);
    int kfd = gw_drive_take_kernel_fd (drive);
    assert_true (kfd >= 0);                     //  then ours to close
    assert_int_equal (gw_drive_take_kernel_fd (drive), -1);
    close (kfd);
    s_done (&p, &drive);
}

//  A fake init that ignores the first hello and answers the second.
static void *
s_init_main (void *arg)
{
    peer_t *p = arg;
    ch_msg_t *req;
    while ((req = s_next (p))) {
        if (++p->requests == 2) {
            s_seen (p, req);
            ch_msg_t *out [2] = { s_answer (req, CH_CELLVM, "hello", "{\"protocol\": "
                "\"cellvm-init\", \"version\": 1, \"role\": \"init\", \"entropy_bytes\": 64}") };
            s_send_at_once (p->fd, out);
        }
        ch_msg_destroy (&req);
    }
    return NULL;
}

static void
test_init_hello_repeats_until_answered (void **state)
{
    (void) state;
    peer_t p;
    gw_init_t *init = gw_init_new (s_peer (&p, "init", s_init_main), CH_FRAME_MAX_DEFAULT);
    gw_drive_t *drive = gw_drive_adopt (&init, -1, 5000);
    assert_null (init);
    uint8_t pool [64] = { 1 };
    json_t *extra = json_pack ("{s:f}", "time", 12345.5), *reply = NULL;
    char err [256] = "";
    assert_int_equal (gw_drive_init_hello (drive, extra, pool, sizeof pool, &reply, err,
                                           sizeof err), 0);
    assert_int_equal (json_integer_value (json_object_get (reply, "entropy_bytes")), 64);
    assert_true (json_real_value (json_object_get (p.seen, "time")) == 12345.5);
    assert_string_equal (json_string_value (json_object_get (p.seen, "protocol")),
                         "cellvm-init");
    assert_int_equal (p.requests, 2);
    char kerr [128] = "";                       //  no kernel port: said so, not a crash
    assert_int_equal (gw_drive_kernel_info (drive, kerr, sizeof kerr), -ENOTCONN);
    json_decref (extra);
    json_decref (reply);
    s_done (&p, &drive);
}

int
main (void)
{
    gw_log_init (GW_LOG_ERROR, NULL);
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_silent_cell_answered_in_one_read),
        cmocka_unit_test (test_a_failed_cell_is_eio_with_its_error),
        cmocka_unit_test (test_a_kernel_death_reported_by_init_ends_the_wait),
        cmocka_unit_test (test_the_kernel_hello_is_checked),
        cmocka_unit_test (test_a_mute_kernel_times_out_at_the_deadline),
        cmocka_unit_test (test_init_hello_repeats_until_answered),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
