/*  gw_curve - CurveZMQ server options from the connection file's keypair.

    Through libzmq directly rather than czmq's zsock_set_curve_*, which
    assert on a failed setsockopt: a libzmq built without libsodium fails
    there, and that is a refusal to explain, not a crash.
*/
#include "server/gw_curve.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>
#include <zmq.h>

int
gw_curve_check (const gw_conn_t *conn, char *err, size_t errlen)
{
    assert (conn && err);
    const uint8_t *pub, *sec;
    if (!gw_conn_curve (conn, &pub, &sec))
        return 0;
    if (!zmq_has ("curve")) {
        snprintf (err, errlen, "the connection file asks for CurveZMQ (curve_publickey, "
                  "curve_secretkey) but this libzmq has no CURVE support (zmq_has(\"curve\") "
                  "is false: it was built without libsodium); use a libzmq with CURVE, or a "
                  "connection file without the keys for plain ports");
        return -ENOTSUP;
    }
    char sec_z85 [GW_CONN_CURVE_Z85 + 1], derived [GW_CONN_CURVE_Z85 + 1];
    char pub_z85 [GW_CONN_CURVE_Z85 + 1];
    int rc = 0;
    if (!zmq_z85_encode (sec_z85, sec, GW_CONN_CURVE_KEY)
    ||  !zmq_z85_encode (pub_z85, pub, GW_CONN_CURVE_KEY)
    ||  zmq_curve_public (derived, sec_z85) != 0) {
        snprintf (err, errlen, "cannot derive the public key of curve_secretkey: %s",
                  zmq_strerror (zmq_errno ()));
        rc = -EINVAL;
    }
    else if (strcmp (derived, pub_z85) != 0) {
        snprintf (err, errlen, "the connection file's curve_publickey is not the public key "
                  "of its curve_secretkey: clients would never complete the CurveZMQ "
                  "handshake (write both from one zmq.curve_keypair())");
        rc = -EINVAL;
    }
    OPENSSL_cleanse (sec_z85, sizeof sec_z85);
    return rc;
}

int
gw_curve_server (void *handle, const gw_conn_t *conn, const char *name, char *err,
                 size_t errlen)
{
    assert (handle && conn && name && err);
    const uint8_t *pub, *sec;
    if (!gw_conn_curve (conn, &pub, &sec))
        return 0;
    int on = 1;
    if (zmq_setsockopt (handle, ZMQ_CURVE_SECRETKEY, sec, GW_CONN_CURVE_KEY) == 0
    &&  zmq_setsockopt (handle, ZMQ_CURVE_PUBLICKEY, pub, GW_CONN_CURVE_KEY) == 0
    &&  zmq_setsockopt (handle, ZMQ_CURVE_SERVER, &on, sizeof on) == 0)
        return 0;
    int rc = -zmq_errno ();
    snprintf (err, errlen, "cannot make %s a CurveZMQ server: %s", name, zmq_strerror (-rc));
    return rc;
}
