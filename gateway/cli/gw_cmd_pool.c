/*  gw_cmd_pool - the pool daemon's entry point (see gw_cmd_pool.h). */
#include "cli/gw_cmd_pool.h"
#include "snap/gw_pool.h"
#include "snap/gw_poold.h"
#include "snap/gw_poolvm.h"

#include <limits.h>

int
gw_cmd_pool_main (gw_args_t *args)
{
    gw_vm_config_t cfg;
    char sock [PATH_MAX], tdir [PATH_MAX];
    const char *dir = gw_args_template_dir (args, tdir, sizeof tdir);
    if (!dir || gw_args_vm_config_resolved (args, &cfg) < 0
    ||  gw_pool_socket_path (&cfg, sock, sizeof sock) < 0)
        return 1;
    gw_poold_opts_t opts = { .socket_path = sock, .size = args->pool,
                             .budget_mib = args->pool_budget_mib ? args->pool_budget_mib
                                                                 : GW_CMD_POOL_BUDGET_MIB,
                             .idle_s = args->pool_idle_s ? args->pool_idle_s
                                                         : GW_CMD_POOL_IDLE_S };
    gw_poolvm_t *vms = gw_poolvm_new (&cfg, dir);
    gw_poold_ops_t ops = gw_poolvm_ops (vms);
    int rc = gw_poold_run (&opts, &ops);
    gw_poolvm_destroy (&vms);
    return rc;
}
