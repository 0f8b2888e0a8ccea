/*  gw_env - the environment a client means for the kernel (see gw_env.h). */
#include "session/gw_env.h"

#include <assert.h>
#include <stdbool.h>
#include <string.h>

static bool
s_name_ok (const char *name, size_t len)
{
    if (len == 0 || len > 128 || (name [0] >= '0' && name [0] <= '9'))
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = name [i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
              || c == '_'))
            return false;
    }
    return true;
}

json_t *
gw_env_passed (char *const *envp, size_t *skipped_p)
{
    json_t *out = json_object ();
    size_t skipped = 0, bytes = 0, plen = strlen (GW_ENV_PREFIX);
    assert (out);
    for (size_t i = 0; envp && envp [i]; i++) {
        const char *e = envp [i];
        if (strncmp (e, GW_ENV_PREFIX, plen) != 0)
            continue;
        const char *name = e + plen, *eq = strchr (name, '=');
        size_t nlen = eq ? (size_t) (eq - name) : 0;
        char key [129];
        json_t *value = eq ? json_string (eq + 1) : NULL;      //  NULL: not UTF-8
        bytes += nlen + (eq ? strlen (eq + 1) : 0);
        if (!eq || !s_name_ok (name, nlen) || !value || bytes > GW_ENV_MAX_BYTES
        ||  json_object_size (out) >= GW_ENV_MAX_VARS) {
            json_decref (value);
            skipped++;
            continue;
        }
        memcpy (key, name, nlen);
        key [nlen] = 0;
        json_object_set_new (out, key, value);
    }
    if (skipped_p)
        *skipped_p = skipped;
    return out;
}
