/*  kn_kernel_pub - what the kernel core publishes on iopub: messages built
 *  here, spliced ones (stream text, Python's display JSON), and the whole
 *  messages of comms and session.send (metadata, an explicit parent,
 *  buffers). Shares kn_kernel_int.h with kn_kernel.c.
 */
#include "kn_kernel_int.h"
#include "ch_jfast.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void
kn_kernel_publish (kn_kernel_t *self, const char *msg_type, json_t **content_p)
{
    assert (self && msg_type && content_p);
    if (strcmp (msg_type, "stream") != 0)
        kn_kernel_flush (self);     //  output first, then what follows it
    pthread_mutex_lock (&self->lock);
    ch_msg_t *msg = NULL;
    if (!self->silent)
        msg = ch_msg_new (CH_IOPUB, msg_type, self->parent, content_p, self->session);
    pthread_mutex_unlock (&self->lock);
    json_decref (*content_p);
    *content_p = NULL;
    if (msg)
        kn_chan_send (self->chan, &msg);
}

//  Send an iopub message whose JSON we put together ourselves: the header,
//  parent (compact JSON) and content pieces are spliced, nothing is parsed or
//  escaped again. msg_type must need no escaping. buf: its one buffer, or NULL.
static void
s_send_spliced (kn_kernel_t *self, const char *msg_type, const char *parent,
                const struct iovec *content, int ncontent, const struct iovec *buf)
{
    char id [37], date [32], head [400];
    ch_uuid4 (id);
    ch_utc_now (date);
    int hn = snprintf (head, sizeof head, "{\"channel\":\"iopub\",\"header\":{\"msg_id\":\"%s\","
                       "\"session\":\"%s\",\"username\":\"cellvm\",\"date\":\"%s\","
                       "\"msg_type\":\"%s\",\"version\":\"" CH_PROTOCOL_VERSION "\"},"
                       "\"parent_header\":", id, self->session, date, msg_type);
    static const char mid [] = ",\"metadata\":{},\"content\":";
    const char *tail = buf ? ",\"buffers\":1}" : ",\"buffers\":0}";
    struct iovec iov [12];
    int n = 0;
    iov [n++] = (struct iovec) { head, (size_t) hn };
    iov [n++] = (struct iovec) { (void *) parent, strlen (parent) };
    iov [n++] = (struct iovec) { (void *) mid, sizeof mid - 1 };
    for (int i = 0; i < ncontent && n < 11; i++)
        iov [n++] = content [i];
    iov [n++] = (struct iovec) { (void *) tail, strlen (tail) };
    kn_chan_send_json_buf (self->chan, msg_type, iov, n, buf);
}

//  The running request's parent as JSON (caller frees), or NULL when it is
//  silent: it publishes nothing.
static char *
s_parent_json (kn_kernel_t *self)
{
    if (getpid () != self->pid)
        return NULL;            //  a cell's fork publishes nothing (and must not lock)
    pthread_mutex_lock (&self->lock);
    char *p = self->silent ? NULL : strdup (self->parent_json ? self->parent_json : "{}");
    pthread_mutex_unlock (&self->lock);
    return p;
}

void
kn_kernel_stream (void *arg, const char *name, const char *text, size_t len)
{
    kn_kernel_t *self = arg;
    char *parent = s_parent_json (self);
    if (!parent)
        return;
    bool err = strcmp (name, "stderr") == 0;
    static const char out [] = "{\"name\":\"stdout\",\"text\":\"";
    static const char errs [] = "{\"name\":\"stderr\",\"text\":\"";
    struct iovec c [3] = {
        { (void *) (err ? errs : out), sizeof out - 1 },
        { (void *) text, len },
        { (void *) "\"}", 2 },
    };
    s_send_spliced (self, "stream", parent, c, 3, NULL);
    free (parent);
}

void
kn_kernel_stream_raw (void *arg, const char *name, const void *text, size_t len)
{
    kn_kernel_t *self = arg;
    char *parent = s_parent_json (self);
    if (!parent)
        return;
    bool err = strcmp (name, "stderr") == 0;
    struct iovec c = { (void *) (err ? "{\"name\":\"stderr\"}" : "{\"name\":\"stdout\"}"), 17 };
    struct iovec b = { (void *) text, len };
    s_send_spliced (self, "stream", parent, &c, 1, &b);
    free (parent);
}

//  A msg_type that goes into JSON as it is: [a-z_], as every Jupyter one.
static bool
s_plain_type (const char *t)
{
    if (!*t || strlen (t) > 64)
        return false;
    for (; *t; t++)
        if (!((*t >= 'a' && *t <= 'z') || *t == '_'))
            return false;
    return true;
}

int
kn_kernel_publish_json (kn_kernel_t *self, const char *msg_type, const char *content,
                        size_t len)
{
    assert (self && msg_type && content);
    //  Only an object: the first and last non-blank bytes are braces.
    size_t a = 0, b = len;
    while (a < b && strchr (" \t\r\n", content [a]))
        a++;
    while (b > a && strchr (" \t\r\n", content [b - 1]))
        b--;
    if (b - a < 2 || content [a] != '{' || content [b - 1] != '}')
        return -EINVAL;
    if (!s_plain_type (msg_type)) {
        json_t *c = ch_jfast_loadb ((const uint8_t *) content, len, 0, NULL);
        if (!json_is_object (c)) {
            json_decref (c);
            return -EINVAL;
        }
        kn_kernel_publish (self, msg_type, &c);
        return 0;
    }
    if (strcmp (msg_type, "stream") != 0)
        kn_kernel_flush (self);     //  output first, then what follows it
    char *parent = s_parent_json (self);
    if (!parent)
        return 0;
    struct iovec c = { (void *) (content + a), b - a };
    s_send_spliced (self, msg_type, parent, &c, 1, NULL);
    free (parent);
    return 0;
}

//  ---------------------------------------------------------------------------
//  Whole messages: comms and session.send

char *
kn_kernel_parent_json (kn_kernel_t *self)
{
    assert (self);
    pthread_mutex_lock (&self->lock);
    char *p = strdup (self->parent_json ? self->parent_json : "{}");
    pthread_mutex_unlock (&self->lock);
    if (!p)
        abort ();
    return p;
}

//  An object from JSON text ({} for NULL); NULL when the text is not one.
static json_t *
s_object (const char *text, size_t len)
{
    if (!text)
        return json_object ();
    json_t *o = ch_jfast_loadb ((const uint8_t *) text, len, 0, NULL);
    if (json_is_object (o))
        return o;
    json_decref (o);
    return NULL;
}

//  May a message with this parent (NULL: the running request's) go out? A
//  silent request publishes nothing, whoever names it as parent. Lock held.
static bool
s_may_publish (const kn_kernel_t *self, const json_t *parent)
{
    if (!self->silent)
        return true;
    const char *a = json_string_value (json_object_get (parent, "msg_id"));
    const char *b = json_string_value (json_object_get (self->parent, "msg_id"));
    return parent && (!a || !b || strcmp (a, b) != 0);
}

//  The message p describes, or NULL when it may not go out (*rc 0) or is
//  malformed (*rc -EINVAL).
static ch_msg_t *
s_build (kn_kernel_t *self, const char *msg_type, const kn_publish_t *p, int *rc)
{
    json_t *content = s_object (p->content, p->content_len);
    json_t *metadata = s_object (p->metadata, p->metadata ? strlen (p->metadata) : 0);
    json_t *parent = p->parent ? s_object (p->parent, strlen (p->parent)) : NULL;
    ch_msg_t *msg = NULL;
    *rc = -EINVAL;
    if (!content || !metadata || (p->parent && !parent))
        goto fail;
    *rc = 0;
    pthread_mutex_lock (&self->lock);
    if (s_may_publish (self, parent))
        msg = ch_msg_new (CH_IOPUB, msg_type, parent ? parent : self->parent, &content,
                          self->session);
    pthread_mutex_unlock (&self->lock);
    if (msg)
        ch_msg_set_metadata (msg, &metadata);
fail:
    json_decref (content);
    json_decref (metadata);
    json_decref (parent);
    return msg;
}

int
kn_kernel_publish_msg (kn_kernel_t *self, const char *msg_type, const kn_publish_t *p)
{
    assert (self && msg_type && p && p->content);
    if (getpid () != self->pid)
        return 0;               //  a cell's fork publishes nothing
    if (p->nbuffers > CH_MSG_MAX_BUFFERS)
        return -E2BIG;
    if (strcmp (msg_type, "stream") != 0)
        kn_kernel_flush (self);     //  output first, then what follows it
    int rc;
    ch_msg_t *msg = s_build (self, msg_type, p, &rc);
    for (size_t i = 0; msg && i < p->nbuffers; i++) {
        size_t len = p->buffers [i].iov_len;
        uint8_t *copy = malloc (len ? len : 1);
        if (!copy)
            abort ();
        if (len)
            memcpy (copy, p->buffers [i].iov_base, len);
        ch_msg_add_buffer (msg, &copy, len);
    }
    if (msg)
        kn_chan_send (self->chan, &msg);
    return rc;
}
