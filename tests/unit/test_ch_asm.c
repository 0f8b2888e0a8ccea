/*  test_ch_asm - the channel's message assembler, output queue and hellos. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ch_asm.h"
#include "ch_frame.h"
#include "ch_hello.h"
#include "ch_outq.h"
#include "ch_util.h"
#include "tu.h"

//  Append one frame of len bytes at *pos.
static void
s_frame (uint8_t *out, size_t *pos, const void *data, size_t len)
{
    ch_frame_encode_header (out + *pos, len, UINT32_MAX);
    memcpy (out + *pos + CH_FRAME_HDR, data, len);
    *pos += CH_FRAME_HDR + len;
}

//  A message with nbuf buffers of buflen bytes each ('a', 'b', ...).
static size_t
s_msg (uint8_t *out, const char *type, int nbuf, size_t buflen)
{
    char json [256];
    size_t pos = 0;
    snprintf (json, sizeof json, "{\"channel\":\"control\",\"header\":{\"msg_type\":\"%s\","
              "\"msg_id\":\"id-%s\"},\"content\":{},\"buffers\":%d}", type, type, nbuf);
    s_frame (out, &pos, json, strlen (json));
    uint8_t *b = malloc (buflen);
    for (int i = 0; i < nbuf; i++) {
        memset (b, 'a' + i, buflen);
        s_frame (out, &pos, b, buflen);
    }
    free (b);
    return pos;
}

static char s_why [256];                        //  why of the last error

//  Feed everything byte by byte; collect the messages and the errors.
static int
s_feed_all (ch_asm_t *a, const uint8_t *data, size_t len, ch_msg_t **msgs, int *nmsgs,
            int *errs, int nerr_max)
{
    int ne = 0;
    *nmsgs = 0;
    for (size_t off = 0; off < len; ) {
        size_t used = 0;
        ch_msg_t *msg = NULL;
        int rc = ch_asm_feed (a, data + off, 1, &used, &msg);
        if (rc < 0 && ne < nerr_max) {
            errs [ne++] = rc;
            snprintf (s_why, sizeof s_why, "%s", ch_asm_why (a));
        }
        if (msg)
            msgs [(*nmsgs)++] = msg;
        if (rc == -EPROTO)
            break;
        off += used;
    }
    return ne;
}

static void
test_ch_asm_assembles_buffers_byte_by_byte (void **state)
{
    (void) state;
    uint8_t data [4096];
    size_t len = s_msg (data, "put_request", 2, 100);
    ch_asm_t *a = ch_asm_new (NULL);
    ch_msg_t *msgs [4];
    int n, errs [4];
    assert_int_equal (s_feed_all (a, data, len, msgs, &n, errs, 4), 0);
    assert_int_equal (n, 1);
    assert_int_equal (ch_msg_nbuffers (msgs [0]), 2);
    size_t blen = 0;
    const uint8_t *b = ch_msg_buffer (msgs [0], 1, &blen);
    assert_int_equal (blen, 100);
    assert_int_equal (b [99], 'b');
    ch_msg_destroy (&msgs [0]);
    ch_asm_destroy (&a);
    assert_null (a);
}

static void
test_ch_asm_drops_an_oversize_message_and_keeps_the_stream (void **state)
{
    (void) state;
    uint8_t data [8192];
    size_t len = s_msg (data, "big", 3, 600);           //  1800 bytes of buffers
    len += s_msg (data + len, "small", 1, 10);
    ch_limits_t lim = { .max_frame = 4096, .max_msg = 1024 };
    ch_asm_t *a = ch_asm_new (&lim);
    ch_msg_t *msgs [4];
    int n, errs [4];
    int ne = s_feed_all (a, data, len, msgs, &n, errs, 4);
    assert_int_equal (ne, 1);
    assert_int_equal (errs [0], -EMSGSIZE);
    assert_non_null (strstr (s_why, "larger than the 1024-byte limit"));
    assert_non_null (ch_asm_dropped (a));
    assert_string_equal (ch_msg_id (ch_asm_dropped (a)), "id-big");
    assert_int_equal (n, 1);                            //  the next one still arrives
    assert_string_equal (ch_msg_type (msgs [0]), "small");
    assert_false (ch_asm_broken (a));
    ch_msg_destroy (&msgs [0]);
    ch_asm_destroy (&a);
}

//  max_json: an envelope frame over it breaks the stream at its header,
//  before its body is read, so a hostile peer cannot make us hold it;
//  buffers may still be larger.
static void
test_ch_asm_caps_the_json_frame_before_reading_it (void **state)
{
    (void) state;
    uint8_t data [8192];
    size_t len = s_msg (data, "ok", 1, 2000);           //  a 2000-byte buffer is fine
    ch_limits_t lim = { .max_frame = 4096, .max_msg = 4096, .max_json = 512 };
    ch_asm_t *a = ch_asm_new (&lim);
    ch_msg_t *msgs [2];
    int n, errs [2];
    assert_int_equal (s_feed_all (a, data, len, msgs, &n, errs, 2), 0);
    assert_int_equal (n, 1);
    ch_msg_destroy (&msgs [0]);
    char json [1000];
    memset (json, ' ', sizeof json);
    json [0] = '{';
    json [sizeof json - 1] = '}';
    size_t pos = 0;
    s_frame (data, &pos, json, sizeof json);
    size_t used = 0;
    ch_msg_t *msg = NULL;
    assert_int_equal (ch_asm_feed (a, data, pos, &used, &msg), -EPROTO);
    assert_true (used <= CH_FRAME_HDR);                 //  the body was never taken
    assert_non_null (strstr (ch_asm_why (a), "JSON frame length 1000 is out of range 1..512"));
    assert_true (ch_asm_broken (a));
    ch_asm_destroy (&a);
}

static void
test_ch_asm_caps_one_buffer (void **state)
{
    (void) state;
    uint8_t data [8192];
    size_t len = s_msg (data, "one", 2, 300);
    len += s_msg (data + len, "two", 0, 0);
    ch_limits_t lim = { .max_frame = 4096, .max_msg = 4096, .max_buffer = 256 };
    ch_asm_t *a = ch_asm_new (&lim);
    ch_msg_t *msgs [4];
    int n, errs [4];
    assert_int_equal (s_feed_all (a, data, len, msgs, &n, errs, 4), 1);
    assert_int_equal (errs [0], -EMSGSIZE);
    assert_non_null (strstr (s_why, "buffer larger than the 256-byte limit"));
    assert_int_equal (n, 1);
    assert_string_equal (ch_msg_type (msgs [0]), "two");
    ch_msg_destroy (&msgs [0]);
    ch_asm_destroy (&a);
}

static void
test_ch_asm_bad_json_is_dropped_bad_length_breaks (void **state)
{
    (void) state;
    uint8_t data [4096];
    size_t pos = 0;
    s_frame (data, &pos, "not json", 8);
    pos += s_msg (data + pos, "after", 0, 0);
    memcpy (data + pos, "\xff\xff\xff\xff", 4);         //  a length far out of range
    pos += 4;
    ch_asm_t *a = ch_asm_new (NULL);
    ch_msg_t *msgs [4];
    int n, errs [4];
    assert_int_equal (s_feed_all (a, data, pos, msgs, &n, errs, 4), 2);
    assert_int_equal (errs [0], -EBADMSG);
    assert_int_equal (errs [1], -EPROTO);
    assert_true (ch_asm_broken (a));
    assert_int_equal (n, 1);
    ch_msg_destroy (&msgs [0]);
    ch_asm_reset (a);
    assert_false (ch_asm_broken (a));
    ch_asm_destroy (&a);
}

static void
test_ch_outq_writes_whole_messages_in_order (void **state)
{
    (void) state;
    int sv [2];
    assert_int_equal (socketpair (AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ch_outq_t *q = ch_outq_new (1024, 4096);
    json_t *c = json_object ();
    ch_msg_t *m = ch_msg_new (CH_SHELL, "execute_request", NULL, &c, "s");
    uint8_t *buf = malloc (2000);
    memset (buf, 'x', 2000);
    ch_msg_add_buffer (m, &buf, 2000);
    assert_int_equal (ch_outq_put (q, m, false), -EMSGSIZE);    //  a frame over 1024
    assert_int_equal (ch_outq_bytes (q), 0);
    ch_msg_destroy (&m);
    c = json_object ();
    m = ch_msg_new (CH_SHELL, "execute_request", NULL, &c, "s");
    assert_int_equal (ch_outq_put (q, m, true), 0);
    size_t first = ch_outq_bytes (q);
    while (ch_outq_put (q, m, false) == 0)
        ;
    assert_true (ch_outq_bytes (q) <= 4096);            //  -ENOBUFS past the cap
    assert_int_equal (ch_outq_flush (q, sv [0]), 0);
    assert_int_equal (ch_outq_bytes (q), 0);
    uint8_t in [8192];
    ssize_t got = read (sv [1], in, sizeof in);
    assert_true (got > (ssize_t) first);
    assert_memory_equal (in, CH_FRAME_SYNC, CH_FRAME_SYNC_LEN);
    ch_asm_t *a = ch_asm_new (NULL);
    ch_asm_allow_sync (a);
    size_t used = 0;
    ch_msg_t *back = NULL;
    assert_int_equal (ch_asm_feed (a, in, (size_t) got, &used, &back), 0);
    assert_non_null (back);
    assert_string_equal (ch_msg_id (back), ch_msg_id (m));
    ch_msg_destroy (&back);
    ch_asm_destroy (&a);
    ch_msg_destroy (&m);
    ch_outq_destroy (&q);
    close (sv [0]);
    close (sv [1]);
}

static void
test_ch_hello_check_names_what_is_wrong (void **state)
{
    (void) state;
    char why [128];
    json_t *h = ch_hello_driver (CH_PROTO_CHANNEL, "test", 1);
    assert_true (json_is_real (json_object_get (h, "time")));
    assert_int_equal (ch_hello_check (h, CH_PROTO_CHANNEL, "driver", why, sizeof why), 0);
    assert_int_equal (ch_hello_check (h, CH_PROTO_CHANNEL, "kernel", why, sizeof why), -EPROTO);
    assert_non_null (strstr (why, "kernel"));
    assert_int_equal (ch_hello_check (h, CH_PROTO_INIT, NULL, why, sizeof why), -EPROTO);
    json_object_set_new (h, "version", json_integer (2));
    assert_int_equal (ch_hello_check (h, CH_PROTO_CHANNEL, NULL, why, sizeof why), -EPROTO);
    assert_non_null (strstr (why, "version"));
    json_decref (h);
}

static void
test_ch_util_sha256_and_mkdir_p (void **state)
{
    (void) state;
    char hex [65];
    ch_sha256_hex ((const uint8_t *) "abc", 3, hex);
    assert_string_equal (hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    char dir [64], deep [128], file [160];
    tu_tmpdir (dir, sizeof dir, "test_ch_util");
    tu_path (deep, sizeof deep, dir, "a/b/c");
    assert_int_equal (ch_mkdir_p (deep, 0700), 0);
    assert_int_equal (ch_mkdir_p (deep, 0700), 0);      //  already there: fine
    tu_write_file (deep, "f", "abc");
    tu_path (file, sizeof file, deep, "f");
    off_t size = 0;
    assert_int_equal (ch_sha256_file (file, 0, hex, &size), 0);
    assert_int_equal (size, 3);
    assert_string_equal (hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    tu_rmtree (dir);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_ch_asm_assembles_buffers_byte_by_byte),
        cmocka_unit_test (test_ch_asm_drops_an_oversize_message_and_keeps_the_stream),
        cmocka_unit_test (test_ch_asm_caps_one_buffer),
        cmocka_unit_test (test_ch_asm_caps_the_json_frame_before_reading_it),
        cmocka_unit_test (test_ch_asm_bad_json_is_dropped_bad_length_breaks),
        cmocka_unit_test (test_ch_outq_writes_whole_messages_in_order),
        cmocka_unit_test (test_ch_hello_check_names_what_is_wrong),
        cmocka_unit_test (test_ch_util_sha256_and_mkdir_p),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
