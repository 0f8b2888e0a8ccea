/*  gw_fs - whole files and trees on disk, never through a symlink: a tree
    deleted (a run dir, a kept workspace, a snapshot, a template) and a file
    copied (a disk layer, a template's files).
*/
#ifndef GW_FS_H
#define GW_FS_H

#include <stdbool.h>

//  Delete path and everything under it, following no symlinks. 0 or -errno.
int gw_fs_remove_tree (const char *path);

//  Copy src to dst (created 0600, replaced if there, not through a
//  symlink): a reflink where the filesystem has them, else copy_file_range.
//  durable: fsync before returning. 0, or -errno with dst removed.
int gw_fs_copy (const char *src, const char *dst, bool durable);

#endif
