/*  gw_cmd_build - the template builder's entry point (see gw_cmd_build.h). */
#include "cli/gw_cmd_build.h"
#include "snap/gw_template.h"
#include "snap/gw_tplmeta.h"
#include "snap/gw_tplsweep.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

//  Say where our template is (the dir holds others: scripts want its path),
//  then sweep the rest: superseded, unused for 30 days, or of an image that
//  is gone (gw_tplsweep.h).
static void
s_done (const char *dir, const gw_vm_config_t *cfg, const char *what)
{
    char key [GW_TPLMETA_KEY_LEN + 1], err [256];
    if (gw_tplmeta_key (cfg, key, sizeof key, err, sizeof err) < 0) {
        printf ("template under %s %s\n", dir, what);
        return;
    }
    printf ("template %s/%s %s\n", dir, key, what);
    gw_tplsweep (dir, key, GW_TPLSWEEP_IDLE_S);
}

int
gw_cmd_build_main (gw_args_t *args)
{
    gw_vm_config_t cfg;
    char err [600] = "", tdir [PATH_MAX];
    const char *dir = gw_args_template_dir (args, tdir, sizeof tdir);
    int rc = gw_args_vm_config_resolved (args, &cfg) < 0 ? -EINVAL : !dir ? -ENAMETOOLONG : 0;
    gw_template_t *t = rc == 0 ? gw_template_open (dir, &cfg, &rc, err, sizeof err) : NULL;
    if (t) {                                    //  up to date: nothing to build
        gw_template_destroy (&t);
        s_done (dir, &cfg, "is up to date");
        return 0;
    }
    err [0] = 0;
    if (rc == -ENOENT || rc == -ESTALE)
        rc = gw_template_build (dir, &cfg, err, sizeof err);
    if (rc == 0)
        s_done (dir, &cfg, "built");
    else
        fprintf (stderr, "cellvm-gateway: template build failed: %s\n",
                 err [0] ? err : strerror (-rc));
    return rc == 0 ? 0 : rc == -EBUSY ? 3 : 1;
}
