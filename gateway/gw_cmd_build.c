/*  gw_cmd_build - the template builder's entry point (see gw_cmd_build.h). */
#include "gw_cmd_build.h"
#include "gw_template.h"
#include "gw_tplmeta.h"
#include "gw_tplsweep.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

//  Templates superseded by ours, or unused for 30 days, go (gw_tplsweep.h).
static void
s_sweep (const char *dir, const gw_vm_config_t *cfg)
{
    char key [GW_TPLMETA_KEY_LEN + 1], err [256];
    if (gw_tplmeta_key (cfg, key, sizeof key, err, sizeof err) == 0)
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
        printf ("template %s is up to date\n", gw_template_path (t));
        gw_template_destroy (&t);
        s_sweep (dir, &cfg);
        return 0;
    }
    err [0] = 0;
    if (rc == -ENOENT || rc == -ESTALE)
        rc = gw_template_build (dir, &cfg, err, sizeof err);
    if (rc == 0)
        s_sweep (dir, &cfg);
    if (rc < 0)
        fprintf (stderr, "cellvm-gateway: template build failed: %s\n",
                 err [0] ? err : strerror (-rc));
    else {
        char key [GW_TPLMETA_KEY_LEN + 1];      //  its path, for scripts: the dir holds others
        if (gw_tplmeta_key (&cfg, key, sizeof key, err, sizeof err) == 0)
            printf ("template %s/%s built\n", dir, key);
        else
            printf ("template built under %s\n", dir);
    }
    return rc == 0 ? 0 : rc == -EBUSY ? 3 : 1;
}
