/*  mc_life - the end of a session, in words. Pure. */
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mc_life.h"

#define NOTICE_PREFIX "cellvm: this session "

bool
mc_life_notice (const ch_msg_t *msg, char *out, size_t cap)
{
    assert (msg && out && cap > 0);
    json_t *content = ch_msg_content (msg);
    const char *name = json_string_value (json_object_get (content, "name"));
    const char *text = json_string_value (json_object_get (content, "text"));
    if (ch_msg_channel (msg) != CH_IOPUB || strcmp (ch_msg_type (msg), "stream") != 0
        || !name || strcmp (name, "stderr") != 0 || !text
        || strncmp (text, NOTICE_PREFIX, strlen (NOTICE_PREFIX)) != 0
        || *ch_msg_parent_id (msg))
        return false;
    snprintf (out, cap, "%s", text);
    size_t n = strlen (out);
    while (n > 0 && strchr (" \t\r\n", out [n - 1]))
        out [--n] = 0;
    return true;
}

static char *
s_strdupf (const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));

static char *
s_strdupf (const char *fmt, ...)
{
    char *s = NULL;
    va_list ap;
    va_start (ap, fmt);
    int n = vasprintf (&s, fmt, ap);
    va_end (ap);
    if (n < 0)
        abort ();
    return s;
}

char *
mc_life_why (const char *notice, const char *exited)
{
    if (notice && *notice)
        return s_strdupf ("the gateway said: \"%s\"", notice);
    return s_strdupf ("%s", exited && *exited ? exited : "its gateway process ended");
}

//  "." to end a sentence that ends with why, unless it already has one.
static const char *
s_stop (const char *why)
{
    size_t n = strlen (why);
    if (n > 0 && why [n - 1] == '.')
        return "";
    if (n > 1 && why [n - 1] == '"' && why [n - 2] == '.')
        return "";
    return ".";
}

//  The first sentence: when and what, with why.
static void
s_what (FILE *f, const char *name, mc_life_when_t when, mc_tool_t tool, const char *why)
{
    const char *so = when == MC_LIFE_DURING ? NULL
                   : tool == MC_TOOL_RESTART ? "there was nothing to restart"
                   : tool == MC_TOOL_CLOSE ? "there was nothing left to close"
                   : "this call was not run";
    if (so)
        fprintf (f, "The session \"%s\" had already ended, so %s: %s%s", name, so, why,
                 s_stop (why));
    else
        fprintf (f, "The session \"%s\" ended while this call was running: %s%s", name, why,
                 s_stop (why));
}

char *
mc_life_words (const char *name, mc_life_when_t when, mc_tool_t tool, const char *why,
               const char *tail)
{
    assert (name && why);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream (&text, &len);
    if (!f)
        abort ();
    s_what (f, name, when, tool, why);
    if (when == MC_LIFE_BEFORE && tool == MC_TOOL_CLOSE)
        fprintf (f, " Its variables and its /workspace files went with it. The next call on "
                 "\"%s\" starts a fresh, empty session.", name);
    else
        fprintf (f, " Lost: every variable, import and definition, and every file under "
                 "/workspace. To go on, call run_python%s: that starts a fresh, empty session "
                 "\"%s\". Re-create what you need (re-run the imports and the setup, upload the "
                 "files again).", tool == MC_TOOL_RUN_PYTHON ? " again" : "", name);
    if (tail && *tail)
        fprintf (f, "\nThe gateway's log ends with:\n%s", tail);
    fclose (f);
    return text;
}
