/*  gw_ckpt - a named session's checkpoints (see gw_ckpt.h). */
#include "snap/gw_ckpt.h"
#include "snap/gw_snapstore.h"
#include "base/gw_log.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int
gw_ckpt_name (const char *name, double wall_s, char *out, size_t cap)
{
    assert (name && out);
    int n = snprintf (out, cap, "ckpt-%s-%010lld", name, (long long) wall_s);
    return n > 0 && (size_t) n < cap && (size_t) n <= GW_SNAP_NAME_MAX ? 0 : -ENAMETOOLONG;
}

//  The seconds of a checkpoint of name, or -1 when entry is not one.
static long long
s_seconds (const char *entry, const char *name)
{
    size_t n = strlen (name);
    if (strncmp (entry, "ckpt-", 5) != 0 || strncmp (entry + 5, name, n) != 0
    ||  entry [5 + n] != '-' || strlen (entry + 6 + n) != 10)
        return -1;
    long long v = 0;
    for (const char *p = entry + 6 + n; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

static int
s_list (const char *store_dir, gw_snapinfo_t **items_p)
{
    char err [400];
    gw_snapstore_t *store = gw_snapstore_new (store_dir, err, sizeof err);
    int n = store ? gw_snapstore_list (store, items_p) : -EACCES;
    gw_snapstore_destroy (&store);
    return n;
}

int
gw_ckpt_newest (const char *store_dir, const char *name, char *out, size_t cap)
{
    assert (store_dir && name && out);
    gw_snapinfo_t *items = NULL;
    int n = s_list (store_dir, &items);
    if (n < 0)
        return n;
    long long best = -1;
    for (int i = 0; i < n; i++) {
        long long s = s_seconds (items [i].name, name);
        if (s > best && items [i].meta) {       //  a whole one: its meta.json reads
            best = s;
            snprintf (out, cap, "%s", items [i].name);
        }
    }
    gw_snapstore_list_free (&items, n);
    return best >= 0 ? 0 : -ENOENT;
}

int
gw_ckpt_prune (const char *store_dir, const char *name, const char *keep)
{
    assert (store_dir && name);
    char err [400];
    gw_snapinfo_t *items = NULL;
    gw_snapstore_t *store = gw_snapstore_new (store_dir, err, sizeof err);
    int n = store ? gw_snapstore_list (store, &items) : 0, removed = 0;
    for (int i = 0; i < n; i++) {
        if (s_seconds (items [i].name, name) < 0 || (keep && strcmp (items [i].name, keep) == 0))
            continue;
        if (gw_snapstore_remove (store, items [i].name, 2000, err, sizeof err) == 0)
            removed++;
        else
            gw_log (GW_LOG_WARN, "session.checkpoint_left", "name=%s reason=\"%s\"",
                    items [i].name, err);
    }
    gw_snapstore_list_free (&items, n > 0 ? n : 0);
    gw_snapstore_destroy (&store);
    return removed;
}
