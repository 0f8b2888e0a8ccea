/*  fuzz_gw_conn - gw_conn_load on arbitrary connection file contents, and
    gw_listen_parse (--listen-fds) and the Z85 key decoder on the same bytes.

    The bytes go to a memfd and are loaded through /proc/self/fd, so no file
    is written per run. Every failure must explain itself.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "wire/gw_conn.h"
#include "wire/gw_listen.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    char text [64];
    int fds [GW_PORT_COUNT];
    snprintf (text, sizeof text, "%.*s", (int) (size < 63 ? size : 63), (const char *) data);
    if (gw_listen_parse (text, fds) == 0)
        for (int i = 0; i < GW_PORT_COUNT; i++)
            if (fds [i] < 3 || fds [i] > 65535)
                abort ();                       //  only plausible fds pass
    int fd = memfd_create ("conn", 0);
    if (fd < 0)
        return 0;
    if (write (fd, data, size) == (ssize_t) size) {
        char path [64], err [256], endpoint [600];
        snprintf (path, sizeof path, "/proc/self/fd/%d", fd);
        gw_conn_t *conn = gw_conn_load (path, err, sizeof err);
        if (!conn && !err [0])
            abort ();
        for (int i = 0; conn && i < GW_PORT_COUNT; i++)
            if (gw_conn_endpoint (conn, (gw_port_t) i, endpoint, sizeof endpoint) != 0)
                abort ();                       //  a loaded file always has endpoints
        const uint8_t *pub = NULL, *sec = NULL;
        if (conn && gw_conn_curve (conn, &pub, &sec) != (pub && sec))
            abort ();                           //  CurveZMQ keys: both or neither
        uint8_t key [GW_CONN_CURVE_KEY];
        if (gw_conn_z85_key ((const char *) data, size, key) == 0 && size != GW_CONN_CURVE_Z85)
            abort ();                           //  only 40 characters decode
        gw_conn_destroy (&conn);
    }
    close (fd);
    return 0;
}
