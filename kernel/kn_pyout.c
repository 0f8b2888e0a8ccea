/*  kn_pyout - sys.stdout, sys.stderr and print() for the embedded Python. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "kn_pyout.h"
#include "kn_capture.h"

#include <assert.h>
#include <stdbool.h>
#include <string.h>
#include <sys/uio.h>

//  The process's capture (one interpreter, one capture): the stream
//  objects write into it. Set once, by kn_pyout_install.
static kn_capture_t *s_capture;

//  ---------------------------------------------------------------------------
//  sys.stdout and sys.stderr: text buffered in-process (kn_capture), no
//  system call per write. A file-like object as TextIOWrapper is, with a
//  binary .buffer; flush() sends at once.

typedef struct {
    PyObject_HEAD
    int stream;                 //  KN_STDOUT or KN_STDERR
    PyObject *buffer;           //  the binary side (s_outbuffer_t)
} s_outstream_t;

typedef struct {
    PyObject_HEAD
    int stream;
} s_outbuffer_t;

static PyTypeObject s_outstream_type;
static PyTypeObject s_outbuffer_type;

//  Queue (or, when large, send) bytes. The GIL is held; released to wait.
static void
s_put (int stream, const char *data, Py_ssize_t len)
{
    if (len <= 0)
        return;
    if ((size_t) len >= KN_CAPTURE_DIRECT) {
        //  data stays valid: the caller's object is alive and immutable.
        Py_BEGIN_ALLOW_THREADS
        kn_capture_write_now (s_capture, stream, data, (size_t) len);
        Py_END_ALLOW_THREADS
        return;
    }
    if (kn_capture_write (s_capture, stream, data, (size_t) len)) {
        Py_BEGIN_ALLOW_THREADS
        kn_capture_flush (s_capture);
        Py_END_ALLOW_THREADS
    }
}

//  Queue str on a stream. Lone surrogates as TextIOWrapper with
//  errors="surrogateescape" has them: escaped bytes go as they are (and come
//  out as U+FFFD), other surrogates raise. -1 with an exception set.
static int
s_put_str (int stream, PyObject *str)
{
    Py_ssize_t len;
    const char *utf8 = PyUnicode_AsUTF8AndSize (str, &len);
    if (utf8) {
        s_put (stream, utf8, len);
        return 0;
    }
    if (!PyErr_ExceptionMatches (PyExc_UnicodeEncodeError))
        return -1;
    PyErr_Clear ();
    PyObject *b = PyUnicode_AsEncodedString (str, "utf-8", "surrogateescape");
    if (!b)
        return -1;
    s_put (stream, PyBytes_AS_STRING (b), PyBytes_GET_SIZE (b));
    Py_DECREF (b);
    return 0;
}

static PyObject *
s_out_write (PyObject *op, PyObject *arg)
{
    s_outstream_t *self = (s_outstream_t *) op;
    if (!PyUnicode_Check (arg))
        return PyErr_Format (PyExc_TypeError, "write() argument must be str, not %.100s",
                             Py_TYPE (arg)->tp_name);
    if (s_put_str (self->stream, arg) < 0)
        return NULL;
    return PyLong_FromSsize_t (PyUnicode_GET_LENGTH (arg));
}

static PyObject *
s_out_writelines (PyObject *op, PyObject *lines)
{
    PyObject *it = PyObject_GetIter (lines);
    if (!it)
        return NULL;
    PyObject *line;
    while ((line = PyIter_Next (it))) {
        PyObject *r = s_out_write (op, line);
        Py_DECREF (line);
        if (!r) {
            Py_DECREF (it);
            return NULL;
        }
        Py_DECREF (r);
    }
    Py_DECREF (it);
    if (PyErr_Occurred ())
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
s_out_flush (PyObject *op, PyObject *args)
{
    (void) op;
    (void) args;
    Py_BEGIN_ALLOW_THREADS
    kn_capture_flush (s_capture);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

//  fileno() is given out so that someone writes to the fd: what they write
//  goes after the text written so far, and before the text written next.
static int
s_stream_of (PyObject *op)
{
    return PyObject_TypeCheck (op, &s_outbuffer_type) ? ((s_outbuffer_t *) op)->stream
                                                      : ((s_outstream_t *) op)->stream;
}

static PyObject *
s_out_fileno (PyObject *op, PyObject *args)
{
    (void) args;
    kn_capture_fence (s_capture);
    return PyLong_FromLong (kn_capture_fd (s_capture, s_stream_of (op)));
}

static PyObject *
s_out_false (PyObject *op, PyObject *args)
{
    (void) op;
    (void) args;
    Py_RETURN_FALSE;
}

static PyObject *
s_out_true (PyObject *op, PyObject *args)
{
    (void) op;
    (void) args;
    Py_RETURN_TRUE;
}

//  close() and reconfigure() are accepted and change nothing: the kernel's
//  streams stay open and UTF-8.
static PyObject *
s_out_ignore (PyObject *op, PyObject *args, PyObject *kwargs)
{
    (void) op;
    (void) args;
    (void) kwargs;
    Py_RETURN_NONE;
}

static PyObject *
s_out_enter (PyObject *op, PyObject *args)
{
    (void) args;
    return Py_NewRef (op);
}

static PyObject *
s_out_exit (PyObject *op, PyObject *args)
{
    (void) args;
    return s_out_flush (op, NULL);
}

static PyMethodDef s_outstream_methods [] = {
    { "write", s_out_write, METH_O, "write(s): queue text; returns len(s)" },
    { "writelines", s_out_writelines, METH_O, "write each of lines" },
    { "flush", s_out_flush, METH_NOARGS, "send everything written so far, now" },
    { "fileno", s_out_fileno, METH_NOARGS, "the captured file descriptor (1 or 2)" },
    { "isatty", s_out_false, METH_NOARGS, NULL },
    { "readable", s_out_false, METH_NOARGS, NULL },
    { "seekable", s_out_false, METH_NOARGS, NULL },
    { "writable", s_out_true, METH_NOARGS, NULL },
    { "close", (PyCFunction) (void (*) (void)) s_out_ignore, METH_VARARGS | METH_KEYWORDS,
      "does nothing: the kernel's streams stay open" },
    { "reconfigure", (PyCFunction) (void (*) (void)) s_out_ignore,
      METH_VARARGS | METH_KEYWORDS, "accepted; the streams stay UTF-8 and unbuffered to the "
      "caller" },
    { "__enter__", s_out_enter, METH_NOARGS, NULL },
    { "__exit__", s_out_exit, METH_VARARGS, NULL },
    { NULL, NULL, 0, NULL }
};

static PyObject *
s_out_get_name (PyObject *op, void *closure)
{
    (void) closure;
    return PyUnicode_FromString (s_stream_of (op) == KN_STDOUT ? "<stdout>" : "<stderr>");
}

static PyObject *
s_out_get_const (PyObject *op, void *closure)
{
    (void) op;
    const char *v = closure;
    if (!v)
        Py_RETURN_NONE;
    if (!strcmp (v, "0"))
        Py_RETURN_FALSE;
    return PyUnicode_FromString (v);
}

static PyObject *
s_out_get_buffer (PyObject *op, void *closure)
{
    (void) closure;
    return Py_NewRef (((s_outstream_t *) op)->buffer);
}

static PyGetSetDef s_outstream_getset [] = {
    { "name", s_out_get_name, NULL, NULL, NULL },
    { "encoding", s_out_get_const, NULL, NULL, "utf-8" },
    { "errors", s_out_get_const, NULL, NULL, "surrogateescape" },
    { "mode", s_out_get_const, NULL, NULL, "w" },
    { "newlines", s_out_get_const, NULL, NULL, NULL },
    { "closed", s_out_get_const, NULL, NULL, "0" },
    { "line_buffering", s_out_get_const, NULL, NULL, "0" },
    { "write_through", s_out_get_const, NULL, NULL, "0" },
    { "buffer", s_out_get_buffer, NULL, NULL, NULL },
    { NULL, NULL, NULL, NULL, NULL }
};

static PyObject *
s_out_repr (PyObject *op)
{
    return PyUnicode_FromFormat ("<_cellvm.OutStream name='%s' encoding='utf-8'>",
                                 s_stream_of (op) == KN_STDOUT ? "<stdout>" : "<stderr>");
}

static void
s_outstream_dealloc (PyObject *op)
{
    Py_XDECREF (((s_outstream_t *) op)->buffer);
    Py_TYPE (op)->tp_free (op);
}

static PyTypeObject s_outstream_type = {
    PyVarObject_HEAD_INIT (NULL, 0)
    .tp_name = "_cellvm.OutStream",
    .tp_basicsize = sizeof (s_outstream_t),
    .tp_dealloc = s_outstream_dealloc,
    .tp_repr = s_out_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The kernel's sys.stdout / sys.stderr: text is queued in-process and sent "
              "as stream messages within 50 ms; flush() sends at once.",
    .tp_methods = s_outstream_methods,
    .tp_getset = s_outstream_getset,
};

static PyObject *
s_buf_write (PyObject *op, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer (arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    //  The bytes are copied (or sent) before the view is released.
    s_put (((s_outbuffer_t *) op)->stream, view.buf, view.len);
    Py_ssize_t n = view.len;
    PyBuffer_Release (&view);
    return PyLong_FromSsize_t (n);
}

static PyMethodDef s_outbuffer_methods [] = {
    { "write", s_buf_write, METH_O, "write(b): queue bytes; returns len(b)" },
    { "flush", s_out_flush, METH_NOARGS, "send everything written so far, now" },
    { "fileno", s_out_fileno, METH_NOARGS, "the captured file descriptor (1 or 2)" },
    { "isatty", s_out_false, METH_NOARGS, NULL },
    { "readable", s_out_false, METH_NOARGS, NULL },
    { "seekable", s_out_false, METH_NOARGS, NULL },
    { "writable", s_out_true, METH_NOARGS, NULL },
    { "close", (PyCFunction) (void (*) (void)) s_out_ignore, METH_VARARGS | METH_KEYWORDS,
      NULL },
    { NULL, NULL, 0, NULL }
};

static PyGetSetDef s_outbuffer_getset [] = {
    { "name", s_out_get_name, NULL, NULL, NULL },
    { "mode", s_out_get_const, NULL, NULL, "wb" },
    { "closed", s_out_get_const, NULL, NULL, "0" },
    { NULL, NULL, NULL, NULL, NULL }
};

static PyTypeObject s_outbuffer_type = {
    PyVarObject_HEAD_INIT (NULL, 0)
    .tp_name = "_cellvm.OutBuffer",
    .tp_basicsize = sizeof (s_outbuffer_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The binary side of the kernel's sys.stdout / sys.stderr.",
    .tp_methods = s_outbuffer_methods,
    .tp_getset = s_outbuffer_getset,
};

//  ---------------------------------------------------------------------------
//  print(): the builtin, with a short way for the kernel's own streams. The
//  pieces of one print (values, separators, end) are queued together, in one
//  go, rather than as a write() call each: cheaper, and fd-level output read
//  meanwhile never lands inside the line. Anything unusual (another file, a
//  sep or end that is not a str, an unknown keyword) goes to the original.

static PyObject *s_builtin_print;     //  the original print
static PyObject *s_sysdict;           //  sys.__dict__ (borrowed: sys lives as long as we do)
static PyObject *s_key_stdout;        //  "stdout", interned

#define S_PIECES 16

typedef struct {
    struct iovec iov [S_PIECES];
    PyObject *ref [S_PIECES];       //  what keeps each piece alive (NULL: static text)
    char digits [S_PIECES][24];     //  the text of an int piece
    int n;
    size_t len;
} s_pieces_t;

//  Queue the pieces collected so far as one write; forget them.
static void
s_pieces_put (s_pieces_t *p, int stream)
{
    if (p->len >= KN_CAPTURE_DIRECT) {
        for (int i = 0; i < p->n; i++)
            s_put (stream, p->iov [i].iov_base, (Py_ssize_t) p->iov [i].iov_len);
    }
    else if (p->n && kn_capture_writev (s_capture, stream, p->iov, p->n)) {
        Py_BEGIN_ALLOW_THREADS
        kn_capture_flush (s_capture);
        Py_END_ALLOW_THREADS
    }
    for (int i = 0; i < p->n; i++)
        Py_XDECREF (p->ref [i]);
    p->n = 0;
    p->len = 0;
}

//  Add a piece that needs no reference (static text).
static void
s_pieces_add_static (s_pieces_t *p, int stream, const char *text, size_t len)
{
    if (p->n == S_PIECES)
        s_pieces_put (p, stream);
    p->iov [p->n] = (struct iovec) { (void *) text, len };
    p->ref [p->n++] = NULL;
    p->len += len;
}

//  Add str (a new reference, taken) as a piece. -1 with an exception set.
static int
s_pieces_add (s_pieces_t *p, int stream, PyObject *str)
{
    if (!str)
        return -1;
    Py_ssize_t len;
    const char *utf8 = PyUnicode_AsUTF8AndSize (str, &len);
    if (!utf8) {
        //  Lone surrogates: as the stream's write() has them.
        PyErr_Clear ();
        s_pieces_put (p, stream);
        int rc = s_put_str (stream, str);
        Py_DECREF (str);
        return rc;
    }
    if (p->n == S_PIECES)
        s_pieces_put (p, stream);
    p->iov [p->n] = (struct iovec) { (void *) utf8, (size_t) len };
    p->ref [p->n++] = str;
    p->len += (size_t) len;
    return 0;
}

//  str() of an exact int that fits a long long, into out (24 bytes), made
//  without a str object: int.__str__ takes several us under TCG, most of a
//  print(i). 0 when it does not fit (then str() it is).
static size_t
s_int_digits (PyObject *o, char *out)
{
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow (o, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred ())) {
        PyErr_Clear ();
        return 0;
    }
    char tmp [24];
    size_t n = 0, k = 0;
    unsigned long long u = v < 0 ? 0ull - (unsigned long long) v : (unsigned long long) v;
    do {
        tmp [n++] = (char) ('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        out [k++] = '-';
    while (n)
        out [k++] = tmp [--n];
    return k;
}

//  Add an exact int as a piece, its digits kept in p. False when it is too
//  large for that (nothing added).
static bool
s_pieces_add_int (s_pieces_t *p, int stream, PyObject *o)
{
    if (p->n == S_PIECES)
        s_pieces_put (p, stream);
    size_t k = s_int_digits (o, p->digits [p->n]);
    if (k == 0)
        return false;
    p->iov [p->n] = (struct iovec) { p->digits [p->n], k };
    p->ref [p->n++] = NULL;
    p->len += k;
    return true;
}

//  str() of these runs no Python code: no output can come from it.
static bool
s_str_is_quiet (PyObject *o)
{
    return PyUnicode_CheckExact (o) || PyLong_CheckExact (o) || PyFloat_CheckExact (o)
        || PyBool_Check (o) || o == Py_None;
}

//  print()'s keywords, from the vectorcall's kwnames.
typedef struct {
    PyObject *sep, *end, *file, *flush;
} s_print_kw_t;

//  Pick out the keywords; -1 for one print() has not (the original then
//  raises as it should).
static int
s_print_kwargs (PyObject *const *values, PyObject *kwnames, s_print_kw_t *kw)
{
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE (kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *k = PyTuple_GET_ITEM (kwnames, i), *v = values [i];
        if (PyUnicode_CompareWithASCIIString (k, "sep") == 0)
            kw->sep = v;
        else if (PyUnicode_CompareWithASCIIString (k, "end") == 0)
            kw->end = v;
        else if (PyUnicode_CompareWithASCIIString (k, "file") == 0)
            kw->file = v;
        else if (PyUnicode_CompareWithASCIIString (k, "flush") == 0)
            kw->flush = v;
        else
            return -1;
    }
    return 0;
}

//  Queue the values, separators and end of one print on stream, in as few
//  writes as the values' __str__ allow. -1 with an exception set.
static int
s_print_pieces (int stream, PyObject *const *args, Py_ssize_t nargs, PyObject *sep,
                PyObject *end)
{
    s_pieces_t p;               //  not zeroed: ~800 bytes per print() under TCG
    p.n = 0;
    p.len = 0;
    int rc = 0;
    for (Py_ssize_t i = 0; i < nargs && rc == 0; i++) {
        if (i > 0 && sep)
            rc = s_pieces_add (&p, stream, Py_NewRef (sep));
        else if (i > 0)
            s_pieces_add_static (&p, stream, " ", 1);
        if (rc == 0 && !s_str_is_quiet (args [i]))
            s_pieces_put (&p, stream);      //  what came before goes before its output
        if (rc == 0 && PyLong_CheckExact (args [i]) && s_pieces_add_int (&p, stream, args [i]))
            continue;
        PyObject *str = rc == 0 ? PyObject_Str (args [i]) : NULL;
        rc = str ? s_pieces_add (&p, stream, str) : -1;
    }
    if (rc == 0 && end)
        rc = s_pieces_add (&p, stream, Py_NewRef (end));
    else if (rc == 0)
        s_pieces_add_static (&p, stream, "\n", 1);
    s_pieces_put (&p, stream);
    return rc;
}

static PyObject *
s_print (PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    (void) module;
    s_print_kw_t kw = { NULL, NULL, NULL, NULL };
    if (s_print_kwargs (args + nargs, kwnames, &kw) < 0)
        goto original;
    PyObject *file = kw.file, *sep = kw.sep, *end = kw.end;
    if (!file || file == Py_None)
        file = PyDict_GetItemWithError (s_sysdict, s_key_stdout);
    if (!s_capture || !file || !Py_IS_TYPE (file, &s_outstream_type))
        goto original;
    sep = sep == Py_None ? NULL : sep;
    end = end == Py_None ? NULL : end;
    if ((sep && !PyUnicode_CheckExact (sep)) || (end && !PyUnicode_CheckExact (end)))
        goto original;
    int want_flush = kw.flush ? PyObject_IsTrue (kw.flush) : 0;
    if (want_flush < 0)
        return NULL;
    Py_INCREF (file);           //  a __str__ may rebind sys.stdout meanwhile
    int rc = s_print_pieces (((s_outstream_t *) file)->stream, args, nargs, sep, end);
    if (rc == 0 && want_flush) {
        Py_BEGIN_ALLOW_THREADS
        kn_capture_flush (s_capture);
        Py_END_ALLOW_THREADS
    }
    Py_DECREF (file);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
original:
    return PyObject_Vectorcall (s_builtin_print, args, (size_t) nargs, kwnames);
}

static PyMethodDef s_print_def = {
    "print", (PyCFunction) (void (*) (void)) s_print, METH_FASTCALL | METH_KEYWORDS,
    "print($module, /, *args, sep=' ', end='\\n', file=None, flush=False)\n--\n\n"
    "Prints the values to a stream, or to sys.stdout by default.\n\n"
    "  sep\n    string inserted between values, default a space.\n"
    "  end\n    string appended after the last value, default a newline.\n"
    "  file\n    a file-like object (stream); defaults to the current sys.stdout.\n"
    "  flush\n    whether to forcibly flush the stream."
};

//  builtins.print becomes s_print (the original is kept for other files).
static int
s_install_print (void)
{
    PyObject *sys = PyImport_ImportModule ("sys");
    if (!sys)
        return -1;
    s_sysdict = PyModule_GetDict (sys);
    Py_DECREF (sys);
    s_key_stdout = PyUnicode_InternFromString ("stdout");
    PyObject *builtins = PyImport_ImportModule ("builtins");
    if (!builtins || !s_key_stdout)
        return -1;
    s_builtin_print = PyObject_GetAttrString (builtins, "print");
    PyObject *name = PyUnicode_FromString ("builtins");
    PyObject *fn = s_builtin_print && name ? PyCFunction_NewEx (&s_print_def, builtins, name)
                                           : NULL;
    int rc = fn ? PyObject_SetAttrString (builtins, "print", fn) : -1;
    Py_XDECREF (fn);
    Py_XDECREF (name);
    Py_DECREF (builtins);
    return rc;
}

int
kn_pyout_add_types (PyObject *module)
{
    if (PyType_Ready (&s_outstream_type) < 0 || PyType_Ready (&s_outbuffer_type) < 0
    ||  PyModule_AddObjectRef (module, "OutStream", (PyObject *) &s_outstream_type) < 0
    ||  PyModule_AddObjectRef (module, "OutBuffer", (PyObject *) &s_outbuffer_type) < 0)
        return -1;
    return 0;
}

int
kn_pyout_install (kn_capture_t *capture)
{
    assert (capture);
    s_capture = capture;
    if (PyType_Ready (&s_outstream_type) < 0 || PyType_Ready (&s_outbuffer_type) < 0)
        return -1;
    const char *names [2] = { "stdout", "stderr" };
    for (int i = 0; i < 2; i++) {
        s_outbuffer_t *b = PyObject_New (s_outbuffer_t, &s_outbuffer_type);
        s_outstream_t *o = b ? PyObject_New (s_outstream_t, &s_outstream_type) : NULL;
        if (!o) {
            Py_XDECREF (b);
            return -1;
        }
        b->stream = o->stream = i;
        o->buffer = (PyObject *) b;
        int rc = PySys_SetObject (names [i], (PyObject *) o);
        Py_DECREF (o);
        if (rc < 0)
            return -1;
    }
    return s_install_print ();
}
