/*  kn_py - the CPython interpreter behind the kernel's seam. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "kn_py.h"
#include "ch_jfast.h"
#include "kn_capture.h"
#include "kn_log.h"
#include "kn_pyout.h"
#include "kn_pysrc.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#define S_INPUT_SLICE_MS 50     //  how often input() looks for an interrupt

//  The process's capture (one interpreter, one capture), for fence(); the
//  stream objects write into it through kn_pyout. NULL: sys.stdout and
//  sys.stderr are left as they are.
static kn_capture_t *s_capture;

struct _kn_py_t {
    kn_kernel_t *kernel;        //  borrowed
    PyObject *shell;            //  cellvm_shell.Kernel instance
    PyObject *comm;             //  the cellvm_comm module
    PyObject *debug;            //  the cellvm_debug module
    PyThreadState *saved;       //  the main thread state while idle
};

typedef struct {
    kn_kernel_t *kernel;
} s_modstate_t;

//  ---------------------------------------------------------------------------
//  _cellvm: the way from Python back into the C core

static kn_kernel_t *
s_kernel_of (PyObject *module)
{
    s_modstate_t *st = PyModule_GetState (module);
    if (!st || !st->kernel)
        PyErr_SetString (PyExc_RuntimeError, "_cellvm is not attached to a kernel");
    return st ? st->kernel : NULL;
}

//  publish() with metadata, a parent or buffers: a whole message (comms,
//  session.send). base has the JSON texts; bufs is a sequence or None.
static PyObject *
s_publish_msg (kn_kernel_t *k, const char *type, const kn_publish_t *base, PyObject *bufs)
{
    Py_buffer views [CH_MSG_MAX_BUFFERS];
    struct iovec iov [CH_MSG_MAX_BUFFERS];
    kn_publish_t p = *base;
    Py_ssize_t n = 0, got = 0;
    int rc = -E2BIG;
    PyObject *seq = bufs == Py_None ? PyTuple_New (0)
                                    : PySequence_Fast (bufs, "publish: buffers must be a sequence");
    if (!seq || (n = PySequence_Fast_GET_SIZE (seq)) > CH_MSG_MAX_BUFFERS)
        goto fail;
    for (; got < n; got++) {
        PyObject *b = PySequence_Fast_GET_ITEM (seq, got);
        if (PyObject_GetBuffer (b, &views [got], PyBUF_SIMPLE) < 0)
            goto fail;
        iov [got] = (struct iovec) { views [got].buf, (size_t) views [got].len };
    }
    p.buffers = iov;
    p.nbuffers = (size_t) n;
    Py_BEGIN_ALLOW_THREADS
    rc = kn_kernel_publish_msg (k, type, &p);
    Py_END_ALLOW_THREADS
fail:
    for (Py_ssize_t i = 0; i < got; i++)
        PyBuffer_Release (&views [i]);
    Py_XDECREF (seq);
    if (PyErr_Occurred ())
        return NULL;
    if (rc == -E2BIG)
        return PyErr_Format (PyExc_ValueError, "publish: at most %d buffers", CH_MSG_MAX_BUFFERS);
    if (rc < 0)
        return PyErr_Format (PyExc_ValueError, "publish: content, metadata and parent must "
                             "be JSON objects");
    Py_RETURN_NONE;
}

static PyObject *
s_publish (PyObject *module, PyObject *args)
{
    const char *type, *text, *meta = NULL, *parent = NULL;
    Py_ssize_t len;
    PyObject *bufs = Py_None;
    kn_kernel_t *k = s_kernel_of (module);
    if (!k || !PyArg_ParseTuple (args, "ss#|zzO", &type, &text, &len, &meta, &parent, &bufs))
        return NULL;
    if (meta || parent || bufs != Py_None) {
        kn_publish_t p = { text, (size_t) len, meta, parent, NULL, 0 };
        return s_publish_msg (k, type, &p, bufs);
    }
    //  The JSON Python made goes out as it is: escaped once, never parsed.
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = kn_kernel_publish_json (k, type, text, (size_t) len);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return PyErr_Format (PyExc_ValueError, "publish: content is not a JSON object");
    Py_RETURN_NONE;
}

static PyObject *
s_parent (PyObject *module, PyObject *args)
{
    (void) args;
    kn_kernel_t *k = s_kernel_of (module);
    if (!k)
        return NULL;
    char *p = kn_kernel_parent_json (k);
    PyObject *r = PyUnicode_FromString (p);
    free (p);
    return r;
}

static PyObject *
s_flush (PyObject *module, PyObject *args)
{
    (void) args;
    kn_kernel_t *k = s_kernel_of (module);
    if (!k)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    kn_kernel_flush (k);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *
s_input (PyObject *module, PyObject *args)
{
    const char *prompt;
    int password = 0;
    kn_kernel_t *k = s_kernel_of (module);
    if (!k || !PyArg_ParseTuple (args, "s|p", &prompt, &password))
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    kn_kernel_flush (k);
    rc = kn_kernel_input_begin (k, prompt, password);
    Py_END_ALLOW_THREADS
    char *value = NULL;
    while (rc == 0 && !value) {
        Py_BEGIN_ALLOW_THREADS
        rc = kn_kernel_input_wait (k, S_INPUT_SLICE_MS, &value);
        Py_END_ALLOW_THREADS
        if (rc == -ETIMEDOUT)
            rc = PyErr_CheckSignals () < 0 ? -EINTR : 0;
    }
    kn_kernel_input_end (k);
    if (rc == -EINTR)
        return NULL;    //  KeyboardInterrupt is set
    if (rc < 0)
        return PyErr_Format (PyExc_EOFError, "input(): the client went away");
    PyObject *r = PyUnicode_DecodeUTF8 (value, (Py_ssize_t) strlen (value), "replace");
    free (value);
    return r;
}

static PyObject *
s_fence (PyObject *module, PyObject *args)
{
    (void) module;
    (void) args;
    if (s_capture)
        kn_capture_fence (s_capture);
    Py_RETURN_NONE;
}


//  The kernel's own log (not the client's stderr): text is one line already.
static PyObject *
s_log (PyObject *module, PyObject *args)
{
    (void) module;
    const char *level, *event, *text;
    if (!PyArg_ParseTuple (args, "sss", &level, &event, &text))
        return NULL;
    int l = ch_log_level_parse (level);
    kn_log (l < 0 ? CH_LOG_INFO : (ch_log_level_t) l, event, "text=\"%s\"", text);
    Py_RETURN_NONE;
}

static PyMethodDef s_methods [] = {
    { "publish", s_publish, METH_VARARGS, "publish(msg_type, content_json, metadata_json=None, "
      "parent_json=None, buffers=None) on iopub; the parent defaults to the running request" },
    { "log", s_log, METH_VARARGS, "log(level, event, text): a line in the kernel's own log" },
    { "parent", s_parent, METH_NOARGS, "the running request's header as JSON ({} when none)" },
    { "flush", s_flush, METH_NOARGS, "emit captured stdout/stderr now" },
    { "fence", s_fence, METH_NOARGS, "fd-level output may have been written up to here "
      "(a child was reaped): Python text written next goes after it" },
    { "input", s_input, METH_VARARGS, "input(prompt, password) via an input_request" },
    { NULL, NULL, 0, NULL }
};

static struct PyModuleDef s_module = {
    PyModuleDef_HEAD_INIT, "_cellvm", "cellvm-kernel's C core", sizeof (s_modstate_t),
    s_methods, NULL, NULL, NULL, NULL
};

static PyObject *
s_init_module (void)
{
    PyObject *m = PyModule_Create (&s_module);
    if (m && kn_pyout_add_types (m) < 0)
        Py_CLEAR (m);
    return m;
}

//  ---------------------------------------------------------------------------
//  Start-up

//  The reason an exception happened, as text, into err; clears it.
static void
s_error_text (char *err, size_t errlen)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch (&type, &value, &tb);
    PyObject *s = value ? PyObject_Str (value) : NULL;
    snprintf (err, errlen, "%s: %s", type ? ((PyTypeObject *) type)->tp_name : "error",
              s && PyUnicode_Check (s) ? PyUnicode_AsUTF8 (s) : "?");
    Py_XDECREF (s);
    Py_XDECREF (type);
    Py_XDECREF (value);
    Py_XDECREF (tb);
}

static int
s_start_python (void)
{
    //  UTF-8 mode: the guest has no locale set, and cells must be able to
    //  print and write any text whatever LANG says.
    PyPreConfig pre;
    PyPreConfig_InitIsolatedConfig (&pre);
    pre.utf8_mode = 1;
    PyStatus st = Py_PreInitialize (&pre);
    if (PyStatus_Exception (st))
        return -1;
    PyConfig config;
    //  Isolated: no PYTHON* variables or user site from whoever started us;
    //  Debian's dist-packages still come in through site.
    PyConfig_InitIsolatedConfig (&config);
    config.site_import = 1;
    config.user_site_directory = 0;
    config.buffered_stdio = 0;          //  every write reaches fd 1/2 at once
    config.install_signal_handlers = 1; //  SIGINT -> KeyboardInterrupt
    config.write_bytecode = 0;
    st = PyConfig_SetString (&config, &config.program_name, L"/usr/bin/python3");
    char *argv [] = { (char *) "cellvm-kernel" };
    if (!PyStatus_Exception (st))
        st = PyConfig_SetBytesArgv (&config, 1, argv);
    if (!PyStatus_Exception (st))
        st = Py_InitializeFromConfig (&config);
    PyConfig_Clear (&config);
    return PyStatus_Exception (st) ? -1 : 0;
}

//  Compile src and run it as module name (new reference, NULL on error).
static PyObject *
s_load_module (const char *name, const char *file, const char *src)
{
    PyObject *code = Py_CompileString (src, file, Py_file_input);
    PyObject *mod = code ? PyImport_ExecCodeModule (name, code) : NULL;
    Py_XDECREF (code);
    return mod;
}

//  cellvm_shell imports these (fast paths, the template's warm-up, what it publishes
//  with, the kernel without IPython, jedi's cache): loaded first, in order, they are
//  in sys.modules. False when one fails (the error is set).
static bool
s_load_parts (void)
{
    static const struct { const char *name, *file, *src; } parts [] = {
        { "cellvm_fast", "cellvm_fast.py", kn_pysrc_fast },
        { "cellvm_warm", "cellvm_warm.py", kn_pysrc_warm },
        { "cellvm_io", "cellvm_io.py", kn_pysrc_io },
        { "cellvm_plain", "cellvm_plain.py", kn_pysrc_plain },
        { "cellvm_jedi", "cellvm_jedi.py", kn_pysrc_jedi },
    };
    for (size_t i = 0; i < sizeof parts / sizeof parts [0]; i++) {
        PyObject *part = s_load_module (parts [i].name, parts [i].file, parts [i].src);
        if (!part)
            return false;
        Py_DECREF (part);
    }
    return true;
}

static int
s_load_shell (kn_py_t *self, char *err, size_t errlen)
{
    PyObject *mod = NULL, *cls = NULL;
    //  Jupyter kernels import from the working directory.
    if (PyRun_SimpleString ("import sys; sys.path.insert(0, '')") < 0)
        goto fail;
    //  Comms first: the shell's Kernel attaches to them.
    self->comm = s_load_module ("cellvm_comm", "cellvm_comm.py", kn_pysrc_comm);
    if (self->comm)
        self->debug = s_load_module ("cellvm_debug", "cellvm_debug.py", kn_pysrc_debug);
    if (self->comm && self->debug && s_load_parts ())
        mod = s_load_module ("cellvm_shell", "cellvm_shell.py", kn_pysrc_shell);
    if (mod)
        cls = PyObject_GetAttrString (mod, "Kernel");
    if (cls)
        self->shell = PyObject_CallNoArgs (cls);
    if (!self->shell)
        goto fail;
    Py_DECREF (cls);
    Py_DECREF (mod);
    return 0;
fail:
    s_error_text (err, errlen);
    Py_XDECREF (cls);
    Py_XDECREF (mod);
    Py_CLEAR (self->comm);
    Py_CLEAR (self->debug);
    return -1;
}

kn_py_t *
kn_py_new (kn_kernel_t *kernel, kn_capture_t *capture, char *err, size_t errlen)
{
    assert (kernel);
    s_capture = capture;
    kn_py_t *self = calloc (1, sizeof *self);
    if (!self)
        abort ();
    self->kernel = kernel;
    PyImport_AppendInittab ("_cellvm", s_init_module);
    if (s_start_python () < 0) {
        snprintf (err, errlen, "cannot initialise Python 3.11");
        free (self);
        return NULL;
    }
    PyObject *m = PyImport_ImportModule ("_cellvm");
    if (m) {
        ((s_modstate_t *) PyModule_GetState (m))->kernel = kernel;
        Py_DECREF (m);
    }
    if (m && capture && kn_pyout_install (capture) < 0) {
        s_error_text (err, errlen);
        free (self);
        return NULL;
    }
    if (!m || s_load_shell (self, err, errlen) < 0) {
        if (!m)
            s_error_text (err, errlen);
        free (self);
        return NULL;
    }
    self->saved = PyEval_SaveThread ();
    return self;
}

//  ---------------------------------------------------------------------------
//  The seam

//  A reply content for an exception that escaped cellvm_shell.
static json_t *
s_exception_reply (void)
{
    char text [1024];
    int interrupted = PyErr_ExceptionMatches (PyExc_KeyboardInterrupt);
    s_error_text (text, sizeof text);
    return json_pack ("{s:s, s:s, s:s, s:[s]}", "status", "error",
                      "ename", interrupted ? "KeyboardInterrupt" : "KernelError",
                      "evalue", text, "traceback", text);
}

//  Call Kernel.<method>(*args) and parse the JSON it returns. GIL held.
static json_t *
s_call_json (kn_py_t *self, const char *method, const char *type, const char *arg)
{
    PyObject *r = type ? PyObject_CallMethod (self->shell, method, "ss", type, arg)
                       : PyObject_CallMethod (self->shell, method, NULL);
    if (!r)
        return s_exception_reply ();
    Py_ssize_t len = 0;
    const char *text = PyUnicode_Check (r) ? PyUnicode_AsUTF8AndSize (r, &len) : NULL;
    json_t *out = text ? ch_jfast_loadb ((const uint8_t *) text, (size_t) len, 0, NULL) : NULL;
    Py_DECREF (r);
    if (!text)
        PyErr_Clear ();
    if (!json_is_object (out)) {
        json_decref (out);
        out = json_pack ("{s:s, s:s, s:s, s:[]}", "status", "error", "ename", "KernelError",
                         "evalue", "the Python side returned no JSON object", "traceback");
    }
    return out;
}

static json_t *
s_handle (void *ctx, const char *msg_type, const json_t *content)
{
    kn_py_t *self = ctx;
    char *text = ch_jfast_dump (content, JSON_COMPACT, NULL);
    if (!text)
        return NULL;
    PyEval_RestoreThread (self->saved);
    json_t *reply = s_call_json (self, "handle", msg_type, text);
    self->saved = PyEval_SaveThread ();
    free (text);
    return reply;
}

static json_t *
s_info (void *ctx)
{
    kn_py_t *self = ctx;
    PyEval_RestoreThread (self->saved);
    json_t *info = s_call_json (self, "info", NULL, NULL);
    self->saved = PyEval_SaveThread ();
    return info;
}

static void
s_discard_interrupt (void *ctx)
{
    kn_py_t *self = ctx;
    PyEval_RestoreThread (self->saved);
    if (PyErr_CheckSignals () < 0)
        PyErr_Clear ();
    self->saved = PyEval_SaveThread ();
}

//  The buffers of msg as memoryviews (ipykernel gives zmq frames' views).
static PyObject *
s_buffers (const ch_msg_t *msg)
{
    size_t n = ch_msg_nbuffers (msg);
    PyObject *list = PyList_New ((Py_ssize_t) n);
    for (size_t i = 0; list && i < n; i++) {
        size_t len = 0;
        const uint8_t *data = ch_msg_buffer (msg, i, &len);
        PyObject *b = PyBytes_FromStringAndSize ((const char *) data, (Py_ssize_t) len);
        PyObject *view = b ? PyMemoryView_FromObject (b) : NULL;
        Py_XDECREF (b);
        if (!view)
            Py_CLEAR (list);
        else
            PyList_SET_ITEM (list, (Py_ssize_t) i, view);
    }
    return list;
}

//  cellvm_comm.dispatch(msg_type, msg_json, buffers): the message's header,
//  parent_header, metadata and content as JSON text.
static void
s_comm (void *ctx, const ch_msg_t *msg)
{
    kn_py_t *self = ctx;
    json_t *m = json_pack ("{s:O, s:O, s:O, s:O}", "header", ch_msg_header (msg),
                           "parent_header", ch_msg_parent (msg), "metadata",
                           ch_msg_metadata (msg), "content", ch_msg_content (msg));
    char *text = m ? ch_jfast_dump (m, JSON_COMPACT, NULL) : NULL;
    json_decref (m);
    if (!text)
        return;
    PyEval_RestoreThread (self->saved);
    PyObject *bufs = s_buffers (msg);
    PyObject *r = bufs ? PyObject_CallMethod (self->comm, "dispatch", "ssO", ch_msg_type (msg),
                                              text, bufs) : NULL;
    if (!r) {
        char why [512];
        s_error_text (why, sizeof why);
        kn_log (CH_LOG_ERROR, "comm.fail", "msg_type=%s reason=\"%s\"", ch_msg_type (msg), why);
    }
    Py_XDECREF (r);
    Py_XDECREF (bufs);
    self->saved = PyEval_SaveThread ();
    free (text);
}

//  cellvm_debug.handle(header, content) on the kernel's debug thread: it
//  takes the GIL for itself (the main thread may be idle, in a cell, or
//  stopped at a breakpoint, where pydevd waits with the GIL released).
static json_t *
s_debug (void *ctx, const json_t *header, const json_t *content)
{
    kn_py_t *self = ctx;
    char *h = ch_jfast_dump (header, JSON_COMPACT, NULL);
    char *c = ch_jfast_dump (content, JSON_COMPACT | JSON_ENCODE_ANY, NULL);
    json_t *out = NULL;
    if (h && c) {
        PyGILState_STATE g = PyGILState_Ensure ();
        PyObject *r = PyObject_CallMethod (self->debug, "handle", "ss", h, c);
        Py_ssize_t len = 0;
        const char *text = r && PyUnicode_Check (r) ? PyUnicode_AsUTF8AndSize (r, &len) : NULL;
        if (text)
            out = ch_jfast_loadb ((const uint8_t *) text, (size_t) len, 0, NULL);
        else {
            char why [512];
            s_error_text (why, sizeof why);
            kn_log (CH_LOG_ERROR, "debug.fail", "reason=\"%s\"", why);
        }
        Py_XDECREF (r);
        PyGILState_Release (g);
    }
    free (h);
    free (c);
    return out;
}

void
kn_py_interp (kn_py_t *self, kn_interp_t *interp)
{
    assert (self && interp);
    interp->ctx = self;
    interp->handle = s_handle;
    interp->info = s_info;
    interp->discard_interrupt = s_discard_interrupt;
    interp->comm = s_comm;
    interp->debug = s_debug;
}
