/*  kn_py - the CPython interpreter behind the kernel's kn_interp_t seam.
 *
 *  Initialises Debian's libpython3.11, registers the _cellvm builtin module
 *  (publish, input, flush, fence: the way back into the C core), makes
 *  sys.stdout/sys.stderr _cellvm.OutStream objects and print() a C print that
 *  queue text in-process (kn_capture; docs/kernel.md "Output"), loads the
 *  embedded cellvm_shell module and creates its Kernel. The GIL is released
 *  whenever the kernel is idle, so the user's own threads keep running.
 */
#ifndef KN_PY_H
#define KN_PY_H

#include "kn_capture.h"
#include "kn_kernel.h"

#include <stddef.h>

typedef struct _kn_py_t kn_py_t;

//  Start Python on the calling (main) thread. kernel and capture are
//  borrowed; with a capture, sys.stdout and sys.stderr write into it (text
//  buffered in-process, see kn_capture.h). NULL on failure, with the reason
//  in err. It lives as long as the process: there is no destructor, as the
//  kernel leaves by _exit while user threads may still run Python.
kn_py_t *kn_py_new (kn_kernel_t *kernel, kn_capture_t *capture, char *err, size_t errlen);

//  Fill in the seam for kn_kernel_set_interp.
void kn_py_interp (kn_py_t *self, kn_interp_t *interp);

#endif
