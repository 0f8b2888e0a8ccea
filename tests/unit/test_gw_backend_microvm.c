/*  test_gw_backend_microvm - the microvm backend with no QEMU: starting,
    the kernel's and the VM's deaths, kills, restarts. The mock VMs and the
    drivers are tu_microvm.h's; file chunks are test_gw_backend_microvm_chunks.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "tu_microvm.h"
#include "ch_clock.h"

//  ==========================================================================
//  Starting.

TU_MICROVM_TEST (test_fast_start_gives_a_working_kernel_fd)
{
    int fd;
    tu_microvm_vm_t *vm = tu_microvm_fast (f, &fd);
    assert_int_equal (f->fast_calls, 1);
    assert_int_equal (f->boots, 0);
    assert_int_equal (gw_backend_pid (f->be), vm->pid);
    tu_microvm_kernel_talks (fd, vm);
    assert_int_equal (tu_microvm_reap (f), -EAGAIN);
    close (fd);
    //  Init's hello was done on the starter's thread: no hello now, and
    //  the end is a shutdown_request so the guest can sync its disk.
    gw_backend_destroy (&f->be);
    //  Destroyed on the starter's thread, off the reactor.
    TU_MICROVM_WAIT_FOR (f, 5000, vm->destroyed);
    ch_msg_t *msg = tu_microvm_init_expect (f, vm, "shutdown_request", false);
    ch_msg_destroy (&msg);
}

TU_MICROVM_TEST (test_failed_fast_start_cold_boots_and_says_hello_until_answered)
{
    f->connect_after = 3;
    int fd;
    assert_int_equal (tu_microvm_open (f, -ENOENT, &fd), 0);
    assert_int_equal (f->fast_calls, 1);
    assert_int_equal (f->boots, 1);
    assert_true (f->again >= 3);                //  booted, ports not there yet
    tu_microvm_vm_t *vm = f->vms [0];
    assert_int_equal (vm->connects [TU_MICROVM_KERNEL], 1);
    tu_microvm_kernel_talks (fd, vm);
    close (fd);
    //  Init's port comes up on a later call or tick, then hellos until one
    //  is answered; a chunk waits for the answer.
    ch_msg_t *h1 = tu_microvm_init_expect (f, vm, "hello", false);
    assert_string_equal (tu_microvm_str (ch_msg_content (h1), "protocol"), "cellvm-init");
    assert_string_equal (tu_microvm_str (ch_msg_content (h1), "role"), "driver");
    ch_msg_t *h2 = tu_microvm_init_expect (f, vm, "hello", false);
    assert_int_equal (vm->connects [TU_MICROVM_INIT], 1);
    assert_int_equal (tu_microvm_put (f, 0, "early.txt", false, "early"), 0);
    tu_microvm_init_send (vm, h2, "hello", json_pack ("{s:s, s:i, s:s, s:s}", "protocol",
                          "cellvm-init", "version", 1, "role", "init", "status", "ok"), NULL, 0);
    ch_msg_t *put = tu_microvm_init_expect (f, vm, "put_request", true);
    assert_string_equal (tu_microvm_str (ch_msg_content (put), "path"), "early.txt");
    json_t *ok = json_pack ("{s:s, s:i}", "status", "ok", "size", 5);
    tu_microvm_done_t *d = tu_microvm_answer (f, vm, &put, 0, ok, NULL, 0);
    assert_int_equal (d->rc, 0);
    assert_null (tu_microvm_init_recv (f, vm, 600));    //  answered: no more hellos
    ch_msg_destroy (&h1);
    ch_msg_destroy (&h2);
}

TU_MICROVM_TEST (test_a_cold_boot_that_fails_is_an_error)
{
    f->boot_fails = true;
    int fd;
    assert_int_equal (tu_microvm_open (f, -ENOENT, &fd), -EIO);
    assert_int_equal (fd, -1);
    assert_int_equal (f->boots, 1);
    assert_int_equal (tu_microvm_reap (f), -ECHILD);
    //  The next start tries again from the top.
    f->fast_rc = 0;
    assert_int_equal (tu_microvm_start (f, &fd), 0);
    assert_int_equal (tu_microvm_connect (f, &fd), 0);
    assert_int_equal (f->fast_calls, 2);
    close (fd);
}

//  Killed while the starter runs, then started again: the start in flight
//  goes on (it used to be refused with -EBUSY for good).
TU_MICROVM_TEST (test_a_start_killed_in_flight_can_be_started_again)
{
    int fd;
    tu_microvm_start_gated_then_kill (f, &fd);
    assert_int_equal (tu_microvm_reap (f), -EAGAIN);
    assert_int_equal (tu_microvm_start (f, &fd), 0);
    assert_int_equal (write (f->gate [1], "g", 1), 1);
    assert_int_equal (tu_microvm_connect (f, &fd), 0);
    assert_int_equal (f->fast_calls, 1);
    tu_microvm_kernel_talks (fd, f->vms [0]);
    close (fd);
}

TU_MICROVM_TEST (test_a_start_killed_in_flight_is_reaped_with_its_vm)
{
    int fd;
    tu_microvm_start_gated_then_kill (f, &fd);
    assert_int_equal (write (f->gate [1], "g", 1), 1);
    int64_t end = ch_clock_mono_ms () + 5000;
    int rc;
    while ((rc = tu_microvm_reap (f)) == -EAGAIN && ch_clock_mono_ms () < end)
        tu_microvm_pump (f, 10);
    assert_int_equal (rc, 0);
    assert_non_null (strstr (f->ex.detail, "stopped before it was ready"));
    assert_true (f->vms [0]->destroyed);
    assert_int_equal (tu_microvm_reap (f), -ECHILD);
}

//  ==========================================================================
//  Deaths, kills, restarts.

//  A kernel's end as init tells it (kernel_exited), and as reap must.
typedef struct {
    const char *reason;
    int code;
    const char *sig;                            //  NULL: it exited with code
    int signal;
    bool oom, requested;
    const char *words;
} exit_t;

static const exit_t
    S_SEGV = { "signaled", 139, "SIGSEGV", SIGSEGV, false, false,
               "The kernel died from signal SIGSEGV (Segmentation fault)." },
    S_OOM = { "oom_killed", 137, "SIGKILL", SIGKILL, true, false,
              "The kernel was killed for exceeding memory." },
    S_KILLED = { "signaled", 137, "SIGKILL", SIGKILL, false, false,
                 "The kernel was killed by SIGKILL." },
    S_STOPPED = { "requested", 137, "SIGKILL", SIGKILL, false, true,
                  "The kernel was stopped as requested." },
    S_EXIT0 = { "exited", 0, NULL, 0, false, false, "The kernel exited with status 0." },
    S_EXIT3 = { "exited", 3, NULL, 0, false, false, "The kernel exited with status 3." };

static void
s_send_exited (tu_microvm_vm_t *vm, const exit_t *e)
{
    json_t *notice = json_pack ("{s:i, s:s, s:i, s:o, s:s?, s:b, s:b, s:s}", "pid", 102,
                                "reason", e->reason, "code", e->code, "exit_code",
                                e->sig ? json_null () : json_integer (e->code), "signal", e->sig,
                                "oom_killed", e->oom, "requested", e->requested,
                                "description", e->words);
    tu_microvm_init_send (vm, NULL, "kernel_exited", notice, NULL, 0);
}

//  Init tells of the kernel's end: on_event says the kernel died, and reap
//  tells it into f->ex (every field written) as e says.
static void
s_kernel_exits (tu_microvm_fixture_t *f, tu_microvm_vm_t *vm, const exit_t *e)
{
    s_send_exited (vm, e);
    TU_MICROVM_WAIT_FOR (f, 2000, f->died);
    f->died = 0;
    memset (&f->ex, 0x55, sizeof f->ex);
    assert_int_equal (tu_microvm_reap (f), 0);
    assert_int_equal (f->ex.signal, e->signal);
    assert_int_equal (f->ex.exit_code, e->sig ? -1 : e->code);
    assert_int_equal (f->ex.oom_killed, e->oom);
    assert_false (f->ex.vm_died);
    assert_string_equal (f->ex.detail, e->words);
}

TU_MICROVM_FAST_TEST (test_kernel_exited_makes_on_event_say_so_and_reap_tell_it)
{
    assert_int_equal (tu_microvm_reap (f), -EAGAIN);
    s_kernel_exits (f, vm, &S_SEGV);
    assert_int_equal (tu_microvm_reap (f), -EAGAIN);    //  reported once; VM runs
    assert_int_equal (vm->kills, 0);
}

TU_MICROVM_FAST_TEST (test_an_oom_kill_and_an_exit_are_told_apart)
{
    int fd = -1;
    s_kernel_exits (f, vm, &S_OOM);
    assert_int_equal (tu_microvm_start (f, &fd), 0);
    close (fd);
    s_kernel_exits (f, vm, &S_EXIT3);
}

//  The stop a restart_request asked for reports the kernel already given
//  up on: never the kernel that replaces it.
TU_MICROVM_FAST_TEST (test_a_requested_kernel_exit_is_ignored)
{
    s_send_exited (vm, &S_STOPPED);
    tu_microvm_pump_for (f, 300);
    assert_int_equal (f->died, 0);
    assert_int_equal (tu_microvm_reap (f), -EAGAIN);
}

TU_MICROVM_FAST_TEST (test_the_vm_dying_is_reaped_as_vm_died)
{
    assert_int_equal (tu_microvm_get (f, 0, "g", 0, 10), 0);
    vm->dead = true;
    vm->wstatus = 1 << 8;                       //  QEMU exited with status 1
    assert_int_equal (tu_microvm_reap (f), 0);
    assert_true (f->ex.vm_died);
    assert_int_equal (f->ex.exit_code, 1);
    assert_int_equal (f->ex.signal, 0);
    assert_non_null (strstr (f->ex.detail, "virtual machine itself stopped (QEMU exited with "
                                           "status 1)"));
    //  Destroyed on the starter's thread, off the reactor.
    TU_MICROVM_WAIT_FOR (f, 5000, vm->destroyed);
    assert_int_equal (f->done [0].calls, 1);     //  the chunk went with it
    assert_int_equal (f->done [0].rc, -EPIPE);
    assert_int_equal (gw_backend_pid (f->be), 0);
    assert_int_equal (tu_microvm_reap (f), -ECHILD);
    //  The next start brings a new VM.
    int fd = -2;
    assert_int_equal (gw_backend_connect (f->be, &fd, f->err, sizeof f->err), -ECHILD);
    tu_microvm_starts_a_new_vm (f);
}

TU_MICROVM_FAST_TEST (test_kill_sends_init_a_kill_request)
{
    assert_int_equal (gw_backend_kill (f->be), 0);
    ch_msg_t *req = tu_microvm_init_expect (f, vm, "kill_request", false);
    assert_string_equal (tu_microvm_str (ch_msg_content (req), "signal"), "SIGKILL");
    assert_int_equal (vm->kills, 0);            //  the VM and /workspace stay
    tu_microvm_init_send (vm, req, NULL, tu_microvm_ok (), NULL, 0);
    ch_msg_destroy (&req);
    s_kernel_exits (f, vm, &S_KILLED);
}

//  Before init answered its hello, only QEMU itself can be killed.
TU_MICROVM_TEST (test_kill_before_init_answers_kills_the_vm)
{
    int fd;
    assert_int_equal (tu_microvm_open (f, -ENOENT, &fd), 0);
    close (fd);
    tu_microvm_vm_t *vm = f->vms [0];
    assert_int_equal (gw_backend_kill (f->be), 0);
    assert_int_equal (vm->kills, 1);
    assert_int_equal (tu_microvm_reap (f), 0);
    assert_true (f->ex.vm_died);
    assert_int_equal (f->ex.signal, SIGKILL);
    //  Destroyed on the starter's thread, off the reactor.
    TU_MICROVM_WAIT_FOR (f, 5000, vm->destroyed);
}

TU_MICROVM_FAST_TEST (test_a_second_start_sends_restart_request)
{
    s_kernel_exits (f, vm, &S_EXIT0);
    int fd = -2;
    assert_int_equal (tu_microvm_start (f, &fd), 0);
    assert_true (fd >= 0);                      //  the same port, at once
    ch_msg_t *req = tu_microvm_init_expect (f, vm, "restart_request", false);
    assert_int_equal (json_object_size (ch_msg_content (req)), 0);
    assert_int_equal (f->fast_calls, 1);
    assert_int_equal (f->nvms, 1);
    tu_microvm_kernel_talks (fd, vm);
    close (fd);
    assert_int_equal (tu_microvm_reap (f), -EAGAIN);
    ch_msg_destroy (&req);
}

//  A restart with init's port gone replaces the VM.
TU_MICROVM_FAST_TEST (test_a_restart_without_init_replaces_the_vm)
{
    tu_microvm_close_init (vm);
    tu_microvm_pump (f, 100);                   //  the backend sees the port close
    int fd = -2;
    assert_int_equal (tu_microvm_start (f, &fd), -EIO);
    assert_string_equal (f->err, "the VM's init does not answer; it will be replaced");
    //  Destroyed on the starter's thread, off the reactor.
    TU_MICROVM_WAIT_FOR (f, 5000, vm->destroyed);
    tu_microvm_starts_a_new_vm (f);
}

int
main (void)
{
    tu_microvm_prepare ();
    const struct CMUnitTest tests [] = {
        TU_MICROVM_CASE (test_fast_start_gives_a_working_kernel_fd),
        TU_MICROVM_CASE (test_failed_fast_start_cold_boots_and_says_hello_until_answered),
        TU_MICROVM_CASE (test_a_cold_boot_that_fails_is_an_error),
        TU_MICROVM_CASE (test_a_start_killed_in_flight_can_be_started_again),
        TU_MICROVM_CASE (test_a_start_killed_in_flight_is_reaped_with_its_vm),
        TU_MICROVM_CASE (test_kernel_exited_makes_on_event_say_so_and_reap_tell_it),
        TU_MICROVM_CASE (test_an_oom_kill_and_an_exit_are_told_apart),
        TU_MICROVM_CASE (test_a_requested_kernel_exit_is_ignored),
        TU_MICROVM_CASE (test_the_vm_dying_is_reaped_as_vm_died),
        TU_MICROVM_CASE (test_kill_sends_init_a_kill_request),
        TU_MICROVM_CASE (test_kill_before_init_answers_kills_the_vm),
        TU_MICROVM_CASE (test_a_second_start_sends_restart_request),
        TU_MICROVM_CASE (test_a_restart_without_init_replaces_the_vm),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
