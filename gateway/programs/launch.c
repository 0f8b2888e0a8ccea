/*  cellvm-launch - what a kernelspec runs: listen on the connection file's
    ports, then exec cellvm-gateway (beside this binary) with the listening
    fds, so a client's first connect is queued by the kernel instead of
    refused (and retried by ZMQ 100 ms later). See gw_listen.h.

    Anything unusual (no connection file, ipc, an IPv6 address, a port
    taken) execs the gateway unchanged: it reports the problem itself.
*/
#include "wire/gw_conn.h"
#include "wire/gw_listen.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

//  path of name in the directory of this executable.
static int
s_beside_me (const char *name, char *path, size_t cap)
{
    char self [PATH_MAX];
    ssize_t n = readlink ("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return -errno;
    self [n] = '\0';
    int len = snprintf (path, cap, "%s/%s", dirname (self), name);
    return len > 0 && (size_t) len < cap ? 0 : -ENAMETOOLONG;
}

static const char *
s_option (int argc, char **argv, const char *name)
{
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp (argv [i], name) == 0)
            return argv [i + 1];
    return NULL;
}

//  "A,B,C,D,E" of fds left open across exec, or "" when not pre-bound.
static void
s_prebind (const char *conn_file, char *list, size_t cap)
{
    char err [300];
    int fds [GW_PORT_COUNT];
    list [0] = '\0';
    gw_conn_t *conn = conn_file ? gw_conn_load (conn_file, err, sizeof err) : NULL;
    if (conn && gw_listen_open (conn, fds, err, sizeof err) == 0) {
        size_t used = 0;
        for (int i = 0; i < GW_PORT_COUNT; i++) {
            fcntl (fds [i], F_SETFD, 0);        //  for the gateway, across exec
            used += (size_t) snprintf (list + used, cap - used, "%s%d", i ? "," : "", fds [i]);
        }
    }
    gw_conn_destroy (&conn);
}

int
main (int argc, char **argv)
{
    char gateway [PATH_MAX], list [64];
    if (s_beside_me ("cellvm-gateway", gateway, sizeof gateway) < 0) {
        fprintf (stderr, "cellvm-launch: cannot find my own directory (/proc/self/exe)\n");
        return 127;
    }
    s_prebind (s_option (argc, argv, "--connection-file"), list, sizeof list);
    char **args = calloc ((size_t) argc + 3, sizeof *args);
    if (!args)
        abort ();
    args [0] = gateway;
    for (int i = 1; i < argc; i++)
        args [i] = argv [i];
    if (list [0]) {
        args [argc] = "--listen-fds";
        args [argc + 1] = list;
    }
    execv (gateway, args);
    fprintf (stderr, "cellvm-launch: cannot run %s: %s\n", gateway, strerror (errno));
    return 127;
}
