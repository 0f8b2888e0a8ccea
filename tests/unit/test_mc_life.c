/*  test_mc_life - the lifetimes of cellvm-mcp's sessions: the gateway's
    notice that it ends a session, recognised (mc_life_notice); what a call
    on a session that ended is told (mc_life_why, mc_life_words, and the
    results of mc_op_ended_result); --idle-timeout and --ttl parsed
    (mc_args) and resolved against a kernelspec (mc_spec_lifetime). No
    process, no socket: kernelspecs are files in a scratch directory.
*/
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "mc_args.h"
#include "mc_life.h"
#include "mc_op.h"
#include "mc_spec.h"
#include "tu.h"

#define IDLE_NOTICE "cellvm: this session was idle longer than its limit (--idle-timeout) " \
    "(3 s) and is being shut down. Its variables and /workspace files are discarded; start a " \
    "new session to go on."

//  An IOPub stream: name, text, and a parent msg_id (NULL: none).
static ch_msg_t *
s_stream (ch_channel_t ch, const char *name, const char *text, const char *parent_id)
{
    json_t *content = json_pack ("{s:s, s:s}", "name", name, "text", text);
    json_t *parent = parent_id ? json_pack ("{s:s}", "msg_id", parent_id) : NULL;
    ch_msg_t *msg = ch_msg_new (ch, "stream", parent, &content, "gw");
    json_decref (parent);
    assert_non_null (msg);
    return msg;
}

static bool
s_notice (ch_msg_t *msg, char *out, size_t cap)
{
    bool is = mc_life_notice (msg, out, cap);
    ch_msg_destroy (&msg);
    return is;
}

static void
test_mc_life_recognises_the_gateways_notice (void **state)
{
    (void) state;
    char out [512];
    assert_true (s_notice (s_stream (CH_IOPUB, "stderr", IDLE_NOTICE "\n", NULL), out,
                           sizeof out));
    assert_string_equal (out, IDLE_NOTICE);         //  the newline trimmed
    assert_true (s_notice (s_stream (CH_IOPUB, "stderr", "cellvm: this session reached its "
                                     "lifetime limit (--ttl) (5 s) ...", ""), out, sizeof out));
    assert_non_null (strstr (out, "(--ttl)"));
    //  A cell's own output, even the same words, is not the gateway's.
    assert_false (s_notice (s_stream (CH_IOPUB, "stderr", IDLE_NOTICE, "a-cell"), out, sizeof out));
    assert_false (s_notice (s_stream (CH_IOPUB, "stdout", IDLE_NOTICE, NULL), out, sizeof out));
    assert_false (s_notice (s_stream (CH_SHELL, "stderr", IDLE_NOTICE, NULL), out, sizeof out));
    assert_false (s_notice (s_stream (CH_IOPUB, "stderr", "cellvm: this cell ran longer than its "
                                      "120 s time limit", NULL), out, sizeof out));
    json_t *content = json_pack ("{s:s}", "execution_state", "idle");
    ch_msg_t *status = ch_msg_new (CH_IOPUB, "status", NULL, &content, "gw");
    assert_false (s_notice (status, out, sizeof out));
    //  Cut to the buffer, never past it.
    char small [16];
    assert_true (s_notice (s_stream (CH_IOPUB, "stderr", IDLE_NOTICE, NULL), small, sizeof small));
    assert_string_equal (small, "cellvm: this se");
}

static void
test_mc_life_why_prefers_the_gateways_words (void **state)
{
    (void) state;
    char *why = mc_life_why (IDLE_NOTICE, "its gateway process exited with status 0");
    assert_string_equal (why, "the gateway said: \"" IDLE_NOTICE "\"");
    free (why);
    why = mc_life_why ("", "its gateway process was killed by signal 9 (SIGKILL)");
    assert_string_equal (why, "its gateway process was killed by signal 9 (SIGKILL)");
    free (why);
    why = mc_life_why (NULL, NULL);
    assert_string_equal (why, "its gateway process ended");
    free (why);
}

//  Each call learns what happened, what was lost and what to do.
static void
test_mc_life_words_for_each_call (void **state)
{
    (void) state;
    char *why = mc_life_why (IDLE_NOTICE, NULL);
    char *w = mc_life_words ("default", MC_LIFE_BEFORE, MC_TOOL_RUN_PYTHON, why, "");
    assert_non_null (strstr (w, "The session \"default\" had already ended, so this call was not "
                             "run: the gateway said: \"cellvm: this session was idle"));
    assert_non_null (strstr (w, "go on.\" Lost: every variable"));       //  no ".."
    assert_non_null (strstr (w, "every file under /workspace"));
    assert_non_null (strstr (w, "call run_python again: that starts a fresh, empty session"));
    assert_null (strstr (w, "log ends"));
    free (w);
    w = mc_life_words ("a", MC_LIFE_DURING, MC_TOOL_UPLOAD_FILE, why, NULL);
    assert_non_null (strstr (w, "The session \"a\" ended while this call was running: "));
    assert_non_null (strstr (w, "To go on, call run_python: that starts"));
    free (w);
    w = mc_life_words ("a", MC_LIFE_BEFORE, MC_TOOL_RESTART, why, "");
    assert_non_null (strstr (w, "had already ended, so there was nothing to restart: "));
    assert_non_null (strstr (w, "Lost: "));
    free (w);
    w = mc_life_words ("a", MC_LIFE_BEFORE, MC_TOOL_CLOSE, why, "");
    assert_non_null (strstr (w, "had already ended, so there was nothing left to close: "));
    assert_non_null (strstr (w, "The next call on \"a\" starts a fresh, empty session."));
    assert_null (strstr (w, "Lost: "));
    free (w);
    free (why);
    w = mc_life_words ("b", MC_LIFE_BEFORE, MC_TOOL_LIST_FILES, "its gateway process exited with "
                       "status 1", "boom\n");
    assert_non_null (strstr (w, "not run: its gateway process exited with status 1. Lost:"));
    assert_non_null (strstr (w, "\nThe gateway's log ends with:\nboom\n"));
    free (w);
}

static mc_op_t *
s_op (const char *params, mc_options_t *opts, mc_shape_opts_t *shape)
{
    json_error_t jerr;
    json_t *p = json_loads (params, 0, &jerr);
    mc_call_t *call = NULL;
    char why [256];
    assert_int_equal (mc_tools_parse (p, &call, why, sizeof why), 0);
    json_decref (p);
    json_t *id = json_integer (9);
    mc_op_t *op = mc_op_new (&call, id, NULL, false, opts, shape, "default");
    json_decref (id);
    return op;
}

//  run_python is a "lost" result with structuredContent; close is done.
static void
test_mc_life_results_of_calls_on_an_ended_session (void **state)
{
    (void) state;
    mc_options_t opts;
    mc_args_default (&opts);
    mc_shape_opts_t shape;
    mc_shape_opts_default (&shape);
    shape.structured = shape.links = true;
    mc_op_t *op = s_op ("{\"name\":\"run_python\",\"arguments\":{\"code\":\"x\"}}", &opts, &shape);
    json_t *r = mc_op_ended_result (op, "The session \"default\" had already ended.", 1000);
    assert_true (json_is_true (json_object_get (r, "isError")));
    json_t *sc = json_object_get (r, "structuredContent");
    assert_string_equal (json_string_value (json_object_get (sc, "status")), "lost");
    assert_true (json_is_null (json_object_get (sc, "execution_count")));
    const char *text = json_string_value (json_object_get (
        json_array_get (json_object_get (r, "content"), 0), "text"));
    assert_non_null (strstr (text, "had already ended."));
    json_decref (r);
    mc_op_destroy (&op);
    op = s_op ("{\"name\":\"close\",\"arguments\":{}}", &opts, &shape);
    r = mc_op_ended_result (op, "nothing left to close", 1000);
    assert_true (json_is_false (json_object_get (r, "isError")));
    json_decref (r);
    mc_op_destroy (&op);
    op = s_op ("{\"name\":\"list_files\",\"arguments\":{}}", &opts, &shape);
    r = mc_op_ended_result (op, "gone", 1000);
    assert_true (json_is_true (json_object_get (r, "isError")));
    json_decref (r);
    mc_op_destroy (&op);
}

static int
s_parse (mc_options_t *opts, const char *opt, const char *value)
{
    char *argv [] = { (char *) "cellvm-mcp", (char *) opt, (char *) value, NULL };
    return mc_args_parse (opts, 3, argv);
}

static void
test_mc_life_options_parse (void **state)
{
    (void) state;
    mc_options_t opts;
    mc_args_default (&opts);
    assert_true (opts.idle_timeout_s < 0 && opts.ttl_s < 0);     //  not given
    assert_int_equal (s_parse (&opts, "--idle-timeout", "3"), 0);
    assert_true (opts.idle_timeout_s == 3 && opts.ttl_s < 0);
    assert_int_equal (s_parse (&opts, "--ttl", "0"), 0);        //  0: no limit
    assert_true (opts.ttl_s == 0 && opts.idle_timeout_s < 0);
    assert_int_equal (s_parse (&opts, "--ttl", "2592000"), 0);  //  30 days
    assert_true (opts.ttl_s == 2592000);
    assert_int_equal (s_parse (&opts, "--ttl", "-1"), -EINVAL);
    assert_int_equal (s_parse (&opts, "--idle-timeout", "soon"), -EINVAL);
    assert_int_equal (s_parse (&opts, "--idle-timeout", "2e9"), -EINVAL);
}

typedef struct {
    char dir [TU_DIR_MAX];
} fixture_t;

static int
s_setup (void **state)
{
    *state = tu_fixture_new (sizeof (fixture_t), "test_mc_life");
    return 0;
}

static mc_spec_t *
s_spec (const char *dir, const char *name, const char *argv_tail)
{
    char text [512], path [PATH_MAX], err [512];
    snprintf (text, sizeof text, "{\"argv\": [\"/bin/true\", \"--connection-file\", "
              "\"{connection_file}\"%s]}", argv_tail);
    tu_write_file (dir, name, text);
    mc_spec_t *spec = mc_spec_load (tu_path (path, sizeof path, dir, name), err, sizeof err);
    assert_non_null (spec);
    return spec;
}

//  Ours wins (appended after the spec's argv), else the spec's own, else
//  the default.
static void
test_mc_life_resolves_against_the_kernelspec (void **state)
{
    fixture_t *f = *state;
    bool append;
    mc_spec_t *plain = s_spec (f->dir, "plain.json", "");
    assert_true (mc_spec_lifetime (plain, "--idle-timeout", -1, MC_LIFE_IDLE_DEFAULT, &append)
                 == MC_LIFE_IDLE_DEFAULT);
    assert_true (append);
    assert_true (mc_spec_lifetime (plain, "--ttl", -1, 0, &append) == 0);
    assert_false (append);
    assert_true (mc_spec_lifetime (plain, "--ttl", 0, 0, &append) == 0);
    assert_true (append);                                       //  0 said: passed on
    mc_spec_destroy (&plain);
    mc_spec_t *agent = s_spec (f->dir, "agent.json", ", \"--idle-timeout\", \"43200\", "
                               "\"--ttl=86400\", \"--idle-pause\", \"300\"");
    assert_true (mc_spec_lifetime (agent, "--idle-timeout", -1, 1800, &append) == 43200);
    assert_false (append);
    assert_true (mc_spec_lifetime (agent, "--ttl", -1, 0, &append) == 86400);
    assert_false (append);
    assert_true (mc_spec_lifetime (agent, "--idle-timeout", 3, 1800, &append) == 3);
    assert_true (append);
    mc_spec_destroy (&agent);
    mc_spec_t *bad = s_spec (f->dir, "bad.json", ", \"--ttl\", \"soon\", \"--idle-timeout\"");
    assert_true (mc_spec_lifetime (bad, "--ttl", -1, 0, &append) == 0);
    assert_false (append);
    assert_true (mc_spec_lifetime (bad, "--idle-timeout", -1, 1800, &append) == 1800);
    assert_true (append);
    mc_spec_destroy (&bad);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_mc_life_recognises_the_gateways_notice),
        cmocka_unit_test (test_mc_life_why_prefers_the_gateways_words),
        cmocka_unit_test (test_mc_life_words_for_each_call),
        cmocka_unit_test (test_mc_life_results_of_calls_on_an_ended_session),
        cmocka_unit_test (test_mc_life_options_parse),
        cmocka_unit_test_setup_teardown (test_mc_life_resolves_against_the_kernelspec, s_setup,
                                         tu_fixture_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
