/*  mc_spec - a kernelspec, found as jupyter_client finds one. */
#include "mc_spec.h"

#include <assert.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct _mc_spec_t {
    char path [PATH_MAX];
    json_t *argv;       //  array of strings, at least one
    json_t *env;        //  object of strings, or NULL
    json_t *meta;       //  metadata object, or NULL
};

//  dir/kernels/name/kernel.json into out when it exists.
static bool
s_try (const char *dir, const char *name, char *out, size_t cap)
{
    if (!dir || !*dir)
        return false;
    int n = snprintf (out, cap, "%s/kernels/%s/kernel.json", dir, name);
    return n > 0 && (size_t) n < cap && access (out, R_OK) == 0;
}

//  Each directory of a colon-separated list.
static bool
s_try_list (const char *list, const char *name, char *out, size_t cap)
{
    char *copy = list ? strdup (list) : NULL, *save = NULL;
    bool found = false;
    for (char *d = copy ? strtok_r (copy, ":", &save) : NULL; d && !found;
         d = strtok_r (NULL, ":", &save))
        found = s_try (d, name, out, cap);
    free (copy);
    return found;
}

//  share/jupyter beside the binary: build/cellvm-mcp -> build/share/jupyter.
static bool
s_try_beside (const char *name, char *out, size_t cap)
{
    char exe [PATH_MAX], dir [PATH_MAX + 32];
    ssize_t n = readlink ("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return false;
    exe [n] = 0;
    char *slash = strrchr (exe, '/');
    if (!slash)
        return false;
    *slash = 0;
    snprintf (dir, sizeof dir, "%s/share/jupyter", exe);
    if (s_try (dir, name, out, cap))
        return true;
    snprintf (dir, sizeof dir, "%s/../share/jupyter", exe);
    return s_try (dir, name, out, cap);
}

static bool
s_find (const char *name, char *out, size_t cap)
{
    char user [PATH_MAX];
    const char *xdg = getenv ("XDG_DATA_HOME"), *home = getenv ("HOME");
    if (xdg && *xdg)
        snprintf (user, sizeof user, "%s/jupyter", xdg);
    else
        snprintf (user, sizeof user, "%s/.local/share/jupyter", home ? home : "/nonexistent");
    return s_try_list (getenv ("JUPYTER_PATH"), name, out, cap) || s_try (user, name, out, cap)
        || s_try ("/usr/local/share/jupyter", name, out, cap)
        || s_try ("/usr/share/jupyter", name, out, cap) || s_try_beside (name, out, cap);
}

static bool
s_argv_ok (const json_t *argv)
{
    if (!json_is_array (argv) || json_array_size (argv) == 0)
        return false;
    size_t i;
    json_t *a;
    json_array_foreach (argv, i, a)
        if (!json_is_string (a))
            return false;
    return true;
}

mc_spec_t *
mc_spec_load (const char *name, char *err, size_t errlen)
{
    assert (name);
    mc_spec_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    json_t *root = NULL;
    if (strchr (name, '/'))
        snprintf (self->path, sizeof self->path, "%s", name);
    else if (!s_find (name, self->path, sizeof self->path)) {
        snprintf (err, errlen, "kernelspec \"%s\" not found (looked in $JUPYTER_PATH, the user's "
                  "and the system's Jupyter data directories, and share/jupyter beside "
                  "cellvm-mcp); run `make` to write cellvm's kernelspecs, or set JUPYTER_PATH",
                  name);
        goto fail;
    }
    json_error_t jerr;
    root = json_load_file (self->path, 0, &jerr);
    self->argv = json_incref (json_object_get (root, "argv"));
    self->env = json_incref (json_object_get (root, "env"));
    self->meta = json_incref (json_object_get (root, "metadata"));
    if (!s_argv_ok (self->argv)) {
        snprintf (err, errlen, "kernelspec %s: %s", self->path,
                  root ? "\"argv\" must be a non-empty array of strings" : jerr.text);
        goto fail;
    }
    json_decref (root);
    return self;
fail:
    json_decref (root);
    mc_spec_destroy (&self);
    return NULL;
}

void
mc_spec_destroy (mc_spec_t **self_p)
{
    assert (self_p);
    if (!*self_p)
        return;
    json_decref ((*self_p)->argv);
    json_decref ((*self_p)->env);
    json_decref ((*self_p)->meta);
    free (*self_p);
    *self_p = NULL;
}

const char *
mc_spec_path (const mc_spec_t *self)
{
    assert (self);
    return self->path;
}

json_t *
mc_spec_argv (const mc_spec_t *self)
{
    assert (self);
    return self->argv;
}

json_t *
mc_spec_env (const mc_spec_t *self)
{
    assert (self);
    return self->env;
}

bool
mc_spec_unsafe (const mc_spec_t *self)
{
    assert (self);
    const char *meta = json_string_value (json_object_get (self->meta, "cellvm_backend"));
    if (meta && strcmp (meta, "unsafe-local") == 0)
        return true;
    size_t i;
    json_t *a;
    json_array_foreach (self->argv, i, a)
        if (strcmp (json_string_value (a), "unsafe-local") == 0
            || strcmp (json_string_value (a), "--backend=unsafe-local") == 0)
            return true;
    return false;
}

//  The spec's own value of option (the last), when its argv sets one.
static bool
s_spec_secs (const mc_spec_t *self, const char *option, double *secs_p)
{
    size_t olen = strlen (option), n = json_array_size (self->argv);
    bool found = false;
    for (size_t i = 1; i < n; i++) {
        const char *a = json_string_value (json_array_get (self->argv, i)), *v = NULL;
        if (strcmp (a, option) == 0 && i + 1 < n)
            v = json_string_value (json_array_get (self->argv, ++i));
        else if (strncmp (a, option, olen) == 0 && a [olen] == '=')
            v = a + olen + 1;
        char *end = NULL;
        double secs = v ? strtod (v, &end) : -1;
        if (v && end != v && !*end && secs >= 0) {
            *secs_p = secs;
            found = true;
        }
    }
    return found;
}

double
mc_spec_lifetime (const mc_spec_t *spec, const char *option, double ours, double fallback,
                  bool *append_p)
{
    assert (spec && option && append_p);
    double own = 0;
    *append_p = ours >= 0;
    if (ours >= 0)
        return ours;
    if (s_spec_secs (spec, option, &own))
        return own;
    *append_p = fallback > 0;
    return *append_p ? fallback : 0;
}
