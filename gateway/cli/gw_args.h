/*  gw_args - cellvm-gateway's options: one table, parsed once, printed by
    --help, and the argv of the children the gateway starts from it.

    The gateway starts two kinds of children with its own VM options: the
    background template builder (--build-template) and the pool daemon
    (--pool-daemon). They must key templates exactly as the gateway does
    (gw_tplmeta), so the table says, per option, which children inherit it,
    and gw_args_child_argv builds their argv from the table alone: an
    option cannot be forgotten. Values are passed as the user wrote them.
    The template directory is always passed, resolved. Options of one
    session (its connection file, listening fds, run dir, backend, kernel,
    limits) are never passed: a build or a pool clone uses the default run
    base, and tests count what a session leaves in its own.
*/
#ifndef GW_ARGS_H
#define GW_ARGS_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "vm/gw_vm_config.h"

//  Which children inherit an option.
#define GW_ARGS_BUILDER 1u                      //  --build-template
#define GW_ARGS_POOL 2u                         //  --pool-daemon

typedef enum {
    GW_OPT_CONNECTION_FILE, GW_OPT_BACKEND, GW_OPT_KERNEL, GW_OPT_LOG_LEVEL, GW_OPT_MAX_MSG,
    GW_OPT_MAX_FRAME, GW_OPT_CELL_TIMEOUT, GW_OPT_IMAGE, GW_OPT_ARTIFACTS_DIR,
    GW_OPT_ARTIFACT_MAX_FILE, GW_OPT_ARTIFACT_MAX_SESSION, GW_OPT_QEMU, GW_OPT_ACCEL,
    GW_OPT_RUN_DIR, GW_OPT_MEMORY, GW_OPT_VCPUS, GW_OPT_TCG_TB, GW_OPT_DISK_SIZE, GW_OPT_TEMPLATE_DIR,
    GW_OPT_NO_TEMPLATES, GW_OPT_BUILD_TEMPLATE, GW_OPT_POOL, GW_OPT_POOL_DAEMON,
    GW_OPT_POOL_BUDGET, GW_OPT_POOL_IDLE, GW_OPT_LISTEN_FDS, GW_OPT_IDLE_PAUSE,
    GW_OPT_IDLE_TIMEOUT, GW_OPT_TTL, GW_OPT_SNAPSHOT_DIR, GW_OPT_FROM_SNAPSHOT, GW_OPT_SNAPSHOT_GC,
    GW_OPT_SNAPSHOT_MAX_AGE, GW_OPT_SNAPSHOT_MAX_BYTES, GW_OPT_JAIL, GW_OPT_JAIL_UID_BASE,
    GW_OPT_CPUS, GW_OPT_PROTOCOL, GW_OPT_SHARE_CWD, GW_OPT_SHARE_MAX, GW_OPT_USER, GW_OPT_DISK_BPS, GW_OPT_DISK_IOPS,
    GW_OPT_SESSION_NAME, GW_OPT_LEASE_TTL, GW_OPT_CHECKPOINT_EVERY, GW_OPT_LEASE_WAIT, GW_OPT_ADMIT, GW_OPT_START_TIMEOUT,
    GW_OPT_EGRESS_ALLOW, GW_OPT_EGRESS_DENY, GW_OPT_EGRESS_STREAMS, GW_OPT_EGRESS_CONNS,
    GW_OPT_EGRESS_MAX, GW_OPT_EGRESS_PORT, GW_OPT_HELP, GW_OPT_COUNT
} gw_opt_id_t;

//  How a value is checked and where it goes.
typedef enum {
    GW_OPTKIND_STR,                             //  any text
    GW_OPTKIND_FLAG,                            //  no value
    GW_OPTKIND_SIZE,                            //  a number with an optional k/M/G suffix
    GW_OPTKIND_SECONDS,                         //  a non-negative decimal
    GW_OPTKIND_ACCEL,                           //  auto, kvm or tcg
    GW_OPTKIND_JAIL                             //  auto, on or off
} gw_opt_kind_t;

//  Which part of --help an option is listed in.
typedef enum {
    GW_ARGS_HELP_MAIN, GW_ARGS_HELP_MICROVM, GW_ARGS_HELP_SESSIONS, GW_ARGS_HELP_EGRESS
} gw_args_help_t;

typedef struct {
    const char *name;                           //  without the leading --
    gw_opt_kind_t kind;
    unsigned long long min, max;                //  GW_OPTKIND_SIZE: the range
    unsigned inherit;                           //  GW_ARGS_BUILDER | GW_ARGS_POOL
    gw_args_help_t group;
    const char *arg;                            //  its value in --help; NULL for a flag
    const char *help;                           //  what it does, one line (--help wraps it)
} gw_opt_t;

#define GW_ARGS_MAX_TRAITS 32

//  The parsed options. text [id] is each option's value as given (the last
//  one wins; "" for a flag), NULL when absent. Numbers are 0 when absent.
typedef struct {
    const char *text [GW_OPT_COUNT];
    size_t max_msg;
    uint32_t max_frame;
    double cell_timeout, idle_pause, idle_timeout, ttl, snapshot_max_age, cpus, lease_ttl;
    double checkpoint_every, lease_wait, start_timeout;
    unsigned long long snapshot_max_bytes;
    unsigned memory_mib, vcpus, tcg_tb_mib, pool, pool_budget_mib, pool_idle_s, jail_uid_base;
    unsigned admit, egress_streams, egress_conns, egress_port;
    unsigned long long egress_max;
    unsigned long long disk_bps, disk_iops;
    unsigned long long disk_bytes, artifact_max_file, artifact_max_session, share_max;
    char image_dir [PATH_MAX];                  //  made absolute by gw_args_vm_config
    //  --Class.trait=value options (traitlets' form: nbclient and other runners
    //  pass IPython's through KernelManager(extra_arguments=...)): accepted,
    //  counted, and the first GW_ARGS_MAX_TRAITS kept (gw_args_ipython).
    unsigned traits;
    const char *first_trait;
    const char *trait [GW_ARGS_MAX_TRAITS];
} gw_args_t;

//  Is this --Class.trait=value for a class of IPython's shell (which the
//  kernel's shell applies), rather than for ipykernel's app, session, ...?
bool gw_args_ipython (const char *trait);

//  The table, GW_OPT_COUNT entries in gw_opt_id_t order.
const gw_opt_t *gw_args_table (void);

//  Parse argv into args (zeroed first). 0; 1 for --help; -EINVAL with
//  the reason printed on stderr.
int gw_args_parse (gw_args_t *args, int argc, char **argv);

//  Was the option given?
bool gw_args_has (const gw_args_t *args, gw_opt_id_t id);

//  --help: every option of the table, each with its value and help, part by
//  part; then the traitlets form and the environment.
void gw_args_usage (FILE *out);

//  name in the directory of this executable, into out.
void gw_args_beside_me (const char *name, char *out, size_t cap);

//  The VM config these options give (gw_vm_config_defaults, then the
//  options). The image dir defaults to image/ beside this executable and is
//  made absolute (QEMU runs in the run dir); cfg borrows strings from args.
void gw_args_vm_config (gw_args_t *args, gw_vm_config_t *cfg);

//  The same, with the accelerator and TSC rate resolved as a session
//  resolves them (both feed the template key). 0, or -errno with the
//  reason printed on stderr.
int gw_args_vm_config_resolved (gw_args_t *args, gw_vm_config_t *cfg);

//  --template-dir, else gw_template_default_dir into out. NULL when it
//  does not fit.
const char *gw_args_template_dir (const gw_args_t *args, char *out, size_t cap);

//  The argv of a child (GW_ARGS_BUILDER or GW_ARGS_POOL): argv [0], its
//  mode option, --template-dir template_dir, then every option given whose
//  table entry names that child. NULL-terminated; free with
//  gw_args_free_argv.
char **gw_args_child_argv (const gw_args_t *args, unsigned child, const char *template_dir);
void gw_args_free_argv (char ***argv_p);

#endif
