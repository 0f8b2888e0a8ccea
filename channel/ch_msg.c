/*  ch_msg - one message of the cellvm channel. */
#include "ch_msg.h"
#include "ch_jfast.h"
#include "ch_jscan.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

struct _ch_msg_t {
    ch_channel_t channel;
    json_t *header, *parent, *metadata, *content;
    size_t expected;                            //  "buffers" in the frame
    size_t nbuf;                                //  buffers attached
    uint8_t *buf [CH_MSG_MAX_BUFFERS];
    size_t buflen [CH_MSG_MAX_BUFFERS];
    ch_free_fn *buffree [CH_MSG_MAX_BUFFERS];   //  NULL: free()
    void *bufhint [CH_MSG_MAX_BUFFERS];
    uint8_t *raw;                               //  content as it came, or NULL
    size_t rawlen;
};

static const char *s_names [CH_COUNT] = {
    "shell", "control", "stdin", "iopub", "cellvm"
};

bool
ch_msg_reply_type (const char *request_type, char *out, size_t cap)
{
    assert (request_type && out && cap > 0);
    out [0] = 0;
    size_t len = strlen (request_type);
    if (len <= 8 || strcmp (request_type + len - 8, "_request") != 0 || len - 8 + 7 >= cap)
        return false;
    snprintf (out, cap, "%.*s_reply", (int) (len - 8), request_type);
    return true;
}

const char *
ch_channel_name (ch_channel_t channel)
{
    assert (channel < CH_COUNT);
    return s_names [channel];
}

//  -1 when name is not a channel.
static int
s_channel_from_name (const char *name)
{
    for (int i = 0; name && i < CH_COUNT; i++)
        if (strcmp (name, s_names [i]) == 0)
            return i;
    return -1;
}

void
ch_uuid4 (char out[37])
{
    uint8_t b[16];
    size_t got = 0;
    while (got < sizeof b) {
        ssize_t n = getrandom (b + got, sizeof b - got, 0);
        if (n > 0)
            got += (size_t) n;
        else if (errno != EINTR)
            abort ();   //  no randomness: ids would collide, refuse to go on
    }
    b[6] = (uint8_t) ((b[6] & 0x0f) | 0x40);
    b[8] = (uint8_t) ((b[8] & 0x3f) | 0x80);
    snprintf (out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
              "%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3], b[4], b[5],
              b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

void
ch_utc_now (char out[32])
{
    struct timespec ts;
    struct tm tm;
    clock_gettime (CLOCK_REALTIME, &ts);
    gmtime_r (&ts.tv_sec, &tm);
    size_t n = strftime (out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf (out + n, 32 - n, ".%06ldZ", ts.tv_nsec / 1000);
}

ch_msg_t *
ch_msg_new (ch_channel_t channel, const char *msg_type, const json_t *parent,
            json_t **content_p, const char *session)
{
    assert (msg_type && session && channel < CH_COUNT);
    ch_msg_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    char id [37], date [32];
    ch_uuid4 (id);
    ch_utc_now (date);
    self->channel = channel;
    self->header = json_pack ("{s:s, s:s, s:s, s:s, s:s, s:s}", "msg_id", id,
                              "session", session, "username", "cellvm", "date", date,
                              "msg_type", msg_type, "version", CH_PROTOCOL_VERSION);
    self->parent = parent ? json_deep_copy (parent) : json_object ();
    self->metadata = json_object ();
    self->content = content_p && *content_p ? *content_p : json_object ();
    if (content_p)
        *content_p = NULL;
    if (!self->header || !self->parent || !self->metadata || !self->content)
        abort ();
    return self;
}

//  Take *p (or a fresh {} when NULL) and null the caller's reference.
static json_t *
s_steal_or_empty (json_t **p)
{
    json_t *v = p && *p ? *p : json_object ();
    if (p)
        *p = NULL;
    if (!v)
        abort ();
    return v;
}

ch_msg_t *
ch_msg_from_parts (ch_channel_t channel, json_t **header_p, json_t **parent_p,
                   json_t **metadata_p, json_t **content_p)
{
    assert (channel < CH_COUNT);
    assert (header_p && json_is_object (*header_p));
    assert (content_p && json_is_object (*content_p));
    ch_msg_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->channel = channel;
    self->header = s_steal_or_empty (header_p);
    self->parent = s_steal_or_empty (parent_p);
    self->metadata = s_steal_or_empty (metadata_p);
    self->content = s_steal_or_empty (content_p);
    return self;
}

void
ch_msg_destroy (ch_msg_t **self_p)
{
    assert (self_p);
    ch_msg_t *self = *self_p;
    if (!self)
        return;
    json_decref (self->header);
    json_decref (self->parent);
    json_decref (self->metadata);
    json_decref (self->content);
    free (self->raw);
    for (size_t i = 0; i < self->nbuf; i++)
        ch_buf_release (self->buf [i], self->buffree [i], self->bufhint [i]);
    free (self);
    *self_p = NULL;
}

//  Take an object member, {} when absent; NULL when present but not an object.
static json_t *
s_object_or_empty (json_t *root, const char *key, int required)
{
    json_t *v = json_object_get (root, key);
    if (!v)
        return required ? NULL : json_object ();
    return json_is_object (v) ? json_incref (v) : NULL;
}

static int
s_fail (char *err, size_t errlen, const char *why)
{
    if (err && errlen)
        snprintf (err, errlen, "%s", why);
    return -EBADMSG;
}

//  What is wrong with a decoded envelope, or NULL.
static const char *
s_envelope_fault (const ch_msg_t *self, int ch, const json_t *nb)
{
    if (ch < 0)
        return "unknown or missing channel";
    if (!self->header || !self->content)
        return "header and content must be JSON objects";
    if (!self->parent || !self->metadata)
        return "parent_header and metadata must be JSON objects";
    if (!json_string_length (json_object_get (self->header, "msg_type")))
        return "header.msg_type must be a non-empty string";
    if (nb && (!json_is_integer (nb) || json_integer_value (nb) < 0
               || json_integer_value (nb) > CH_MSG_MAX_BUFFERS))
        return "buffers must be an integer from 0 to 16";
    return NULL;
}

int
ch_msg_decode (const uint8_t *data, size_t len, ch_msg_t **msg_p, char *err, size_t errlen)
{
    assert (msg_p);
    *msg_p = NULL;
    json_error_t jerr;
    ch_msg_t *self = NULL;
    json_t *root = ch_jfast_loadb (data, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return s_fail (err, errlen, "frame is not valid UTF-8 JSON");
    if (!json_is_object (root)) {
        json_decref (root);
        return s_fail (err, errlen, "frame is not a JSON object");
    }
    const char *why = NULL;
    self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    int ch = s_channel_from_name (json_string_value (json_object_get (root, "channel")));
    json_t *nb = json_object_get (root, "buffers");
    self->header = s_object_or_empty (root, "header", 1);
    self->parent = s_object_or_empty (root, "parent_header", 0);
    self->metadata = s_object_or_empty (root, "metadata", 0);
    self->content = s_object_or_empty (root, "content", 1);
    why = s_envelope_fault (self, ch, nb);
    if (why)
        goto fail;
    self->channel = (ch_channel_t) ch;
    self->expected = nb ? (size_t) json_integer_value (nb) : 0;
    json_decref (root);
    *msg_p = self;
    return 0;
fail:
    json_decref (root);
    ch_msg_destroy (&self);
    return s_fail (err, errlen, why);
}

char *
ch_msg_encode (const ch_msg_t *self, size_t *len_p)
{
    assert (self);
    //  Raw content was validated on its way in; only tests encode it again.
    json_t *content = self->raw ? ch_jfast_loadb (self->raw, self->rawlen, 0, NULL)
                                : json_incref (self->content);
    assert (content);
    json_t *root = json_pack ("{s:s, s:O, s:O, s:O, s:o, s:I}",
                              "channel", s_names [self->channel], "header", self->header,
                              "parent_header", self->parent, "metadata", self->metadata,
                              "content", content, "buffers", (json_int_t) self->nbuf);
    if (!root)
        abort ();
    //  Strict JSON: NaN/Infinity cannot be represented by jansson reals at all.
    char *text = ch_jfast_dump (root, JSON_COMPACT | JSON_ENSURE_ASCII, len_p);
    json_decref (root);
    if (!text)
        abort ();
    return text;
}

ch_channel_t ch_msg_channel (const ch_msg_t *self) { assert (self); return self->channel; }
json_t *ch_msg_header (const ch_msg_t *self) { assert (self); return self->header; }
json_t *ch_msg_parent (const ch_msg_t *self) { assert (self); return self->parent; }
json_t *ch_msg_metadata (const ch_msg_t *self) { assert (self); return self->metadata; }
json_t *ch_msg_content (const ch_msg_t *self) { assert (self); return self->content; }
size_t ch_msg_nbuffers_expected (const ch_msg_t *self) { assert (self); return self->expected; }
size_t ch_msg_nbuffers (const ch_msg_t *self) { assert (self); return self->nbuf; }

const char *
ch_msg_type (const ch_msg_t *self)
{
    assert (self);
    const char *t = json_string_value (json_object_get (self->header, "msg_type"));
    return t ? t : "";
}

const char *
ch_msg_id (const ch_msg_t *self)
{
    assert (self);
    const char *t = json_string_value (json_object_get (self->header, "msg_id"));
    return t ? t : "";
}

const char *
ch_msg_parent_id (const ch_msg_t *self)
{
    assert (self);
    const char *t = json_string_value (json_object_get (self->parent, "msg_id"));
    return t ? t : "";
}

void
ch_buf_release (void *data, ch_free_fn *free_fn, void *hint)
{
    if (free_fn)
        free_fn (data, hint);
    else
        free (data);
}

int
ch_msg_add_buffer_owned (ch_msg_t *self, uint8_t *data, size_t len, ch_free_fn *free_fn,
                         void *hint)
{
    assert (self);
    if (self->nbuf >= CH_MSG_MAX_BUFFERS) {
        ch_buf_release (data, free_fn, hint);
        return -E2BIG;
    }
    self->buf [self->nbuf] = data;
    self->buffree [self->nbuf] = free_fn;
    self->bufhint [self->nbuf] = hint;
    self->buflen [self->nbuf++] = len;
    return 0;
}

int
ch_msg_add_buffer (ch_msg_t *self, uint8_t **data_p, size_t len)
{
    assert (self && data_p);
    if (self->nbuf >= CH_MSG_MAX_BUFFERS)
        return -E2BIG;
    int rc = ch_msg_add_buffer_owned (self, *data_p, len, NULL, NULL);
    *data_p = NULL;
    return rc;
}

const uint8_t *
ch_msg_buffer (const ch_msg_t *self, size_t index, size_t *len_p)
{
    assert (self);
    if (index >= self->nbuf)
        return NULL;
    if (len_p)
        *len_p = self->buflen [index];
    return self->buf [index];
}

uint8_t *
ch_msg_take_buffer (ch_msg_t *self, size_t index, size_t *len_p, ch_free_fn **free_fn_p,
                    void **hint_p)
{
    assert (self && len_p && free_fn_p && hint_p);
    *len_p = 0;
    *free_fn_p = NULL;
    *hint_p = NULL;
    if (index >= self->nbuf)
        return NULL;
    uint8_t *data = self->buf [index];
    *len_p = self->buflen [index];
    *free_fn_p = self->buffree [index];
    *hint_p = self->bufhint [index];
    self->buf [index] = NULL;
    self->buflen [index] = 0;
    self->buffree [index] = NULL;
    self->bufhint [index] = NULL;
    return data;
}

void
ch_msg_drop_buffers (ch_msg_t *self)
{
    assert (self);
    for (size_t i = 0; i < self->nbuf; i++)
        ch_buf_release (self->buf [i], self->buffree [i], self->bufhint [i]);
    self->nbuf = self->expected = 0;
}

void
ch_msg_set_metadata (ch_msg_t *self, json_t **metadata_p)
{
    assert (self && metadata_p && *metadata_p);
    json_decref (self->metadata);
    self->metadata = *metadata_p;
    *metadata_p = NULL;
}

//  ---------------------------------------------------------------------------
//  Stream texts as they came (see ch_msg.h, ch_msg_decode_lazy).

const uint8_t *
ch_msg_raw_content (const ch_msg_t *self, size_t *len_p)
{
    assert (self && len_p);
    *len_p = self->rawlen;
    return self->raw;
}

uint8_t *
ch_msg_take_raw_content (ch_msg_t *self, size_t *len_p)
{
    assert (self && len_p);
    uint8_t *raw = self->raw;
    *len_p = self->rawlen;
    self->raw = NULL;
    self->rawlen = 0;
    return raw;
}

void
ch_msg_set_raw_content (ch_msg_t *self, uint8_t **raw_p, size_t len)
{
    assert (self && raw_p);
    free (self->raw);
    self->raw = *raw_p;
    self->rawlen = *raw_p ? len : 0;
    *raw_p = NULL;
}

enum { S_CHANNEL, S_HEADER, S_PARENT, S_METADATA, S_CONTENT, S_BUFFERS, S_KEYS };

typedef struct {
    size_t at [S_KEYS], end [S_KEYS];           //  each member's value, when seen
    bool seen [S_KEYS];
} s_spans_t;

static int
s_key_index (const uint8_t *k, size_t n, const char *const *names, int count)
{
    for (int i = 0; i < count; i++)
        if (strlen (names [i]) == n && memcmp (names [i], k, n) == 0)
            return i;
    return -1;
}

//  The members of the object at p[i], each a known name seen once, into
//  spans. -1 for anything else: the full parser then decides.
static int
s_members (const uint8_t *p, size_t len, size_t i, const char *const *names, int count,
           s_spans_t *sp, size_t *end)
{
    if (i >= len || p [i] != '{')
        return -1;
    i = ch_jscan_ws (p, len, i + 1);
    while (i < len && p [i] != '}') {
        size_t kend;
        if (ch_jscan_string (p, len, i, &kend) < 0 || !ch_jscan_plain (p, i, kend))
            return -1;
        int k = s_key_index (p + i + 1, kend - i - 2, names, count);
        if (k < 0 || sp->seen [k])
            return -1;
        i = ch_jscan_ws (p, len, kend);
        if (i >= len || p [i] != ':')
            return -1;
        sp->at [k] = i = ch_jscan_ws (p, len, i + 1);
        if (ch_jscan_value (p, len, i, &i) < 0)
            return -1;
        sp->end [k] = i;
        sp->seen [k] = true;
        i = ch_jscan_ws (p, len, i);
        if (i < len && p [i] == ',') {
            i = ch_jscan_ws (p, len, i + 1);
            if (i >= len || p [i] != '"')
                return -1;
        }
        else if (i >= len || p [i] != '}')
            return -1;
    }
    if (i >= len)
        return -1;
    *end = i + 1;
    return 0;
}

//  Content {"name": <plain string>, "text": <string>}: name into out.
static int
s_stream_content (const uint8_t *p, size_t at, size_t end, char *out, size_t cap)
{
    static const char *const names [] = { "name", "text" };
    s_spans_t sp = { 0 };
    size_t stop;
    if (s_members (p, end, at, names, 2, &sp, &stop) < 0 || stop != end
    ||  !sp.seen [0] || !sp.seen [1] || p [sp.at [0]] != '"' || p [sp.at [1]] != '"'
    ||  !ch_jscan_plain (p, sp.at [0], sp.end [0]) || sp.end [0] - sp.at [0] - 2 >= cap)
        return -1;
    size_t n = sp.end [0] - sp.at [0] - 2;
    memcpy (out, p + sp.at [0] + 1, n);
    out [n] = 0;
    return 0;
}

static json_t *
s_load_span (const uint8_t *p, const s_spans_t *sp, int k)
{
    if (!sp->seen [k])
        return NULL;
    return ch_jfast_loadb (p + sp->at [k], sp->end [k] - sp->at [k],
                           JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, NULL);
}

static void
s_keep_raw (ch_msg_t *self, const uint8_t *p, const s_spans_t *sp)
{
    self->rawlen = sp->end [S_CONTENT] - sp->at [S_CONTENT];
    self->raw = malloc (self->rawlen);
    if (!self->raw)
        abort ();
    memcpy (self->raw, p + sp->at [S_CONTENT], self->rawlen);
}

//  The envelope from its spans, parsed; a stream message's content kept raw.
static int
s_decode_raw (const uint8_t *p, size_t len, ch_msg_t **msg_p)
{
    static const char *const names [S_KEYS] = {
        "channel", "header", "parent_header", "metadata", "content", "buffers"
    };
    s_spans_t sp = { 0 };
    size_t end;
    char name [16];
    int rc = -1;
    if (s_members (p, len, ch_jscan_ws (p, len, 0), names, S_KEYS, &sp, &end) < 0
    ||  ch_jscan_ws (p, len, end) != len || !sp.seen [S_CONTENT]
    ||  s_stream_content (p, sp.at [S_CONTENT], sp.end [S_CONTENT], name, sizeof name) < 0)
        return -1;
    ch_msg_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    json_t *channel = s_load_span (p, &sp, S_CHANNEL), *nb = s_load_span (p, &sp, S_BUFFERS);
    json_t *parent = s_load_span (p, &sp, S_PARENT), *meta = s_load_span (p, &sp, S_METADATA);
    self->header = s_load_span (p, &sp, S_HEADER);
    self->parent = parent ? (json_is_object (parent) ? json_incref (parent) : NULL)
                          : json_object ();
    self->metadata = meta ? (json_is_object (meta) ? json_incref (meta) : NULL) : json_object ();
    self->content = json_pack ("{s:s}", "name", name);
    int ch = s_channel_from_name (json_string_value (channel));
    if (!json_is_object (self->header) || s_envelope_fault (self, ch, nb)
    ||  strcmp (ch_msg_type (self), "stream") != 0 || (sp.seen [S_BUFFERS] && !nb))
        goto fail;
    self->channel = (ch_channel_t) ch;
    self->expected = nb ? (size_t) json_integer_value (nb) : 0;
    s_keep_raw (self, p, &sp);
    *msg_p = self;
    self = NULL;
    rc = 0;
fail:
    json_decref (channel);
    json_decref (nb);
    json_decref (parent);
    json_decref (meta);
    ch_msg_destroy (&self);
    return rc;
}

int
ch_msg_decode_lazy (const uint8_t *data, size_t len, size_t raw_min, ch_msg_t **msg_p,
                    char *err, size_t errlen)
{
    assert (msg_p);
    *msg_p = NULL;
    if (len >= raw_min && s_decode_raw (data, len, msg_p) == 0)
        return 0;
    return ch_msg_decode (data, len, msg_p, err, errlen);
}
