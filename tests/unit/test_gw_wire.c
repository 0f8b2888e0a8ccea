/*  test_gw_wire - the Jupyter multipart codec, read as API examples.

    Messages come from jupyter_client (hmac_vectors.h, made by
    gen_hmac_vectors.py) or are built here and signed with gw_hmac.
*/
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "wire/gw_wire.h"
#include "hmac_vectors.h"
#include "tu.h"

#define KEY "e8bd966f-188aaf0fb9d983f3cf49159a"
#define GENERATOR "tests/unit/gen_hmac_vectors.py"

static gw_wire_t *
s_wire (const char *scheme, const char *key, size_t max_bytes)
{
    gw_hmac_t *hmac = gw_hmac_new (scheme, (const uint8_t *) key, strlen (key));
    assert_non_null (hmac);
    gw_wire_t *wire = gw_wire_new (&hmac, max_bytes);
    assert_null (hmac);                         //  ownership moved
    return wire;
}

//  The frames of a generated vector, as a list we can tamper with.
static gw_frames_t *
s_vector_frames (const hmac_vector_t *v)
{
    gw_frames_t *frames = gw_frames_new ();
    for (size_t i = 0; i < v->nframes; i++)
        gw_frames_append (frames, v->frames [i], v->lens [i]);
    return frames;
}

//  [ids...] <IDS|MSG> sig header parent metadata content [buffers...], signed
//  with the wire's own key over the given (possibly broken) JSON texts.
static gw_frames_t *
s_signed (gw_wire_t *wire, const char *ids, const char *header, const char *parent,
          const char *metadata, const char *content, size_t nbuffers)
{
    gw_frames_t *frames = gw_frames_new ();
    if (ids)
        gw_frames_append (frames, ids, strlen (ids));
    const char *json [4] = { header, parent, metadata, content };
    const uint8_t *parts [4];
    size_t lens [4];
    for (int i = 0; i < 4; i++) {
        parts [i] = (const uint8_t *) json [i];
        lens [i] = strlen (json [i]);
    }
    char sig [129];
    int n = gw_hmac_sign (gw_wire_hmac (wire), parts, lens, 4, sig, sizeof sig);
    assert_true (n >= 0);
    gw_frames_append (frames, GW_WIRE_DELIM, GW_WIRE_DELIM_LEN);
    gw_frames_append (frames, sig, (size_t) n);
    for (int i = 0; i < 4; i++)
        gw_frames_append (frames, json [i], lens [i]);
    for (size_t i = 0; i < nbuffers; i++)
        gw_frames_append (frames, "buf", 3);
    return frames;
}

#define HEADER_OK "{\"msg_id\":\"m1\",\"msg_type\":\"execute_request\",\"session\":\"s\"," \
                  "\"username\":\"u\",\"date\":\"2026-11-29T10:34:56.914628Z\",\"version\":\"5.3\"}"

//  Decode and return the errno, checking the failure contract on the way.
static int
s_decode_rc (gw_wire_t *wire, gw_frames_t *frames, const char **why)
{
    ch_msg_t *msg = (ch_msg_t *) 1;
    gw_frames_t *ids = (gw_frames_t *) 1;
    *why = NULL;
    int rc = gw_wire_decode (wire, CH_SHELL, gw_frames_array (frames),
                             gw_frames_size (frames), &msg, &ids, why);
    if (rc < 0) {
        assert_null (msg);
        assert_null (ids);
        assert_non_null (*why);
    }
    ch_msg_destroy (&msg);
    gw_frames_destroy (&ids);
    return rc;
}

static void
test_gw_wire_decodes_jupyter_client_messages (void **state)
{
    (void) state;
    for (size_t i = 0; i < HMAC_VECTOR_COUNT; i++) {
        const hmac_vector_t *v = &hmac_vectors [i];
        gw_hmac_t *hmac = gw_hmac_new (v->scheme, (const uint8_t *) v->key, v->keylen);
        gw_wire_t *wire = gw_wire_new (&hmac, 0);
        gw_frames_t *frames = s_vector_frames (v);
        ch_msg_t *msg = NULL;
        gw_frames_t *ids = NULL;
        const char *why = NULL;
        int rc = gw_wire_decode (wire, CH_SHELL, gw_frames_array (frames),
                                 gw_frames_size (frames), &msg, &ids, &why);
        assert_int_equal (rc, 0);
        assert_int_equal (ch_msg_channel (msg), CH_SHELL);
        assert_string_equal (ch_msg_id (msg) + 4, ch_msg_type (msg));     //  "msg-<type>"
        assert_int_equal (gw_frames_size (ids), v->delim);
        assert_int_equal (ch_msg_nbuffers (msg), v->nframes - v->delim - 6);
        gw_frames_destroy (&frames);
        gw_frames_destroy (&ids);
        ch_msg_destroy (&msg);
        gw_wire_destroy (&wire);
    }
}

static void
test_gw_wire_decodes_unicode_content (void **state)
{
    (void) state;
    const hmac_vector_t *v = &hmac_vectors [2];
    assert_string_equal (v->name, "sha256_unicode");
    gw_hmac_t *hmac = gw_hmac_new (v->scheme, (const uint8_t *) v->key, v->keylen);
    gw_wire_t *wire = gw_wire_new (&hmac, 0);
    gw_frames_t *frames = s_vector_frames (v);
    ch_msg_t *msg = NULL;
    gw_frames_t *ids = NULL;
    assert_int_equal (gw_wire_decode (wire, CH_SHELL, gw_frames_array (frames),
                                      gw_frames_size (frames), &msg, &ids, NULL), 0);
    const char *code = json_string_value (json_object_get (ch_msg_content (msg), "code"));
    assert_string_equal (code, "print('h\xc3\xa9llo w\xc3\xb6rld \xe2\x9c\x93 \xf0\x9f\x90\x8d')");
    gw_frames_destroy (&frames);
    gw_frames_destroy (&ids);
    ch_msg_destroy (&msg);
    gw_wire_destroy (&wire);
}

static void
test_gw_wire_preserves_identities (void **state)
{
    (void) state;
    gw_wire_t *wire = s_wire ("hmac-sha256", KEY, 0);
    gw_frames_t *frames = gw_frames_new ();
    gw_frames_append (frames, "\x00\x80\x01", 3);                 //  binary identity
    gw_frames_append (frames, "", 0);                             //  empty identity
    gw_frames_t *body = s_signed (wire, "client", HEADER_OK, "{}", "{}", "{}", 0);
    for (size_t i = 0; i < gw_frames_size (body); i++)
        gw_frames_append (frames, gw_frames_get (body, i)->data, gw_frames_get (body, i)->size);
    ch_msg_t *msg = NULL;
    gw_frames_t *ids = NULL;
    assert_int_equal (gw_wire_decode (wire, CH_CONTROL, gw_frames_array (frames),
                                      gw_frames_size (frames), &msg, &ids, NULL), 0);
    assert_int_equal (ch_msg_channel (msg), CH_CONTROL);
    assert_int_equal (gw_frames_size (ids), 3);
    assert_memory_equal (gw_frames_get (ids, 0)->data, "\x00\x80\x01", 3);
    assert_int_equal (gw_frames_get (ids, 1)->size, 0);
    assert_int_equal (gw_frames_get (ids, 2)->size, 6);
    assert_memory_equal (gw_frames_get (ids, 2)->data, "client", 6);
    gw_frames_destroy (&body);
    gw_frames_destroy (&frames);
    gw_frames_destroy (&ids);
    ch_msg_destroy (&msg);
    gw_wire_destroy (&wire);
}

static void
test_gw_wire_preserves_buffers (void **state)
{
    (void) state;
    const hmac_vector_t *v = &hmac_vectors [4];
    assert_string_equal (v->name, "sha256_buffers");
    gw_hmac_t *hmac = gw_hmac_new (v->scheme, (const uint8_t *) v->key, v->keylen);
    gw_wire_t *wire = gw_wire_new (&hmac, 0);
    gw_frames_t *frames = s_vector_frames (v);
    ch_msg_t *msg = NULL;
    gw_frames_t *ids = NULL;
    assert_int_equal (gw_wire_decode (wire, CH_SHELL, gw_frames_array (frames),
                                      gw_frames_size (frames), &msg, &ids, NULL), 0);
    assert_int_equal (ch_msg_nbuffers (msg), 2);
    size_t len = 99;
    const uint8_t *buf = ch_msg_buffer (msg, 0, &len);
    assert_int_equal (len, 4);
    assert_memory_equal (buf, "\x00\x01\x02\xff", 4);
    assert_non_null (ch_msg_buffer (msg, 1, &len));
    assert_int_equal (len, 0);
    gw_frames_destroy (&frames);
    gw_frames_destroy (&ids);
    ch_msg_destroy (&msg);
    gw_wire_destroy (&wire);
}

static void
test_gw_wire_rejects_bad_signature (void **state)
{
    (void) state;
    gw_wire_t *wire = s_wire ("hmac-sha256", KEY, 0);
    gw_frames_t *frames = s_signed (wire, NULL, HEADER_OK, "{}", "{}", "{}", 0);
    gw_frame_t *sig = (gw_frame_t *) gw_frames_get (frames, 1);
    sig->data [10] = sig->data [10] == 'a' ? 'b' : 'a';
    const char *why;
    assert_int_equal (s_decode_rc (wire, frames, &why), -EACCES);
    assert_string_equal (why, "bad signature");
    gw_frames_destroy (&frames);
    gw_wire_destroy (&wire);
}

static void
test_gw_wire_rejects_signature_over_other_content (void **state)
{
    (void) state;
    gw_wire_t *wire = s_wire ("hmac-sha256", KEY, 0);
    gw_frames_t *frames = s_signed (wire, NULL, HEADER_OK, "{}", "{}", "{\"code\":\"1\"}", 0);
    gw_frame_t *content = (gw_frame_t *) gw_frames_get (frames, 5);
    content->data [9] = '2';                    //  same length, other code
    const char *why;
    assert_int_equal (s_decode_rc (wire, frames, &why), -EACCES);
    gw_frames_destroy (&frames);
    gw_wire_destroy (&wire);
}

static void
test_gw_wire_rejects_wrong_length_signature (void **state)
{
    (void) state;
    gw_wire_t *wire = s_wire ("hmac-sha256", KEY, 0);
    gw_frames_t *frames = s_signed (wire, NULL, HEADER_OK, "{}", "{}", "{}", 0);
    gw_frame_t *sig = (gw_frame_t *) gw_frames_get (frames, 1);
    sig->size = 32;                             //  a true prefix of the right one
    const char *why;
    assert_int_equal (s_decode_rc (wire, frames, &why), -EACCES);
    assert_string_equal (why, "bad signature length");
    gw_frames_destroy (&frames);
    gw_wire_destroy (&wire);
}

static void
test_gw_wire_rejects_unsigned_when_key_set (void **state)
{
    (void) state;
    gw_wire_t *wire = s_wire ("hmac-sha256", KEY, 0);
    gw_frames_t *frames = s_signed (wire, NULL, HEADER_OK, "{}", "{}", "{}", 0);
    ((gw_frame_t *) gw_frames_get (frames, 1))->size = 0;
    const char *why;
    assert_int_equal (s_decode_rc (wire, frames, &why), -EACCES);
    assert_string_equal (why, "unsigned message");
    gw_frames_destroy (&frames);
    gw_wire_destroy (&wire);
}

static void
test_gw_wire_rejects_replayed_signature (void **state)
{
    (void) state;
    gw_wire_t *wire = s_wire ("hmac-sha256", KEY, 0);
    gw_frames_t *frames = s_signed (wire, NULL, HEADER_OK, "{}", "{}", "{}", 0);
    const char *why;
    assert_int_equal (s_decode_rc (wire, frames, &why), 0);
    assert_int_equal (s_decode_rc (wire, frames, &why), -EALREADY);
    assert_string_equal (why, "replayed signature");
    gw_frames_destroy (&frames);
    gw_wire_destroy (&wire);
}

static void
test_gw_wire_remembers_only_verified_signatures (void **state)
{
    (void) state;
    gw_wire_t *wire = s_wire ("hmac-sha256", KEY, 0);
    gw_frames_t *good = s_signed (wire, NULL, HEADER_OK, "{}", "{}", "{}", 0);
    gw_frames_t *forged = gw_frames_dup (good);
    ((gw_frame_t *) gw_frames_get (forged, 5))->data [0] = ' ';  //  content changed
    const char *why;
    assert_int_equal (s_decode_rc (wire, forged, &why), -EACCES);
    //  The forgery carried the real signature; it must not block the real message.
    assert_int_equal (s_decode_rc (wire, good, &why), 0);
    gw_frames_destroy (&good);
    gw_frames_destroy (&forged);
    gw_wire_destroy (&wire);
}

//  A distinct signed execute_request per n.
static gw_frames_t *
s_numbered (gw_wire_t *wire, int n)
{
    char content [64];
    snprintf (content, sizeof content, "{\"code\":\"%d\"}", n);
    return s_signed (wire, NULL, HEADER_OK, "{}", "{}", content, 0);
}

static void
test_gw_wire_history_forgets_oldest_when_full (void **state)
{
    (void) state;
    gw_wire_t *wire = s_wire ("hmac-sha256", KEY, 0);
    gw_wire_set_history (wire, 1000);
    const char *why;
    //  3000 messages churn the index through many evictions.
    for (int n = 0; n < 3000; n++) {
        gw_frames_t *frames = s_numbered (wire, n);
        assert_int_equal (s_decode_rc (wire, frames, &why), 0);
        gw_frames_destroy (&frames);
    }
    for (int n = 2000; n < 3000; n++) {         //  the last 1000 are all remembered
        gw_frames_t *frames = s_numbered (wire, n);
        assert_int_equal (s_decode_rc (wire, frames, &why), -EALREADY);
        gw_frames_destroy (&frames);
    }
    gw_frames_t *evicted = s_numbered (wire, 1999);
    assert_int_equal (s_decode_rc (wire, evicted, &why), 0);     //  culled: accepted again
    assert_int_equal (s_decode_rc (wire, evicted, &why), -EALREADY);
    gw_frames_destroy (&evicted);
    gw_wire_destroy (&wire);
}

static void
test_gw_wire_history_can_be_turned_off (void **state)
{
    (void) state;
    gw_wire_t *wire = s_wire ("hmac-sha256", KEY, 0);
    gw_wire_set_history (wire, 0);
    gw_frames_t *frames = s_numbered (wire, 1);
    const char *why;
    assert_int_equal (s_decode_rc (wire, frames, &why), 0);
    assert_int_equal (s_decode_rc (wire, frames, &why), 0);
    gw_frames_destroy (&frames);
    gw_wire_destroy (&wire);
}

static void
test_gw_wire_rejects_missing_delimiter (void **state)
{
    (void) state;
    gw_wire_t *wire = s_wire ("hmac-sha256", KEY, 0);
    gw_frames_t *frames = s_signed (wire, "id", HEADER_OK, "{}", "{}", "{}", 0);
    gw_frames_get (frames, 1)->data [0] = '[';  //  "[IDS|MSG>"
    const char *why;
    assert_int_equal (s_decode_rc (wire, frames, &why), -EBADMSG);
    assert_string_equal (why, "missing <IDS|MSG> delimiter");
    gw_frames_t *empty = gw_frames_new ();
    assert_int_equal (s_decode_rc (wire, empty, &why), -EBADMSG);
    gw_frames_destroy (&empty);
    gw_frames_destroy (&frames);
    gw_wire_destroy (&wire);
}

static void
test_gw_wire_rejects_too_few_frames (void **state)
{
    (void) state;
    gw_wire_t *wire = s_wire ("hmac-sha256", KEY, 0);
    gw_frames_t *full = s_signed (wire, NULL, HEADER_OK, "{}", "{}", "{}", 0);
    gw_frames_t *short_msg = gw_frames_new ();
    for (size_t i = 0; i < 5; i++)              //  content missing
        gw_frames_append (short_msg, gw_frames_get (full, i)->data, gw_frames_get (full, i)->size);
    const char *why;
    assert_int_equal (s_decode_rc (wire, short_msg, &why), -EBADMSG);
    assert_string_equal (why, "too few frames");
    gw_frames_destroy (&short_msg);
    gw_frames_destroy (&full);
    gw_wire_destroy (&wire);
}

static void
test_gw_wire_rejects_non_json_frame (void **state)
{
    (void) state;
    gw_wire_t *wire = s_wire ("hmac-sha256", KEY, 0);
    gw_frames_t *frames = s_signed (wire, NULL, HEADER_OK, "{}", "{not json", "{}", 0);
    const char *why;
    assert_int_equal (s_decode_rc (wire, frames, &why), -EBADMSG);
    assert_string_equal (why, "metadata is not valid JSON");
    gw_frames_destroy (&frames);
    frames = s_signed (wire, NULL, HEADER_OK, "{}", "{}", "{\"a\":\"\xff\"}", 0);
    assert_int_equal (s_decode_rc (wire, frames, &why), -EBADMSG);   //  not UTF-8
    assert_string_equal (why, "content is not valid JSON");
    gw_frames_destroy (&frames);
    gw_wire_destroy (&wire);
}

static void
test_gw_wire_rejects_non_object_frame (void **state)
{
    (void) state;
    gw_wire_t *wire = s_wire ("hmac-sha256", KEY, 0);
    const char *why;
    gw_frames_t *frames = s_signed (wire, NULL, HEADER_OK, "{}", "{}", "[1, 2]", 0);
    assert_int_equal (s_decode_rc (wire, frames, &why), -EBADMSG);
    assert_string_equal (why, "content is not a JSON object");
    gw_frames_destroy (&frames);
    frames = s_signed (wire, NULL, HEADER_OK, "null", "{}", "{}", 0);
    assert_int_equal (s_decode_rc (wire, frames, &why), -EBADMSG);
    assert_string_equal (why, "parent_header is not a JSON object");
    gw_frames_destroy (&frames);
    frames = s_signed (wire, NULL, "\"header\"", "{}", "{}", "{}", 0);
    assert_int_equal (s_decode_rc (wire, frames, &why), -EBADMSG);
    assert_string_equal (why, "header is not a JSON object");
    gw_frames_destroy (&frames);
    gw_wire_destroy (&wire);
}

static void
test_gw_wire_rejects_header_missing_msg_type (void **state)
{
    (void) state;
    gw_wire_t *wire = s_wire ("hmac-sha256", KEY, 0);
    const char *why;
    gw_frames_t *frames = s_signed (wire, NULL, "{\"msg_id\":\"m\"}", "{}", "{}", "{}", 0);
    assert_int_equal (s_decode_rc (wire, frames, &why), -EBADMSG);
    assert_string_equal (why, "header.msg_type is not a non-empty string");
    gw_frames_destroy (&frames);
    frames = s_signed (wire, NULL, "{\"msg_id\":\"m\",\"msg_type\":\"\"}", "{}", "{}", "{}", 0);
    assert_int_equal (s_decode_rc (wire, frames, &why), -EBADMSG);
    gw_frames_destroy (&frames);
    frames = s_signed (wire, NULL, "{\"msg_id\":7,\"msg_type\":\"x\"}", "{}", "{}", "{}", 0);
    assert_int_equal (s_decode_rc (wire, frames, &why), -EBADMSG);
    assert_string_equal (why, "header.msg_id is not a string");
    gw_frames_destroy (&frames);
    gw_wire_destroy (&wire);
}

static void
test_gw_wire_rejects_oversize_message (void **state)
{
    (void) state;
    gw_wire_t *wire = s_wire ("hmac-sha256", KEY, 300);
    gw_frames_t *frames = s_signed (wire, NULL, HEADER_OK, "{}", "{}", "{}", 0);
    const char *why;
    assert_int_equal (s_decode_rc (wire, frames, &why), 0);      //  under the cap
    gw_frames_destroy (&frames);
    frames = s_signed (wire, NULL, HEADER_OK, "{}", "{}", "{}", 40);
    assert_int_equal (s_decode_rc (wire, frames, &why), -EMSGSIZE);
    assert_string_equal (why, "message too large");
    gw_frames_destroy (&frames);
    gw_wire_destroy (&wire);
}

static void
test_gw_wire_rejects_too_many_buffers (void **state)
{
    (void) state;
    gw_wire_t *wire = s_wire ("hmac-sha256", KEY, 0);
    const char *why;
    gw_frames_t *frames = s_signed (wire, NULL, HEADER_OK, "{}", "{}", "{}", CH_MSG_MAX_BUFFERS);
    assert_int_equal (s_decode_rc (wire, frames, &why), 0);
    gw_frames_destroy (&frames);
    frames = s_signed (wire, NULL, HEADER_OK, "{}", "{}", "{\"n\":17}", CH_MSG_MAX_BUFFERS + 1);
    assert_int_equal (s_decode_rc (wire, frames, &why), -EMSGSIZE);
    assert_string_equal (why, "too many buffers");
    gw_frames_destroy (&frames);
    gw_wire_destroy (&wire);
}

static void
test_gw_wire_round_trips_encode_decode (void **state)
{
    (void) state;
    gw_wire_t *sender = s_wire ("hmac-sha512", KEY, 0);
    gw_wire_t *receiver = s_wire ("hmac-sha512", KEY, 0);
    json_t *content = json_pack ("{s:s, s:f}", "text", "caf\xc3\xa9", "x", 0.5);
    ch_msg_t *msg = ch_msg_new (CH_IOPUB, "stream", NULL, &content, "kernel-session");
    uint8_t *buf = malloc (3);
    memcpy (buf, "\x00\x00\x07", 3);
    assert_int_equal (ch_msg_add_buffer (msg, &buf, 3), 0);
    gw_frames_t *topic = gw_frames_new ();
    gw_frames_append (topic, "kernel.x.stream", 15);
    gw_frames_t *wire_frames = gw_wire_encode (sender, topic, msg);
    assert_int_equal (gw_frames_size (wire_frames), 1 + 6 + 1);
    ch_msg_t *back = NULL;
    gw_frames_t *ids = NULL;
    assert_int_equal (gw_wire_decode (receiver, CH_IOPUB, gw_frames_array (wire_frames),
                                      gw_frames_size (wire_frames), &back, &ids, NULL), 0);
    assert_true (json_equal (ch_msg_header (back), ch_msg_header (msg)));
    assert_true (json_equal (ch_msg_content (back), ch_msg_content (msg)));
    assert_int_equal (gw_frames_size (ids), 1);
    assert_memory_equal (gw_frames_get (ids, 0)->data, "kernel.x.stream", 15);
    size_t len;
    assert_memory_equal (ch_msg_buffer (back, 0, &len), "\x00\x00\x07", 3);
    assert_int_equal (len, 3);
    gw_frames_destroy (&ids);
    gw_frames_destroy (&topic);
    gw_frames_destroy (&wire_frames);
    ch_msg_destroy (&back);
    ch_msg_destroy (&msg);
    gw_wire_destroy (&sender);
    gw_wire_destroy (&receiver);
}

static void
test_gw_wire_encode_writes_compact_utf8_json (void **state)
{
    (void) state;
    gw_wire_t *wire = s_wire ("hmac-sha256", KEY, 0);
    json_t *content = json_pack ("{s:s}", "text", "\xe2\x9c\x93");
    ch_msg_t *msg = ch_msg_new (CH_SHELL, "execute_reply", NULL, &content, "s");
    gw_frames_t *frames = gw_wire_encode (wire, NULL, msg);
    const gw_frame_t *c = gw_frames_get (frames, 5);
    assert_int_equal (c->size, strlen ("{\"text\":\"\xe2\x9c\x93\"}"));
    assert_memory_equal (c->data, "{\"text\":\"\xe2\x9c\x93\"}", c->size);
    assert_memory_equal (gw_frames_get (frames, 3)->data, "{}", 2);        //  parent
    gw_frames_destroy (&frames);
    ch_msg_destroy (&msg);
    gw_wire_destroy (&wire);
}

static void
test_gw_wire_encode_signs_the_bytes_it_sends (void **state)
{
    (void) state;
    gw_wire_t *wire = s_wire ("hmac-sha256", KEY, 0);
    ch_msg_t *msg = ch_msg_new (CH_SHELL, "kernel_info_reply", NULL, NULL, "s");
    gw_frames_t *frames = gw_wire_encode (wire, NULL, msg);
    const uint8_t *parts [4];
    size_t lens [4];
    for (int i = 0; i < 4; i++) {
        parts [i] = gw_frames_get (frames, 2 + (size_t) i)->data;
        lens [i] = gw_frames_get (frames, 2 + (size_t) i)->size;
    }
    const gw_frame_t *sig = gw_frames_get (frames, 1);
    assert_int_equal (sig->size, 64);
    assert_true (gw_hmac_verify (gw_wire_hmac (wire), parts, lens, 4, sig->data, sig->size));
    gw_frames_destroy (&frames);
    ch_msg_destroy (&msg);
    gw_wire_destroy (&wire);
}

static void
test_gw_wire_empty_key_sends_empty_signature_frame (void **state)
{
    (void) state;
    gw_wire_t *wire = s_wire ("hmac-sha256", "", 0);
    ch_msg_t *msg = ch_msg_new (CH_SHELL, "kernel_info_reply", NULL, NULL, "s");
    gw_frames_t *frames = gw_wire_encode (wire, NULL, msg);
    assert_int_equal (gw_frames_size (frames), 6);              //  present, not dropped
    assert_memory_equal (gw_frames_get (frames, 0)->data, GW_WIRE_DELIM, GW_WIRE_DELIM_LEN);
    assert_int_equal (gw_frames_get (frames, 1)->size, 0);
    gw_frames_destroy (&frames);
    ch_msg_destroy (&msg);
    gw_wire_destroy (&wire);
}

static void
test_gw_wire_empty_key_checks_no_signature (void **state)
{
    (void) state;
    gw_wire_t *wire = s_wire ("hmac-sha256", "", 0);
    gw_frames_t *frames = s_signed (wire, NULL, HEADER_OK, "{}", "{}", "{}", 0);
    gw_frame_t *sig = (gw_frame_t *) gw_frames_get (frames, 1);
    assert_int_equal (sig->size, 0);
    const char *why;
    assert_int_equal (s_decode_rc (wire, frames, &why), 0);
    assert_int_equal (s_decode_rc (wire, frames, &why), 0);      //  no history without a key
    gw_frames_destroy (&frames);
    gw_wire_destroy (&wire);
}

//  Write frames as 4-byte big-endian length + bytes, the generator's format.
static void
s_write_frames (const char *path, const gw_frames_t *frames)
{
    FILE *file = fopen (path, "wb");
    assert_non_null (file);
    for (size_t i = 0; i < gw_frames_size (frames); i++) {
        const gw_frame_t *f = gw_frames_get (frames, i);
        uint8_t hdr [4] = { (uint8_t) (f->size >> 24), (uint8_t) (f->size >> 16),
                            (uint8_t) (f->size >> 8), (uint8_t) f->size };
        fwrite (hdr, 1, 4, file);
        fwrite (f->data, 1, f->size, file);
    }
    fclose (file);
}

static void
test_gw_wire_encode_output_verifies_with_jupyter_client (void **state)
{
    (void) state;
    //  scripts/deps.sh installs what this needs: without it the test fails, or
    //  (no jupyter_client) skips, which fails under CI too.
    if (access ("/usr/bin/python3", X_OK) != 0 || access (GENERATOR, R_OK) != 0)
        fail_msg ("/usr/bin/python3 or %s is missing: run scripts/deps.sh", GENERATOR);
    gw_wire_t *wire = s_wire ("hmac-sha256", KEY, 0);
    json_t *content = json_pack ("{s:s, s:i}", "name", "stdout \xc3\xa9", "n", 3);
    ch_msg_t *msg = ch_msg_new (CH_SHELL, "execute_reply", NULL, &content, "s");
    gw_frames_t *ids = gw_frames_new ();
    gw_frames_append (ids, "client-1", 8);
    gw_frames_t *frames = gw_wire_encode (wire, ids, msg);
    char path [] = "/tmp/test_gw_wire_XXXXXX";
    int fd = mkstemp (path);
    assert_true (fd >= 0);
    close (fd);
    s_write_frames (path, frames);
    char cmd [512];
    snprintf (cmd, sizeof cmd, "/usr/bin/python3 %s --verify %s %s hmac-sha256 2>/dev/null",
              GENERATOR, path, KEY);
    int status = system (cmd);
    unlink (path);
    gw_frames_destroy (&ids);
    gw_frames_destroy (&frames);
    ch_msg_destroy (&msg);
    gw_wire_destroy (&wire);
    if (WIFEXITED (status) && WEXITSTATUS (status) == 2)
        tu_skip ("no jupyter_client for /usr/bin/python3 (scripts/deps.sh installs it)");
    assert_true (WIFEXITED (status));
    assert_int_equal (WEXITSTATUS (status), 0);
}

static void
test_gw_frames_copy_take_and_dup (void **state)
{
    (void) state;
    gw_frames_t *frames = gw_frames_new ();
    assert_null (gw_frames_array (frames));
    gw_frames_append (frames, "abc", 3);
    gw_frames_append (frames, NULL, 0);
    uint8_t *owned = malloc (2);
    memcpy (owned, "xy", 2);
    gw_frames_append_take (frames, &owned, 2);
    assert_null (owned);
    assert_int_equal (gw_frames_size (frames), 3);
    assert_non_null (gw_frames_get (frames, 1)->data);          //  never NULL, even empty
    assert_null (gw_frames_get (frames, 3));
    gw_frames_t *copy = gw_frames_dup (frames);
    gw_frames_destroy (&frames);
    assert_null (frames);
    assert_int_equal (gw_frames_size (copy), 3);
    assert_memory_equal (gw_frames_get (copy, 2)->data, "xy", 2);
    gw_frames_destroy (&copy);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_gw_wire_decodes_jupyter_client_messages),
        cmocka_unit_test (test_gw_wire_decodes_unicode_content),
        cmocka_unit_test (test_gw_wire_preserves_identities),
        cmocka_unit_test (test_gw_wire_preserves_buffers),
        cmocka_unit_test (test_gw_wire_rejects_bad_signature),
        cmocka_unit_test (test_gw_wire_rejects_signature_over_other_content),
        cmocka_unit_test (test_gw_wire_rejects_wrong_length_signature),
        cmocka_unit_test (test_gw_wire_rejects_unsigned_when_key_set),
        cmocka_unit_test (test_gw_wire_rejects_replayed_signature),
        cmocka_unit_test (test_gw_wire_remembers_only_verified_signatures),
        cmocka_unit_test (test_gw_wire_history_forgets_oldest_when_full),
        cmocka_unit_test (test_gw_wire_history_can_be_turned_off),
        cmocka_unit_test (test_gw_wire_rejects_missing_delimiter),
        cmocka_unit_test (test_gw_wire_rejects_too_few_frames),
        cmocka_unit_test (test_gw_wire_rejects_non_json_frame),
        cmocka_unit_test (test_gw_wire_rejects_non_object_frame),
        cmocka_unit_test (test_gw_wire_rejects_header_missing_msg_type),
        cmocka_unit_test (test_gw_wire_rejects_oversize_message),
        cmocka_unit_test (test_gw_wire_rejects_too_many_buffers),
        cmocka_unit_test (test_gw_wire_round_trips_encode_decode),
        cmocka_unit_test (test_gw_wire_encode_writes_compact_utf8_json),
        cmocka_unit_test (test_gw_wire_encode_signs_the_bytes_it_sends),
        cmocka_unit_test (test_gw_wire_empty_key_sends_empty_signature_frame),
        cmocka_unit_test (test_gw_wire_empty_key_checks_no_signature),
        cmocka_unit_test (test_gw_wire_encode_output_verifies_with_jupyter_client),
        cmocka_unit_test (test_gw_frames_copy_take_and_dup),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
