/*  test_ch_text - raw stream texts: the gateway's escape of a kernel's text
 *  sent as bytes (ch_text), UTF-8 cuts, and the assembler turning a raw
 *  text into the content a client gets, hostile input included. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ch_asm.h"
#include "ch_frame.h"
#include "ch_text.h"

//  The content for text, NUL-terminated (caller frees); NULL on error, *rc.
static char *
s_content (const char *name, const void *text, size_t len, size_t cap, int *rc)
{
    uint8_t *out = NULL;
    size_t n = 0;
    *rc = ch_text_stream_content (name, text, len, cap, &out, &n);
    if (*rc < 0) {
        assert_null (out);
        return NULL;
    }
    char *s = malloc (n + 1);
    memcpy (s, out, n);
    s [n] = 0;
    free (out);
    return s;
}

//  The text member of a content, as jansson reads it (so it is valid JSON).
static char *
s_text_of (const char *content)
{
    json_error_t e;
    json_t *j = json_loads (content, 0, &e);
    assert_non_null (j);
    assert_int_equal (json_object_size (j), 2);
    char *t = strdup (json_string_value (json_object_get (j, "text")));
    json_decref (j);
    return t;
}

static void
test_ch_text_content_escapes_and_makes_utf8_valid (void **state)
{
    (void) state;
    int rc;
    static const char in [] = "a\"\\\n\x1b[0m \xe2\x9c\x93 \xff \xc0\x80 \xed\xa0\x80 z\0!\xe2\x9c";
    char *c = s_content ("stderr", in, sizeof in - 1, 1 << 20, &rc);
    assert_int_equal (rc, 0);
    assert_string_equal (c, "{\"name\":\"stderr\",\"text\":\"a\\\"\\\\\\n\\u001b[0m \xe2\x9c\x93 "
                         "\xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
                         " z\xef\xbf\xbd!\xef\xbf\xbd\xef\xbf\xbd\"}");
    char *t = s_text_of (c);
    assert_string_equal (t, "a\"\\\n\x1b[0m \xe2\x9c\x93 \xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd "
                         "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd z\xef\xbf\xbd!"
                         "\xef\xbf\xbd\xef\xbf\xbd");
    free (t);
    free (c);
    c = s_content ("stdout", "", 0, 64, &rc);
    assert_string_equal (c, "{\"name\":\"stdout\",\"text\":\"\"}");
    free (c);
}

//  Hostile: a name that is not a stream, a text over the cap once escaped.
static void
test_ch_text_content_refuses_bad_names_and_caps_the_growth (void **state)
{
    (void) state;
    int rc;
    assert_null (s_content ("stdin", "x", 1, 1024, &rc));
    assert_int_equal (rc, -EINVAL);
    assert_null (s_content ("stdout\"", "x", 1, 1024, &rc));
    assert_int_equal (rc, -EINVAL);
    //  100 control bytes are 600 escaped: over a 500-byte cap, under 700.
    char ctl [100];
    memset (ctl, 1, sizeof ctl);
    assert_null (s_content ("stdout", ctl, sizeof ctl, 500, &rc));
    assert_int_equal (rc, -EMSGSIZE);
    char *c = s_content ("stdout", ctl, sizeof ctl, 700, &rc);
    assert_int_equal (rc, 0);
    assert_int_equal (strlen (c), 25 + 600 + 2);
    free (c);
    //  A long plain text grows the buffer many times and stays whole.
    size_t n = 3 << 20;
    char *big = malloc (n);
    for (size_t i = 0; i < n; i++)
        big [i] = i % 97 == 0 ? '\t' : 'a' + (char) (i % 26);
    c = s_content ("stdout", big, n, 64 << 20, &rc);
    assert_int_equal (rc, 0);
    char *t = s_text_of (c);
    assert_memory_equal (t, big, n);
    assert_int_equal (strlen (t), n);
    free (t);
    free (c);
    free (big);
}

//  The tail held back is what the escape holds back.
static void
test_ch_text_utf8_tail_matches_the_escape (void **state)
{
    (void) state;
    static const struct { const char *s; size_t tail; } cases [] = {
        { "abc", 0 }, { "a\xe2", 1 }, { "a\xe2\x9c", 2 }, { "a\xe2\x9c\x93", 0 },
        { "\xf0\x9f\x98", 3 }, { "\xf0\x9f\x98\x80", 0 }, { "a\x80\x80", 0 },
        { "a\xff", 0 }, { "a\xc3", 1 }, { "\xc3", 1 }, { "", 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases [0]; i++) {
        size_t len = strlen (cases [i].s), used;
        char out [64];
        ch_json_escape ((const unsigned char *) cases [i].s, len, out, sizeof out, &used);
        assert_int_equal (ch_utf8_tail ((const uint8_t *) cases [i].s, len), cases [i].tail);
        assert_int_equal (len - used, cases [i].tail);
    }
}

//  Cut anywhere, escaped apart (as the gateway escapes each raw text) the
//  pieces read as the whole escaped at once: no character is split, and
//  invalid bytes become the same U+FFFDs.
static void
test_ch_text_cuts_read_as_the_whole (void **state)
{
    (void) state;
    static const char *const atoms [] = {
        "a", "\n", "\xc3\xa9", "\xe2\x9c\x93", "\xf0\x9f\x98\x80", "\xff", "\x80", "\xe2",
        "\xf0\x9f", "\xed\xa0\x80", "\"", "\x01",
    };
    srand (7);
    for (int round = 0; round < 2000; round++) {
        char in [256];
        size_t len = 0;
        while (len < 200) {
            const char *a = atoms [rand () % (sizeof atoms / sizeof atoms [0])];
            memcpy (in + len, a, strlen (a));
            len += strlen (a);
        }
        //  The kernel holds the tail back; the rest goes, cut at cap.
        size_t cap = 4 + (size_t) rand () % 40, used;
        char whole [2048], parts [2048];
        size_t wn = ch_json_escape ((const unsigned char *) in, len, whole, sizeof whole, &used);
        assert_int_equal (len - used, ch_utf8_tail ((const uint8_t *) in, len));
        len = used;
        size_t pn = 0, off = 0;
        while (off < len) {
            size_t n = len - off > cap ? ch_utf8_cut ((const uint8_t *) in + off, len - off, cap)
                                       : len - off;
            assert_true (n > 0 && n <= cap);
            int rc;
            char *c = s_content ("stdout", in + off, n, 4096, &rc);
            assert_int_equal (rc, 0);
            size_t cn = strlen (c) - 25 - 2;      //  {"name":"stdout","text":" ... "}
            memcpy (parts + pn, c + 25, cn);
            pn += cn;
            free (c);
            off += n;
        }
        assert_int_equal (pn, wn);
        assert_memory_equal (parts, whole, wn);
    }
}

//  ---------------------------------------------------------------------------
//  The assembler

static void
s_frame (uint8_t *out, size_t *pos, const void *data, size_t len)
{
    ch_frame_encode_header (out + *pos, len, UINT32_MAX);
    memcpy (out + *pos + CH_FRAME_HDR, data, len);
    *pos += CH_FRAME_HDR + len;
}

//  A stream message on channel with content, then nbuf copies of text.
static void
s_raw_msg (uint8_t *out, size_t *pos, const char *channel, const char *content, int nbuf,
           const void *text, size_t len)
{
    char json [512];
    snprintf (json, sizeof json, "{\"channel\":\"%s\",\"header\":{\"msg_type\":\"stream\","
              "\"msg_id\":\"m\"},\"parent_header\":{},\"content\":%s,\"buffers\":%d}",
              channel, content, nbuf);
    s_frame (out, pos, json, strlen (json));
    for (int i = 0; i < nbuf; i++)
        s_frame (out, pos, text, len);
}

//  Feed all of data; up to 8 messages out, errors counted into *errs.
static int
s_feed (ch_asm_t *a, const uint8_t *data, size_t len, ch_msg_t **msgs, int *errs)
{
    int n = 0;
    *errs = 0;
    for (size_t off = 0; off < len; ) {
        size_t used = 0;
        ch_msg_t *m = NULL;
        int rc = ch_asm_feed (a, data + off, len - off, &used, &m);
        *errs += rc < 0;
        if (m && n < 8)
            msgs [n++] = m;
        else
            ch_msg_destroy (&m);
        off += used;
    }
    return n;
}

static const char *
s_raw_of (const ch_msg_t *m)
{
    static char buf [1024];
    size_t n = 0;
    const uint8_t *raw = ch_msg_raw_content (m, &n);
    if (!raw)
        return NULL;
    snprintf (buf, sizeof buf, "%.*s", (int) n, (const char *) raw);
    return buf;
}

//  Control bytes, DEL and anything past ASCII (a cut UTF-8 sequence too)
//  become '?', as does each byte asked for; the rest stays.
static void
test_ch_text_printable_keeps_one_ascii_line (void **state)
{
    (void) state;
    char text [] = "a\tb\nc\x1b[31m\x7f\xc3\xa9\xe2\x82 \"q\" \\ ~";
    ch_text_printable (text, NULL);
    assert_string_equal (text, "a?b?c?[31m????? \"q\" \\ ~");
    ch_text_printable (text, "\"\\");
    assert_string_equal (text, "a?b?c?[31m????? ?q? ? ~");
    char empty [] = "";
    ch_text_printable (empty, "x");
    assert_string_equal (empty, "");
}

static void
test_ch_asm_raw_text_becomes_the_content (void **state)
{
    (void) state;
    uint8_t data [4096];
    size_t pos = 0;
    s_raw_msg (data, &pos, "iopub", "{\"name\":\"stdout\"}", 1, "hi\n\xff", 4);
    ch_asm_t *a = ch_asm_new (NULL);
    ch_asm_set_raw_stream (a, 1024);
    ch_msg_t *m [8];
    int errs;
    assert_int_equal (s_feed (a, data, pos, m, &errs), 1);
    assert_int_equal (errs, 0);
    assert_string_equal (s_raw_of (m [0]), "{\"name\":\"stdout\",\"text\":\"hi\\n\xef\xbf\xbd\"}");
    assert_int_equal (ch_msg_nbuffers (m [0]), 0);
    assert_int_equal (ch_msg_nbuffers_expected (m [0]), 0);
    assert_string_equal (json_string_value (json_object_get (ch_msg_content (m [0]), "name")),
                         "stdout");
    ch_msg_destroy (&m [0]);
    ch_asm_destroy (&a);
    //  Without raw streams (the kernel's and init's readers) it stays a buffer.
    a = ch_asm_new (NULL);
    assert_int_equal (s_feed (a, data, pos, m, &errs), 1);
    size_t rawlen;
    assert_null (ch_msg_raw_content (m [0], &rawlen));
    assert_int_equal (ch_msg_nbuffers (m [0]), 1);
    ch_msg_destroy (&m [0]);
    ch_asm_destroy (&a);
}

//  Hostile raw texts: a bad name is dropped, one too large once escaped is
//  dropped (its envelope kept to answer), and the stream goes on after
//  both. Near misses (other channels, more members, two buffers) are not
//  raw texts: they pass as they are, for the gateway's checks to judge.
static void
test_ch_asm_raw_text_hostile (void **state)
{
    (void) state;
    uint8_t data [8192];
    char ctl [400];
    memset (ctl, 2, sizeof ctl);
    size_t pos = 0;
    s_raw_msg (data, &pos, "iopub", "{\"name\":\"stdin\"}", 1, "x", 1);
    s_raw_msg (data, &pos, "iopub", "{\"name\":\"stdout\"}", 1, ctl, sizeof ctl);
    s_raw_msg (data, &pos, "iopub", "{\"name\":\"stderr\"}", 1, "ok", 2);
    s_raw_msg (data, &pos, "shell", "{\"name\":\"stdout\"}", 1, "a", 1);
    s_raw_msg (data, &pos, "iopub", "{\"name\":\"stdout\",\"x\":1}", 1, "b", 1);
    s_raw_msg (data, &pos, "iopub", "{\"name\":\"stdout\"}", 2, "c", 1);
    s_raw_msg (data, &pos, "iopub", "{\"name\":7}", 1, "d", 1);
    ch_limits_t lim = { .max_frame = 4096, .max_msg = 2048 };
    ch_asm_t *a = ch_asm_new (&lim);
    ch_asm_set_raw_stream (a, 1024);
    ch_msg_t *m [8];
    int errs;
    int n = s_feed (a, data, pos, m, &errs);
    assert_int_equal (errs, 2);
    assert_int_equal (n, 5);
    assert_string_equal (s_raw_of (m [0]), "{\"name\":\"stderr\",\"text\":\"ok\"}");
    for (int i = 1; i < n; i++) {
        assert_null (s_raw_of (m [i]));
        assert_true (ch_msg_nbuffers (m [i]) >= 1);
    }
    for (int i = 0; i < n; i++)
        ch_msg_destroy (&m [i]);
    //  The oversize one, fed alone: -EMSGSIZE with its envelope kept.
    pos = 0;
    s_raw_msg (data, &pos, "iopub", "{\"name\":\"stdout\"}", 1, ctl, sizeof ctl);
    size_t used;
    ch_msg_t *msg = NULL;
    assert_int_equal (ch_asm_feed (a, data, pos, &used, &msg), -EMSGSIZE);
    assert_null (msg);
    assert_non_null (ch_asm_dropped (a));
    assert_string_equal (ch_msg_id (ch_asm_dropped (a)), "m");
    assert_non_null (strstr (ch_asm_why (a), "stream text"));
    assert_false (ch_asm_broken (a));
    ch_asm_destroy (&a);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_ch_text_content_escapes_and_makes_utf8_valid),
        cmocka_unit_test (test_ch_text_content_refuses_bad_names_and_caps_the_growth),
        cmocka_unit_test (test_ch_text_utf8_tail_matches_the_escape),
        cmocka_unit_test (test_ch_text_cuts_read_as_the_whole),
        cmocka_unit_test (test_ch_text_printable_keeps_one_ascii_line),
        cmocka_unit_test (test_ch_asm_raw_text_becomes_the_content),
        cmocka_unit_test (test_ch_asm_raw_text_hostile),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
