/*  test_gw_keep - a session's /workspace kept across a client restart:
    identity, stage, commit, claim, sweep, and a tampered kept/ directory. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "disk/gw_keep.h"
#include "base/gw_log.h"
#include "tu.h"

#define ID_A "0123456789abcdef01234567"
#define ID_B "fedcba9876543210fedcba98"

typedef struct {
    char base [TU_DIR_MAX];                     //  a fresh BASE per test
    char kept [TU_DIR_MAX + 8];                 //  BASE/kept
    char err [512];
} fixture_t;

static int
s_setup (void **state)
{
    fixture_t *f = tu_fixture_new (sizeof *f, "test_gw_keep");
    snprintf (f->kept, sizeof f->kept, "%s/kept", f->base);
    *state = f;
    return 0;
}

static bool
s_exists (const char *path)
{
    struct stat st;
    return lstat (path, &st) == 0;
}

//  The text of dir/name ("" when it cannot be read).
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

//  Stage id under f->base holding file "name" with text, then commit.
static void
s_keep (fixture_t *f, const char *id, const char *name, const char *text)
{
    char staged [PATH_MAX];
    assert_int_equal (gw_keep_stage (f->base, id, staged, sizeof staged, f->err,
                                     sizeof f->err), 0);
    tu_write_file (staged, name, text);
    assert_int_equal (gw_keep_commit (f->base, id, staged, f->err, sizeof f->err), 0);
    assert_false (s_exists (staged));
}

//  How many entries dir has, but . and ..
static int
s_count (const char *dir)
{
    char cmd [PATH_MAX + 64];
    snprintf (cmd, sizeof cmd, "ls -A '%s' | wc -l", dir);
    FILE *p = popen (cmd, "r");
    assert_non_null (p);
    int n = -1;
    assert_int_equal (fscanf (p, "%d", &n), 1);
    pclose (p);
    return n;
}

static void
test_gw_keep_identity_is_per_file_and_key (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char a [32], b [32], c [32], d [32], cwd [PATH_MAX], path [PATH_MAX];
    tu_write_file (f->base, "kernel-1.json", "{}");
    tu_write_file (f->base, "kernel-2.json", "{}");
    tu_path (path, sizeof path, f->base, "kernel-1.json");
    assert_int_equal (gw_keep_identity (path, "secret", a, sizeof a), 0);
    assert_int_equal (strlen (a), GW_KEEP_ID_LEN);
    assert_int_equal (strspn (a, "0123456789abcdef"), GW_KEEP_ID_LEN);
    assert_int_equal (gw_keep_identity (path, "secret", b, sizeof b), 0);
    assert_string_equal (a, b);                 //  stable
    assert_int_equal (gw_keep_identity (path, "other", c, sizeof c), 0);
    assert_string_not_equal (a, c);             //  another key
    tu_path (path, sizeof path, f->base, "kernel-2.json");
    assert_int_equal (gw_keep_identity (path, "secret", d, sizeof d), 0);
    assert_string_not_equal (a, d);             //  another file
    //  A relative spelling of the same file is the same session.
    assert_non_null (getcwd (cwd, sizeof cwd));
    assert_int_equal (chdir (f->base), 0);
    int rc = gw_keep_identity ("./kernel-1.json", "secret", b, sizeof b);
    assert_int_equal (chdir (cwd), 0);
    assert_int_equal (rc, 0);
    assert_string_equal (a, b);
    //  An empty key is a key too.
    assert_int_equal (gw_keep_identity (path, "", c, sizeof c), 0);
    assert_string_not_equal (c, d);
    tu_path (path, sizeof path, f->base, "missing.json");
    assert_int_equal (gw_keep_identity (path, "secret", a, sizeof a), -ENOENT);
    assert_int_equal (gw_keep_identity (path, "secret", a, GW_KEEP_ID_LEN), -ENOSPC);
}

static void
test_gw_keep_stage_commit_claim_hands_the_files_over (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char staged [PATH_MAX], sub [PATH_MAX], dst [PATH_MAX], path [PATH_MAX];
    assert_int_equal (gw_keep_stage (f->base, ID_A, staged, sizeof staged, f->err,
                                     sizeof f->err), 0);
    char want [PATH_MAX];
    snprintf (want, sizeof want, "%s/.stage-" ID_A "-%d", f->kept, (int) getpid ());
    assert_string_equal (staged, want);
    struct stat st;
    assert_int_equal (lstat (staged, &st), 0);
    assert_int_equal (st.st_mode & 07777, 0700);
    assert_int_equal (lstat (f->kept, &st), 0);
    assert_int_equal (st.st_mode & 07777, 0700);
    tu_write_file (staged, "notes.txt", "kept text");
    tu_path (sub, sizeof sub, staged, "sub");
    assert_int_equal (mkdir (sub, 0700), 0);
    tu_write_file (sub, "deep.txt", "deep");
    assert_int_equal (gw_keep_commit (f->base, ID_A, staged, f->err, sizeof f->err), 0);
    assert_false (s_exists (staged));
    assert_true (s_exists (tu_path (path, sizeof path, f->kept, ID_A)));
    tu_path (dst, sizeof dst, f->base, "claimed");
    assert_int_equal (gw_keep_claim (f->base, ID_A, dst, f->err, sizeof f->err), 0);
    assert_string_equal (s_read (dst, "notes.txt"), "kept text");
    assert_string_equal (s_read (dst, "sub/deep.txt"), "deep");
    assert_false (s_exists (path));             //  taken, not copied
    assert_int_equal (gw_keep_claim (f->base, ID_A, dst, f->err, sizeof f->err), -ENOENT);
}

static void
test_gw_keep_claim_without_anything_kept_is_enoent (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char dst [PATH_MAX];
    tu_path (dst, sizeof dst, f->base, "claimed");
    assert_int_equal (gw_keep_claim (f->base, ID_A, dst, f->err, sizeof f->err), -ENOENT);
    assert_false (s_exists (dst));
    //  Something kept under another identity is not ours.
    s_keep (f, ID_B, "b.txt", "b");
    assert_int_equal (gw_keep_claim (f->base, ID_A, dst, f->err, sizeof f->err), -ENOENT);
    //  An identity that would name another path is refused outright.
    assert_int_equal (gw_keep_claim (f->base, "../../etc", dst, f->err, sizeof f->err),
                      -EINVAL);
    assert_int_equal (gw_keep_claim (f->base, ID_B "0", dst, f->err, sizeof f->err),
                      -EINVAL);
    char staged [PATH_MAX];
    assert_int_equal (gw_keep_stage (f->base, "ABCDEF", staged, sizeof staged, f->err,
                                     sizeof f->err), -EINVAL);
}

static void
test_gw_keep_claim_never_replaces_dst (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char dst [PATH_MAX], path [PATH_MAX];
    s_keep (f, ID_A, "a.txt", "a");
    tu_path (dst, sizeof dst, f->base, "claimed");
    assert_int_equal (mkdir (dst, 0700), 0);
    assert_int_equal (gw_keep_claim (f->base, ID_A, dst, f->err, sizeof f->err), -EEXIST);
    assert_true (s_exists (tu_path (path, sizeof path, f->kept, ID_A)));   //  still kept
    assert_string_equal (s_read (path, "a.txt"), "a");
}

static void
test_gw_keep_commit_replaces_an_older_kept_dir (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char dst [PATH_MAX];
    s_keep (f, ID_A, "old.txt", "old");
    s_keep (f, ID_A, "new.txt", "new");
    assert_int_equal (s_count (f->kept), 1);     //  no stage or old copy left behind
    tu_path (dst, sizeof dst, f->base, "claimed");
    assert_int_equal (gw_keep_claim (f->base, ID_A, dst, f->err, sizeof f->err), 0);
    assert_string_equal (s_read (dst, "new.txt"), "new");
    assert_false (s_exists (tu_path ((char [PATH_MAX]) { 0 }, PATH_MAX, dst, "old.txt")));
    //  A stage of ours left over from before is emptied, not reused as is.
    char staged [PATH_MAX];
    assert_int_equal (gw_keep_stage (f->base, ID_B, staged, sizeof staged, f->err,
                                     sizeof f->err), 0);
    tu_write_file (staged, "stale.txt", "x");
    assert_int_equal (gw_keep_stage (f->base, ID_B, staged, sizeof staged, f->err,
                                     sizeof f->err), 0);
    assert_int_equal (s_count (staged), 0);
}

static void
test_gw_keep_a_kept_symlink_or_file_is_refused_and_removed (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char elsewhere [PATH_MAX], link [PATH_MAX], dst [PATH_MAX];
    s_keep (f, ID_B, "b.txt", "b");              //  makes kept/
    tu_path (elsewhere, sizeof elsewhere, f->base, "elsewhere");
    assert_int_equal (mkdir (elsewhere, 0700), 0);
    tu_write_file (elsewhere, "victim.txt", "v");
    tu_path (link, sizeof link, f->kept, ID_A);
    assert_int_equal (symlink (elsewhere, link), 0);
    tu_path (dst, sizeof dst, f->base, "claimed");
    assert_int_equal (gw_keep_claim (f->base, ID_A, dst, f->err, sizeof f->err), -EACCES);
    assert_non_null (strstr (f->err, "symlink"));
    assert_false (s_exists (link));
    assert_false (s_exists (dst));
    assert_string_equal (s_read (elsewhere, "victim.txt"), "v");   //  not followed
    //  A file where a directory should be.
    tu_write_file (f->kept, ID_A, "not a dir");
    assert_int_equal (gw_keep_claim (f->base, ID_A, dst, f->err, sizeof f->err), -EACCES);
    assert_false (s_exists (link));
    //  Another user's directory (we can only make one as root).
    assert_int_equal (mkdir (link, 0700), 0);
    if (geteuid () == 0 && chown (link, 65534, 65534) == 0) {
        assert_int_equal (gw_keep_claim (f->base, ID_A, dst, f->err, sizeof f->err), -EACCES);
        assert_non_null (strstr (f->err, "another user"));
        assert_false (s_exists (link));
    }
}

static void
test_gw_keep_refuses_a_tampered_kept_dir_or_stage (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char elsewhere [PATH_MAX], staged [PATH_MAX], link [PATH_MAX];
    tu_path (elsewhere, sizeof elsewhere, f->base, "elsewhere");
    assert_int_equal (mkdir (elsewhere, 0700), 0);
    //  kept/ itself a symlink: nothing is made through it.
    assert_int_equal (symlink (elsewhere, f->kept), 0);
    assert_int_equal (gw_keep_stage (f->base, ID_A, staged, sizeof staged, f->err,
                                     sizeof f->err), -ENOTDIR);
    assert_non_null (strstr (f->err, "symlink"));
    assert_int_equal (s_count (elsewhere), 0);
    assert_int_equal (gw_keep_sweep (f->base, 0, time (NULL) + 3600.0), -ENOTDIR);
    assert_int_equal (unlink (f->kept), 0);
    //  A staged path that is a symlink is not committed, and it goes.
    tu_write_file (elsewhere, "victim.txt", "v");
    tu_path (link, sizeof link, f->base, "staged-link");
    assert_int_equal (symlink (elsewhere, link), 0);
    assert_true (gw_keep_commit (f->base, ID_A, link, f->err, sizeof f->err) < 0);
    assert_false (s_exists (link));
    assert_string_equal (s_read (elsewhere, "victim.txt"), "v");
    assert_false (s_exists (tu_path (staged, sizeof staged, f->kept, ID_A)));
}

//  dir/name made with mtime age_s ago.
static void
s_aged (const char *dir, const char *name, double age_s)
{
    char path [PATH_MAX];
    tu_path (path, sizeof path, dir, name);
    assert_int_equal (mkdir (path, 0700), 0);
    tu_write_file (path, "f", "x");
    time_t t = time (NULL) - (time_t) age_s;
    struct timespec ts [2] = { { t, 0 }, { t, 0 } };
    assert_int_equal (utimensat (AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW), 0);
}

static void
test_gw_keep_sweep_removes_old_ones_only (void **state)
{
    fixture_t *f = (fixture_t *) *state;
    char path [PATH_MAX], dead [64], ours [64], logfile [PATH_MAX];
    assert_int_equal (gw_keep_sweep (f->base, 600, time (NULL)), 0);     //  no kept/ yet
    s_keep (f, ID_A, "young.txt", "y");          //  committed just now
    s_aged (f->kept, ID_B, 1000);
    pid_t pid = fork ();
    if (pid == 0)
        _exit (0);
    waitpid (pid, NULL, 0);                     //  a pid certainly gone
    snprintf (dead, sizeof dead, ".stage-" ID_B "-%d", (int) pid);
    s_aged (f->kept, dead, 1000);
    snprintf (ours, sizeof ours, ".stage-" ID_A "-%d", (int) getpid ());
    s_aged (f->kept, ours, 1000);               //  ours is in use
    s_aged (f->kept, "unrelated", 1000);        //  not a name we make
    s_aged (f->kept, "fedcba9876543210fedcba9", 1000);     //  23 digits: not an identity
    FILE *log = fopen (tu_path (logfile, sizeof logfile, f->base, "log"), "w+");
    assert_non_null (log);
    gw_log_init (GW_LOG_INFO, log);
    int rc = gw_keep_sweep (f->base, 600, (double) time (NULL));
    gw_log_init (GW_LOG_INFO, NULL);
    fclose (log);
    assert_int_equal (rc, 2);
    assert_false (s_exists (tu_path (path, sizeof path, f->kept, ID_B)));
    assert_false (s_exists (tu_path (path, sizeof path, f->kept, dead)));
    assert_true (s_exists (tu_path (path, sizeof path, f->kept, ID_A)));
    assert_true (s_exists (tu_path (path, sizeof path, f->kept, ours)));
    assert_true (s_exists (tu_path (path, sizeof path, f->kept, "unrelated")));
    const char *text = s_read (f->base, "log");
    const char *first = strstr (text, "event=keep.swept");
    assert_non_null (first);
    assert_non_null (strstr (first + 1, "event=keep.swept"));
    //  Later, the young one is old too. Two seconds past the limit: time() is
    //  whole seconds and may trail a file's fine-grained mtime by one.
    assert_int_equal (gw_keep_sweep (f->base, 600, time (NULL) + 602.0), 1);
    assert_false (s_exists (tu_path (path, sizeof path, f->kept, ID_A)));
}

int
main (void)
{
#define S_TEST(name) cmocka_unit_test_setup_teardown (name, s_setup, tu_fixture_teardown)
    const struct CMUnitTest tests [] = {
        S_TEST (test_gw_keep_identity_is_per_file_and_key),
        S_TEST (test_gw_keep_stage_commit_claim_hands_the_files_over),
        S_TEST (test_gw_keep_claim_without_anything_kept_is_enoent),
        S_TEST (test_gw_keep_claim_never_replaces_dst),
        S_TEST (test_gw_keep_commit_replaces_an_older_kept_dir),
        S_TEST (test_gw_keep_a_kept_symlink_or_file_is_refused_and_removed),
        S_TEST (test_gw_keep_refuses_a_tampered_kept_dir_or_stage),
        S_TEST (test_gw_keep_sweep_removes_old_ones_only),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
