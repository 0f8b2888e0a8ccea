/*  gw_remote_int - what gw_remote.c (set-up, start, reply) and
    gw_remote_serve.c (the comm port, signals, control messages) share.
    Nothing else includes this.
*/
#ifndef GW_REMOTE_INT_H
#define GW_REMOTE_INT_H

#include "cli/gw_rcomm.h"
#include "cli/gw_remote.h"
#include "wire/gw_conn.h"
#include "wire/gw_wire.h"

#include <czmq.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define GW_REMOTE_COMM GW_PORT_COUNT            //  index of the comm port in fds/ports

struct _gw_remote_t {
    const gw_rargs_t *args;                     //  borrowed
    gw_egreply_t *reply;                        //  the front's key
    int fds [GW_RARGS_PORTS];                   //  listening: gw_port_t order, then comm
    int ports [GW_RARGS_PORTS];
    char key [37];                              //  the connection's HMAC key
    char curve_public [41], curve_secret [41];  //  Z85, "" without --encryption curve
    char dir [PATH_MAX];                        //  private, 0700; "" until made
    char conn_path [PATH_MAX];
    int sig_fd;                                 //  SIGCHLD, SIGTERM, SIGHUP, SIGINT
    pid_t child;                                //  cellvm-gateway, 0 before start
    bool reaped;
    int status;                                 //  waitpid's, once reaped
    gw_rcomm_t *comm;
    gw_wire_t *wire;                            //  signs control messages; lazily
    zsock_t *control;                           //  DEALER to the control port; lazily
    char session [37];
    int64_t kill_at_ms;                         //  SIGKILL then (after shutdown), 0: none
};

//  waitpid (WNOHANG) the gateway: true once it is gone.
bool gw_remote__reap (gw_remote_t *self);

#endif
