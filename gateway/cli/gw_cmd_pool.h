/*  gw_cmd_pool - `cellvm-gateway --pool-daemon --pool N [--pool-budget MIB]
    [--pool-idle S] [vm options]`: the warm pool daemon (gw_poold) for the
    template these options key, with the real VM operations (gw_poolvm),
    listening on gw_pool_socket_path. A `--pool N` gateway that finds no
    daemon starts this in the background (argv from gw_args_child_argv).
    See docs/snapshots.md.
*/
#ifndef GW_CMD_POOL_H
#define GW_CMD_POOL_H

#include "cli/gw_args.h"

#define GW_CMD_POOL_BUDGET_MIB 4096             //  --pool-budget default
#define GW_CMD_POOL_IDLE_S 1800                 //  --pool-idle default

//  The process exit code (gw_poold_run's; 1 when it cannot start).
int gw_cmd_pool_main (gw_args_t *args);

#endif
