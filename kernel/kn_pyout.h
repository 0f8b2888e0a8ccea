/*  kn_pyout - sys.stdout, sys.stderr and print() for the embedded Python.
 *
 *  sys.stdout and sys.stderr become _cellvm.OutStream objects (with a binary
 *  .buffer, _cellvm.OutBuffer) and builtins.print a C print: text is queued
 *  in-process in a kn_capture, no system call per write (docs/kernel.md
 *  "Output"). Part of kn_py; every call is made with the GIL held.
 */
#ifndef KN_PYOUT_H
#define KN_PYOUT_H

#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>

#include "kn_capture.h"

//  Add the OutStream and OutBuffer types to module (_cellvm). 0, or -1 with
//  an exception set.
int kn_pyout_add_types (PyObject *module);

//  Make sys.stdout, sys.stderr and print() write into capture (borrowed;
//  sys.__stdout__ and sys.__stderr__ stay the unbuffered files on fd 1 and
//  2). 0, or -1 with an exception set.
int kn_pyout_install (kn_capture_t *capture);

#endif
