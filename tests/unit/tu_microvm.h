/*  tu_microvm - the microvm backend tests' share of the test helpers
    (test_gw_backend_microvm*.c): mock VMs, the fixture, and the drivers.

    The backend's seam (gw_microvm_opts_t.seam) hands it mock VMs: a fast
    start (on gw_vmstart's thread, like a pool take or a restore) or a cold
    boot whose ports come up a few calls later. Each mock VM's kernel and
    init ports are socketpairs; the test plays init (docs/init.md) and the
    kernel's port on the other ends with the channel library (ch_asm in,
    ch_write_msg out). The backend is driven only through the gw_backend_*
    wrappers and a poll loop on its event fd, as the session drives it.

    The macros want cmocka.h included before them.
*/
#ifndef TU_MICROVM_H_INCLUDED
#define TU_MICROVM_H_INCLUDED

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/gw_backend.h"
#include "ch_asm.h"
#include "ch_msg.h"
#include "ch_clock.h"

#define TU_MICROVM_CHUNK_MS 300                 //  the shortened chunk deadline
#define TU_MICROVM_MAX_VMS 4

//  --------------------------------------------------------------------------
//  Mock VMs behind gw_vmh.

enum { TU_MICROVM_KERNEL, TU_MICROVM_INIT };    //  a mock VM's ports

typedef struct {
    int pid;
    int port [2][2];                            //  [KERNEL|INIT][0 backend's end, 1 ours]
    bool holds_ports;                           //  fast start: ports came with it
    int connect_after;                          //  -EAGAIN this many times per port
    int tries [2], connects [2], kills;
    bool dead;                                  //  reap reports wstatus
    int wstatus;
    bool destroyed;
    ch_asm_t *asm_;                             //  what the backend sent init
    uint8_t rbuf [65536];
    size_t rpos, rlen;
} tu_microvm_vm_t;

//  --------------------------------------------------------------------------
//  The fixture: the backend, its mock VMs, and what the chunks' done saw.

typedef struct {
    int calls, rc;
    json_t *reply;                              //  a copy
    uint8_t data [256];
    size_t len;
    char err [600];
} tu_microvm_done_t;

typedef struct {
    gw_backend_t *be;
    tu_microvm_vm_t *vms [TU_MICROVM_MAX_VMS];  //  made so far, oldest first
    int nvms;
    int fast_rc;                                //  the mock fast start: 0 or -ENOENT
    int fast_calls, boots;
    bool boot_fails;
    int connect_after;                          //  for cold-booted VMs
    int again;                                  //  connects told -EAGAIN after a boot
    int gate [2];                               //  fast start waits for a byte, when gated
    bool gated;
    int died;                                   //  on_event said the kernel died
    tu_microvm_done_t done [4];
    char err [256];                             //  the last call's reason
    gw_exit_t ex;                               //  the last reap's
} tu_microvm_fixture_t;

//  The process set up as the gateway's: SIGPIPE ignored, the log at ERROR
//  (DEBUG when TEST_LOG is set). For main, before the tests run.
void tu_microvm_prepare (void);

//  cmocka setup and teardown: a fresh fixture, no backend yet (teardown
//  destroys the backend and checks it let go of every VM).
int tu_microvm_setup (void **state);
int tu_microvm_teardown (void **state);

//  A cmocka test entry with that setup and teardown.
#define TU_MICROVM_CASE(name)                                                   \
    cmocka_unit_test_setup_teardown (name, tu_microvm_setup, tu_microvm_teardown)

//  A test of a fresh fixture f, and its cmocka entry NAME. The FAST_TEST's
//  also has vm: a fast-started session's, its kernel channel closed
//  (tu_microvm_fast).
#define TU_MICROVM_TEST(name)                                                   \
    static void name##_ (tu_microvm_fixture_t *f);                              \
    static void name (void **state) { name##_ (*state); }                       \
    static void name##_ (tu_microvm_fixture_t *f)
#define TU_MICROVM_FAST_TEST(name)                                              \
    static void name##_ (tu_microvm_fixture_t *f, tu_microvm_vm_t *vm);         \
    static void name (void **state)                                             \
        { name##_ (*state, tu_microvm_fast (*state, NULL)); }                   \
    static void name##_ (tu_microvm_fixture_t *f, tu_microvm_vm_t *vm)

//  --------------------------------------------------------------------------
//  Driving the backend as the session's reactor does.

//  Wait up to ms for the event fd; handle one event. Nothing once destroyed.
void tu_microvm_pump (tu_microvm_fixture_t *f, int ms);

//  Pump for ms, whatever happens.
void tu_microvm_pump_for (tu_microvm_fixture_t *f, int ms);

//  Pump until cond holds; fail the test after ms.
#define TU_MICROVM_WAIT_FOR(f, ms, cond)                                        \
    do {                                                                        \
        int64_t end_ = ch_clock_mono_ms () + (ms);                                   \
        while (!(cond)) {                                                       \
            if (ch_clock_mono_ms () > end_)                                          \
                fail_msg ("timed out waiting for %s", #cond);                   \
            tu_microvm_pump ((f), 10);                                          \
        }                                                                       \
    } while (0)

//  gw_backend_start and gw_backend_reap (into f->ex), reasons into f->err.
int tu_microvm_start (tu_microvm_fixture_t *f, int *fd_p);
int tu_microvm_reap (tu_microvm_fixture_t *f);

//  connect until it stops saying -EAGAIN, pumping between tries; counts the
//  tries after a boot (its ports not there yet) in f->again.
int tu_microvm_connect (tu_microvm_fixture_t *f, int *fd_p);

//  A new backend's first start, whose channel comes later: connect's rc.
//  The fast start fails with fast_rc when that is not 0 (then a cold boot).
int tu_microvm_open (tu_microvm_fixture_t *f, int fast_rc, int *fd_p);

//  A fast-started session: its VM, and the kernel channel into *fd_p (NULL:
//  closed).
tu_microvm_vm_t *tu_microvm_fast (tu_microvm_fixture_t *f, int *fd_p);

//  A gated fast start, killed while the starter waits at the gate.
void tu_microvm_start_gated_then_kill (tu_microvm_fixture_t *f, int *fd_p);

//  --------------------------------------------------------------------------
//  Playing init and the kernel's port.

//  The next message the backend sent init, pumping the backend meanwhile;
//  NULL when none came within ms.
ch_msg_t *tu_microvm_init_recv (tu_microvm_fixture_t *f, tu_microvm_vm_t *vm, int ms);

//  The next message must be of this type (hellos still in flight skipped
//  when skip_hellos).
ch_msg_t *tu_microvm_init_expect (tu_microvm_fixture_t *f, tu_microvm_vm_t *vm,
                                  const char *type, bool skip_hellos);

//  Init sends a message with a buffer: a reply to req (NULL: a notice).
//  type NULL: the reply type of req's ("put_request" -> "put_reply").
void tu_microvm_init_send (tu_microvm_vm_t *vm, const ch_msg_t *req, const char *type,
                           json_t *content, const void *buf, size_t len);

//  {"status": "ok"}, new.
json_t *tu_microvm_ok (void);

//  Init's end of its port gone.
void tu_microvm_close_init (tu_microvm_vm_t *vm);

//  Bytes written on one end of the kernel channel arrive at the other.
void tu_microvm_kernel_talks (int gw_fd, tu_microvm_vm_t *vm);

//  A start that replaces the VM: a second one, whose kernel channel works.
void tu_microvm_starts_a_new_vm (tu_microvm_fixture_t *f);

//  --------------------------------------------------------------------------
//  Chunks: their done into f->done [i]; it must never run inside the call.

//  put_chunk of text (static: it must outlive the chunk) into done [i].
int tu_microvm_put (tu_microvm_fixture_t *f, int i, const char *path, bool append,
                    const char *text);
int tu_microvm_get (tu_microvm_fixture_t *f, int i, const char *path, uint64_t offset,
                    size_t len);

//  A put into done [i] refused in the call with rc and why; no done after.
void tu_microvm_put_refused (tu_microvm_fixture_t *f, int i, int rc, const char *why);

//  Init answers *req_p (destroyed) with content and a buffer: the done [i]
//  that brings, once.
tu_microvm_done_t *tu_microvm_answer (tu_microvm_fixture_t *f, tu_microvm_vm_t *vm,
                                      ch_msg_t **req_p, int i, json_t *content,
                                      const void *buf, size_t len);

//  obj's member key as a string, an integer.
const char *tu_microvm_str (const json_t *obj, const char *key);
json_int_t tu_microvm_int (const json_t *obj, const char *key);

#endif
