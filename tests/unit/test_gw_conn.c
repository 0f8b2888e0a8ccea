/*  test_gw_conn - loading the connection file a Jupyter client writes. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "wire/gw_conn.h"

#define SECRET "e8bd966f-188aaf0fb9d983f3cf49159a"

//  The file KernelManager writes, with one field replaced or removed.
#define PORTS "\"shell_port\": 33335, \"iopub_port\": 56431, \"stdin_port\": 58129, " \
              "\"control_port\": 58401, \"hb_port\": 34151"
#define GOOD "{" PORTS ", \"ip\": \"127.0.0.1\", \"key\": \"" SECRET "\", " \
             "\"transport\": \"tcp\", \"signature_scheme\": \"hmac-sha256\", " \
             "\"kernel_name\": \"cellvm\"}"

static char s_path [64];

//  Write text to a fresh temporary file; its path is s_path.
static const char *
s_file (const char *text)
{
    snprintf (s_path, sizeof s_path, "/tmp/test_gw_conn_XXXXXX");
    int fd = mkstemp (s_path);
    assert_true (fd >= 0);
    size_t len = strlen (text);
    assert_int_equal (write (fd, text, len), (ssize_t) len);
    close (fd);
    return s_path;
}

//  Load text, expect failure, and return the error (static buffer).
static const char *
s_load_error (const char *text)
{
    static char err [512];
    err [0] = 0;
    gw_conn_t *conn = gw_conn_load (s_file (text), err, sizeof err);
    unlink (s_path);
    assert_null (conn);
    assert_non_null (strstr (err, s_path));     //  names the file
    assert_null (strstr (err, SECRET));         //  never the key
    assert_null (strstr (err, "188aaf0f"));     //  not even part of it
    return err;
}

static void
test_gw_conn_loads_tcp_file (void **state)
{
    (void) state;
    char err [256];
    gw_conn_t *conn = gw_conn_load (s_file (GOOD), err, sizeof err);
    unlink (s_path);
    assert_non_null (conn);
    assert_string_equal (gw_conn_transport (conn), "tcp");
    assert_string_equal (gw_conn_scheme (conn), "hmac-sha256");
    char endpoint [64];
    assert_int_equal (gw_conn_endpoint (conn, GW_PORT_SHELL, endpoint, sizeof endpoint), 0);
    assert_string_equal (endpoint, "tcp://127.0.0.1:33335");
    assert_int_equal (gw_conn_endpoint (conn, GW_PORT_HB, endpoint, sizeof endpoint), 0);
    assert_string_equal (endpoint, "tcp://127.0.0.1:34151");
    assert_int_equal (gw_conn_port (conn, GW_PORT_IOPUB), 56431);
    assert_int_equal (gw_conn_port (conn, GW_PORT_STDIN), 58129);
    assert_int_equal (gw_conn_port (conn, GW_PORT_CONTROL), 58401);
    size_t len = 0;
    const uint8_t *key = gw_conn_key (conn, &len);
    assert_int_equal (len, strlen (SECRET));
    assert_memory_equal (key, SECRET, len);     //  the string's bytes, not hex-decoded
    gw_conn_destroy (&conn);
    assert_null (conn);
}

static void
test_gw_conn_builds_ipc_endpoint (void **state)
{
    (void) state;
    char err [256];
    gw_conn_t *conn = gw_conn_load (s_file ("{\"transport\": \"ipc\", \"ip\": \"/tmp/kernel-ipc\","
        " \"shell_port\": 1, \"iopub_port\": 2, \"stdin_port\": 3, \"control_port\": 4,"
        " \"hb_port\": 0, \"key\": \"\"}"), err, sizeof err);
    unlink (s_path);
    assert_non_null (conn);
    char endpoint [64];
    assert_int_equal (gw_conn_endpoint (conn, GW_PORT_SHELL, endpoint, sizeof endpoint), 0);
    assert_string_equal (endpoint, "ipc:///tmp/kernel-ipc-1");
    assert_int_equal (gw_conn_endpoint (conn, GW_PORT_HB, endpoint, sizeof endpoint), 0);
    assert_string_equal (endpoint, "ipc:///tmp/kernel-ipc-0");
    size_t len = 99;
    gw_conn_key (conn, &len);
    assert_int_equal (len, 0);                  //  empty key: signing off
    gw_conn_destroy (&conn);
}

static void
test_gw_conn_brackets_ipv6_and_defaults_scheme (void **state)
{
    (void) state;
    char err [256];
    gw_conn_t *conn = gw_conn_load (s_file ("{" PORTS ", \"ip\": \"::1\", \"key\": \"k\"}"),
                                    err, sizeof err);
    unlink (s_path);
    assert_non_null (conn);
    assert_string_equal (gw_conn_transport (conn), "tcp");       //  default
    assert_string_equal (gw_conn_scheme (conn), "hmac-sha256");  //  default
    char endpoint [64];
    assert_int_equal (gw_conn_endpoint (conn, GW_PORT_SHELL, endpoint, sizeof endpoint), 0);
    assert_string_equal (endpoint, "tcp://[::1]:33335");
    gw_conn_destroy (&conn);
}

static void
test_gw_conn_endpoint_reports_small_buffer (void **state)
{
    (void) state;
    char err [256];
    gw_conn_t *conn = gw_conn_load (s_file (GOOD), err, sizeof err);
    unlink (s_path);
    char endpoint [10];
    assert_int_equal (gw_conn_endpoint (conn, GW_PORT_SHELL, endpoint, sizeof endpoint), -ENOSPC);
    assert_int_equal (gw_conn_endpoint (conn, (gw_port_t) 9, endpoint, sizeof endpoint), -EINVAL);
    gw_conn_destroy (&conn);
}

static void
test_gw_conn_reports_missing_file (void **state)
{
    (void) state;
    char err [256];
    assert_null (gw_conn_load ("/nonexistent/kernel-1.json", err, sizeof err));
    assert_non_null (strstr (err, "/nonexistent/kernel-1.json"));
    assert_non_null (strstr (err, "No such file"));
    assert_null (gw_conn_load (NULL, err, sizeof err));
    assert_non_null (strstr (err, "no connection file"));
}

static void
test_gw_conn_reports_bad_json_position (void **state)
{
    (void) state;
    const char *err = s_load_error ("{\"ip\": \"127.0.0.1\",\n \"shell_port\": 1,,}");
    assert_non_null (strstr (err, "not valid JSON at line 2"));
    err = s_load_error ("[1, 2]");
    assert_non_null (strstr (err, "not a JSON object"));
}

static void
test_gw_conn_reports_missing_port (void **state)
{
    (void) state;
    const char *err = s_load_error ("{\"shell_port\": 1, \"iopub_port\": 2, \"stdin_port\": 3,"
        " \"control_port\": 4, \"ip\": \"127.0.0.1\", \"key\": \"" SECRET "\"}");
    assert_non_null (strstr (err, "missing field \"hb_port\""));
}

static void
test_gw_conn_rejects_port_out_of_range (void **state)
{
    (void) state;
    const char *bad [] = { "70000", "0", "-1", "\"5555\"", "1.5", "null" };
    for (size_t i = 0; i < sizeof bad / sizeof bad [0]; i++) {
        char text [512];
        snprintf (text, sizeof text, "{\"shell_port\": 1, \"iopub_port\": 2, \"stdin_port\": %s,"
                  " \"control_port\": 4, \"hb_port\": 5, \"ip\": \"127.0.0.1\", \"key\": \""
                  SECRET "\"}", bad [i]);
        const char *err = s_load_error (text);
        assert_non_null (strstr (err, "bad port value for \"stdin_port\""));
    }
}

static void
test_gw_conn_rejects_wrong_transport (void **state)
{
    (void) state;
    const char *err = s_load_error ("{" PORTS ", \"ip\": \"127.0.0.1\", \"key\": \"" SECRET "\","
                                    " \"transport\": \"udp\"}");
    assert_non_null (strstr (err, "\"transport\" must be \"tcp\" or \"ipc\""));
}

static void
test_gw_conn_rejects_bad_scheme (void **state)
{
    (void) state;
    const char *bad [] = { "\"sha256\"", "\"hmac-sha3\"", "\"\"", "42" };
    for (size_t i = 0; i < sizeof bad / sizeof bad [0]; i++) {
        char text [512];
        snprintf (text, sizeof text, "{" PORTS ", \"ip\": \"127.0.0.1\", \"key\": \"" SECRET "\","
                  " \"signature_scheme\": %s}", bad [i]);
        const char *err = s_load_error (text);
        assert_non_null (strstr (err, "\"signature_scheme\" must be \"hmac-\""));
    }
}

static void
test_gw_conn_requires_key_and_ip (void **state)
{
    (void) state;
    const char *err = s_load_error ("{" PORTS ", \"ip\": \"127.0.0.1\"}");
    assert_non_null (strstr (err, "missing field \"key\""));
    err = s_load_error ("{" PORTS ", \"ip\": \"127.0.0.1\", \"key\": 5}");
    assert_non_null (strstr (err, "\"key\" must be a string"));
    err = s_load_error ("{" PORTS ", \"key\": \"" SECRET "\"}");
    assert_non_null (strstr (err, "missing field \"ip\""));
}

static void
test_gw_conn_never_puts_key_in_errors (void **state)
{
    (void) state;
    //  Syntax errors right at or after the key: jansson would quote it.
    s_load_error ("{\"key\": \"" SECRET);
    s_load_error ("{\"key\": \"" SECRET "\" \"ip\": 1}");
    s_load_error ("{\"key\": \"" SECRET "\x01\"}");
    s_load_error ("{\"key\": " SECRET "}");
    s_load_error ("{\"key\": \"" SECRET "\", \"key\": \"" SECRET "\"}");
    s_load_error ("{\"" SECRET "\": 1}");
    s_load_error ("{" PORTS ", \"ip\": \"127.0.0.1\", \"key\": \"" SECRET "\", \"transport\": 7}");
}

//  A keypair from zmq.curve_keypair(), and the ZeroMQ documentation's key
//  (zmq_curve(7)) with its bytes, from pyzmq's z85.decode.
#define CURVE_PUB "<KG3wqzpv#i=iyGH1UbYvpw{0t6YQTD?g?B:H4Ku"
#define CURVE_SEC "(:pV?D-+sMW(gib}k7GGVyV3&tloe}3}wlg>w.5*"
#define DOC_KEY "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID"
static const uint8_t s_doc_key_bytes [32] = {
    0xbb, 0x88, 0x47, 0x1d, 0x65, 0xe2, 0x65, 0x9b, 0x30, 0xc5, 0x5a, 0x53, 0x21, 0xce, 0xbb, 0x5a,
    0xab, 0x2b, 0x70, 0xa3, 0x98, 0x64, 0x5c, 0x26, 0xdc, 0xa2, 0xb2, 0xfc, 0xb4, 0x3f, 0xc5, 0x18
};

//  GOOD with the curve fields (text after its last field, e.g. ", \"curve_publickey\": ...").
static const char *
s_with (const char *curve_fields)
{
    static char text [1024];
    snprintf (text, sizeof text, "{" PORTS ", \"ip\": \"127.0.0.1\", \"key\": \"" SECRET "\"%s}",
              curve_fields);
    return text;
}

static void
test_gw_conn_decodes_z85_keys (void **state)
{
    (void) state;
    uint8_t out [GW_CONN_CURVE_KEY];
    assert_int_equal (gw_conn_z85_key (DOC_KEY, strlen (DOC_KEY), out), 0);
    assert_memory_equal (out, s_doc_key_bytes, sizeof out);
    const char *max = "%nSc0%nSc0%nSc0%nSc0%nSc0%nSc0%nSc0%nSc0";     //  all 0xff
    assert_int_equal (gw_conn_z85_key (max, 40, out), 0);
    for (size_t i = 0; i < sizeof out; i++)
        assert_int_equal (out [i], 0xff);
}

static void
test_gw_conn_refuses_bad_z85 (void **state)
{
    (void) state;
    uint8_t out [GW_CONN_CURVE_KEY];
    memset (out, 0x5a, sizeof out);
    assert_int_equal (gw_conn_z85_key (DOC_KEY, 39, out), -EINVAL);
    assert_int_equal (gw_conn_z85_key (DOC_KEY "0", 41, out), -EINVAL);
    assert_int_equal (gw_conn_z85_key ("", 0, out), -EINVAL);
    assert_int_equal (gw_conn_z85_key (NULL, 40, out), -EINVAL);
    //  Characters Z85 leaves out (quote, backslash, comma, ~), and a NUL inside.
    const char *bad [] = { "\"", "\\", ",", "~", "_", " " };
    for (size_t i = 0; i < sizeof bad / sizeof bad [0]; i++) {
        char key [41];
        memcpy (key, DOC_KEY, sizeof key);
        key [17] = bad [i][0];
        assert_int_equal (gw_conn_z85_key (key, 40, out), -EILSEQ);
    }
    assert_int_equal (gw_conn_z85_key ("Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*\0IaLV{hID", 40, out),
                      -EILSEQ);
    //  "%nSc1" is 2^32: five digits past four bytes. The output is wiped.
    memset (out, 0x5a, sizeof out);
    assert_int_equal (gw_conn_z85_key ("%nSc0%nSc0%nSc0%nSc1%nSc0%nSc0%nSc0%nSc0", 40, out),
                      -ERANGE);
    for (size_t i = 0; i < sizeof out; i++)
        assert_int_equal (out [i], 0);
    assert_int_equal (gw_conn_z85_key ("########################################", 40, out),
                      -ERANGE);
}

static void
test_gw_conn_loads_curve_keys (void **state)
{
    (void) state;
    char err [512];
    gw_conn_t *conn = gw_conn_load (s_file (s_with (", \"curve_publickey\": \"" DOC_KEY "\", "
                                    "\"curve_secretkey\": \"" CURVE_SEC "\"")), err, sizeof err);
    unlink (s_path);
    assert_non_null (conn);
    const uint8_t *pub = NULL, *sec = NULL;
    assert_true (gw_conn_curve (conn, &pub, &sec));
    assert_memory_equal (pub, s_doc_key_bytes, sizeof s_doc_key_bytes);
    uint8_t want [GW_CONN_CURVE_KEY];
    assert_int_equal (gw_conn_z85_key (CURVE_SEC, 40, want), 0);
    assert_memory_equal (sec, want, sizeof want);
    gw_conn_destroy (&conn);
}

static void
test_gw_conn_plain_without_curve_keys (void **state)
{
    (void) state;
    const char *plain [] = { "", ", \"curve_publickey\": null, \"curve_secretkey\": null" };
    for (size_t i = 0; i < sizeof plain / sizeof plain [0]; i++) {
        char err [512];
        gw_conn_t *conn = gw_conn_load (s_file (s_with (plain [i])), err, sizeof err);
        unlink (s_path);
        assert_non_null (conn);
        const uint8_t *pub = (const uint8_t *) "x", *sec = (const uint8_t *) "x";
        assert_false (gw_conn_curve (conn, &pub, &sec));
        assert_null (pub);
        assert_null (sec);
        gw_conn_destroy (&conn);
    }
}

//  The reason names the field and never quotes either key.
static const char *
s_curve_error (const char *fields)
{
    const char *err = s_load_error (s_with (fields));
    assert_null (strstr (err, CURVE_PUB));
    assert_null (strstr (err, CURVE_SEC));
    assert_null (strstr (err, "(:pV?D"));
    return err;
}

static void
test_gw_conn_refuses_one_curve_key (void **state)
{
    (void) state;
    const char *err = s_curve_error (", \"curve_publickey\": \"" CURVE_PUB "\"");
    assert_non_null (strstr (err, "\"curve_publickey\" is given without \"curve_secretkey\""));
    err = s_curve_error (", \"curve_secretkey\": \"" CURVE_SEC "\"");
    assert_non_null (strstr (err, "\"curve_secretkey\" is given without \"curve_publickey\""));
    err = s_curve_error (", \"curve_publickey\": null, \"curve_secretkey\": \"" CURVE_SEC "\"");
    assert_non_null (strstr (err, "\"curve_secretkey\" is given without"));
}

static void
test_gw_conn_refuses_bad_curve_key (void **state)
{
    (void) state;
    const char *err = s_curve_error (", \"curve_publickey\": \"" CURVE_PUB "x\", "
                                     "\"curve_secretkey\": \"" CURVE_SEC "\"");
    assert_non_null (strstr (err, "field \"curve_publickey\" must be a CurveZMQ key"));
    assert_non_null (strstr (err, "length is not 40"));
    err = s_curve_error (", \"curve_publickey\": \"" CURVE_PUB "\", "
                         "\"curve_secretkey\": \"(:pV?D-+sMW(gib}k7GGVyV3&tloe}3}wlg>w,5*\"");
    assert_non_null (strstr (err, "field \"curve_secretkey\" holds a character that is not Z85"));
    err = s_curve_error (", \"curve_publickey\": 42, \"curve_secretkey\": \"" CURVE_SEC "\"");
    assert_non_null (strstr (err, "field \"curve_publickey\" must be a CurveZMQ key"));
    assert_non_null (strstr (err, "not a string"));
    err = s_curve_error (", \"curve_publickey\": \"" CURVE_PUB "\", \"curve_secretkey\": \"\"");
    assert_non_null (strstr (err, "field \"curve_secretkey\" must be a CurveZMQ key"));
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_gw_conn_loads_tcp_file),
        cmocka_unit_test (test_gw_conn_builds_ipc_endpoint),
        cmocka_unit_test (test_gw_conn_brackets_ipv6_and_defaults_scheme),
        cmocka_unit_test (test_gw_conn_endpoint_reports_small_buffer),
        cmocka_unit_test (test_gw_conn_reports_missing_file),
        cmocka_unit_test (test_gw_conn_reports_bad_json_position),
        cmocka_unit_test (test_gw_conn_reports_missing_port),
        cmocka_unit_test (test_gw_conn_rejects_port_out_of_range),
        cmocka_unit_test (test_gw_conn_rejects_wrong_transport),
        cmocka_unit_test (test_gw_conn_rejects_bad_scheme),
        cmocka_unit_test (test_gw_conn_requires_key_and_ip),
        cmocka_unit_test (test_gw_conn_never_puts_key_in_errors),
        cmocka_unit_test (test_gw_conn_decodes_z85_keys),
        cmocka_unit_test (test_gw_conn_refuses_bad_z85),
        cmocka_unit_test (test_gw_conn_loads_curve_keys),
        cmocka_unit_test (test_gw_conn_plain_without_curve_keys),
        cmocka_unit_test (test_gw_conn_refuses_one_curve_key),
        cmocka_unit_test (test_gw_conn_refuses_bad_curve_key),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
