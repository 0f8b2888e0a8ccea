/*  test_gi_ops - how init turns a control-port message into an action and a
    reply, on the host.

    gi_ops_decode is pure, so most of this drives it directly. The handle
    tests run whole requests through gi_ops_handle and a real gi_ctl
    (tu_gi.h), with /workspace pointed at a mkdtemp directory. Nothing here
    sets the clock, credits entropy or starts a kernel. workspace_detach and
    the hello that mounts /workspace again: test_gi_workspace.c.
*/
#include <errno.h>
#include <limits.h>
#include <sys/stat.h>

#include "tu_gi.h"

//  A request decode accepts, and all it must decode to (want.data: none
//  when nbuf is 0, else buffer 0, whose bytes are 'a').
typedef struct {
    const char *type, *content;
    int nbuf;
    size_t buflen;
    gi_req_t want;
} s_accept_t;

#define S_HEX64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define S_HELLO "{\"protocol\": \"cellvm-init\", \"version\": 1, \"role\": \"driver\", "

static const s_accept_t s_accepts [] = {
    //  hello takes the time, the protocol and entropy; everything is
    //  optional, and a time that is not a number is ignored.
    { "hello", S_HELLO "\"time\": 1767225600.5}", 1, 64, { .op = GI_OP_HELLO, .reply = "hello",
      .protocol = "cellvm-init", .has_time = 1, .time = 1767225600.5, .len = 64 } },
    { "hello", "{\"time\": \"noon\"}", 0, 0, { .op = GI_OP_HELLO, .reply = "hello" } },
    //  Requests without fields.
    { "status_request", "{\"ignored\": true}", 0, 0,
      { .op = GI_OP_STATUS, .reply = "status_reply" } },
    { "restart_request", "{\"ignored\": true}", 0, 0,
      { .op = GI_OP_RESTART, .reply = "restart_reply" } },
    { "shutdown_request", "{\"ignored\": true}", 0, 0,
      { .op = GI_OP_SHUTDOWN, .reply = "shutdown_reply" } },
    //  put with one buffer; no buffer: an empty file; append null or
    //  absent: truncate; mode 0: 0644.
    { "put_request", "{\"path\": \"/workspace/data/in.csv\", \"append\": true, \"mode\": 384}",
      1, 12345, { .op = GI_OP_PUT, .reply = "put_reply", .path = "/workspace/data/in.csv",
                  .rel = "data/in.csv", .append = 1, .mode = 0600, .len = 12345 } },
    { "put_request", "{\"path\": \"empty.txt\", \"append\": null}", 0, 0,
      { .op = GI_OP_PUT, .reply = "put_reply", .path = "empty.txt", .rel = "empty.txt" } },
    //  get defaults the length and caps it (not refused).
    { "get_request", "{\"path\": \"out/plot.png\"}", 0, 0, { .op = GI_OP_GET, .reply = "get_reply",
      .path = "out/plot.png", .rel = "out/plot.png", .length = GI_CHUNK_MAX } },
    { "get_request", "{\"path\": \"a\", \"offset\": 4294967296000, \"length\": 1099511627776}", 0, 0,
      { .op = GI_OP_GET, .reply = "get_reply", .path = "a", .rel = "a",
        .offset = 4294967296000ull, .length = GI_CHUNK_MAX } },
    //  kill takes a signal name.
    { "kill_request", "{}", 0, 0, { .op = GI_OP_KILL, .reply = "kill_reply", .signal = SIGKILL } },
    { "kill_request", "{\"signal\": null}", 0, 0,
      { .op = GI_OP_KILL, .reply = "kill_reply", .signal = SIGKILL } },
    { "kill_request", "{\"signal\": \"SIGINT\"}", 0, 0,
      { .op = GI_OP_KILL, .reply = "kill_reply", .signal = SIGINT } },
    { "kill_request", "{\"signal\": \"SIGTERM\"}", 0, 0,
      { .op = GI_OP_KILL, .reply = "kill_reply", .signal = SIGTERM } },
    { "set_time_request", "{\"time\": 1767225600.123}", 0, 0,
      { .op = GI_OP_SET_TIME, .reply = "set_time_reply", .has_time = 1, .time = 1767225600.123 } },
    { "add_entropy_request", "{}", 1, 1,
      { .op = GI_OP_ADD_ENTROPY, .reply = "add_entropy_reply", .len = 1 } },
    { "add_entropy_request", "{}", 1, 64,
      { .op = GI_OP_ADD_ENTROPY, .reply = "add_entropy_reply", .len = 64 } },
    { "add_entropy_request", "{}", 1, 4096,
      { .op = GI_OP_ADD_ENTROPY, .reply = "add_entropy_reply", .len = 4096 } },
    //  workspace_detach: kill_kernel true, false, or absent (null) for false.
    { "workspace_detach_request", "{}", 0, 0,
      { .op = GI_OP_WORKSPACE_DETACH, .reply = "workspace_detach_reply" } },
    { "workspace_detach_request", "{\"kill_kernel\": true}", 0, 0,
      { .op = GI_OP_WORKSPACE_DETACH, .reply = "workspace_detach_reply", .kill_kernel = 1 } },
    { "workspace_detach_request", "{\"kill_kernel\": false}", 0, 0,
      { .op = GI_OP_WORKSPACE_DETACH, .reply = "workspace_detach_reply" } },
    { "workspace_detach_request", "{\"kill_kernel\": null}", 0, 0,
      { .op = GI_OP_WORKSPACE_DETACH, .reply = "workspace_detach_reply" } },
    //  egress_start: a nonce of 16..64 of [0-9a-f]; the port defaults to 3128.
    { "egress_start_request", "{\"nonce\": \"0123456789abcdef\"}", 0, 0,
      { .op = GI_OP_EGRESS_START, .reply = "egress_start_reply", .nonce = "0123456789abcdef",
        .port = 3128 } },
    { "egress_start_request", "{\"nonce\": \"" S_HEX64 "\", \"port\": 1024}", 0, 0,
      { .op = GI_OP_EGRESS_START, .reply = "egress_start_reply", .nonce = S_HEX64,
        .port = 1024 } },
    { "egress_start_request", "{\"nonce\": \"" S_HEX64 "\", \"port\": 65535}", 0, 0,
      { .op = GI_OP_EGRESS_START, .reply = "egress_start_reply", .nonce = S_HEX64,
        .port = 65535 } },
};

//  got is want: both NULL, or both the same string.
static void
s_same_string (const char *got, const char *want)
{
    if (!want)
        assert_null (got);
    else {
        assert_non_null (got);
        assert_string_equal (got, want);
    }
}

static void
s_check_accepted (const s_accept_t *c)
{
    const gi_req_t *w = &c->want;
    gi_req_t r;
    char why [256];
    ch_msg_t *msg = tu_gi_req (CH_CELLVM, c->type, c->content, c->nbuf, c->buflen);
    assert_int_equal (gi_ops_decode (msg, &r, why, sizeof why), 0);
    assert_int_equal (r.op, w->op);
    assert_string_equal (r.reply, w->reply);
    assert_null (r.ename);
    s_same_string (r.path, w->path);
    s_same_string (r.rel, w->rel);
    s_same_string (r.protocol, w->protocol);
    s_same_string (r.nonce, w->nonce);
    assert_int_equal (r.port, w->port);
    assert_int_equal (r.append, w->append);
    assert_int_equal (r.mode, w->mode);
    assert_int_equal (r.offset, w->offset);
    assert_int_equal (r.length, w->length);
    assert_int_equal (r.len, w->len);
    assert_int_equal (r.signal, w->signal);
    assert_int_equal (r.kill_kernel, w->kill_kernel);
    assert_int_equal (r.has_time, w->has_time);
    assert_true (r.time == w->time);
    if (c->nbuf)
        assert_int_equal (r.data [r.len - 1], 'a');
    else
        assert_null (r.data);
    ch_msg_destroy (&msg);
}

//  Each request decoded into what to do, every field checked.
static void
test_gi_ops_decode_accepts_requests_into_what_to_do (void **state)
{
    (void) state;
    for (size_t i = 0; i < sizeof s_accepts / sizeof s_accepts [0]; i++)
        s_check_accepted (&s_accepts [i]);
}

//  Requests decode refuses, grouped by the refusal: its rc, ename and
//  evalue words. Each request: its content and nbuf buffers of buflen bytes.
typedef struct {
    const char *content;
    int nbuf;
    size_t buflen;
} s_bad_t;

#define S_BAD_MAX 8
typedef struct {
    const char *type;
    int rc;
    const char *ename, *evalue;
    s_bad_t bad [S_BAD_MAX];                    //  up to the first without content
} s_refusal_t;

#define S_OUTSIDE "paths must be under /workspace: Invalid cross-device link"
#define S_BAD_APPEND "append must be true or false: Invalid argument"
#define S_BAD_TIME "time must be a number: Invalid argument"
#define S_UNKNOWN "frobnicate_request: Function not implemented"
#define S_BAD_NONCE "nonce must be 16..64 of [0-9a-f]: Invalid argument"

static const s_refusal_t s_refusals [] = {
    { "put_request", -EINVAL, "BadRequest", "put needs a path and at most 1 buffer: Invalid argument",
      { { "{\"append\": false}", 1, 4 }, { "{\"path\": 5}", 0, 0 }, { "{\"path\": \"a\"}", 2, 4 },
        { "{\"path\": \"a\", \"mode\": \"644\"}", 0, 0 },
        { "{\"path\": \"a\", \"mode\": null}", 0, 0 } } },
    { "put_request", -EINVAL, "BadRequest", S_BAD_APPEND,
      { { "{\"path\": \"a\", \"append\": \"yes\"}", 1, 4 },
        { "{\"path\": \"a\", \"append\": 1}", 1, 4 } } },
    { "put_request", -EXDEV, "PathOutsideWorkspace", S_OUTSIDE,
      { { "{\"path\": \"/etc/passwd\"}", 1, 4 }, { "{\"path\": \"\"}", 1, 4 },
        { "{\"path\": \"out/../../x\"}", 1, 4 } } },
    { "get_request", -EINVAL, "BadRequest", "get needs a path, offset, length: Invalid argument",
      { { "{}", 0, 0 }, { "{\"path\": [\"a\"]}", 0, 0 },
        { "{\"path\": \"a\", \"offset\": -1}", 0, 0 }, { "{\"path\": \"a\", \"offset\": 1.5}", 0, 0 },
        { "{\"path\": \"a\", \"offset\": \"0\"}", 0, 0 }, { "{\"path\": \"a\", \"length\": -1}", 0, 0 },
        { "{\"path\": \"a\", \"length\": null}", 0, 0 } } },
    { "get_request", -EXDEV, "PathOutsideWorkspace", S_OUTSIDE,
      { { "{\"path\": \"/workspace\"}", 0, 0 }, { "{\"path\": \"/workspacex/a\"}", 0, 0 } } },
    { "kill_request", -EINVAL, "BadRequest", "signal must be a name like \"SIGINT\": Invalid argument",
      { { "{\"signal\": \"INT\"}", 0, 0 }, { "{\"signal\": 9}", 0, 0 } } },
    { "set_time_request", -EINVAL, "BadRequest", S_BAD_TIME,
      { { "{}", 0, 0 }, { "{\"time\": \"now\"}", 0, 0 } } },
    { "set_time_request", -EINVAL, "BadRequest", "time: Invalid argument",
      { { "{\"time\": -1}", 0, 0 }, { "{\"time\": 1e12}", 0, 0 } } },
    { "add_entropy_request", -EINVAL, "BadRequest", "entropy must be 1..4096 bytes: Invalid argument",
      { { "{}", 0, 0 }, { "{}", 2, 8 }, { "{}", 1, 4097 } } },
    { "workspace_detach_request", -EINVAL, "BadRequest",
      "kill_kernel must be true or false: Invalid argument",
      { { "{\"kill_kernel\": 1}", 0, 0 }, { "{\"kill_kernel\": \"yes\"}", 0, 0 },
        { "{\"kill_kernel\": [true]}", 0, 0 } } },
    { "egress_start_request", -EINVAL, "BadRequest", S_BAD_NONCE,
      { { "{}", 0, 0 }, { "{\"nonce\": \"0123456789abcde\"}", 0, 0 },
        { "{\"nonce\": \"" S_HEX64 "0\"}", 0, 0 },
        { "{\"nonce\": \"0123456789ABCDEF\"}", 0, 0 },
        { "{\"nonce\": \"0123456789abcdeg\"}", 0, 0 },
        { "{\"nonce\": \"\"}", 0, 0 },
        { "{\"nonce\": 1234567890123456789}", 0, 0 }, { "{\"nonce\": null}", 0, 0 } } },
    { "egress_start_request", -EINVAL, "BadRequest", "port must be an integer 1024..65535: "
      "Invalid argument",
      { { "{\"nonce\": \"0123456789abcdef\", \"port\": 1023}", 0, 0 },
        { "{\"nonce\": \"0123456789abcdef\", \"port\": 65536}", 0, 0 },
        { "{\"nonce\": \"0123456789abcdef\", \"port\": \"3128\"}", 0, 0 },
        { "{\"nonce\": \"0123456789abcdef\", \"port\": null}", 0, 0 },
        { "{\"nonce\": \"0123456789abcdef\", \"port\": 3128.5}", 0, 0 },
        { "{\"nonce\": \"0123456789abcdef\", \"port\": -1}", 0, 0 } } },
    { "frobnicate_request", -ENOSYS, "UnknownMessageType", S_UNKNOWN, { { "{}", 0, 0 } } },
};
//  bad refused as c says, the reply named after the request.
static void
s_check_refused (const s_refusal_t *c, const s_bad_t *bad)
{
    ch_msg_t *msg = tu_gi_req (CH_CELLVM, c->type, bad->content, bad->nbuf, bad->buflen);
    gi_req_t r;
    char why [256], reply [128];
    int rc = gi_ops_decode (msg, &r, why, sizeof why);
    if (rc != c->rc || !r.ename || strcmp (r.ename, c->ename) || strcmp (why, c->evalue))
        fail_msg ("%s %s: rc %d ename %s evalue \"%s\"", c->type, bad->content, rc,
                  r.ename ? r.ename : "(null)", why);
    assert_string_equal (r.reply, tu_gi_reply_type (c->type, reply));
    assert_int_equal (r.op, GI_OP_NONE);
    ch_msg_destroy (&msg);
}

//  Each refusal names the reply, its ename and its evalue words.
static void
test_gi_ops_decode_refuses_bad_requests_with_reply_words (void **state)
{
    (void) state;
    int checked = 0;
    for (size_t i = 0; i < sizeof s_refusals / sizeof s_refusals [0]; i++)
        for (int j = 0; j < S_BAD_MAX && s_refusals [i].bad [j].content; j++, checked++)
            s_check_refused (&s_refusals [i], &s_refusals [i].bad [j]);
    assert_int_equal (checked, 46);             //  every request in the table
}

static void
test_gi_ops_decode_drops_what_is_not_a_request (void **state)
{
    (void) state;
    char longest [128], too_long [128];
    snprintf (longest, sizeof longest, "%0112d_request", 0);    //  120 characters
    snprintf (too_long, sizeof too_long, "%0113d_request", 0);
    const struct { ch_channel_t channel; const char *type; int rc; const char *reply; } cases [] = {
        { CH_CELLVM, "frobnicate", -ENOMSG, "" },
        { CH_CELLVM, "kernel_exited", -ENOMSG, "" },
        { CH_CELLVM, "_request", -ENOMSG, "" },
        { CH_CELLVM, too_long, -ENOMSG, "" },
        { CH_SHELL, "hello", -ENOMSG, "" },
        { CH_CELLVM, longest, -ENOSYS, "" },
        { CH_SHELL, "status_request", -ENOSYS, "status_reply" },   //  init speaks cellvm only
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases [0]; i++) {
        ch_msg_t *msg = tu_gi_req (cases [i].channel, cases [i].type, "{}", 0, 0);
        gi_req_t r;
        char why [256];
        assert_int_equal (gi_ops_decode (msg, &r, why, sizeof why), cases [i].rc);
        assert_int_equal (r.op, GI_OP_NONE);
        assert_true (why [0]);                  //  a refusal always says why
        if (cases [i].rc == -ENOMSG) {
            assert_string_equal (r.reply, "");
            assert_null (r.ename);
        }
        else if (cases [i].reply [0])
            assert_string_equal (r.reply, cases [i].reply);
        else
            assert_int_equal (strlen (r.reply), 118);
        ch_msg_destroy (&msg);
    }
}

//  ---------------------------------------------------------------------------
//  Whole requests through gi_ops_handle and gi_ctl, replies read back.

static int
s_setup (void **state)
{
    return tu_gi_setup (state, "test_gi_ops", "tmpfs");
}

static void
test_gi_ops_handle_put_then_get_round_trip (void **state)
{
    tu_gi_t *f = (tu_gi_t *) *state;
    ch_msg_t *req = tu_gi_req (CH_CELLVM, "put_request",
                               "{\"path\": \"/workspace/in/data.bin\"}", 1, 1000);
    json_t *c = tu_gi_reply (f, req, "put_reply", "ok", NULL);
    assert_string_equal (tu_gi_str (c, "path"), "/workspace/in/data.bin");
    assert_int_equal (json_integer_value (json_object_get (c, "size")), 1000);
    assert_int_equal (json_integer_value (json_object_get (c, "written")), 1000);
    assert_int_equal (strlen (tu_gi_str (c, "sha256")), 64);
    char sha [65];
    snprintf (sha, sizeof sha, "%s", tu_gi_str (c, "sha256"));
    json_decref (c);
    req = tu_gi_req (CH_CELLVM, "get_request", "{\"path\": \"in/data.bin\", \"offset\": 0}", 0, 0);
    ch_msg_t *out = NULL;
    c = tu_gi_reply (f, req, "get_reply", "ok", &out);
    assert_string_equal (tu_gi_str (c, "path"), "/workspace/in/data.bin");
    assert_int_equal (json_integer_value (json_object_get (c, "length")), 1000);
    assert_true (json_is_true (json_object_get (c, "eof")));
    assert_string_equal (tu_gi_str (c, "sha256"), sha);
    assert_int_equal (ch_msg_nbuffers (out), 1);            //  the bytes, as a buffer
    size_t len = 0;
    const uint8_t *bytes = ch_msg_buffer (out, 0, &len);
    assert_int_equal (len, 1000);
    assert_int_equal (bytes [999], 'a');
    json_decref (c);
    ch_msg_destroy (&out);
    //  An empty chunk comes without a buffer.
    req = tu_gi_req (CH_CELLVM, "get_request", "{\"path\": \"in/data.bin\", \"offset\": 1000}", 0, 0);
    c = tu_gi_reply (f, req, "get_reply", "ok", &out);
    assert_int_equal (ch_msg_nbuffers (out), 0);
    json_decref (c);
    ch_msg_destroy (&out);
}

static void
test_gi_ops_handle_errors_carry_ename_and_evalue (void **state)
{
    tu_gi_t *f = (tu_gi_t *) *state;
    const struct { const char *type, *content, *ename, *evalue; } cases [] = {
        { "put_request", "{\"path\": \"/etc/passwd\"}", "PathOutsideWorkspace", S_OUTSIDE },
        { "put_request", "{\"path\": \"a\", \"append\": \"yes\"}", "BadRequest", S_BAD_APPEND },
        { "get_request", "{\"path\": \"nope.txt\"}", "FileNotFound",
          "nope.txt: No such file or directory" },
        { "get_request", "{\"path\": \"in\"}", "NotARegularFile", "in: Invalid argument" },
        { "kill_request", "{\"signal\": \"SIGINT\"}", "NoKernel",
          "the kernel is not running: No such process" },
        { "set_time_request", "{\"time\": \"now\"}", "BadRequest", S_BAD_TIME },
        { "frobnicate_request", "{}", "UnknownMessageType", S_UNKNOWN },
        //  The host has no egress port (a guest without one says the same).
        { "egress_start_request", "{\"nonce\": \"0123456789abcdef\"}", "NoEgressPort",
          "this VM has no egress port: the image or the gateway is older" },
        { "egress_start_request", "{\"nonce\": \"xyz\"}", "BadRequest", S_BAD_NONCE },
    };
    char dir [PATH_MAX], reply [128];
    assert_int_equal (mkdir (tu_path (dir, sizeof dir, f->root, "in"), 0755), 0);
    for (size_t i = 0; i < sizeof cases / sizeof cases [0]; i++) {
        ch_msg_t *req = tu_gi_req (CH_CELLVM, cases [i].type, cases [i].content, 0, 0);
        json_t *c = tu_gi_reply (f, req, tu_gi_reply_type (cases [i].type, reply), "error", NULL);
        assert_string_equal (tu_gi_str (c, "ename"), cases [i].ename);
        assert_string_equal (tu_gi_str (c, "evalue"), cases [i].evalue);
        json_decref (c);
    }
}

static void
test_gi_ops_handle_answers_every_hello (void **state)
{
    tu_gi_t *f = (tu_gi_t *) *state;
    for (int i = 1; i <= 2; i++) {
        ch_msg_t *req = tu_gi_req (CH_CELLVM, "hello", "{\"protocol\": \"cellvm-init\", "
                                   "\"version\": 1, \"role\": \"driver\"}", 0, 0);
        json_t *c = tu_gi_reply (f, req, "hello", "ok", NULL);
        assert_string_equal (tu_gi_str (c, "protocol"), "cellvm-init");
        assert_string_equal (tu_gi_str (c, "role"), "init");
        assert_string_equal (tu_gi_str (c, "workspace"), "/workspace");
        assert_string_equal (tu_gi_str (c, "workspace_fs"), "tmpfs");
        assert_string_equal (tu_gi_str (c, "kernel_port"), "cellvm.kernel");
        assert_int_equal (json_integer_value (json_object_get (c, "hellos")), i);
        assert_int_equal (json_integer_value (json_object_get (c, "max_frame")),
                          CH_FRAME_MAX_DEFAULT);
        assert_string_equal (tu_gi_str (json_object_get (c, "kernel"), "state"), "not_started");
        assert_null (json_object_get (c, "adjusted_s"));
        assert_true (json_is_true (json_object_get (c, "workspace_mounted")));
        assert_null (json_object_get (c, "workspace_error"));
        json_decref (c);
    }
}

static void
test_gi_ops_handle_status_request_reports_the_kernel (void **state)
{
    tu_gi_t *f = (tu_gi_t *) *state;
    ch_msg_t *req = tu_gi_req (CH_CELLVM, "status_request", "{}", 0, 0);
    json_t *c = tu_gi_reply (f, req, "status_reply", "ok", NULL);
    json_t *k = json_object_get (c, "kernel");
    assert_string_equal (tu_gi_str (k, "state"), "not_started");
    assert_true (json_is_null (json_object_get (k, "last_exit")));
    assert_true (json_is_true (json_object_get (c, "workspace_mounted")));
    json_decref (c);
}

static void
test_gi_ops_handle_drops_messages_that_are_not_requests (void **state)
{
    tu_gi_t *f = (tu_gi_t *) *state;
    ch_msg_t *req = tu_gi_req (CH_CELLVM, "frobnicate", "{}", 0, 0);
    assert_null (tu_gi_call (f, req));
    req = tu_gi_req (CH_CELLVM, "kernel_exited", "{}", 0, 0);
    assert_null (tu_gi_call (f, req));
    assert_int_equal (gi_ctl_queued (f->ctl), 0);
}

int
main (void)
{
#define S_TEST(name) cmocka_unit_test_setup_teardown (name, s_setup, tu_gi_teardown)
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_gi_ops_decode_accepts_requests_into_what_to_do),
        cmocka_unit_test (test_gi_ops_decode_refuses_bad_requests_with_reply_words),
        cmocka_unit_test (test_gi_ops_decode_drops_what_is_not_a_request),
        S_TEST (test_gi_ops_handle_put_then_get_round_trip),
        S_TEST (test_gi_ops_handle_errors_carry_ename_and_evalue),
        S_TEST (test_gi_ops_handle_answers_every_hello),
        S_TEST (test_gi_ops_handle_status_request_reports_the_kernel),
        S_TEST (test_gi_ops_handle_drops_messages_that_are_not_requests),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
