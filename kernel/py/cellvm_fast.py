"""cellvm_fast - cheaper ways through IPython for the cells users run most (docs/kernel.md
"A cheaper cell").

Under TCG a trivial cell's Python costs ~35x what it costs natively, so each of these skips
work whose result is known in advance, and falls back to IPython's own code for anything
else. Each gives IPython's result byte for byte wherever it answers; tests/integration/
test_fastpath.py checks each against IPython itself (and fails when one deviates).
"""
import re
import sys


def _plain_format_calls():
    """IPython's formatters' __call__ are wrapped by `decorator`, which binds every call's
    arguments to the signature (inspect.Signature.bind): 12 calls per displayed value, ~8 ms
    of a `1` cell under TCG. The same wrapper (IPython's catch_format_error, its own code
    object) without the binding: the same results, errors and tracebacks."""
    from IPython.core import formatters
    caller = getattr(formatters.catch_format_error, "__wrapped__", None)
    if caller is None:
        return
    for cls in list(vars(formatters).values()):
        fn = cls.__dict__.get("__call__") if isinstance(cls, type) else None
        inner = getattr(fn, "__wrapped__", None)
        if inner is None or getattr(fn, "_cellvm_plain", False):
            continue

        def call(self, *args, _inner=inner, **kwargs):
            if not args and "obj" in kwargs:     # what the binding did: obj is args[0]
                args = (kwargs.pop("obj"),)
            return caller(_inner, self, *args, **kwargs)
        call.__name__, call.__qualname__, call.__doc__ = "__call__", fn.__qualname__, fn.__doc__
        call.__wrapped__, call._cellvm_plain = inner, True
        cls.__call__ = call


#  Where IPython's static input transformations (prompts, indentation, magics, `!`,
#  `?`, autocall escapes) could apply; else they give the cell back with a newline.
_MAYBE_SPECIAL = None


def _plain_transforms(manager):
    """transform_cell without tokenizing a cell none of them could change: ~3 ms of every
    cell under TCG. The same output on every cell (tests/integration/test_fastpath.py)."""
    global _MAYBE_SPECIAL
    #  splitlines() also ends a line at \r, \v, \f, \x1c-\x1e, \x85, U+2028/9: slow path.
    _MAYBE_SPECIAL = re.compile(r"[%!?\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]"
                                r"|^[ \t]*([,;/]|>>>|\.\.\.|In \[)", re.M)
    slow = manager.transform_cell

    def transform_cell(cell):
        if cell and not cell[0].isspace() and not _MAYBE_SPECIAL.search(cell):
            return cell if cell.endswith("\n") else cell + "\n"
        return slow(cell)
    manager.transform_cell = transform_cell


# ----------------------------------------------------------------------------
#  should_run_async: IPython compiles every cell once more only to learn whether it has a
#  top-level await (CO_COROUTINE): ~0.6 ms under TCG. Only `await`, `async for`, `async
#  with` and async comprehensions set that flag, so a cell without either word cannot.
#  The compile's own errors decide too: SyntaxError and MemoryError mean False, anything
#  else escapes run_cell. The fast path answers only where compile cannot raise those:
#  no NUL, no lone surrogate (ValueError, UnicodeEncodeError), and too short to nest
#  deep enough for a RecursionError (thousands of levels at the default limit).

PLAIN_ASYNC_MAX = 500                               # characters
_ASYNC_UNSAFE = re.compile(r"await|async|[\x00\ud800-\udfff]")


def plain_async_cell(cell):
    """True when IPython's _should_be_async(cell) is surely False and raises nothing."""
    return (isinstance(cell, str) and len(cell) <= PLAIN_ASYNC_MAX
            and sys.getrecursionlimit() >= 1000 and not _ASYNC_UNSAFE.search(cell))


def plain_should_run_async(shell):
    """shell.should_run_async that answers False at once for a plain cell."""
    slow = shell.should_run_async

    def should_run_async(raw_cell, *, transformed_cell=None, preprocessing_exc_tuple=None):
        if (preprocessing_exc_tuple is None and transformed_cell is not None
                and plain_async_cell(transformed_cell)):
            return False
        return slow(raw_cell, transformed_cell=transformed_cell,
                    preprocessing_exc_tuple=preprocessing_exc_tuple)
    shell.should_run_async = should_run_async


# ----------------------------------------------------------------------------
#  display_formatter.format: for a value of a builtin type (`1`, a str, a list), IPython
#  asks each of its 12 formatters in turn; all but text/plain look up a printer by type
#  (walking the MRO and the deferred printers) and a _repr_*_ method, and answer None.
#  Builtin types cannot gain methods, so unless a printer was registered for the type,
#  its bases or that very object, or a formatter was replaced or looks for another
#  method name, the bundle is text/plain alone: only that formatter is asked.

_BUILTIN_TYPES = (int, float, complex, bool, str, bytes, bytearray, list, tuple, dict, set,
                  frozenset, range, type(None), type(Ellipsis), type(NotImplemented))
#  type -> (its MRO, the (module, name) key of each, the names of its attributes)
_TYPE_INFO = {t: (t.__mro__, tuple((c.__module__, c.__name__) for c in t.__mro__),
                  frozenset(dir(t))) for t in _BUILTIN_TYPES}


def _known_calls():
    """IPython's formatter classes -> their __call__ as now installed."""
    from IPython.core import formatters
    return {cls: cls.__call__ for cls in vars(formatters).values()
            if isinstance(cls, type) and issubclass(cls, formatters.BaseFormatter)}


def _declines(f, obj, info, known):
    """True when formatter f surely answers None for obj (of a type in _TYPE_INFO)."""
    if known.get(type(f)) is not type(f).__call__:
        return False
    vals = f._trait_values      # the traits' own dicts, as their __get__ would return
    try:
        singles, types_, deferred = (vals["singleton_printers"], vals["type_printers"],
                                     vals["deferred_printers"])
        method = vals["print_method"]
    except KeyError:            # a trait never read yet: let IPython do it
        return False
    mro, keys, attrs = info
    if id(obj) in singles or method in attrs:
        return False
    if types_ and any(c in types_ for c in mro):
        return False
    return not (deferred and any(k in deferred for k in keys))


def plain_format(display_formatter):
    """display_formatter.format with the shortcut above; IPython's format otherwise."""
    slow = display_formatter.format
    known = _known_calls()

    def format(obj, include=None, exclude=None):
        info = _TYPE_INFO.get(type(obj))
        if info is None or include is not None or exclude is not None:
            return slow(obj, include=include, exclude=exclude)
        vals = display_formatter._trait_values
        formatters = vals.get("formatters")
        plain = formatters.get("text/plain") if formatters else None
        others = [vals.get("ipython_display_formatter"), vals.get("mimebundle_formatter")]
        others += [f for k, f in formatters.items() if k != "text/plain"] if plain else []
        if plain is None or not all(f is not None and _declines(f, obj, info, known)
                                    for f in others):
            return slow(obj, include=include, exclude=exclude)
        format_dict, md_dict = {}, {}
        data, md = plain(obj), None
        if isinstance(data, tuple) and len(data) == 2:
            data, md = data
        if data is not None:
            format_dict["text/plain"] = data
        if md is not None:
            md_dict["text/plain"] = md
        return format_dict, md_dict
    display_formatter.format = format
