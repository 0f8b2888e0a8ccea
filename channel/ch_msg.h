/*  ch_msg - one message of the cellvm channel (see docs/channel.md).
 *
 *  The envelope codec is pure: ch_msg_decode turns one JSON frame into a
 *  message, ch_msg_encode turns a message into the bytes of its JSON frame.
 *  Buffers travel as separate frames; the message only carries them.
 *  Part of the channel library (docs/channel.md).
 */
#ifndef CH_MSG_H
#define CH_MSG_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CH_MSG_MAX_BUFFERS 16
#define CH_PROTOCOL_VERSION "5.3"

typedef enum {
    CH_SHELL, CH_CONTROL, CH_STDIN, CH_IOPUB, CH_CELLVM, CH_COUNT
} ch_channel_t;

typedef struct _ch_msg_t ch_msg_t;

//  New message with a fresh header (msg_id, session, username, date, msg_type,
//  version). parent may be NULL ({}); it is copied. Steals *content_p (NULL
//  means {}).
ch_msg_t *ch_msg_new (ch_channel_t channel, const char *msg_type,
                      const json_t *parent, json_t **content_p, const char *session);

//  Message from parts the caller already validated (the gateway's wire
//  decoder). Steals all four; NULL parent/metadata mean {}. header and
//  content must be objects.
ch_msg_t *ch_msg_from_parts (ch_channel_t channel, json_t **header_p, json_t **parent_p,
                             json_t **metadata_p, json_t **content_p);

//  Decode one JSON frame. On success *msg_p owns the message and the return
//  is 0. On failure returns -EBADMSG and writes a reason into err.
int ch_msg_decode (const uint8_t *data, size_t len, ch_msg_t **msg_p,
                   char *err, size_t errlen);

//  As ch_msg_decode, but a stream message whose frame is at least raw_min
//  bytes keeps its content as the bytes it came in (ch_msg_raw_content):
//  validated as strictly as the parser would (ch_jscan), not parsed, and
//  exactly {"name": ..., "text": ...}; ch_msg_content then holds only the
//  name. Anything else, or any doubt, goes through ch_msg_decode.
int ch_msg_decode_lazy (const uint8_t *data, size_t len, size_t raw_min, ch_msg_t **msg_p,
                        char *err, size_t errlen);
//  Content kept as it came (valid JSON object text), or NULL; *len_p its size.
const uint8_t *ch_msg_raw_content (const ch_msg_t *self, size_t *len_p);
//  Take it out (caller frees), NULL when none.
uint8_t *ch_msg_take_raw_content (ch_msg_t *self, size_t *len_p);
//  Give the message raw content (valid JSON object text the caller
//  validated); steals *raw_p. It goes on the wire instead of content.
void ch_msg_set_raw_content (ch_msg_t *self, uint8_t **raw_p, size_t len);
//  Encode the JSON frame (buffers not included). Caller frees the result.
char *ch_msg_encode (const ch_msg_t *self, size_t *len_p);

void ch_msg_destroy (ch_msg_t **self_p);

ch_channel_t ch_msg_channel (const ch_msg_t *self);
const char *ch_msg_type (const ch_msg_t *self);
//  Borrowed references into the message; never NULL (empty objects instead).
json_t *ch_msg_header (const ch_msg_t *self);
json_t *ch_msg_parent (const ch_msg_t *self);
json_t *ch_msg_metadata (const ch_msg_t *self);
json_t *ch_msg_content (const ch_msg_t *self);
//  msg_id of the header, or "" when missing.
const char *ch_msg_id (const ch_msg_t *self);
//  msg_id of the parent_header (the request this answers), or "" when missing.
const char *ch_msg_parent_id (const ch_msg_t *self);

//  Buffers: the decoded count the frame announced, and those attached so far.
size_t ch_msg_nbuffers_expected (const ch_msg_t *self);
size_t ch_msg_nbuffers (const ch_msg_t *self);
//  Attach a buffer; steals *data_p (malloc'ed). -E2BIG past the cap.
int ch_msg_add_buffer (ch_msg_t *self, uint8_t **data_p, size_t len);
const uint8_t *ch_msg_buffer (const ch_msg_t *self, size_t index, size_t *len_p);
//  How a buffer that is not plain malloc'ed memory is released (the
//  signature is ZeroMQ's zmq_free_fn, so a buffer can move into a zmq_msg
//  without a copy).
typedef void (ch_free_fn) (void *data, void *hint);

//  Release data as free_fn says (NULL: free()).
void ch_buf_release (void *data, ch_free_fn *free_fn, void *hint);

//  Attach data, released later by free_fn (data, hint) (NULL: free()); it
//  is taken either way. -E2BIG past the cap (released at once).
int ch_msg_add_buffer_owned (ch_msg_t *self, uint8_t *data, size_t len, ch_free_fn *free_fn,
                             void *hint);

//  Take buffer index out of the message, with how to release it
//  (ch_buf_release); the message keeps an empty buffer in its place. NULL
//  (and *len_p 0) when there is none or it is empty.
uint8_t *ch_msg_take_buffer (ch_msg_t *self, size_t index, size_t *len_p,
                             ch_free_fn **free_fn_p, void **hint_p);

//  Release every buffer: the message then has none, and expects none.
void ch_msg_drop_buffers (ch_msg_t *self);

//  Replace metadata (steals *metadata_p).
void ch_msg_set_metadata (ch_msg_t *self, json_t **metadata_p);

//  "foo_request" -> "foo_reply" into out; false (out "") when type is not
//  a request or the name does not fit.
bool ch_msg_reply_type (const char *request_type, char *out, size_t cap);

const char *ch_channel_name (ch_channel_t channel);

//  Fill out with a fresh random UUID4 string (37 bytes with NUL).
void ch_uuid4 (char out[37]);
//  Fill out with the current UTC time as ISO-8601 with microseconds and Z.
void ch_utc_now (char out[32]);

#endif
