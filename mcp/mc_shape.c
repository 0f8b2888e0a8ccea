/*  mc_shape - one cell's outputs, shaped into an MCP tool result for a model. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mc_clip.h"
#include "mc_fileres.h"
#include "mc_html.h"
#include "mc_shape.h"

struct _mc_shape_t {
    mc_shape_opts_t opts;
    char *session;
    mc_clip_t *out;         //  stdout
    mc_clip_t *err;         //  stderr
    json_t *displays;       //  [{"data": bundle, "id": display_id or null}]
    json_t *result;         //  execute_result's bundle, or NULL
    json_t *error;          //  the error message's content, or NULL
    json_t *reply;          //  execute_reply's content, or NULL
    double elapsed;
    mc_end_t end;
    double limit_s;
    char *words;
};

void
mc_shape_opts_default (mc_shape_opts_t *opts)
{
    assert (opts);
    opts->stream_cap = 20000;
    opts->text_cap = 20000;
    opts->image_cap = 1u << 20;
    opts->max_images = 4;
    opts->links = true;
    opts->structured = true;
}

mc_shape_t *
mc_shape_new (const mc_shape_opts_t *opts, const char *session)
{
    assert (opts && session);
    mc_shape_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->opts = *opts;
    self->session = strdup (session);
    self->out = mc_clip_new (opts->stream_cap);
    self->err = mc_clip_new (opts->stream_cap);
    self->displays = json_array ();
    if (!self->session || !self->displays)
        abort ();
    return self;
}

void
mc_shape_destroy (mc_shape_t **self_p)
{
    assert (self_p);
    mc_shape_t *self = *self_p;
    if (!self)
        return;
    mc_clip_destroy (&self->out);
    mc_clip_destroy (&self->err);
    json_decref (self->displays);
    json_decref (self->result);
    json_decref (self->error);
    json_decref (self->reply);
    free (self->session);
    free (self->words);
    free (self);
    *self_p = NULL;
}

static void
s_stream (mc_shape_t *self, const json_t *content)
{
    const char *name = json_string_value (json_object_get (content, "name"));
    json_t *text = json_object_get (content, "text");
    if (!name || !json_is_string (text))
        return;
    mc_clip_t *clip = strcmp (name, "stderr") == 0 ? self->err : self->out;
    mc_clip_add (clip, json_string_value (text), json_string_length (text));
}

//  A display: appended, or an earlier one with the same display_id replaced.
static void
s_display (mc_shape_t *self, const json_t *content, bool update)
{
    json_t *data = json_object_get (content, "data");
    json_t *id = json_object_get (json_object_get (content, "transient"), "display_id");
    if (!json_is_object (data))
        return;
    size_t i;
    json_t *d;
    json_array_foreach (self->displays, i, d) {
        if (json_is_string (id) && json_equal (json_object_get (d, "id"), id)) {
            json_object_set (d, "data", data);
            return;
        }
    }
    if (!update)
        json_array_append_new (self->displays, json_pack ("{s:O, s:O}", "data", data, "id",
                                                          json_is_string (id) ? id : json_null ()));
}

//  clear_output: what the cell showed so far goes, as in a notebook.
static void
s_clear (mc_shape_t *self)
{
    mc_clip_destroy (&self->out);
    mc_clip_destroy (&self->err);
    self->out = mc_clip_new (self->opts.stream_cap);
    self->err = mc_clip_new (self->opts.stream_cap);
    json_array_clear (self->displays);
}

void
mc_shape_iopub (mc_shape_t *self, const char *msg_type, const json_t *content)
{
    assert (self && msg_type);
    if (!json_is_object (content))
        return;
    if (strcmp (msg_type, "stream") == 0)
        s_stream (self, content);
    else if (strcmp (msg_type, "display_data") == 0)
        s_display (self, content, false);
    else if (strcmp (msg_type, "update_display_data") == 0)
        s_display (self, content, true);
    else if (strcmp (msg_type, "execute_result") == 0 && json_is_object (json_object_get (content, "data"))) {
        json_decref (self->result);
        self->result = json_incref (json_object_get (content, "data"));
    }
    else if (strcmp (msg_type, "error") == 0) {
        json_decref (self->error);
        self->error = json_deep_copy (content);
    }
    else if (strcmp (msg_type, "clear_output") == 0)
        s_clear (self);
}

void
mc_shape_reply (mc_shape_t *self, const json_t *content)
{
    assert (self);
    if (!json_is_object (content))
        return;
    json_decref (self->reply);
    self->reply = json_deep_copy (content);
    //  A reply with an error but no error message on IOPub still tells it.
    const char *status = json_string_value (json_object_get (content, "status"));
    if (!self->error && status && strcmp (status, "error") == 0)
        self->error = json_pack ("{s:O?, s:O?, s:O?}", "ename", json_object_get (content, "ename"),
                                 "evalue", json_object_get (content, "evalue"), "traceback",
                                 json_object_get (content, "traceback"));
}

void
mc_shape_elapsed (mc_shape_t *self, double seconds)
{
    assert (self);
    self->elapsed = seconds;
}

void
mc_shape_end (mc_shape_t *self, mc_end_t end, double limit_s, const char *words)
{
    assert (self);
    self->end = end;
    self->limit_s = limit_s;
    free (self->words);
    self->words = words ? strdup (words) : NULL;
}

size_t
mc_shape_stdout_bytes (const mc_shape_t *self)
{
    assert (self);
    return mc_clip_total (self->out);
}

//  ---------------------------------------------------------------------
//  Building the result

typedef struct {
    FILE *text;             //  the text block being written
    char *text_buf;
    size_t text_len;
    json_t *content;        //  content blocks after the text
    json_t *sc;             //  structuredContent
    size_t images;          //  images returned so far
} build_t;

static const char *const s_image_types [] = { "image/png", "image/jpeg", "image/gif",
                                              "image/webp", NULL };

//  base64 without whitespace (the kernel may wrap lines); new string.
static char *
s_b64_compact (const char *s, size_t *len_p)
{
    size_t len = strlen (s), n = 0;
    char *out = malloc (len + 1);
    if (!out)
        abort ();
    for (size_t i = 0; i < len; i++)
        if (s [i] != '\n' && s [i] != '\r' && s [i] != ' ')
            out [n++] = s [i];
    out [n] = 0;
    *len_p = n;
    return out;
}

//  An image of bundle as an image block, or why not in the text. True when
//  the bundle held an image.
static bool
s_image (mc_shape_t *self, build_t *b, const json_t *bundle)
{
    for (const char *const *t = s_image_types; *t; t++) {
        const char *data = json_string_value (json_object_get (bundle, *t));
        if (!data)
            continue;
        size_t len;
        char *b64 = s_b64_compact (data, &len);
        size_t bytes = len / 4 * 3;
        char num [32], cap [32];
        if (b->images >= self->opts.max_images)
            fprintf (b->text, "[%s image of %s bytes not returned: this call already returned "
                     "%zu images, the most it may]\n", *t, mc_clip_fmt_bytes (bytes, num), b->images);
        else if (bytes > self->opts.image_cap)
            fprintf (b->text, "[%s image of %s bytes not returned: over the %s-byte image cap; "
                     "save it under /workspace/out and use download_file]\n", *t,
                     mc_clip_fmt_bytes (bytes, num), mc_clip_fmt_bytes (self->opts.image_cap, cap));
        else {
            json_array_append_new (b->content, json_pack ("{s:s, s:s, s:s}", "type", "image",
                                                          "data", b64, "mimeType", *t));
            fprintf (b->text, "[%s image, %s bytes: returned as image %zu]\n", *t,
                     mc_clip_fmt_bytes (bytes, num), ++b->images);
        }
        free (b64);
        return true;
    }
    return false;
}

//  text/plain that only names an object ("<Figure size 640x480 with 1 Axes>").
static bool
s_is_object_repr (const char *s)
{
    size_t n = s ? strlen (s) : 0;
    return n >= 2 && s [0] == '<' && s [n - 1] == '>' && !memchr (s, '\n', n);
}

//  The text a bundle shows: an HTML table as rows when text/plain is only
//  an object's name; else text/plain, markdown, LaTeX, JSON, HTML. New.
static char *
s_bundle_text (const json_t *bundle)
{
    const char *plain = json_string_value (json_object_get (bundle, "text/plain"));
    json_t *html = json_object_get (bundle, "text/html");
    if (json_is_string (html) && (!plain || s_is_object_repr (plain))
        && mc_html_has_table (json_string_value (html), json_string_length (html)))
        return mc_html_to_text (json_string_value (html), json_string_length (html));
    if (plain)
        return strdup (plain);
    static const char *const texts [] = { "text/markdown", "text/latex", "text/html", NULL };
    for (const char *const *t = texts; *t; t++) {
        json_t *v = json_object_get (bundle, *t);
        if (json_is_string (v))
            return strcmp (*t, "text/html") == 0
                ? mc_html_to_text (json_string_value (v), json_string_length (v))
                : strdup (json_string_value (v));
    }
    json_t *j = json_object_get (bundle, "application/json");
    return j ? json_dumps (j, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
}

//  Text cleaned of terminal codes and capped head and tail; new.
static char *
s_capped (const char *text, size_t len, size_t cap)
{
    char *clean = mc_clip_clean (text, len, &len);
    mc_clip_t *clip = mc_clip_new (cap);
    mc_clip_add (clip, clean, len);
    char *out = mc_clip_text (clip);
    mc_clip_destroy (&clip);
    free (clean);
    return out;
}

static void
s_section (build_t *b, const char *title, const char *body)
{
    size_t n = strlen (body);
    fprintf (b->text, "--- %s ---\n%s%s", title, body, n && body [n - 1] != '\n' ? "\n" : "");
}

//  stdout or stderr: a section, and its data in structuredContent.
static void
s_stream_out (build_t *b, mc_clip_t *clip, const char *name)
{
    size_t total = mc_clip_total (clip);
    char *raw = mc_clip_text (clip);
    size_t len;
    char *text = mc_clip_clean (raw, strlen (raw), &len);
    char title [96], num [32];
    snprintf (title, sizeof title, "%s (%s bytes)", name, mc_clip_fmt_bytes (total, num));
    if (total > 0)
        s_section (b, title, text);
    char key [32];
    json_object_set_new (b->sc, name, json_stringn (text, len));
    snprintf (key, sizeof key, "%s_bytes", name);
    json_object_set_new (b->sc, key, json_integer ((json_int_t) total));
    snprintf (key, sizeof key, "%s_omitted_bytes", name);
    json_object_set_new (b->sc, key, json_integer ((json_int_t) mc_clip_omitted (clip)));
    free (raw);
    free (text);
}

static void
s_displays_out (mc_shape_t *self, build_t *b)
{
    mc_clip_t *clip = mc_clip_new (self->opts.text_cap);
    size_t i;
    json_t *d;
    json_array_foreach (self->displays, i, d) {
        json_t *bundle = json_object_get (d, "data");
        bool image = s_image (self, b, bundle);
        char *text = s_bundle_text (bundle);
        if (text && !(image && s_is_object_repr (text))) {
            mc_clip_add (clip, text, strlen (text));
            mc_clip_add (clip, "\n", 1);
        }
        free (text);
    }
    char *all = mc_clip_text (clip);
    if (*all)
        s_section (b, "display", all);
    json_object_set_new (b->sc, "displays", json_string (all));
    free (all);
    mc_clip_destroy (&clip);
}

static void
s_result_out (mc_shape_t *self, build_t *b, json_int_t count)
{
    char *text = self->result ? s_bundle_text (self->result) : NULL;
    if (self->result)
        s_image (self, b, self->result);
    if (!text) {
        json_object_set_new (b->sc, "result", json_null ());
        return;
    }
    char *capped = s_capped (text, strlen (text), self->opts.text_cap);
    char title [48];
    snprintf (title, sizeof title, "result (Out[%lld])", (long long) count);
    s_section (b, title, capped);
    json_object_set_new (b->sc, "result", json_string (capped));
    free (capped);
    free (text);
}

static const char *
s_ename (const mc_shape_t *self)
{
    return json_string_value (json_object_get (self->error, "ename"));
}

static const char *
s_status (const mc_shape_t *self)
{
    if (self->end == MC_END_LOST)
        return "lost";
    if (self->end == MC_END_TIMEOUT || self->end == MC_END_TIMEOUT_RESTART)
        return "timeout";
    const char *ename = s_ename (self);
    if (ename && strcmp (ename, "KernelDied") == 0)
        return "died";
    const char *st = json_string_value (json_object_get (self->reply, "status"));
    return !self->error && st && strcmp (st, "ok") == 0 ? "ok" : "error";
}

//  The first line: what happened, in words.
static void
s_headline (const mc_shape_t *self, build_t *b, const char *status, json_int_t count)
{
    char cell [32] = "The cell";
    if (count > 0)
        snprintf (cell, sizeof cell, "Cell [%lld]", (long long) count);
    const char *evalue = json_string_value (json_object_get (self->error, "evalue"));
    if (strcmp (status, "ok") == 0)
        fprintf (b->text, "%s ran in %.2f s.\n", cell, self->elapsed);
    else if (strcmp (status, "error") == 0)
        fprintf (b->text, "%s raised %s after %.2f s: %s\n", cell,
                 s_ename (self) ? s_ename (self) : "an error", self->elapsed, evalue ? evalue : "");
    else if (strcmp (status, "died") == 0)
        fprintf (b->text, "The kernel died while the cell ran (after %.2f s). %s\n",
                 self->elapsed, evalue ? evalue : "");
    else if (self->end == MC_END_TIMEOUT)
        fprintf (b->text, "%s ran past its time limit of %g s (timeout_s) and was interrupted. "
                 "Lost: only the cell's unfinished work. Kept: every variable and the files "
                 "under /workspace. To finish the work, split it into smaller cells or call "
                 "run_python again with a larger timeout_s.\n", cell, self->limit_s);
    else if (self->end == MC_END_TIMEOUT_RESTART)
        fprintf (b->text, "%s ran past its time limit of %g s (timeout_s) and did not stop when "
                 "interrupted, so the Python interpreter was restarted. Lost: every variable, "
                 "import and definition. Kept: the files under /workspace. Re-run what you need, "
                 "in smaller steps or with a larger timeout_s.\n", cell, self->limit_s);
    else
        fprintf (b->text, "%s\n", self->words ? self->words : "The session ended.");
}

static void
s_error_out (mc_shape_t *self, build_t *b, const char *status)
{
    if (!self->error)
        return;
    json_t *tb = json_object_get (self->error, "traceback");
    const char *ename = s_ename (self), *evalue = json_string_value (
        json_object_get (self->error, "evalue"));
    FILE *f;
    char *joined = NULL;
    size_t jlen = 0;
    if (!(f = open_memstream (&joined, &jlen)))
        abort ();
    size_t i;
    json_t *line;
    json_array_foreach (tb, i, line)
        if (json_is_string (line))
            fprintf (f, "%s\n", json_string_value (line));
    fclose (f);
    char *clean = s_capped (joined, jlen, self->opts.text_cap);
    char title [160];
    snprintf (title, sizeof title, "error: %.120s", ename ? ename : "?");
    if (strcmp (status, "died") != 0)
        s_section (b, title, *clean ? clean : (evalue ? evalue : ""));
    json_object_set_new (b->sc, "error", json_pack ("{s:s, s:s, s:s}", "ename", ename ? ename : "",
                                                    "evalue", evalue ? evalue : "", "traceback", clean));
    free (clean);
    free (joined);
}

static void
s_file_out (mc_shape_t *self, build_t *b, json_t *file, json_t *list)
{
    const char *path = json_string_value (json_object_get (file, "path"));
    if (!path)
        return;
    const char *mime = json_string_value (json_object_get (file, "mime"));
    json_int_t size = json_integer_value (json_object_get (file, "size"));
    char *uri = mc_fileres_uri (self->session, path), num [32];
    const char *base = strrchr (path, '/') ? strrchr (path, '/') + 1 : path;
    fprintf (b->text, "%s (%s, %s bytes): download_file {\"path\": \"%s\"}\n", path,
             mime ? mime : "?", mc_clip_fmt_bytes ((size_t) size, num), path);
    json_t *entry = json_deep_copy (file);
    json_object_set_new (entry, "uri", json_string (uri));
    json_array_append_new (list, entry);
    if (self->opts.links) {
        char desc [128];
        snprintf (desc, sizeof desc, "Written by the cell; get the bytes with download_file "
                  "or resources/read");
        json_array_append_new (b->content, json_pack (
            "{s:s, s:s, s:s, s:s, s:I, s:s}", "type", "resource_link", "uri", uri, "name",
            *base ? base : path, "mimeType", mime ? mime : "application/octet-stream", "size",
            size, "description", desc));
    }
    free (uri);
}

static void
s_files_out (mc_shape_t *self, build_t *b)
{
    json_t *files = json_object_get (self->reply, "output_files");
    json_t *list = json_array ();
    if (json_array_size (files) > 0)
        fprintf (b->text, "--- files written under /workspace/out ---\n");
    size_t i;
    json_t *file;
    json_array_foreach (files, i, file)
        s_file_out (self, b, file, list);
    if (json_is_true (json_object_get (self->reply, "output_files_truncated")))
        fprintf (b->text, "(more files were written than one reply lists: see list_files)\n");
    json_object_set_new (b->sc, "output_files", list);
}

json_t *
mc_shape_result (mc_shape_t *self)
{
    assert (self);
    build_t b = { NULL, NULL, 0, json_array (), json_object (), 0 };
    if (!(b.text = open_memstream (&b.text_buf, &b.text_len)))
        abort ();
    const char *status = s_status (self);
    json_t *jcount = json_object_get (self->reply, "execution_count");
    json_int_t count = json_is_integer (jcount) ? json_integer_value (jcount) : 0;
    s_headline (self, &b, status, count);
    s_stream_out (&b, self->out, "stdout");
    s_stream_out (&b, self->err, "stderr");
    s_displays_out (self, &b);
    s_result_out (self, &b, count);
    s_error_out (self, &b, status);
    s_files_out (self, &b);
    fclose (b.text);
    json_t *head = json_pack ("{s:s, s:s, s:o, s:f, s:I}", "session", self->session, "status",
                              status, "execution_count", count > 0 ? json_integer (count)
                              : json_null (), "elapsed_s", self->elapsed, "images",
                              (json_int_t) b.images);
    json_object_update (b.sc, head);
    json_decref (head);
    json_array_insert_new (b.content, 0, json_pack ("{s:s, s:s}", "type", "text", "text", b.text_buf));
    json_t *res = json_pack ("{s:o, s:b}", "content", b.content, "isError", strcmp (status, "ok") != 0);
    if (self->opts.structured)
        json_object_set_new (res, "structuredContent", b.sc);
    else
        json_decref (b.sc);
    free (b.text_buf);
    return res;
}
