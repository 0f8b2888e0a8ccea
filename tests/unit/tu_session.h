/*  tu_session - the session tests' share of the test helpers
    (test_gw_session*.c): a mock backend, a scripted kernel, a client.

    The mock backend's start hands the session one end of a socketpair; the
    test plays the kernel on the other end with the same ch_frame/ch_msg
    codecs the real kernel uses. What the session sends to clients is
    captured from its emit callback.

    The macro wants cmocka.h included before it.
*/
#ifndef TU_SESSION_H_INCLUDED
#define TU_SESSION_H_INCLUDED

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "session/gw_session.h"
#include "ch_msg.h"

//  --------------------------------------------------------------------------
//  Mock backend.

typedef struct {
    int kernel_fd;                              //  the test's end, -1 when none
    int starts, kills, interrupts;
    int fail_starts;                            //  this many starts fail first
    int connect_after;                          //  start returns no fd; connect gives it after n tries
    int pending_fd;                             //  the session's end, until connect hands it out
    bool sync_markers;                          //  a virtio port: markers before hellos
    bool keep_live;                             //  gw_backend_t.keep_live
    bool exited;                                //  reap reports this exit
    gw_exit_t exit;
} tu_session_mock_t;

//  The mock backend's kill, for a test that kills the kernel itself: it
//  dies with SIGKILL (unless an exit is already set) and reap reports it.
int tu_session_mock_kill (void *ctx);

//  --------------------------------------------------------------------------
//  Capture of what clients receive.

#define TU_SESSION_MAX_SEEN 64
typedef struct {
    ch_channel_t channel;
    char ids [64];                              //  first identity / topic frame
    char type [64];
    json_t *header, *parent, *content;
} tu_session_seen_t;

//  The fixture: the mock backend, the session, what clients received.
typedef struct {
    tu_session_mock_t mock;
    gw_session_t *session;
    tu_session_seen_t seen [TU_SESSION_MAX_SEEN];
    size_t nseen;
} tu_session_t;

//  The first captured message of this type at or after index from (NULL if none).
tu_session_seen_t *tu_session_find_seen (tu_session_t *f, const char *type, size_t from);

//  A captured status message's execution_state.
const char *tu_session_status_of (const tu_session_seen_t *s);

//  --------------------------------------------------------------------------
//  Playing the kernel.

void tu_session_kernel_send_raw (tu_session_t *f, const void *data, size_t len);

//  One frame: its header (CH_FRAME_MAX_DEFAULT), then data.
void tu_session_kernel_send_frame (tu_session_t *f, const void *data, size_t len);

//  A message from the kernel (content is taken), framed as the kernel frames it.
void tu_session_kernel_send (tu_session_t *f, ch_channel_t ch, const char *type,
                             const json_t *parent, json_t *content);

//  The kernel's hello: after it, the session is ready.
void tu_session_kernel_hello (tu_session_t *f);

//  Next message the session sent to the kernel, or NULL after timeout_ms.
ch_msg_t *tu_session_kernel_recv (tu_session_t *f, int timeout_ms);

//  Let the session read what the kernel wrote and run its timers.
void tu_session_pump (tu_session_t *f, int ms);

//  --------------------------------------------------------------------------
//  Playing the client.

//  A request from client "client-id" (content is taken; NULL for {}), which
//  gw_session_request must answer with expect_rc. Returns a copy of its header.
json_t *tu_session_client_request (tu_session_t *f, ch_channel_t ch, const char *type,
                                   const char *msg_id, json_t *content, int expect_rc);

//  An execute_request of code; returns a copy of its header.
json_t *tu_session_execute (tu_session_t *f, const char *msg_id, const char *code);

//  Receive the next request at the kernel and check it is msg_id.
ch_msg_t *tu_session_expect_at_kernel (tu_session_t *f, const char *msg_id);

//  --------------------------------------------------------------------------
//  Fixture.

//  cmocka setup and teardown: a fresh tu_session_t, no session yet.
int tu_session_setup (void **state);
int tu_session_teardown (void **state);

//  A cmocka test entry with that setup and teardown.
#define TU_SESSION_CASE(name)                                                   \
    cmocka_unit_test_setup_teardown (name, tu_session_setup, tu_session_teardown)

//  The session made with the mock backend (opts may be NULL) and started.
void tu_session_start (tu_session_t *f, const gw_session_opts_t *opts);

//  Start, read the driver hello, answer it: the kernel is ready.
void tu_session_start_ready (tu_session_t *f);

//  The same with opts (may be NULL).
void tu_session_start_ready_with (tu_session_t *f, const gw_session_opts_t *opts);

#endif
