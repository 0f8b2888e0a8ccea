/*  kn_msg - one message of the cellvm channel (see docs/channel.md).
 *
 *  The envelope codec is pure: kn_msg_decode turns one JSON frame into a
 *  message, kn_msg_encode turns a message into the bytes of its JSON frame.
 *  Buffers travel as separate frames; the message only carries them.
 *  The gateway compiles this same file.
 */
#ifndef KN_MSG_H
#define KN_MSG_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define KN_MSG_MAX_BUFFERS 16
#define KN_PROTOCOL_VERSION "5.3"

typedef enum {
    KN_CH_SHELL, KN_CH_CONTROL, KN_CH_STDIN, KN_CH_IOPUB, KN_CH_CELLVM, KN_CH_COUNT
} kn_channel_t;

typedef struct _kn_msg_t kn_msg_t;

//  New message with a fresh header (msg_id, session, username, date, msg_type,
//  version). parent may be NULL ({}); it is copied. Steals *content_p (NULL
//  means {}).
kn_msg_t *kn_msg_new (kn_channel_t channel, const char *msg_type,
                      const json_t *parent, json_t **content_p, const char *session);

//  Message from parts the caller already validated (the gateway's wire
//  decoder). Steals all four; NULL parent/metadata mean {}. header and
//  content must be objects.
kn_msg_t *kn_msg_from_parts (kn_channel_t channel, json_t **header_p, json_t **parent_p,
                             json_t **metadata_p, json_t **content_p);

//  Decode one JSON frame. On success *msg_p owns the message and the return
//  is 0. On failure returns -EBADMSG and writes a reason into err.
int kn_msg_decode (const uint8_t *data, size_t len, kn_msg_t **msg_p,
                   char *err, size_t errlen);

//  Encode the JSON frame (buffers not included). Caller frees the result.
char *kn_msg_encode (const kn_msg_t *self, size_t *len_p);

void kn_msg_destroy (kn_msg_t **self_p);

kn_channel_t kn_msg_channel (const kn_msg_t *self);
const char *kn_msg_type (const kn_msg_t *self);
//  Borrowed references into the message; never NULL (empty objects instead).
json_t *kn_msg_header (const kn_msg_t *self);
json_t *kn_msg_parent (const kn_msg_t *self);
json_t *kn_msg_metadata (const kn_msg_t *self);
json_t *kn_msg_content (const kn_msg_t *self);
//  msg_id of the header, or "" when missing.
const char *kn_msg_id (const kn_msg_t *self);

//  Buffers: the decoded count the frame announced, and those attached so far.
size_t kn_msg_nbuffers_expected (const kn_msg_t *self);
size_t kn_msg_nbuffers (const kn_msg_t *self);
//  Attach a buffer; steals *data_p (malloc'ed). -E2BIG past the cap.
int kn_msg_add_buffer (kn_msg_t *self, uint8_t **data_p, size_t len);
const uint8_t *kn_msg_buffer (const kn_msg_t *self, size_t index, size_t *len_p);

//  Replace content (steals *content_p) / metadata.
void kn_msg_set_content (kn_msg_t *self, json_t **content_p);
void kn_msg_set_metadata (kn_msg_t *self, json_t **metadata_p);

const char *kn_channel_name (kn_channel_t channel);
//  -1 when name is not a channel.
int kn_channel_from_name (const char *name);

//  Fill out with a fresh random UUID4 string (37 bytes with NUL).
void kn_uuid4 (char out[37]);
//  Fill out with the current UTC time as ISO-8601 with microseconds and Z.
void kn_utc_now (char out[32]);

#endif
