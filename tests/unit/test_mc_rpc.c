/*  test_mc_rpc - cellvm-mcp's request decoder: JSON-RPC lines (mc_rpc), the
    line splitter with its cap (mc_lines), the tools' arguments (mc_tools)
    and base64 (mc_b64). All pure: no process, no socket.
*/
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "mc_b64.h"
#include "mc_lines.h"
#include "mc_rpc.h"
#include "mc_tools.h"

//  Decode text; return the JSON-RPC error code (0 when it decoded).
static int
s_decode (const char *text, mc_rpc_t **msg_p, json_t **id_p, char *why, size_t cap)
{
    int code = 0;
    int rc = mc_rpc_decode (text, strlen (text), msg_p, &code, id_p, why, cap);
    assert_int_equal (rc == 0, code == 0);
    return rc == 0 ? 0 : code;
}

static void
test_mc_rpc_decodes_request_notification_response (void **state)
{
    (void) state;
    mc_rpc_t *msg;
    json_t *id;
    char why [256];
    assert_int_equal (s_decode ("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":"
                                "{\"name\":\"x\",\"_meta\":{\"progressToken\":\"t1\"}}}", &msg, &id,
                                why, sizeof why), 0);
    assert_int_equal (mc_rpc_kind (msg), MC_RPC_REQUEST);
    assert_string_equal (mc_rpc_method (msg), "tools/call");
    assert_int_equal (json_integer_value (mc_rpc_id (msg)), 7);
    assert_string_equal (json_string_value (mc_rpc_progress_token (msg)), "t1");
    json_decref (id);
    mc_rpc_destroy (&msg);
    assert_null (msg);
    assert_int_equal (s_decode ("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}",
                                &msg, &id, why, sizeof why), 0);
    assert_int_equal (mc_rpc_kind (msg), MC_RPC_NOTIFICATION);
    assert_null (mc_rpc_id (msg));
    assert_null (mc_rpc_params (msg));
    mc_rpc_destroy (&msg);
    assert_int_equal (s_decode ("{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"result\":{}}", &msg, &id, why,
                                sizeof why), 0);
    assert_int_equal (mc_rpc_kind (msg), MC_RPC_RESPONSE);
    json_decref (id);
    mc_rpc_destroy (&msg);
}

static void
test_mc_rpc_refuses_bad_messages_with_codes (void **state)
{
    (void) state;
    static const struct { const char *text; int code; const char *why; bool has_id; } cases [] = {
        { "", MC_RPC_PARSE_ERROR, "not valid JSON", false },
        { "{\"jsonrpc\":", MC_RPC_PARSE_ERROR, "not valid JSON", false },
        { "\xff\xfe", MC_RPC_PARSE_ERROR, "not valid JSON", false },
        { "[1,2]", MC_RPC_INVALID_REQUEST, "batches", false },
        { "42", MC_RPC_INVALID_REQUEST, "JSON object", false },
        { "{\"id\":1,\"method\":\"ping\"}", MC_RPC_INVALID_REQUEST, "\"2.0\"", true },
        { "{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\"}", MC_RPC_INVALID_REQUEST, "\"id\"", false },
        { "{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}", MC_RPC_INVALID_REQUEST, "\"id\"", false },
        { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":3}", MC_RPC_INVALID_REQUEST, "\"method\"", true },
        { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\"}", MC_RPC_INVALID_REQUEST, "\"method\"", true },
        { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":3}", MC_RPC_INVALID_REQUEST, "\"params\"", true },
        { "{\"jsonrpc\":\"2.0\",\"id\":1}", MC_RPC_INVALID_REQUEST, "\"method\"", true },
        { "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1,\"error\":{}}", MC_RPC_INVALID_REQUEST, "exactly one", true },
        { "{\"jsonrpc\":\"2.0\",\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\"}", MC_RPC_PARSE_ERROR, "duplicate", false },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases [0]; i++) {
        mc_rpc_t *msg = (mc_rpc_t *) 1;
        json_t *id = NULL;
        char why [256];
        assert_int_equal (s_decode (cases [i].text, &msg, &id, why, sizeof why), cases [i].code);
        assert_null (msg);
        assert_non_null (strstr (why, cases [i].why));
        assert_int_equal (id != NULL, cases [i].has_id);
        json_decref (id);
    }
}

static void
test_mc_rpc_encodes_lines (void **state)
{
    (void) state;
    size_t len;
    json_t *id = json_integer (3), *result = json_pack ("{s:s}", "a", "\xc3\xa9");
    char *line = mc_rpc_result (id, &result, &len);
    assert_null (result);
    assert_string_equal (line, "{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"a\":\"\\u00E9\"}}\n");
    assert_int_equal (len, strlen (line));
    free (line);
    line = mc_rpc_error (NULL, MC_RPC_PARSE_ERROR, "bad", &len);
    assert_string_equal (line, "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,"
                               "\"message\":\"bad\"}}\n");
    free (line);
    line = mc_rpc_error (id, 1, "\xff not utf-8", &len);
    assert_non_null (strstr (line, "not valid UTF-8"));
    free (line);
    json_decref (id);
}

static void
test_mc_rpc_sniffs_the_id_of_an_oversize_line (void **state)
{
    (void) state;
    const char *head = "{\"jsonrpc\":\"2.0\",\"params\":{\"id\":9,\"code\":\"xx";
    assert_null (mc_rpc_sniff_id (head, strlen (head)));
    head = "{\"jsonrpc\":\"2.0\",\"id\": 12,\"method\":\"tools/call\",\"params\":{\"code\":\"xx";
    json_t *id = mc_rpc_sniff_id (head, strlen (head));
    assert_int_equal (json_integer_value (id), 12);
    json_decref (id);
    head = "{\"method\":\"x\",\"params\":{\"a\":\"\\\"id\\\":4\"},\"id\":\"r-1\",";
    id = mc_rpc_sniff_id (head, strlen (head));
    assert_string_equal (json_string_value (id), "r-1");
    json_decref (id);
}

static void
test_mc_lines_splits_and_caps (void **state)
{
    (void) state;
    mc_lines_t *lines = mc_lines_new (8);
    const char *in = "ab\r\n0123456789abc\nxyz\n\npart";
    const char *p = in, *line;
    size_t len = strlen (in), n, total;
    const char *want [] = { "ab", "0123456789abc", "xyz", "" };
    int kinds [] = { 1, 2, 1, 1 }, got = 0;
    while (len > 0) {
        size_t used = mc_lines_feed (lines, p, len);
        p += used;
        len -= used;
        int rc;
        while ((rc = mc_lines_next (lines, &line, &n, &total)) > 0) {
            assert_int_equal (rc, kinds [got]);
            if (rc == 1)
                assert_memory_equal (line, want [got], n);
            else
                assert_int_equal (total, 13);
            got++;
        }
    }
    assert_int_equal (got, 4);
    assert_int_equal (mc_lines_pending (lines), 4);
    mc_lines_destroy (&lines);
    assert_null (lines);
}

static void
test_mc_tools_normalises_and_refuses_paths (void **state)
{
    (void) state;
    char out [256], why [512];
    static const char *const ok [][2] = {
        { "", "/workspace" }, { "data/x.csv", "/workspace/data/x.csv" },
        { "/workspace", "/workspace" }, { "/workspace//a/./b/", "/workspace/a/b" },
        { "./a", "/workspace/a" },
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok [0]; i++) {
        assert_int_equal (mc_tools_path (ok [i][0], out, sizeof out, why, sizeof why), 0);
        assert_string_equal (out, ok [i][1]);
    }
    static const char *const bad [] = { "/etc/passwd", "/workspacex/a", "../x", "a/../../b",
                                        "a/..", "a\nb", "/" };
    for (size_t i = 0; i < sizeof bad / sizeof bad [0]; i++) {
        assert_int_equal (mc_tools_path (bad [i], out, sizeof out, why, sizeof why), -EACCES);
        assert_true (strstr (why, "/workspace") || strstr (why, "control"));
    }
}

//  Parse {"name": tool, "arguments": args}; the return code, why.
static int
s_parse (const char *tool, const char *args, mc_call_t **call_p, char *why, size_t cap)
{
    json_t *params = json_pack ("{s:s, s:o}", "name", tool, "arguments", json_loads (args, 0, NULL));
    int rc = mc_tools_parse (params, call_p, why, cap);
    json_decref (params);
    return rc;
}

static void
test_mc_tools_checks_arguments (void **state)
{
    (void) state;
    mc_call_t *call;
    char why [512];
    assert_int_equal (s_parse ("run_python", "{\"code\":\"1\",\"timeout_s\":2.5,\"session\":\"s-1\"}",
                               &call, why, sizeof why), 0);
    assert_string_equal (call->code, "1");
    assert_true (call->timeout_s == 2.5);
    assert_string_equal (call->session, "s-1");
    mc_call_destroy (&call);
    assert_int_equal (s_parse ("upload_file", "{\"path\":\"a.bin\",\"content_base64\":\"AAH/\"}",
                               &call, why, sizeof why), 0);
    assert_int_equal (call->len, 3);
    assert_int_equal (call->data [2], 0xff);
    assert_string_equal (call->path, "/workspace/a.bin");
    mc_call_destroy (&call);
    static const struct { const char *tool, *args, *why; int rc; } bad [] = {
        { "nope", "{}", "Unknown tool", -ENOENT },
        { "run_python", "{}", "needs \"code\"", -EINVAL },
        { "run_python", "{\"code\":1}", "must be a string, not a number", -EINVAL },
        { "run_python", "{\"code\":\"1\",\"timeout_s\":0}", "timeout_s", -EINVAL },
        { "run_python", "{\"code\":\"1\",\"timeout\":3}", "no argument \"timeout\"", -EINVAL },
        { "run_python", "{\"code\":\"1\",\"session\":\"a b\"}", "\"session\"", -EINVAL },
        { "upload_file", "{\"path\":\"a\"}", "exactly one", -EINVAL },
        { "upload_file", "{\"path\":\"a\",\"content_base64\":\"A*==\"}", "at character 1", -EINVAL },
        { "download_file", "{\"path\":\"/etc/shadow\"}", "PathOutsideWorkspace", -EACCES },
        { "list_files", "{\"path\":[]}", "must be a string", -EINVAL },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad [0]; i++) {
        call = (mc_call_t *) 1;
        assert_int_equal (s_parse (bad [i].tool, bad [i].args, &call, why, sizeof why), bad [i].rc);
        assert_null (call);
        assert_non_null (strstr (why, bad [i].why));
    }
}

static void
test_mc_b64_round_trips_and_refuses (void **state)
{
    (void) state;
    const uint8_t data [] = { 0, 1, 2, 0xfe, 0xff };
    for (size_t n = 0; n <= sizeof data; n++) {
        char *text = mc_b64_encode (data, n);
        uint8_t *back;
        size_t len, bad;
        assert_int_equal (strlen (text), mc_b64_encoded_len (n));
        assert_int_equal (mc_b64_decode (text, strlen (text), &back, &len, &bad), 0);
        assert_int_equal (len, n);
        assert_memory_equal (back, data, n);
        free (back);
        free (text);
    }
    uint8_t *out;
    size_t len, bad;
    assert_int_equal (mc_b64_decode ("aGk\n=", 5, &out, &len, &bad), 0);
    assert_memory_equal (out, "hi", 2);
    free (out);
    const char *refused [] = { "a", "a===", "aGk=a", "aG!k", "=aGk" };
    for (size_t i = 0; i < sizeof refused / sizeof refused [0]; i++)
        assert_int_equal (mc_b64_decode (refused [i], strlen (refused [i]), &out, &len, &bad), -EINVAL);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_mc_rpc_decodes_request_notification_response),
        cmocka_unit_test (test_mc_rpc_refuses_bad_messages_with_codes),
        cmocka_unit_test (test_mc_rpc_encodes_lines),
        cmocka_unit_test (test_mc_rpc_sniffs_the_id_of_an_oversize_line),
        cmocka_unit_test (test_mc_lines_splits_and_caps),
        cmocka_unit_test (test_mc_tools_normalises_and_refuses_paths),
        cmocka_unit_test (test_mc_tools_checks_arguments),
        cmocka_unit_test (test_mc_b64_round_trips_and_refuses),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
