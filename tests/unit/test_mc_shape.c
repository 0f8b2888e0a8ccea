/*  test_mc_shape - a cell's outputs shaped for a model: head-and-tail
    clipping with its marker (mc_clip), ANSI codes and carriage returns
    (mc_clip_clean), HTML tables as text (mc_html), and the whole
    CallToolResult (mc_shape). Pure.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "mc_clip.h"
#include "mc_html.h"
#include "mc_shape.h"

static void
test_mc_clip_keeps_everything_that_fits (void **state)
{
    (void) state;
    mc_clip_t *clip = mc_clip_new (100);
    mc_clip_add (clip, "hello ", 6);
    mc_clip_add (clip, "world\n", 6);
    char *text = mc_clip_text (clip);
    assert_string_equal (text, "hello world\n");
    assert_int_equal (mc_clip_omitted (clip), 0);
    free (text);
    mc_clip_destroy (&clip);
    assert_null (clip);
}

static void
test_mc_clip_keeps_head_and_tail_with_marker (void **state)
{
    (void) state;
    mc_clip_t *clip = mc_clip_new (1000);
    mc_clip_add (clip, "HEAD\n", 5);
    char line [101];
    memset (line, 'x', 99);
    line [99] = '\n';
    for (int i = 0; i < 12346; i++)
        mc_clip_add (clip, line, 100);
    mc_clip_add (clip, "TAIL\n", 5);
    char *text = mc_clip_text (clip);
    assert_int_equal (mc_clip_total (clip), 1234610);
    assert_true (strncmp (text, "HEAD\n", 5) == 0);
    assert_true (strlen (text) <= 1000 + 64);
    assert_non_null (strstr (text, "TAIL\n"));
    char marker [64], num [32];
    snprintf (marker, sizeof marker, "\n[... %s bytes omitted ...]\n",
              mc_clip_fmt_bytes (mc_clip_omitted (clip), num));
    assert_non_null (strstr (text, marker));
    //  Cuts fall on line breaks when one is near: whole lines around the marker.
    assert_non_null (strstr (text, "x\n[... "));
    assert_non_null (strstr (text, "omitted ...]\nxxx"));
    //  The marker's leading line break is the head's own last one.
    assert_int_equal (strlen (text) - (strlen (marker) - 1) + mc_clip_omitted (clip),
                      mc_clip_total (clip));
    free (text);
    mc_clip_destroy (&clip);
}

static void
test_mc_clip_never_cuts_a_character (void **state)
{
    (void) state;
    mc_clip_t *clip = mc_clip_new (64);
    for (int i = 0; i < 200; i++)
        mc_clip_add (clip, "\xe2\x82\xac", 3);     //  the euro sign, no line breaks
    char *text = mc_clip_text (clip);
    json_t *s = json_string (text);             //  NULL when not UTF-8
    assert_non_null (s);
    json_decref (s);
    assert_non_null (strstr (text, "bytes omitted"));
    free (text);
    mc_clip_destroy (&clip);
}

static void
test_mc_clip_formats_bytes (void **state)
{
    (void) state;
    char out [32];
    assert_string_equal (mc_clip_fmt_bytes (0, out), "0");
    assert_string_equal (mc_clip_fmt_bytes (999, out), "999");
    assert_string_equal (mc_clip_fmt_bytes (1234567, out), "1,234,567");
    assert_string_equal (mc_clip_fmt_bytes (1000, out), "1,000");
}

static void
test_mc_clip_cleans_ansi_and_carriage_returns (void **state)
{
    (void) state;
    static const char *const cases [][2] = {
        { "\x1b[0;31mZeroDivisionError\x1b[0m: x", "ZeroDivisionError: x" },
        { "\x1b[1;32m----> 1\x1b[39m y", "----> 1 y" },
        { "\x1b]0;title\x07text", "text" },
        { "\x1b]8;;http://x\x1b\\link", "link" },
        { "10%\r50%\r100%\ndone\r\n", "100%\ndone\r\n" },
        { "plain", "plain" },
        { "\x1b[", "" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases [0]; i++) {
        size_t len;
        char *out = mc_clip_clean (cases [i][0], strlen (cases [i][0]), &len);
        assert_string_equal (out, cases [i][1]);
        assert_int_equal (len, strlen (cases [i][1]));
        free (out);
    }
}

static void
test_mc_html_tables_become_rows (void **state)
{
    (void) state;
    const char *html =
        "<div><style scoped>.x td { color: red }</style><table border=\"1\" class=\"dataframe\">\n"
        "<thead><tr><th></th><th>a</th><th>b &amp; c</th></tr></thead>\n"
        "<tbody><tr>\n  <th>0</th>\n  <td>1</td>\n  <td>&lt;3&gt;</td>\n</tr></tbody></table>"
        "<script>alert(1)</script><p>2 rows</p></div>";
    assert_true (mc_html_has_table (html, strlen (html)));
    char *text = mc_html_to_text (html, strlen (html));
    assert_string_equal (text, "| a | b & c\n0 | 1 | <3>\n2 rows");
    free (text);
    assert_false (mc_html_has_table ("<b>x</b>", 8));
    text = mc_html_to_text ("<b>x", 4);
    assert_string_equal (text, "x");
    free (text);
}

static json_t *
s_json (const char *text)
{
    json_t *v = json_loads (text, 0, NULL);
    assert_non_null (v);
    return v;
}

static void
s_feed (mc_shape_t *shape, const char *type, const char *content)
{
    json_t *c = s_json (content);
    mc_shape_iopub (shape, type, c);
    json_decref (c);
}

static const char *
s_text (json_t *result)
{
    return json_string_value (json_object_get (json_array_get (json_object_get (result, "content"), 0), "text"));
}

static void
test_mc_shape_ok_cell_with_result_image_and_file (void **state)
{
    (void) state;
    mc_shape_opts_t opts;
    mc_shape_opts_default (&opts);
    mc_shape_t *shape = mc_shape_new (&opts, "default");
    s_feed (shape, "stream", "{\"name\": \"stdout\", \"text\": \"hi\\n\"}");
    s_feed (shape, "display_data", "{\"data\": {\"image/png\": \"iVBORw0K\\nGgo=\", \"text/plain\": "
                                   "\"<Figure size 640x480 with 1 Axes>\"}, \"metadata\": {}}");
    s_feed (shape, "execute_result", "{\"execution_count\": 3, \"data\": {\"text/plain\": \"42\"}}");
    json_t *reply = s_json ("{\"status\": \"ok\", \"execution_count\": 3, \"output_files\": [{\"path\":"
                            " \"/workspace/out/a b.csv\", \"size\": 8, \"mime\": \"text/csv\", "
                            "\"sha256\": \"ab\"}]}");
    mc_shape_reply (shape, reply);
    mc_shape_elapsed (shape, 0.5);
    json_t *r = mc_shape_result (shape);
    assert_true (json_is_false (json_object_get (r, "isError")));
    assert_non_null (strstr (s_text (r), "Cell [3] ran in 0.50 s."));
    assert_non_null (strstr (s_text (r), "--- result (Out[3]) ---\n42\n"));
    assert_null (strstr (s_text (r), "<Figure"));
    json_t *content = json_object_get (r, "content");
    assert_string_equal (json_string_value (json_object_get (json_array_get (content, 1), "data")), "iVBORw0KGgo=");
    json_t *link = json_array_get (content, 2);
    assert_string_equal (json_string_value (json_object_get (link, "type")), "resource_link");
    assert_string_equal (json_string_value (json_object_get (link, "uri")), "cellvm://default/workspace/out/a%20b.csv");
    json_t *sc = json_object_get (r, "structuredContent");
    assert_string_equal (json_string_value (json_object_get (sc, "status")), "ok");
    assert_int_equal (json_integer_value (json_object_get (sc, "execution_count")), 3);
    assert_string_equal (json_string_value (json_object_get (json_array_get (
        json_object_get (sc, "output_files"), 0), "sha256")), "ab");
    json_decref (r);
    json_decref (reply);
    mc_shape_destroy (&shape);
    assert_null (shape);
}

static void
test_mc_shape_error_is_data_without_ansi (void **state)
{
    (void) state;
    mc_shape_opts_t opts;
    mc_shape_opts_default (&opts);
    opts.links = opts.structured = false;
    mc_shape_t *shape = mc_shape_new (&opts, "s");
    s_feed (shape, "error", "{\"ename\": \"ZeroDivisionError\", \"evalue\": \"division by zero\", "
                            "\"traceback\": [\"\\u001b[0;31mZeroDivisionError\\u001b[0m\", \"line 1\"]}");
    json_t *reply = s_json ("{\"status\": \"error\", \"execution_count\": 4}");
    mc_shape_reply (shape, reply);
    json_t *r = mc_shape_result (shape);
    assert_true (json_is_true (json_object_get (r, "isError")));
    assert_null (json_object_get (r, "structuredContent"));
    assert_null (strchr (s_text (r), 0x1b));
    assert_non_null (strstr (s_text (r), "Cell [4] raised ZeroDivisionError"));
    assert_non_null (strstr (s_text (r), "ZeroDivisionError\nline 1\n"));
    json_decref (r);
    json_decref (reply);
    mc_shape_destroy (&shape);
}

static void
test_mc_shape_death_and_timeouts_in_words (void **state)
{
    (void) state;
    mc_shape_opts_t opts;
    mc_shape_opts_default (&opts);
    mc_shape_t *shape = mc_shape_new (&opts, "s");
    s_feed (shape, "error", "{\"ename\": \"KernelDied\", \"evalue\": \"The kernel was killed by "
                            "signal 9.\", \"traceback\": []}");
    json_t *r = mc_shape_result (shape);
    assert_string_equal (json_string_value (json_object_get (json_object_get (r, "structuredContent"),
                                                             "status")), "died");
    assert_non_null (strstr (s_text (r), "The kernel died while the cell ran"));
    assert_non_null (strstr (s_text (r), "signal 9"));
    json_decref (r);
    mc_shape_destroy (&shape);
    shape = mc_shape_new (&opts, "s");
    mc_shape_end (shape, MC_END_TIMEOUT_RESTART, 10, NULL);
    r = mc_shape_result (shape);
    assert_true (json_is_true (json_object_get (r, "isError")));
    assert_non_null (strstr (s_text (r), "time limit of 10 s"));
    assert_non_null (strstr (s_text (r), "Kept: the files under /workspace"));
    json_decref (r);
    mc_shape_end (shape, MC_END_LOST, 0, "The session ended: gone.");
    r = mc_shape_result (shape);
    assert_non_null (strstr (s_text (r), "The session ended: gone."));
    json_decref (r);
    mc_shape_destroy (&shape);
}

static void
test_mc_shape_caps_streams_images_and_clears (void **state)
{
    (void) state;
    mc_shape_opts_t opts;
    mc_shape_opts_default (&opts);
    opts.stream_cap = 100;
    opts.max_images = 1;
    mc_shape_t *shape = mc_shape_new (&opts, "s");
    s_feed (shape, "stream", "{\"name\": \"stdout\", \"text\": \"gone\"}");
    s_feed (shape, "clear_output", "{\"wait\": false}");
    for (int i = 0; i < 50; i++)
        s_feed (shape, "stream", "{\"name\": \"stderr\", \"text\": \"0123456789\\n\"}");
    s_feed (shape, "display_data", "{\"data\": {\"image/png\": \"AAAA\"}, \"metadata\": {}}");
    s_feed (shape, "display_data", "{\"data\": {\"image/png\": \"BBBB\"}, \"metadata\": {}}");
    json_t *r = mc_shape_result (shape);
    json_t *sc = json_object_get (r, "structuredContent");
    assert_string_equal (json_string_value (json_object_get (sc, "stdout")), "");
    assert_int_equal (json_integer_value (json_object_get (sc, "stderr_bytes")), 550);
    assert_non_null (strstr (json_string_value (json_object_get (sc, "stderr")), "bytes omitted"));
    assert_int_equal (json_integer_value (json_object_get (sc, "images")), 1);
    assert_non_null (strstr (s_text (r), "already returned 1 images"));
    json_decref (r);
    mc_shape_destroy (&shape);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_mc_clip_keeps_everything_that_fits),
        cmocka_unit_test (test_mc_clip_keeps_head_and_tail_with_marker),
        cmocka_unit_test (test_mc_clip_never_cuts_a_character),
        cmocka_unit_test (test_mc_clip_formats_bytes),
        cmocka_unit_test (test_mc_clip_cleans_ansi_and_carriage_returns),
        cmocka_unit_test (test_mc_html_tables_become_rows),
        cmocka_unit_test (test_mc_shape_ok_cell_with_result_image_and_file),
        cmocka_unit_test (test_mc_shape_error_is_data_without_ansi),
        cmocka_unit_test (test_mc_shape_death_and_timeouts_in_words),
        cmocka_unit_test (test_mc_shape_caps_streams_images_and_clears),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
