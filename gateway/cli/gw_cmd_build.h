/*  gw_cmd_build - `cellvm-gateway --build-template [vm options]`: build the
    template for these options unless an intact one exists, then delete the
    templates ours supersedes or that nobody restored for 30 days
    (gw_tplsweep). A gateway that finds no template starts this in the
    background (gw_template_build_detached, argv from gw_args_child_argv);
    `make template` runs it in the foreground. See docs/snapshots.md.
*/
#ifndef GW_CMD_BUILD_H
#define GW_CMD_BUILD_H

#include "cli/gw_args.h"

//  The process exit code: 0 (built, or up to date), 3 (another process is
//  building the same template), 1 (failed; the reason on stderr).
int gw_cmd_build_main (gw_args_t *args);

#endif
