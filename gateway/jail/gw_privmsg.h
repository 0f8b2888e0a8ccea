/*  gw_privmsg - the messages between an unprivileged gateway and its
    privileged helper (gw_priv, gw_privd): a pure codec, no sockets.

    A request is a fixed header and up to GW_PRIVMSG_STRS strings, each a
    length and its bytes; a reply is one fixed struct. The helper trusts
    nothing a request says: gw_privmsg_decode checks every length, count
    and terminator, and gw_privd checks what the strings name.
*/
#ifndef GW_PRIVMSG_H
#define GW_PRIVMSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GW_PRIVMSG_MAX 65536                    //  largest request on the wire
#define GW_PRIVMSG_ARGV 64                      //  QEMU's argv, at most
#define GW_PRIVMSG_STRLEN 4096                  //  one string, at most

typedef enum {
    GW_PRIV_SPAWN = 1,                          //  jail and start QEMU; fds: log, null
    GW_PRIV_KILL,                               //  SIGKILL a VM the helper started
    GW_PRIV_REAP,                               //  its exit status, once it exited
    GW_PRIV_CONSOLE                             //  QEMU's descriptor of its console log
} gw_privmsg_op_t;

//  The paths of a spawn, in this order on the wire, then argv.
enum { GW_PRIVMSG_RUN_DIR, GW_PRIVMSG_DISK, GW_PRIVMSG_KERNEL, GW_PRIVMSG_INITRD,
       GW_PRIVMSG_ROOTFS, GW_PRIVMSG_MEM_PATH, GW_PRIVMSG_PATHS };

typedef struct {
    uint32_t op;                                //  gw_privmsg_op_t
    int32_t pid;                                //  KILL, REAP, CONSOLE
    uint32_t block;                             //  REAP: wait for the exit
    uint32_t mem_mib;                           //  SPAWN: guest RAM
    uint32_t mem_share;                         //  SPAWN: a template's RAM (QEMU writes it)
    uint32_t kvm;                               //  SPAWN: /dev/kvm
    uint64_t fsize;                             //  SPAWN: RLIMIT_FSIZE
    //  SPAWN: paths (NULL: none; the disk is a name in the run dir); CONSOLE: path [0]
    const char *path [GW_PRIVMSG_PATHS];
    uint32_t argc;
    const char *argv [GW_PRIVMSG_ARGV + 1];     //  NULL-terminated
} gw_privmsg_t;

typedef struct {
    int32_t rc;                                 //  0 or -errno
    int32_t pid;                                //  SPAWN: QEMU's
    int32_t wstatus;                            //  REAP
    uint32_t uid;                               //  SPAWN: the jail's uid
    char kind [16];                             //  SPAWN: "root"
    char cgroup [256];                          //  SPAWN: its cgroup, "" none
    char text [512];                            //  the error, or REAP: why it died ("")
} gw_privreply_t;

//  The request into buf; its size, or -EMSGSIZE (too many or too long).
int gw_privmsg_encode (const gw_privmsg_t *msg, uint8_t *buf, size_t cap);

//  A request from buf, whose strings msg then points into (each is sent
//  with its NUL); 0, or -EBADMSG for anything malformed.
int gw_privmsg_decode (gw_privmsg_t *msg, const uint8_t *buf, size_t len);

//  A reply's strings terminated: the gateway reads it as it came.
void gw_privreply_terminate (gw_privreply_t *reply);

#endif
