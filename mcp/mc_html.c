/*  mc_html - HTML a cell displayed, as plain text a model can read. */
#include <assert.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "mc_html.h"

typedef struct {
    char *buf;
    size_t len;
    bool row_has_cell;  //  a cell was written on this table row
} out_t;

static void
s_put (out_t *o, const char *s, size_t n)
{
    memcpy (o->buf + o->len, s, n);
    o->len += n;
}

//  A line break, unless the text already ends with one (or is empty).
static void
s_trim (out_t *o)
{
    while (o->len > 0 && o->buf [o->len - 1] == ' ')
        o->len--;
}

static void
s_break (out_t *o)
{
    s_trim (o);
    if (o->len > 0 && o->buf [o->len - 1] != '\n')
        s_put (o, "\n", 1);
    o->row_has_cell = false;
}

//  The tag's name (lowercase) into name; is it a closing tag?
static bool
s_tag_name (const char *tag, size_t len, char *name, size_t cap)
{
    size_t i = 1;
    bool closing = i < len && tag [i] == '/';
    if (closing)
        i++;
    size_t n = 0;
    while (i < len && n + 1 < cap && isalnum ((unsigned char) tag [i]))
        name [n++] = (char) tolower ((unsigned char) tag [i++]);
    name [n] = 0;
    return closing;
}

static bool
s_is (const char *name, const char *const *list)
{
    for (; *list; list++)
        if (strcmp (name, *list) == 0)
            return true;
    return false;
}

//  What a tag does to the text.
static void
s_tag (out_t *o, const char *name, bool closing)
{
    static const char *const breaks [] = { "br", "p", "div", "li", "tr", "table", "h1",
                                           "h2", "h3", "h4", "h5", "h6", "ul", "ol",
                                           "thead", "tbody", "pre", "hr", NULL };
    if (!closing && (strcmp (name, "td") == 0 || strcmp (name, "th") == 0)) {
        if (o->row_has_cell) {
            s_trim (o);
            bool bol = o->len == 0 || o->buf [o->len - 1] == '\n';
            s_put (o, bol ? "| " : " | ", bol ? 2 : 3);
        }
        o->row_has_cell = true;
    }
    else if (s_is (name, breaks))
        s_break (o);
}

//  Skip a <style> or <script> element: the offset just past its end tag.
static size_t
s_skip_element (const char *html, size_t len, size_t i, const char *name)
{
    size_t nlen = strlen (name);
    for (; i + nlen + 2 < len; i++)
        if (html [i] == '<' && html [i + 1] == '/' && strncasecmp (html + i + 2, name, nlen) == 0) {
            const char *gt = memchr (html + i, '>', len - i);
            return gt ? (size_t) (gt - html) + 1 : len;
        }
    return len;
}

static const struct { const char *name; const char *text; } s_entities [] = {
    { "&amp;", "&" }, { "&lt;", "<" }, { "&gt;", ">" }, { "&quot;", "\"" },
    { "&#39;", "'" }, { "&apos;", "'" }, { "&nbsp;", " " }, { "&#x27;", "'" },
};

//  An entity at html + i: its text written, the bytes it took returned (0: none).
static size_t
s_entity (out_t *o, const char *html, size_t len, size_t i)
{
    for (size_t k = 0; k < sizeof s_entities / sizeof s_entities [0]; k++) {
        size_t n = strlen (s_entities [k].name);
        if (i + n <= len && memcmp (html + i, s_entities [k].name, n) == 0) {
            s_put (o, s_entities [k].text, strlen (s_entities [k].text));
            return n;
        }
    }
    return 0;
}

//  Handle the tag starting at html [i] == '<'; return the offset after it.
static size_t
s_markup (out_t *o, const char *html, size_t len, size_t i)
{
    const char *gt = memchr (html + i, '>', len - i);
    size_t end = gt ? (size_t) (gt - html) + 1 : len;
    char name [16];
    bool closing = s_tag_name (html + i, end - i, name, sizeof name);
    if (!closing && (strcmp (name, "style") == 0 || strcmp (name, "script") == 0))
        return s_skip_element (html, len, end, name);
    s_tag (o, name, closing);
    return end;
}

//  Squeeze whitespace runs inside lines and blank-line runs.
static void
s_text_char (out_t *o, char c)
{
    if (c == '\n' || c == '\r' || c == '\t')
        c = ' ';
    if (c == ' ' && (o->len == 0 || o->buf [o->len - 1] == ' ' || o->buf [o->len - 1] == '\n'))
        return;
    s_put (o, &c, 1);
}

char *
mc_html_to_text (const char *html, size_t len)
{
    assert (html || len == 0);
    out_t o = { malloc (len + 1), 0, false };
    if (!o.buf)
        abort ();
    size_t i = 0;
    while (i < len) {
        if (html [i] == '<') {
            i = s_markup (&o, html, len, i);
            continue;
        }
        size_t n = html [i] == '&' ? s_entity (&o, html, len, i) : 0;
        if (n == 0)
            s_text_char (&o, html [i]);
        i += n ? n : 1;
    }
    while (o.len > 0 && (o.buf [o.len - 1] == '\n' || o.buf [o.len - 1] == ' '))
        o.len--;
    o.buf [o.len] = 0;
    return o.buf;
}

bool
mc_html_has_table (const char *html, size_t len)
{
    for (size_t i = 0; i + 6 <= len; i++)
        if (html [i] == '<' && strncasecmp (html + i + 1, "table", 5) == 0)
            return true;
    return false;
}
