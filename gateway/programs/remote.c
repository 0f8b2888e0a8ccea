/*  cellvm-remote - the launcher Jupyter Enterprise Gateway and Gateway
    Provisioners start on a node: it picks the ports and the key, runs
    cellvm-gateway (beside this binary) on them, reports them encrypted to
    the response address, and serves EG's comm port until the gateway
    exits, with the gateway's exit status. docs/cluster.md.

    cellvm-remote --kernel-id ID --response-address HOST:PORT --public-key KEY
                  [--port-range LO..HI] [--ip ADDR] [--launch-timeout S]
                  [-- GATEWAY OPTION...]

    Any input that is wrong ends it at once, with one line naming it, and
    exit status 1; nothing is left running.
*/
#include "cli/gw_args.h"
#include "cli/gw_rargs.h"
#include "cli/gw_remote.h"
#include "base/gw_log.h"
#include "wire/gw_egreply.h"

#include <czmq.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

extern char **environ;

static int
s_fail (const char *what)
{
    fprintf (stderr, "cellvm-remote: %s\n", what);
    return 1;
}

int
main (int argc, char **argv)
{
    char err [512], gateway [PATH_MAX];
    const char *level = getenv ("CELLVM_LOG_LEVEL");
    int lv = level && *level ? gw_log_level_parse (level) : GW_LOG_WARN;
    gw_log_init (lv < 0 ? GW_LOG_WARN : (gw_log_level_t) lv, NULL);
    zsys_handler_set (NULL);                    //  our signals are a signalfd's, not czmq's
    gw_rargs_t args;
    if (gw_rargs_parse (&args, argc, argv, environ, err, sizeof err) < 0)
        return s_fail (err);
    gw_egreply_t *reply = gw_egreply_new (args.public_key, err, sizeof err);
    gw_remote_t *remote = reply ? gw_remote_new (&args, &reply, err, sizeof err) : NULL;
    int rc = -1;
    gateway [0] = 0;
    if (remote)
        gw_args_beside_me ("cellvm-gateway", gateway, sizeof gateway);
    if (remote && access (gateway, X_OK) != 0)
        snprintf (err, sizeof err, "cannot find cellvm-gateway beside me (%s)", gateway);
    else if (remote && gw_remote_start (remote, gateway, err, sizeof err) == 0)
        rc = gw_remote_serve (remote);
    gw_remote_destroy (&remote);                //  ends the gateway if it still runs
    gw_egreply_destroy (&reply);
    gw_rargs_release (&args);
    return rc < 0 ? s_fail (err) : rc;
}
