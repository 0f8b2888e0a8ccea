/*  gw_conn - the Jupyter connection file the client wrote for us.

    Errors name the file and the field and say what would be accepted, so the
    person reading the log can fix the file. The key is never quoted: not in
    our messages, and not through jansson's error text either (which quotes
    the token near a syntax error, and that token may be the key).
*/
#include "wire/gw_conn.h"
#include "wire/gw_hmac.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/crypto.h>

#define S_IP_MAX 256                            //  a host or an ipc path prefix

struct _gw_conn_t {
    char transport [4];                         //  "tcp" or "ipc"
    char ip [S_IP_MAX];                         //  address, or ipc path prefix
    char scheme [32];                           //  "hmac-sha256"...
    int ports [GW_PORT_COUNT];                  //  indexed by gw_port_t
    uint8_t *key;                               //  key bytes, wiped on destroy
    size_t keylen;
    int listen_fds [GW_PORT_COUNT];             //  pre-bound (gw_listen), -1: none
    bool curve;                                 //  the file gave a CurveZMQ keypair
    uint8_t curve_public [GW_CONN_CURVE_KEY];
    uint8_t curve_secret [GW_CONN_CURVE_KEY];   //  wiped on destroy with the rest
};

//  Z85's alphabet (ZeroMQ RFC 32): a character's place is its digit.
static const char s_z85 [] =
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

static const char *s_port_names [GW_PORT_COUNT] = {
    "shell_port", "iopub_port", "stdin_port", "control_port", "hb_port"
};

const char *
gw_conn_port_name (gw_port_t which)
{
    return (unsigned) which < GW_PORT_COUNT ? s_port_names [which] : NULL;
}

//  Write "connection file PATH: <reason>" into err; always returns -EINVAL.
static int
s_err (char *err, size_t errlen, const char *path, const char *fmt, ...)
    __attribute__ ((format (printf, 4, 5)));

static int
s_err (char *err, size_t errlen, const char *path, const char *fmt, ...)
{
    if (!err || !errlen)
        return -EINVAL;
    int n = snprintf (err, errlen, "connection file %s: ", path);
    if (n >= 0 && (size_t) n < errlen) {
        va_list args;
        va_start (args, fmt);
        vsnprintf (err + n, errlen - (size_t) n, fmt, args);
        va_end (args);
    }
    return -EINVAL;
}

//  Read and parse the file; NULL with err set when missing or not JSON.
static json_t *
s_read (const char *path, char *err, size_t errlen)
{
    FILE *file = fopen (path, "r");
    if (!file) {
        s_err (err, errlen, path, "cannot open it (%s)", strerror (errno));
        return NULL;
    }
    json_error_t jerr;
    json_t *root = json_loadf (file, JSON_REJECT_DUPLICATES, &jerr);
    fclose (file);
    if (!root) {
        //  Keep jansson's reason but cut the quoted token ("... near 'x'").
        char *near = strstr (jerr.text, " near ");
        if (near)
            *near = 0;
        s_err (err, errlen, path, "not valid JSON at line %d column %d: %s",
               jerr.line, jerr.column, jerr.text);
    }
    else if (!json_is_object (root)) {
        s_err (err, errlen, path, "top level is not a JSON object");
        json_decref (root);
        root = NULL;
    }
    OPENSSL_cleanse (&jerr, sizeof jerr);       //  its source field may hold file bytes
    return root;
}

//  Optional string field into out; def when absent. No key ever goes here.
static int
s_get_string (json_t *root, const char *name, const char *def, char *out, size_t cap,
              const char *path, char *err, size_t errlen)
{
    json_t *v = json_object_get (root, name);
    if (!v && def)
        v = json_string (def);
    else if (!v)
        return s_err (err, errlen, path, "missing field \"%s\"", name);
    else
        json_incref (v);
    int rc = 0;
    const char *s = json_string_value (v);
    size_t len = json_string_length (v);
    if (!s || len == 0 || len >= cap || strlen (s) != len)
        rc = s_err (err, errlen, path, "field \"%s\" must be a non-empty string "
                    "shorter than %zu bytes", name, cap);
    else
        memcpy (out, s, len + 1);
    json_decref (v);
    return rc;
}

static int
s_get_port (gw_conn_t *self, json_t *root, gw_port_t which, const char *path,
            char *err, size_t errlen)
{
    const char *name = s_port_names [which];
    bool tcp = strcmp (self->transport, "tcp") == 0;
    json_t *v = json_object_get (root, name);
    if (!v)
        return s_err (err, errlen, path, "missing field \"%s\"", name);
    json_int_t port = json_integer_value (v);
    if (!json_is_integer (v) || port < (tcp ? 1 : 0) || port > (tcp ? 65535 : INT_MAX))
        return s_err (err, errlen, path, "bad port value for \"%s\": must be an integer "
                      "%s (the client picks the ports; 0 is not accepted for tcp)", name,
                      tcp ? "from 1 to 65535" : ">= 0");
    self->ports [which] = (int) port;
    return 0;
}

static int
s_get_key (gw_conn_t *self, json_t *root, const char *path, char *err, size_t errlen)
{
    json_t *v = json_object_get (root, "key");
    if (!v)     //  a silent default would switch authentication off
        return s_err (err, errlen, path, "missing field \"key\" (use \"\" to disable "
                      "message signing explicitly)");
    if (!json_is_string (v))
        return s_err (err, errlen, path, "field \"key\" must be a string");
    self->keylen = json_string_length (v);
    self->key = malloc (self->keylen + 1);
    if (!self->key)
        abort ();
    memcpy (self->key, json_string_value (v), self->keylen + 1);
    return 0;
}

int
gw_conn_z85_key (const char *text, size_t len, uint8_t out [GW_CONN_CURVE_KEY])
{
    assert (out);
    if (!text || len != GW_CONN_CURVE_Z85)
        return -EINVAL;
    int rc = 0;
    for (size_t group = 0; group < GW_CONN_CURVE_Z85 / 5 && rc == 0; group++) {
        uint64_t value = 0;
        for (size_t i = 0; i < 5 && rc == 0; i++) {
            char c = text [5 * group + i];
            const char *at = c ? strchr (s_z85, c) : NULL;
            if (!at)
                rc = -EILSEQ;
            else
                value = value * 85 + (uint64_t) (at - s_z85);
        }
        if (rc == 0 && value > UINT32_MAX)
            rc = -ERANGE;                       //  five digits reach past four bytes
        for (int b = 0; b < 4 && rc == 0; b++)
            out [4 * group + (size_t) b] = (uint8_t) (value >> (24 - 8 * b));
    }
    if (rc != 0)
        OPENSSL_cleanse (out, GW_CONN_CURVE_KEY);
    return rc;
}

//  One CurveZMQ key field into out; the reason names the field, never the value.
static int
s_get_curve_key (json_t *v, const char *name, uint8_t out [GW_CONN_CURVE_KEY],
                 const char *path, char *err, size_t errlen)
{
    const char *text = json_string_value (v);
    size_t len = text ? json_string_length (v) : 0;
    int rc = text ? gw_conn_z85_key (text, len, out) : -EINVAL;
    if (rc == -EILSEQ)
        return s_err (err, errlen, path, "field \"%s\" holds a character that is not Z85 "
                      "(a CurveZMQ key is 40 characters of ZeroMQ's Z85, as "
                      "zmq.curve_keypair() writes)", name);
    if (rc < 0)
        return s_err (err, errlen, path, "field \"%s\" must be a CurveZMQ key: a string of "
                      "40 Z85 characters, as zmq.curve_keypair() writes (%s)", name,
                      !text ? "it is not a string" : len != GW_CONN_CURVE_Z85
                      ? "its length is not 40" : "a group of five characters is over 2^32 - 1");
    return 0;
}

//  curve_publickey and curve_secretkey: both (CurveZMQ on every port) or
//  neither (plain ports). One alone is refused: jupyter_client would then
//  run the ports in plain text without a word, which is not what whoever
//  wrote one key meant.
static int
s_get_curve (gw_conn_t *self, json_t *root, const char *path, char *err, size_t errlen)
{
    json_t *pub = json_object_get (root, "curve_publickey");
    json_t *sec = json_object_get (root, "curve_secretkey");
    pub = json_is_null (pub) ? NULL : pub;
    sec = json_is_null (sec) ? NULL : sec;
    if (!pub && !sec)
        return 0;
    if (!pub || !sec)
        return s_err (err, errlen, path, "field \"%s\" is given without \"%s\": CurveZMQ "
                      "needs both keys of the pair (or neither, for plain ports)",
                      pub ? "curve_publickey" : "curve_secretkey",
                      pub ? "curve_secretkey" : "curve_publickey");
    if (s_get_curve_key (pub, "curve_publickey", self->curve_public, path, err, errlen) < 0
    ||  s_get_curve_key (sec, "curve_secretkey", self->curve_secret, path, err, errlen) < 0)
        return -EINVAL;
    self->curve = true;
    return 0;
}

//  Every check after the file parsed; 0 or -EINVAL with err set.
static int
s_validate (gw_conn_t *self, json_t *root, const char *path, char *err, size_t errlen)
{
    if (s_get_string (root, "transport", "tcp", self->transport, sizeof self->transport,
                      path, err, errlen) < 0
        || (strcmp (self->transport, "tcp") != 0 && strcmp (self->transport, "ipc") != 0))
        return s_err (err, errlen, path, "field \"transport\" must be \"tcp\" or \"ipc\"");
    if (s_get_string (root, "ip", NULL, self->ip, sizeof self->ip, path, err, errlen) < 0)
        return -EINVAL;
    for (const char *c = self->ip; *c; c++)
        if ((unsigned char) *c < 0x20 || *c == 0x7f)
            return s_err (err, errlen, path, "field \"ip\" contains control characters");
    for (int i = 0; i < GW_PORT_COUNT; i++)
        if (s_get_port (self, root, (gw_port_t) i, path, err, errlen) < 0)
            return -EINVAL;
    if (s_get_string (root, "signature_scheme", "hmac-sha256", self->scheme,
                      sizeof self->scheme, path, err, errlen) < 0
        || !gw_hmac_scheme_supported (self->scheme))
        return s_err (err, errlen, path, "field \"signature_scheme\" must be \"hmac-\" "
                      "followed by md5, sha1, sha224, sha256, sha384 or sha512");
    if (s_get_curve (self, root, path, err, errlen) < 0)
        return -EINVAL;
    return s_get_key (self, root, path, err, errlen);
}

gw_conn_t *
gw_conn_load (const char *path, char *err, size_t errlen)
{
    if (err && errlen)
        err [0] = 0;
    if (!path || !*path) {
        if (err && errlen)
            snprintf (err, errlen, "no connection file given");
        return NULL;
    }
    gw_conn_t *self = NULL;
    json_t *root = s_read (path, err, errlen);
    if (!root)
        goto fail;
    self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    for (int i = 0; i < GW_PORT_COUNT; i++)
        self->listen_fds [i] = -1;
    if (s_validate (self, root, path, err, errlen) < 0)
        goto fail;
    json_decref (root);
    return self;
fail:
    json_decref (root);
    gw_conn_destroy (&self);
    return NULL;
}

void
gw_conn_destroy (gw_conn_t **self_p)
{
    assert (self_p);
    gw_conn_t *self = *self_p;
    if (!self)
        return;
    if (self->key)
        OPENSSL_cleanse (self->key, self->keylen);
    free (self->key);
    OPENSSL_cleanse (self, sizeof *self);
    free (self);
    *self_p = NULL;
}

int
gw_conn_port (const gw_conn_t *self, gw_port_t which)
{
    assert (self);
    return (unsigned) which < GW_PORT_COUNT ? self->ports [which] : -EINVAL;
}

int
gw_conn_endpoint (const gw_conn_t *self, gw_port_t which, char *out, size_t cap)
{
    assert (self && (out || cap == 0));
    if ((unsigned) which >= GW_PORT_COUNT)
        return -EINVAL;
    int n;
    int port = self->ports [which];
    if (strcmp (self->transport, "ipc") == 0)
        n = snprintf (out, cap, "ipc://%s-%d", self->ip, port);
    else if (strchr (self->ip, ':') && self->ip [0] != '[')
        n = snprintf (out, cap, "tcp://[%s]:%d", self->ip, port);     //  IPv6 literal
    else
        n = snprintf (out, cap, "tcp://%s:%d", self->ip, port);
    return n >= 0 && (size_t) n < cap ? 0 : -ENOSPC;
}

const uint8_t *
gw_conn_key (const gw_conn_t *self, size_t *len_p)
{
    assert (self);
    if (len_p)
        *len_p = self->keylen;
    return self->key;
}

const char *gw_conn_scheme (const gw_conn_t *self) { assert (self); return self->scheme; }
const char *gw_conn_transport (const gw_conn_t *self) { assert (self); return self->transport; }
const char *gw_conn_ip (const gw_conn_t *self) { assert (self); return self->ip; }

bool
gw_conn_curve (const gw_conn_t *self, const uint8_t **public_p, const uint8_t **secret_p)
{
    assert (self);
    if (public_p)
        *public_p = self->curve ? self->curve_public : NULL;
    if (secret_p)
        *secret_p = self->curve ? self->curve_secret : NULL;
    return self->curve;
}

void
gw_conn_set_listen_fds (gw_conn_t *self, const int fds [GW_PORT_COUNT])
{
    assert (self && fds);
    memcpy (self->listen_fds, fds, sizeof self->listen_fds);
}

int
gw_conn_listen_fd (const gw_conn_t *self, gw_port_t which)
{
    assert (self);
    return (unsigned) which < GW_PORT_COUNT ? self->listen_fds [which] : -1;
}
