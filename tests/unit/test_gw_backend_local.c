/*  test_gw_backend_local - the unsafe-local backend's /workspace across a
    client restart: keep_workspace hands it over, a new backend adopts it.

    The kernel is a shell script (KERNEL --fd 3 --max-frame N --outdir DIR):
    it writes into its outdir, then sleeps until killed. Scratch dirs live
    under the default run dir base, where the backend's workspace is, so
    renames between them stay on one filesystem.
*/
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "ch_util.h"
#include "backend/gw_backend_local.h"
#include "disk/gw_keep.h"
#include "base/gw_runbase.h"
#include "tu.h"

typedef struct {
    char dir [TU_DIR_MAX];                      //  scratch, under the default base
    char kernel [TU_DIR_MAX + 16];              //  DIR/kernel.sh
    char err [512];
} fixture_t;

static int
s_setup (void **state)
{
    fixture_t *f = calloc (1, sizeof *f);
    assert_non_null (f);
    char base [TU_DIR_MAX];
    assert_int_equal (gw_runbase_default (base, sizeof base), 0);
    assert_int_equal (ch_mkdir_p (base, 0700), 0);
    int n = snprintf (f->dir, sizeof f->dir, "%.40s/test-local-XXXXXX", base);
    assert_true (n > 0 && (size_t) n < sizeof f->dir && strlen (base) <= 40);
    assert_non_null (mkdtemp (f->dir));
    tu_write_file (f->dir, "kernel.sh", "#!/bin/sh\necho up > \"$6/kernel.txt\"\nexec sleep 30\n");
    tu_path (f->kernel, sizeof f->kernel, f->dir, "kernel.sh");
    assert_int_equal (chmod (f->kernel, 0700), 0);
    *state = f;
    return 0;
}

static bool
s_exists (const char *path)
{
    struct stat st;
    return lstat (path, &st) == 0;
}

static bool
s_is_real_dir (const char *path)
{
    struct stat st;
    return lstat (path, &st) == 0 && S_ISDIR (st.st_mode);
}

static const char *
s_read (const char *dir, const char *name)
{
    static char text [256];
    char path [PATH_MAX];
    text [0] = 0;
    FILE *file = fopen (tu_path (path, sizeof path, dir, name), "r");
    if (file) {
        size_t n = fread (text, 1, sizeof text - 1, file);
        text [n] = 0;
        fclose (file);
    }
    return text;
}

//  Wait up to 5 s for path to appear.
static bool
s_wait_for (const char *path)
{
    for (int i = 0; i < 500 && !s_exists (path); i++)
        nanosleep (&(struct timespec) { 0, 10 * 1000 * 1000 }, NULL);
    return s_exists (path);
}

static gw_backend_t *
s_backend (fixture_t *f, const char *adopt_dir)
{
    gw_backend_t *be = gw_backend_local_new_opts (f->kernel, 1 << 20, adopt_dir, f->err,
                                                  sizeof f->err);
    if (!be)
        fail_msg ("backend: %s", f->err);
    assert_non_null (gw_backend_local_workspace (be));
    return be;
}

//  DIR/name made, empty: where a workspace is kept.
static const char *
s_keep_dir (fixture_t *f, const char *name, char *out, size_t cap)
{
    tu_path (out, cap, f->dir, name);
    assert_int_equal (mkdir (out, 0700), 0);
    return out;
}

static void
test_gw_backend_local_keep_kills_the_kernel_and_moves_the_workspace (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char keep [PATH_MAX], kept [PATH_MAX], ws [PATH_MAX], path [PATH_MAX];
    gw_backend_t *be = s_backend (f, NULL);
    snprintf (ws, sizeof ws, "%s", gw_backend_local_workspace (be));
    int fd = -1;
    assert_int_equal (gw_backend_start (be, &fd, f->err, sizeof f->err), 0);
    pid_t pid = gw_backend_pid (be);
    assert_true (pid > 0);
    assert_true (s_wait_for (tu_path (path, sizeof path, ws, "out/kernel.txt")));
    tu_write_file (ws, "data.csv", "1,2,3\n");
    s_keep_dir (f, "keep", keep, sizeof keep);
    assert_int_equal (gw_backend_keep_workspace (be, keep, f->err, sizeof f->err), 0);
    assert_int_equal (kill (pid, 0), -1);       //  dead and collected: nothing writes
    assert_int_equal (errno, ESRCH);
    assert_false (s_exists (ws));
    gw_backend_destroy (&be);
    tu_path (kept, sizeof kept, keep, "workspace");
    assert_string_equal (s_read (kept, "data.csv"), "1,2,3\n");    //  destroy left it
    assert_string_equal (s_read (kept, "out/kernel.txt"), "up\n");
    close (fd);
}

static void
s_chunk_done (void *arg, int rc, const json_t *reply, const uint8_t *data, size_t len,
              const char *err)
{
    (void) reply, (void) data, (void) len, (void) err;
    *(int *) arg = rc;
}

static void
test_gw_backend_local_keep_waits_for_a_chunk_in_flight (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char keep [PATH_MAX], kept [PATH_MAX];
    gw_backend_t *be = s_backend (f, NULL);
    static uint8_t big [GW_CHUNK_MAX];
    memset (big, 'z', sizeof big);
    int done_rc = 1;
    assert_int_equal (gw_backend_put_chunk (be, "big.bin", false, big, sizeof big,
                                            s_chunk_done, &done_rc, f->err, sizeof f->err), 0);
    s_keep_dir (f, "keep", keep, sizeof keep);
    assert_int_equal (gw_backend_keep_workspace (be, keep, f->err, sizeof f->err), 0);
    struct stat st;
    assert_int_equal (stat (tu_path (kept, sizeof kept, keep, "workspace/big.bin"), &st), 0);
    assert_int_equal (st.st_size, GW_CHUNK_MAX);
    gw_backend_on_event (be);                   //  the chunk's done: it had succeeded
    assert_int_equal (done_rc, 0);
    gw_backend_destroy (&be);
}

static void
test_gw_backend_local_keep_refuses_an_unsafe_destination (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char keep [PATH_MAX], link [PATH_MAX], ws [PATH_MAX];
    gw_backend_t *be = s_backend (f, NULL);
    snprintf (ws, sizeof ws, "%s", gw_backend_local_workspace (be));
    tu_write_file (ws, "mine.txt", "m");
    s_keep_dir (f, "target", keep, sizeof keep);
    tu_path (link, sizeof link, f->dir, "link");
    assert_int_equal (symlink (keep, link), 0);
    assert_int_equal (gw_backend_keep_workspace (be, link, f->err, sizeof f->err), -EACCES);
    assert_false (s_exists (tu_path ((char [PATH_MAX]) { 0 }, PATH_MAX, keep, "workspace")));
    assert_string_equal (s_read (ws, "mine.txt"), "m");     //  still in place
    //  A workspace already there is never replaced.
    tu_path (link, sizeof link, keep, "workspace");
    assert_int_equal (mkdir (link, 0700), 0);
    assert_int_equal (gw_backend_keep_workspace (be, keep, f->err, sizeof f->err), -EEXIST);
    assert_string_equal (s_read (ws, "mine.txt"), "m");
    gw_backend_destroy (&be);
}

static void
test_gw_backend_local_adopts_a_kept_workspace (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char adopt [PATH_MAX], ws [PATH_MAX], path [PATH_MAX], elsewhere [PATH_MAX];
    s_keep_dir (f, "adopt", adopt, sizeof adopt);
    tu_path (ws, sizeof ws, adopt, "workspace");
    assert_int_equal (mkdir (ws, 0700), 0);
    tu_write_file (ws, "model.pkl", "weights");
    //  A tampered outdir: a symlink out of the workspace.
    s_keep_dir (f, "elsewhere", elsewhere, sizeof elsewhere);
    assert_int_equal (symlink (elsewhere, tu_path (path, sizeof path, ws, "out")), 0);
    gw_backend_t *be = s_backend (f, adopt);
    const char *mine = gw_backend_local_workspace (be);
    assert_string_equal (s_read (mine, "model.pkl"), "weights");
    assert_true (s_is_real_dir (tu_path (path, sizeof path, mine, "out")));
    assert_false (s_exists (adopt));            //  consumed
    //  The kernel writes into the real outdir, not through the old symlink.
    int fd = -1;
    assert_int_equal (gw_backend_start (be, &fd, f->err, sizeof f->err), 0);
    assert_true (s_wait_for (tu_path (path, sizeof path, mine, "out/kernel.txt")));
    assert_false (s_exists (tu_path (path, sizeof path, elsewhere, "kernel.txt")));
    gw_backend_destroy (&be);
    close (fd);
}

static void
test_gw_backend_local_adopt_falls_back_to_a_fresh_workspace (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char adopt [PATH_MAX], elsewhere [PATH_MAX], path [PATH_MAX];
    //  adopt/workspace is a symlink to someone's files: not followed.
    s_keep_dir (f, "elsewhere", elsewhere, sizeof elsewhere);
    tu_write_file (elsewhere, "victim.txt", "v");
    s_keep_dir (f, "adopt", adopt, sizeof adopt);
    assert_int_equal (symlink (elsewhere, tu_path (path, sizeof path, adopt, "workspace")), 0);
    gw_backend_t *be = s_backend (f, adopt);
    const char *mine = gw_backend_local_workspace (be);
    assert_true (s_is_real_dir (mine));
    assert_false (s_exists (tu_path (path, sizeof path, mine, "victim.txt")));
    assert_false (s_exists (adopt));
    assert_string_equal (s_read (elsewhere, "victim.txt"), "v");
    gw_backend_destroy (&be);
    assert_string_equal (s_read (elsewhere, "victim.txt"), "v");
    //  Nothing at adopt_dir at all, and adopt_dir a file.
    be = s_backend (f, adopt);
    assert_true (s_is_real_dir (tu_path (path, sizeof path, gw_backend_local_workspace (be),
                                         "out")));
    gw_backend_destroy (&be);
    tu_write_file (f->dir, "adopt", "not a dir");
    be = s_backend (f, adopt);
    assert_true (s_is_real_dir (gw_backend_local_workspace (be)));
    assert_false (s_exists (adopt));
    gw_backend_destroy (&be);
}

//  The whole restart: keep into a stage, commit, claim, adopt.
static void
test_gw_backend_local_restart_through_gw_keep (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char id [32], staged [PATH_MAX], claimed [PATH_MAX], conn [PATH_MAX];
    tu_write_file (f->dir, "kernel-1.json", "{}");
    assert_int_equal (gw_keep_identity (tu_path (conn, sizeof conn, f->dir, "kernel-1.json"),
                                        "key", id, sizeof id), 0);
    gw_backend_t *be = s_backend (f, NULL);
    tu_write_file (gw_backend_local_workspace (be), "notes.md", "# kept");
    assert_int_equal (gw_keep_stage (f->dir, id, staged, sizeof staged, f->err,
                                     sizeof f->err), 0);
    assert_int_equal (gw_backend_keep_workspace (be, staged, f->err, sizeof f->err), 0);
    gw_backend_destroy (&be);
    assert_int_equal (gw_keep_commit (f->dir, id, staged, f->err, sizeof f->err), 0);
    //  The next gateway.
    tu_path (claimed, sizeof claimed, f->dir, "claimed");
    assert_int_equal (gw_keep_claim (f->dir, id, claimed, f->err, sizeof f->err), 0);
    be = s_backend (f, claimed);
    assert_string_equal (s_read (gw_backend_local_workspace (be), "notes.md"), "# kept");
    assert_false (s_exists (claimed));
    gw_backend_destroy (&be);
    assert_int_equal (gw_keep_claim (f->dir, id, claimed, f->err, sizeof f->err), -ENOENT);
}

static void
test_gw_backend_local_workspace_getter_is_for_local_only (void **state)
{
    (void) state;
    gw_backend_t other = { .name = "mock" };
    assert_null (gw_backend_local_workspace (&other));
    assert_null (gw_backend_local_workspace (NULL));
}

static int
s_teardown (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    tu_rmtree (f->dir);
    free (f);
    return 0;
}

int
main (void)
{
#define S_TEST(name) cmocka_unit_test_setup_teardown (name, s_setup, s_teardown)
    const struct CMUnitTest tests [] = {
        S_TEST (test_gw_backend_local_keep_kills_the_kernel_and_moves_the_workspace),
        S_TEST (test_gw_backend_local_keep_waits_for_a_chunk_in_flight),
        S_TEST (test_gw_backend_local_keep_refuses_an_unsafe_destination),
        S_TEST (test_gw_backend_local_adopts_a_kept_workspace),
        S_TEST (test_gw_backend_local_adopt_falls_back_to_a_fresh_workspace),
        S_TEST (test_gw_backend_local_restart_through_gw_keep),
        cmocka_unit_test (test_gw_backend_local_workspace_getter_is_for_local_only),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
