/*  gw_cli_snap - `cellvm snapshot ls|rm|gc` over the snapshot store
    (gw_snapstore.h; see gw_cli.h). A store that does not exist yet is
    empty: listing or collecting never creates it.
*/
#include "cli/gw_cli.h"
#include "snap/gw_snapstore.h"
#include "ch_clock.h"

#include <assert.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define S_LS_FORMAT "%-28s  %-19s  %7s  %10s  %s\n"

//  The store opts name, into *store_p; NULL there when it does not exist.
//  0, or -errno with the reason printed.
static int
s_open (const gw_cli_opts_t *opts, gw_snapstore_t **store_p)
{
    char dir [PATH_MAX], err [PATH_MAX + 256] = "";
    struct stat st;
    *store_p = NULL;
    int rc = opts->snapshot_dir ? 0 : gw_snapstore_default_dir (dir, sizeof dir);
    if (rc < 0) {
        gw_cli_error ("no default snapshot store ($CELLVM_SNAPSHOT_DIR and $HOME are unset); "
                      "give --snapshot-dir DIR");
        return rc;
    }
    const char *path = opts->snapshot_dir ? opts->snapshot_dir : dir;
    if (lstat (path, &st) < 0 && errno == ENOENT)
        return 0;
    *store_p = gw_snapstore_new (path, err, sizeof err);
    if (!*store_p) {
        gw_cli_error ("%s", err);
        return -EACCES;
    }
    return 0;
}

//  The snapshot's "reason" from its meta.json, or NULL.
static const char *
s_reason (const gw_snapinfo_t *it)
{
    return json_string_value (json_object_get (it->meta, "reason"));
}

static void
s_ls_row (const gw_snapinfo_t *it, double now)
{
    char name [GW_SNAP_NAME_MAX + 1], created [32] = "-", age [32], size [32], reason [40];
    time_t t = (time_t) it->created;
    struct tm tm;
    if (it->created > 0 && it->created < 1e12 && localtime_r (&t, &tm))
        strftime (created, sizeof created, "%Y-%m-%d %H:%M:%S", &tm);
    gw_cli_clean (it->name, GW_SNAP_NAME_MAX, name, sizeof name);
    gw_cli_clean (s_reason (it), 32, reason, sizeof reason);
    gw_cli_duration (now - it->created, age, sizeof age);
    gw_cli_bytes ((double) it->bytes, size, sizeof size);
    printf (S_LS_FORMAT, name, created, age, size, reason);
}

//  The listing as JSON: name, created, age_s, bytes, reason, meta.
static json_t *
s_ls_json (const gw_snapinfo_t *items, int n, double now)
{
    json_t *all = json_array ();
    for (int i = 0; i < n; i++) {
        double age = now - items [i].created;
        const char *reason = s_reason (&items [i]);
        json_array_append_new (all, json_pack ("{s:s, s:f, s:I, s:I, s:o, s:O}",
                               "name", items [i].name, "created", items [i].created,
                               "age_s", (json_int_t) (age > 0 ? age : 0),
                               "bytes", (json_int_t) items [i].bytes,
                               "reason", reason ? json_string (reason) : json_null (),
                               "meta", items [i].meta ? items [i].meta : json_null ()));
    }
    return all;
}

int
gw_cli_snap_ls (const gw_cli_opts_t *opts, char **args, int count)
{
    (void) args;
    assert (opts && count == 0);
    gw_snapstore_t *store = NULL;
    gw_snapinfo_t *items = NULL;
    if (s_open (opts, &store) < 0)
        return GW_CLI_FAILED;
    int n = store ? gw_snapstore_list (store, &items) : 0;
    if (n < 0) {
        gw_cli_error ("cannot list %s: %s", gw_snapstore_dir (store), strerror (-n));
        gw_snapstore_destroy (&store);
        return GW_CLI_FAILED;
    }
    double now = ch_clock_wall_s ();
    if (opts->json) {
        json_t *all = s_ls_json (items, n, now);
        json_dumpf (all, stdout, JSON_INDENT (1));
        printf ("\n");
        json_decref (all);
    }
    else
        printf (S_LS_FORMAT, "NAME", "CREATED", "AGE", "SIZE", "REASON");
    for (int i = 0; !opts->json && i < n; i++)
        s_ls_row (&items [i], now);
    gw_snapstore_list_free (&items, n);
    gw_snapstore_destroy (&store);
    return fflush (stdout) == 0 ? GW_CLI_OK : GW_CLI_FAILED;
}

//  Remove one snapshot and say so. True when it went.
static bool
s_rm_one (gw_snapstore_t *store, const char *name)
{
    char err [PATH_MAX + 256] = "", clean [GW_SNAP_NAME_MAX + 1];
    gw_cli_clean (name, GW_SNAP_NAME_MAX, clean, sizeof clean);
    if (!gw_snapstore_name_ok (name)) {
        gw_cli_error ("'%s' is not a snapshot name ([A-Za-z0-9_-], 1 to %d characters)", clean,
                      GW_SNAP_NAME_MAX);
        return false;
    }
    int rc = store ? gw_snapstore_remove (store, name, GW_CLI_SNAP_WAIT_MS, err, sizeof err)
                   : -ENOENT;
    if (rc == 0)
        printf ("removed snapshot %s\n", clean);
    else if (rc == -ENOENT)
        gw_cli_error ("no snapshot named %s in the store; `cellvm snapshot ls` lists them",
                      clean);
    else
        gw_cli_error ("%s", err [0] ? err : strerror (-rc));
    return rc == 0;
}

int
gw_cli_snap_rm (const gw_cli_opts_t *opts, char **args, int count)
{
    assert (opts && args && count > 0);
    gw_snapstore_t *store = NULL;
    if (s_open (opts, &store) < 0)
        return GW_CLI_FAILED;
    int failed = 0;
    for (int i = 0; i < count; i++)
        failed += !s_rm_one (store, args [i]);
    gw_snapstore_destroy (&store);
    return failed ? GW_CLI_FAILED : GW_CLI_OK;
}

//  Print the snapshots of before that after no longer has; their bytes.
static uint64_t
s_report_removed (const gw_snapinfo_t *before, int nb, const gw_snapinfo_t *after, int na)
{
    uint64_t bytes = 0;
    char size [32];
    for (int i = 0; i < nb; i++) {
        int j = 0;
        while (j < na && strcmp (before [i].name, after [j].name))
            j++;
        if (j < na)
            continue;
        gw_cli_bytes ((double) before [i].bytes, size, sizeof size);
        printf ("removed snapshot %s (%s)\n", before [i].name, size);
        bytes += before [i].bytes;
    }
    return bytes;
}

int
gw_cli_snap_gc (const gw_cli_opts_t *opts, char **args, int count)
{
    (void) args;
    assert (opts && count == 0);
    gw_snapstore_t *store = NULL;
    gw_snapinfo_t *before = NULL, *after = NULL;
    char freed [32];
    if (s_open (opts, &store) < 0)
        return GW_CLI_FAILED;
    if (!store) {
        printf ("gc: the store is empty\n");
        return GW_CLI_OK;
    }
    int nb = gw_snapstore_list (store, &before);
    int rc = gw_snapstore_gc (store, opts->max_age_s, opts->max_bytes, ch_clock_wall_s ());
    int na = gw_snapstore_list (store, &after);
    if (rc < 0)
        gw_cli_error ("gc of %s failed: %s", gw_snapstore_dir (store), strerror (-rc));
    else {
        gw_cli_bytes ((double) s_report_removed (before, nb, after, na), freed, sizeof freed);
        printf ("gc: removed %d snapshot%s, %s; %d left\n", rc, rc == 1 ? "" : "s", freed,
                na > 0 ? na : 0);
    }
    gw_snapstore_list_free (&before, nb);
    gw_snapstore_list_free (&after, na);
    gw_snapstore_destroy (&store);
    return rc < 0 ? GW_CLI_FAILED : GW_CLI_OK;
}
