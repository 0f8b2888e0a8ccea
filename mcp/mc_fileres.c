/*  mc_fileres - the files tools' requests and results, pure. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "mc_b64.h"
#include "mc_clip.h"
#include "mc_fileres.h"

//  The listing cell. It runs in a namespace of its own (exec with a fresh
//  dict), so the user's variables are neither read nor changed.
static const char s_list_src [] =
    "import os as _o, json as _j, stat as _s\n"
    "def _ls(p):\n"
    "    base = _o.path.dirname(_o.environ.get('CELLVM_OUTDIR') or '/workspace/out')\n"
    "    rel = p[len('/workspace'):].lstrip('/')\n"
    "    root = _o.path.join(base, rel) if rel else base\n"
    "    r = {'path': p, 'entries': [], 'truncated': False}\n"
    "    try:\n"
    "        st = _o.lstat(root)\n"
    "    except OSError as e:\n"
    "        r['error'] = '{}: {}'.format(type(e).__name__, e.strerror)\n"
    "        return r\n"
    "    rb, rr = _o.path.realpath(base), _o.path.realpath(root)\n"
    "    if rr != rb and not rr.startswith(rb + _o.sep):\n"
    "        r['error'] = 'SymlinkRefused: the path goes through a symlink'\n"
    "        return r\n"
    "    if not _s.S_ISDIR(st.st_mode):\n"
    "        r['entries'].append([_o.path.basename(root), 'file', st.st_size])\n"
    "        return r\n"
    "    for d, ds, fs in _o.walk(root):\n"
    "        ds.sort()\n"
    "        if d == base:\n"
    "            ds[:] = [x for x in ds if x != 'lost+found']\n"
    "        for n in sorted(ds + fs):\n"
    "            q = _o.path.join(d, n)\n"
    "            try:\n"
    "                s = _o.lstat(q)\n"
    "            except OSError:\n"
    "                continue\n"
    "            t = 'dir' if _s.S_ISDIR(s.st_mode) else 'link' if _s.S_ISLNK(s.st_mode) else 'file'\n"
    "            r['entries'].append([_o.path.relpath(q, root) + ('/' if t == 'dir' else ''), t,\n"
    "                                 s.st_size if t == 'file' else None])\n"
    "            if len(r['entries']) >= %d:\n"
    "                r['truncated'] = True\n"
    "                return r\n"
    "    return r\n"
    "print(_j.dumps(_ls(%s)))\n";

char *
mc_fileres_list_code (const char *path)
{
    assert (path);
    json_t *jpath = json_string (path);
    char *lit = jpath ? json_dumps (jpath, JSON_ENCODE_ANY) : NULL;
    char *src = NULL, *code = NULL;
    if (!lit || asprintf (&src, s_list_src, MC_LIST_MAX, lit) < 0)
        abort ();
    json_t *jsrc = json_string (src);
    char *src_lit = jsrc ? json_dumps (jsrc, JSON_ENCODE_ANY) : NULL;
    if (!src_lit || asprintf (&code, "exec(%s, {'__name__': '__cellvm_mcp__'})", src_lit) < 0)
        abort ();
    json_decref (jpath);
    json_decref (jsrc);
    free (lit);
    free (src);
    free (src_lit);
    return code;
}

static json_t *
s_result (const char *text, bool is_error, json_t *sc, bool structured)
{
    json_t *res = json_pack ("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text", text,
                             "isError", is_error);
    if (structured && sc)
        json_object_set (res, "structuredContent", sc);
    json_decref (sc);
    return res;
}

json_t *
mc_fileres_error (const char *what, const json_t *reply, bool structured)
{
    const char *ename = json_string_value (json_object_get (reply, "ename"));
    const char *evalue = json_string_value (json_object_get (reply, "evalue"));
    char *text = NULL;
    if (asprintf (&text, "%s%s%s%s%s", what, ename ? ": " : "", ename ? ename : "",
                  evalue ? ": " : "", evalue ? evalue : "") < 0)
        abort ();
    json_t *res = s_result (text, true, json_pack ("{s:s, s:s, s:s}", "status", "error", "ename",
                                                   ename ? ename : "", "evalue",
                                                   evalue ? evalue : text), structured);
    free (text);
    return res;
}

json_t *
mc_fileres_upload (const json_t *reply, size_t written, bool structured)
{
    const char *path = json_string_value (json_object_get (reply, "path"));
    const char *sha = json_string_value (json_object_get (reply, "sha256"));
    json_int_t size = json_integer_value (json_object_get (reply, "size"));
    char *text = NULL, n1 [32], n2 [32];
    if (asprintf (&text, "Wrote %s bytes to %s (the file now holds %s bytes). A cell can open it "
                  "by that path.", mc_clip_fmt_bytes (written, n1), path ? path : "?",
                  mc_clip_fmt_bytes ((size_t) size, n2)) < 0)
        abort ();
    json_t *res = s_result (text, false, json_pack (
        "{s:s, s:s, s:I, s:I, s:s}", "status", "ok", "path", path ? path : "", "size", size,
        "written", (json_int_t) written, "sha256", sha ? sha : ""), structured);
    free (text);
    return res;
}

//  One listing line: "  name  1,234 bytes".
static void
s_entry (FILE *f, json_t *e, json_t *list)
{
    const char *name = json_string_value (json_array_get (e, 0));
    const char *type = json_string_value (json_array_get (e, 1));
    json_t *size = json_array_get (e, 2);
    if (!name || !type)
        return;
    char num [32];
    if (json_is_integer (size))
        fprintf (f, "  %s  %s bytes\n", name, mc_clip_fmt_bytes ((size_t) json_integer_value (size), num));
    else
        fprintf (f, "  %s%s\n", name, strcmp (type, "link") == 0 ? "  (symlink)" : "");
    json_array_append_new (list, json_pack ("{s:s, s:s, s:O}", "name", name, "type", type,
                                            "size", size ? size : json_null ()));
}

json_t *
mc_fileres_list_result (const char *path, const char *out, bool structured)
{
    //  The JSON is the last line the cell printed (the user's code may print too).
    const char *line = out ? out : "";
    for (const char *p = line; (p = strstr (p, "\n{\"path\"")) != NULL; p++)
        line = p + 1;
    json_t *root = json_loads (line, JSON_DISABLE_EOF_CHECK, NULL);
    json_t *entries = json_object_get (root, "entries");
    const char *err = json_string_value (json_object_get (root, "error"));
    if (!json_is_array (entries) || err) {
        json_t *r = json_pack ("{s:s, s:s}", "ename", "ListFailed", "evalue",
                               err ? err : "the listing cell printed no listing");
        json_t *res = mc_fileres_error (path, r, structured);
        json_decref (r);
        json_decref (root);
        return res;
    }
    char *text = NULL;
    size_t tlen = 0;
    FILE *f = open_memstream (&text, &tlen);
    fprintf (f, "%s: %zu entr%s%s\n", path, json_array_size (entries),
             json_array_size (entries) == 1 ? "y" : "ies",
             json_is_true (json_object_get (root, "truncated")) ? " (the first " "1000; "
             "list a subdirectory for more)" : "");
    json_t *list = json_array ();
    size_t i;
    json_t *e;
    json_array_foreach (entries, i, e)
        s_entry (f, e, list);
    fclose (f);
    json_t *res = s_result (text, false, json_pack ("{s:s, s:o, s:O}", "path", path, "entries",
                                                    list, "truncated", json_object_get (root,
                                                    "truncated") ? json_object_get (root,
                                                    "truncated") : json_false ()), structured);
    free (text);
    json_decref (root);
    return res;
}

//  MIME type by file name extension ("application/octet-stream" if unknown).
static const char *
s_mime (const char *path)
{
    static const char *const table [][2] = {
        { "png", "image/png" }, { "jpg", "image/jpeg" }, { "jpeg", "image/jpeg" },
        { "gif", "image/gif" }, { "webp", "image/webp" }, { "svg", "image/svg+xml" },
        { "csv", "text/csv" }, { "tsv", "text/tab-separated-values" }, { "txt", "text/plain" },
        { "log", "text/plain" }, { "md", "text/markdown" }, { "json", "application/json" },
        { "html", "text/html" }, { "htm", "text/html" }, { "py", "text/x-python" },
        { "xml", "application/xml" }, { "yaml", "application/yaml" }, { "yml", "application/yaml" },
        { "pdf", "application/pdf" }, { "zip", "application/zip" }, { "gz", "application/gzip" },
        { "parquet", "application/vnd.apache.parquet" }, { "ipynb", "application/x-ipynb+json" },
    };
    const char *dot = strrchr (path, '.');
    if (dot && !strchr (dot, '/'))
        for (size_t i = 0; i < sizeof table / sizeof table [0]; i++)
            if (strcasecmp (dot + 1, table [i][0]) == 0)
                return table [i][1];
    return "application/octet-stream";
}

char *
mc_fileres_uri (const char *session, const char *path)
{
    size_t n = strlen (path);
    char *out = malloc (strlen (session) + 3 * n + 16);
    if (!out)
        abort ();
    char *o = out + sprintf (out, "cellvm://%s", session);
    if (path [0] != '/')
        *o++ = '/';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char) path [i];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
            || (c && strchr ("-._~/", c)))
            *o++ = (char) c;
        else
            o += sprintf (o, "%%%02X", c);
    }
    *o = 0;
    return out;
}

//  The bytes as one content item: image, text or blob (resource contents
//  when as_resource).
static json_t *
s_download_item (const uint8_t *data, size_t len, const char *uri, const char *mime,
                 const mc_download_opts_t *opts, const char **kind_p)
{
    bool image = strncmp (mime, "image/", 6) == 0 && strcmp (mime, "image/svg+xml") != 0;
    json_t *text = memchr (data, 0, len) ? NULL : json_stringn ((const char *) data, len);
    if (image && len <= opts->image_cap && !opts->as_resource) {
        *kind_p = "image";
        char *b64 = mc_b64_encode (data, len);
        json_t *item = json_pack ("{s:s, s:s, s:s}", "type", "image", "data", b64, "mimeType", mime);
        free (b64);
        json_decref (text);
        return item;
    }
    json_t *res = json_pack ("{s:s, s:s}", "uri", uri, "mimeType", text && !strcmp (mime,
                             "application/octet-stream") ? "text/plain" : mime);
    *kind_p = text && !image ? "text" : "blob";
    if (text && !image)
        json_object_set (res, "text", text);
    else {
        char *b64 = mc_b64_encode (data, len);
        json_object_set_new (res, "blob", json_string (b64));
        free (b64);
    }
    json_decref (text);
    return opts->as_resource ? res : json_pack ("{s:s, s:o}", "type", "resource", "resource", res);
}

json_t *
mc_fileres_download (const json_t *reply, const uint8_t *data, size_t len,
                     const char *session, const char *path, const mc_download_opts_t *opts)
{
    assert (opts && path && session && (data || len == 0));
    char n1 [32], n2 [32], *text = NULL;
    if (len > opts->max_download) {
        if (asprintf (&text, "%s is %s bytes, over download_file's limit of %s bytes "
                      "(--max-download). Read the part you need from a cell, or write a smaller "
                      "file (compressed, or split) under /workspace and download that.", path,
                      mc_clip_fmt_bytes (len, n1), mc_clip_fmt_bytes (opts->max_download, n2)) < 0)
            abort ();
        json_t *res = s_result (text, true, NULL, false);
        free (text);
        return res;
    }
    const char *mime = s_mime (path), *kind = "blob";
    char *uri = mc_fileres_uri (session, path);
    json_t *item = s_download_item (data ? data : (const uint8_t *) "", len, uri, mime, opts, &kind);
    if (opts->as_resource) {
        free (uri);
        return json_pack ("{s:[o]}", "contents", item);
    }
    const char *sha = json_string_value (json_object_get (reply, "sha256"));
    if (asprintf (&text, "%s: %s bytes, %s, sha256 %s; returned as %s below.", path,
                  mc_clip_fmt_bytes (len, n1), mime, sha ? sha : "?", kind) < 0)
        abort ();
    json_t *res = s_result (text, false, json_pack ("{s:s, s:I, s:s, s:s, s:s}", "path", path,
                            "size", (json_int_t) len, "mime", mime, "sha256", sha ? sha : "",
                            "uri", uri), opts->structured);
    json_array_append_new (json_object_get (res, "content"), item);
    free (text);
    free (uri);
    return res;
}
