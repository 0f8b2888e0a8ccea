/*  gw_chain - a session's /workspace disk as files: a qcow2 layer chain.

    A session's disk is its top layer in the VM's run dir plus the layers
    below it that live in the same directory (their backing file names have
    no '/'): "base.qcow2" under a session started from a snapshot, and one
    "ws-<hex>.qcow2" per snapshot taken (docs/sessions.md). The bottom layer
    names an absolute backing file (a template's disk), or none.
    Moving a disk from one VM to the next (a kernel death, a client
    restart) moves those files together, with a file "top" naming the top.
    No QEMU here: the chain is read from the qcow2 headers.
*/
#ifndef GW_CHAIN_H
#define GW_CHAIN_H

#include <stddef.h>

#define GW_CHAIN_MAX 64                         //  layers in one directory
#define GW_CHAIN_TOP "top"                      //  the file that names the top layer

//  The backing file name recorded in the qcow2 header of path into out
//  ("" when none). 0, -EBADMSG when path is not a qcow2 (or the name is
//  unreasonable), -errno.
int gw_chain_backing (const char *path, char *out, size_t cap);

//  Link (or, across filesystems, copy) the chain of layer `top` in src_dir
//  into dst_dir (an existing, empty directory), and write dst_dir/top.
//  The source stays as it was. 0 or -errno with the reason in err.
int gw_chain_export (const char *src_dir, const char *top, const char *dst_dir,
                     char *err, size_t errlen);

//  Record top as dir's top layer. 0 or -errno.
int gw_chain_write_top (const char *dir, const char *top);

//  The top layer's name recorded in dir (written by gw_chain_export) into
//  out. 0, -ENOENT, -EBADMSG when it names no layer file of dir.
int gw_chain_top (const char *dir, char *out, size_t cap);

//  Link (or copy) every layer of dir's chain into dst_dir. dir stays whole
//  until the caller removes it, so a start that fails loses nothing.
//  0 or -errno with the reason in err.
int gw_chain_import (const char *dir, const char *dst_dir, char *err, size_t errlen);

#endif
