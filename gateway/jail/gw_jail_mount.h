/*  gw_jail_mount - the minimal root a jailed QEMU sees, planned in the
    parent and built in the child.

    Every path QEMU opens appears in the jail at its host path, so its argv
    needs no rewriting: the plan mirrors each path component by component
    (a directory is made in the jail's tmpfs, a symlink is copied and then
    followed) and ends in a bind mount of the file or directory itself.
    Directory binds are planned first, shortest first, and anything below
    one is not planned again (it is visible through it).

    gw_jail_mount_apply runs in the child between clone and exec: syscalls
    only (mount, mkdir, symlink, open, pivot_root), no allocation.
*/
#ifndef GW_JAIL_MOUNT_H
#define GW_JAIL_MOUNT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct _gw_jail_mount_t gw_jail_mount_t;

typedef enum { GW_JM_DIR, GW_JM_SYMLINK, GW_JM_FILE, GW_JM_TREE, GW_JM_NODE } gw_jm_kind_t;

typedef struct {
    gw_jm_kind_t kind;
    const char *path;                           //  in the jail (= on the host)
    const char *target;                         //  root + path: where the child makes it
    const char *link;                           //  GW_JM_SYMLINK: the link's text
    unsigned long remount;                      //  binds: MS_ flags of a remount, 0: none
    dev_t dev;                                  //  GW_JM_NODE: a character device made,
    unsigned uid, gid;                          //  mode 0600, owned by uid:gid
} gw_jm_entry_t;

//  A plan for a jail whose tmpfs the child mounts on root (an empty dir).
gw_jail_mount_t *gw_jail_mount_new (const char *root);
void gw_jail_mount_destroy (gw_jail_mount_t **self_p);

//  Plan path (absolute): a directory bind when tree, else a file bind;
//  read-only when ro. Binds of trees must be planned before files.
//  0, -ELOOP, -ENAMETOOLONG, -EINVAL (relative), or lstat's -errno.
int gw_jail_mount_add (gw_jail_mount_t *self, const char *path, bool tree, bool ro);

//  A character device node at path (its parents planned as directories),
//  made for uid:gid only: /dev/kvm for a VM whose uid is not in its group.
int gw_jail_mount_add_node (gw_jail_mount_t *self, const char *path, dev_t dev, unsigned uid,
                            unsigned gid);

//  True when path is visible through a planned directory bind.
bool gw_jail_mount_covered (const gw_jail_mount_t *self, const char *path);

size_t gw_jail_mount_size (const gw_jail_mount_t *self);
const gw_jm_entry_t *gw_jail_mount_entry (const gw_jail_mount_t *self, size_t i);

//  The shared libraries ld.so loads for exe (its PT_INTERP's --list),
//  NULL-terminated (empty for a static exe); the caller frees the array
//  and strings. NULL on error.
char **gw_jail_mount_libs (const char *exe);

//  Child side: mount the tmpfs on root, build the plan in it, pivot_root
//  into it and make it read-only. 0 or -errno; *step is the entry that
//  failed (-1: before the entries, size: the pivot).
int gw_jail_mount_apply (const gw_jail_mount_t *self, int *step);

#endif
