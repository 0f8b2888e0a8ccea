/*  gw_conn - the Jupyter connection file the client wrote for us.

    {"transport": "tcp", "ip": "127.0.0.1", "shell_port": 5555, ...,
     "key": "e8bd966f-...", "signature_scheme": "hmac-sha256"}

    Required: ip, shell_port, iopub_port, stdin_port, control_port, hb_port,
    key (may be ""). Defaults: transport "tcp", signature_scheme
    "hmac-sha256". Unknown keys are ignored. The key never appears in any
    error text, and is wiped on destroy.

    Optional, both or neither: curve_publickey and curve_secretkey, the
    CurveZMQ keypair jupyter_client 8.9 writes (Z85, 40 characters each; one
    pair, used by the kernel as the CURVE server and by the client too). A
    JSON null counts as absent, as in jupyter_client. Neither key is ever
    quoted in an error; both are wiped on destroy.
*/
#ifndef GW_CONN_H
#define GW_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct _gw_conn_t gw_conn_t;

typedef enum { GW_PORT_SHELL, GW_PORT_IOPUB, GW_PORT_STDIN, GW_PORT_CONTROL, GW_PORT_HB } gw_port_t;
#define GW_PORT_COUNT 5

//  Load and validate the file. NULL on failure with an actionable reason in
//  err (file missing or unreadable, not JSON at line:col, missing field X,
//  bad port value for X, ...).
gw_conn_t *gw_conn_load (const char *path, char *err, size_t errlen);

//  Destroy, wiping the key (OPENSSL_cleanse); nulls *self_p. NULL-safe.
void gw_conn_destroy (gw_conn_t **self_p);

//  Write the endpoint: tcp://IP:PORT (IPv6 as tcp://[IP]:PORT) or
//  ipc://IP-PORT (jupyter_client convention). 0, -EINVAL for a bad which,
//  -ENOSPC when cap is too small.
int gw_conn_endpoint (const gw_conn_t *self, gw_port_t which, char *out, size_t cap);

//  The port number for which (-EINVAL for a bad which).
int gw_conn_port (const gw_conn_t *self, gw_port_t which);

//  Borrowed key bytes (not NUL-terminated for signing purposes; *len_p = 0
//  when the key is empty).
const uint8_t *gw_conn_key (const gw_conn_t *self, size_t *len_p);
const char *gw_conn_scheme (const gw_conn_t *self);
const char *gw_conn_transport (const gw_conn_t *self);
const char *gw_conn_ip (const gw_conn_t *self);

#define GW_CONN_CURVE_KEY 32                     //  bytes of a CurveZMQ key
#define GW_CONN_CURVE_Z85 40                     //  its Z85 text

//  The CurveZMQ keypair when the file gave one: true with borrowed 32-byte
//  keys in *public_p and *secret_p (either may be NULL); false for plain
//  ports.
bool gw_conn_curve (const gw_conn_t *self, const uint8_t **public_p,
                    const uint8_t **secret_p);

//  Decode a CurveZMQ key: exactly GW_CONN_CURVE_Z85 characters of Z85
//  (ZeroMQ RFC 32) into GW_CONN_CURVE_KEY bytes. 0; -EINVAL for another
//  length, -EILSEQ for a character outside Z85's alphabet, -ERANGE for a
//  group of five over 2^32 - 1. out is wiped on failure.
int gw_conn_z85_key (const char *text, size_t len, uint8_t out [GW_CONN_CURVE_KEY]);

//  Name of a port as in the file ("shell_port"...); NULL for a bad which.
const char *gw_conn_port_name (gw_port_t which);

//  Listening sockets made for these ports before we ran (gw_listen); the
//  server adopts them instead of binding. -1 each until set.
void gw_conn_set_listen_fds (gw_conn_t *self, const int fds [GW_PORT_COUNT]);
int gw_conn_listen_fd (const gw_conn_t *self, gw_port_t which);

#endif
