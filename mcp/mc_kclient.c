/*  mc_kclient - a Jupyter client's sockets on one cellvm-gateway. */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <czmq.h>

#include "wire/gw_conn.h"
#include "wire/gw_hmac.h"
#include "wire/gw_wire.h"
#include "mc_kclient.h"

struct _mc_kclient_t {
    gw_wire_t *wire;
    zsock_t *sock [CH_COUNT];   //  shell, control (DEALER), iopub (SUB); others NULL
    char session [37];          //  our client session id, also the DEALERs' identity
};

//  Bind n sockets to 127.0.0.1:0 at once (so the ports differ) and read them.
static int
s_free_ports (int *ports, int n)
{
    int fds [GW_PORT_COUNT], rc = 0, i;
    for (i = 0; i < n; i++) {
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = 0 };
        socklen_t len = sizeof sa;
        sa.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
        fds [i] = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fds [i] < 0 || bind (fds [i], (struct sockaddr *) &sa, sizeof sa) != 0
            || getsockname (fds [i], (struct sockaddr *) &sa, &len) != 0) {
            rc = -errno;
            if (fds [i] >= 0)
                close (fds [i]);
            break;
        }
        ports [i] = ntohs (sa.sin_port);
    }
    while (i-- > 0)
        close (fds [i]);
    return rc;
}

int
mc_kclient_write_conn (const char *path, char *err, size_t errlen)
{
    assert (path);
    int ports [GW_PORT_COUNT];
    uint8_t raw [32];
    char key [65];
    int rc = s_free_ports (ports, GW_PORT_COUNT);
    if (rc == 0 && getrandom (raw, sizeof raw, 0) != (ssize_t) sizeof raw)
        rc = -EIO;
    if (rc != 0) {
        snprintf (err, errlen, "cannot pick ports or a key for %s: %s", path, strerror (-rc));
        return rc;
    }
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf (key + 2 * i, 3, "%02x", raw [i]);
    int fd = open (path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    FILE *f = fd >= 0 ? fdopen (fd, "w") : NULL;
    if (!f) {
        rc = -errno;
        if (fd >= 0)
            close (fd);
        snprintf (err, errlen, "cannot write %s: %s", path, strerror (-rc));
        return rc;
    }
    fprintf (f, "{\"transport\": \"tcp\", \"ip\": \"127.0.0.1\", \"shell_port\": %d, "
             "\"iopub_port\": %d, \"stdin_port\": %d, \"control_port\": %d, \"hb_port\": %d, "
             "\"key\": \"%s\", \"signature_scheme\": \"hmac-sha256\", \"kernel_name\": "
             "\"cellvm\"}\n", ports [0], ports [1], ports [2], ports [3], ports [4], key);
    rc = fclose (f) == 0 ? 0 : -EIO;
    memset (key, 0, sizeof key);
    memset (raw, 0, sizeof raw);
    if (rc != 0)
        snprintf (err, errlen, "cannot write %s", path);
    return rc;
}

static zsock_t *
s_connect (const gw_conn_t *conn, gw_port_t port, int type, const char *identity)
{
    char endpoint [300];
    if (gw_conn_endpoint (conn, port, endpoint, sizeof endpoint) != 0)
        return NULL;
    zsock_t *sock = zsock_new (type);
    if (!sock)
        return NULL;
    zsock_set_linger (sock, 0);
    zsock_set_rcvhwm (sock, 0);
    zsock_set_sndhwm (sock, 0);
    if (identity)
        zsock_set_identity (sock, identity);
    if (type == ZMQ_SUB)
        zsock_set_subscribe (sock, "");
    if (zsock_connect (sock, "%s", endpoint) != 0)
        zsock_destroy (&sock);
    return sock;
}

mc_kclient_t *
mc_kclient_new (const char *conn_path, size_t max_msg, char *err, size_t errlen)
{
    gw_conn_t *conn = gw_conn_load (conn_path, err, errlen);
    mc_kclient_t *self = conn ? calloc (1, sizeof *self) : NULL;
    if (!self)
        goto fail;
    size_t keylen;
    const uint8_t *key = gw_conn_key (conn, &keylen);
    gw_hmac_t *hmac = gw_hmac_new (gw_conn_scheme (conn), key, keylen);
    if (!hmac || !(self->wire = gw_wire_new (&hmac, max_msg))) {
        gw_hmac_destroy (&hmac);
        snprintf (err, errlen, "connection file %s: cannot set up signing", conn_path);
        goto fail;
    }
    ch_uuid4 (self->session);
    self->sock [CH_SHELL] = s_connect (conn, GW_PORT_SHELL, ZMQ_DEALER, self->session);
    self->sock [CH_CONTROL] = s_connect (conn, GW_PORT_CONTROL, ZMQ_DEALER, self->session);
    self->sock [CH_IOPUB] = s_connect (conn, GW_PORT_IOPUB, ZMQ_SUB, NULL);
    if (!self->sock [CH_SHELL] || !self->sock [CH_CONTROL] || !self->sock [CH_IOPUB]) {
        snprintf (err, errlen, "cannot connect to the ports of %s", conn_path);
        goto fail;
    }
    gw_conn_destroy (&conn);
    return self;
fail:
    mc_kclient_destroy (&self);
    gw_conn_destroy (&conn);
    return NULL;
}

void
mc_kclient_destroy (mc_kclient_t **self_p)
{
    assert (self_p);
    mc_kclient_t *self = *self_p;
    if (!self)
        return;
    for (int ch = 0; ch < CH_COUNT; ch++)
        zsock_destroy (&self->sock [ch]);
    gw_wire_destroy (&self->wire);
    free (self);
    *self_p = NULL;
}

int
mc_kclient_send (mc_kclient_t *self, ch_channel_t ch, const char *msg_type,
                 json_t **content_p, const uint8_t *buf, size_t len, char msg_id [37])
{
    assert (self && msg_type && (ch == CH_SHELL || ch == CH_CONTROL));
    ch_msg_t *msg = ch_msg_new (ch, msg_type, NULL, content_p, self->session);
    snprintf (msg_id, 37, "%s", ch_msg_id (msg));
    if (buf) {
        uint8_t *copy = malloc (len ? len : 1);
        if (!copy)
            abort ();
        memcpy (copy, buf, len);
        ch_msg_add_buffer (msg, &copy, len);
    }
    gw_frames_t *frames = gw_wire_encode (self->wire, NULL, msg);
    ch_msg_destroy (&msg);
    if (!frames)
        return -EIO;
    zmsg_t *zmsg = zmsg_new ();
    for (size_t i = 0; i < gw_frames_size (frames); i++) {
        const gw_frame_t *f = gw_frames_get (frames, i);
        zmsg_addmem (zmsg, f->data, f->size);
    }
    gw_frames_destroy (&frames);
    return zmsg_send (&zmsg, self->sock [ch]) == 0 ? 0 : -EIO;
}

void *
mc_kclient_handle (mc_kclient_t *self, ch_channel_t ch)
{
    assert (self && ch < CH_COUNT && self->sock [ch]);
    return zsock_resolve (self->sock [ch]);
}

int
mc_kclient_recv (mc_kclient_t *self, ch_channel_t ch, ch_msg_t **msg_p, const char **why)
{
    assert (self && msg_p && why && ch < CH_COUNT && self->sock [ch]);
    *msg_p = NULL;
    if (!(zsock_events (self->sock [ch]) & ZMQ_POLLIN))
        return -EAGAIN;
    zmsg_t *zmsg = zmsg_recv (self->sock [ch]);
    if (!zmsg)
        return -EAGAIN;
    size_t n = zmsg_size (zmsg);
    gw_frame_t *frames = calloc (n ? n : 1, sizeof *frames);
    if (!frames)
        abort ();
    zframe_t *f = zmsg_first (zmsg);
    for (size_t i = 0; i < n && f; i++, f = zmsg_next (zmsg)) {
        static uint8_t empty;
        frames [i].data = zframe_size (f) ? zframe_data (f) : &empty;
        frames [i].size = zframe_size (f);
    }
    gw_frames_t *ids = NULL;
    int rc = gw_wire_decode (self->wire, ch, frames, n, msg_p, &ids, why);
    gw_frames_destroy (&ids);
    free (frames);
    zmsg_destroy (&zmsg);
    return rc == 0 ? 0 : -EBADMSG;
}
