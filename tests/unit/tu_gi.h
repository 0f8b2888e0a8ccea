/*  tu_gi - init's control port for the gi_ops tests: a real gi_ctl on a
    pseudo-terminal in raw mode (a stand-in for the virtio port), requests
    through gi_ops_handle, replies read back through ch_asm, and /workspace
    pointed at the fixture's mkdtemp directory.

    Static functions in a header, because each test_gi_* binary links only
    its own file, the gi_*.o and tu.o (Makefile).
*/
#ifndef TU_GI_H_INCLUDED
#define TU_GI_H_INCLUDED

#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>
#include <cmocka.h>

#include "ch_asm.h"
#include "ch_frame.h"
#include "gi_files.h"
#include "gi_ops.h"
#include "tu.h"

#define TU_GI_FN static __attribute__ ((unused))

typedef struct {
    char root [TU_DIR_MAX];                     //  stands for /workspace
    int master;                                 //  the host's end of the "port"
    gi_ctl_t *ctl;
    gi_kernel_t *kernel;
    gi_ops_t *ops;
    ch_asm_t *asm_;
} tu_gi_t;

//  A request as the host sends it: content as JSON text, nbuf buffers of
//  buflen bytes ('a', 'b', ...).
TU_GI_FN ch_msg_t *
tu_gi_req (ch_channel_t channel, const char *type, const char *content, int nbuf, size_t buflen)
{
    json_error_t err;
    json_t *c = json_loads (content, 0, &err);
    if (!c)
        fail_msg ("bad test JSON %s: %s", content, err.text);
    ch_msg_t *msg = ch_msg_new (channel, type, NULL, &c, "host-session");
    for (int i = 0; i < nbuf; i++) {
        uint8_t *b = malloc (buflen);
        memset (b, 'a' + i, buflen);
        assert_int_equal (ch_msg_add_buffer (msg, &b, buflen), 0);
    }
    return msg;
}

//  The reply's type to a request's: "x_request" -> "x_reply".
TU_GI_FN const char *
tu_gi_reply_type (const char *type, char reply [128])
{
    snprintf (reply, 128, "%.*s_reply", (int) (strlen (type) - strlen ("_request")), type);
    return reply;
}

//  A fixture (tu_fixture_new, named name) whose ops say /workspace is a
//  workspace ("ext4" or "tmpfs"); *state gets it.
TU_GI_FN int
tu_gi_setup (void **state, const char *name, const char *workspace)
{
    tu_gi_t *f = tu_fixture_new (sizeof *f, name);
    signal (SIGIO, SIG_IGN);                    //  gi_ctl asks for SIGIO
    assert_int_equal (gi_files_set_root (f->root), 0);
    f->master = posix_openpt (O_RDWR | O_NOCTTY | O_NONBLOCK);
    assert_true (f->master >= 0);
    assert_int_equal (grantpt (f->master), 0);
    assert_int_equal (unlockpt (f->master), 0);
    const char *port = ptsname (f->master);
    int slave = open (port, O_RDWR | O_NOCTTY);
    struct termios raw;
    assert_int_equal (tcgetattr (slave, &raw), 0);
    cfmakeraw (&raw);                           //  bytes through as they are
    assert_int_equal (tcsetattr (slave, TCSANOW, &raw), 0);
    f->ctl = gi_ctl_new (port, CH_FRAME_MAX_DEFAULT);
    close (slave);
    assert_non_null (f->ctl);
    ch_msg_t *none = NULL;
    assert_int_equal (gi_ctl_io (f->ctl, 0, &none), 0);        //  the host is there
    assert_true (gi_ctl_connected (f->ctl));
    f->kernel = gi_kernel_new (0);
    f->ops = gi_ops_new (f->ctl, f->kernel, workspace);
    f->asm_ = ch_asm_new (NULL);
    *state = f;
    return 0;
}

TU_GI_FN int
tu_gi_teardown (void **state)
{
    tu_gi_t *f = (tu_gi_t *) *state;
    gi_ops_destroy (&f->ops);
    gi_kernel_destroy (&f->kernel);
    gi_ctl_destroy (&f->ctl);
    ch_asm_destroy (&f->asm_);
    close (f->master);
    gi_files_set_root (NULL);
    return tu_fixture_teardown (state);
}

//  Hand msg to init; return the next message it writes (NULL if none).
TU_GI_FN ch_msg_t *
tu_gi_call (tu_gi_t *f, ch_msg_t *msg)
{
    assert_int_equal (gi_ops_handle (f->ops, &msg), 0);
    assert_null (msg);
    for (int tries = 0; tries < 1000; tries++) {
        ch_msg_t *in = NULL;
        assert_int_equal (gi_ctl_io (f->ctl, POLLOUT, &in), 0);
        assert_null (in);
        uint8_t buf [65536];
        ssize_t n = read (f->master, buf, sizeof buf);
        for (size_t off = 0; n > 0 && off < (size_t) n; ) {
            size_t used = 0;
            ch_msg_t *out = NULL;
            assert_int_equal (ch_asm_feed (f->asm_, buf + off, (size_t) n - off, &used, &out), 0);
            off += used;
            if (out) {
                assert_int_equal (off, (size_t) n);     //  one reply per request
                return out;
            }
        }
        if (n <= 0 && gi_ctl_queued (f->ctl) == 0)
            break;
    }
    return NULL;
}

//  The reply to msg: its type, parent and status checked; content returned.
TU_GI_FN json_t *
tu_gi_reply (tu_gi_t *f, ch_msg_t *msg, const char *type, const char *status, ch_msg_t **out_p)
{
    char id [64];
    snprintf (id, sizeof id, "%s", ch_msg_id (msg));
    ch_msg_t *out = tu_gi_call (f, msg);
    assert_non_null (out);
    assert_int_equal (ch_msg_channel (out), CH_CELLVM);
    assert_string_equal (ch_msg_type (out), type);
    assert_string_equal (json_string_value (json_object_get (ch_msg_parent (out), "msg_id")), id);
    json_t *c = json_incref (ch_msg_content (out));
    assert_string_equal (json_string_value (json_object_get (c, "status")), status);
    if (out_p)
        *out_p = out;
    else
        ch_msg_destroy (&out);
    return c;
}

TU_GI_FN const char *
tu_gi_str (const json_t *c, const char *key)
{
    const char *s = json_string_value (json_object_get (c, key));
    return s ? s : "(none)";
}

#endif
