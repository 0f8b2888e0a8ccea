"""cellvm_jedi - jedi's on-disk cache, read defensively and written atomically.

Jedi has parso keep every tree it parses as a pickle under settings.cache_directory
(~/.cache/jedi/CPython-311-33/ on the host, the user's: shared by every kernel, ipykernel and
editor of the user's). parso writes a pickle in place and, reading, takes only FileNotFoundError
for a miss: a file cut short (a kernel killed mid-write, two writers at once, or our own
completion budget's _Deadline landing inside pickle.dump) made every later completion that
reached it fail, in every session, until someone deleted the file.

install() replaces parso's two file functions (parso.cache looks them up at each call):
- a load for which anything unreadable is a miss (torn, garbage, a pickle of something else,
  an unreadable or uncreatable directory), and the bad file is removed so the fresh parse is
  saved again;
- a save to a temporary file renamed over the old one, so a reader sees the old pickle or the
  new, never part of one; a save that fails (a read-only HOME, a full disk) leaves the tree in
  memory and says nothing in a cell's output (parso warns on PermissionError).
A BaseException (our _Deadline, KeyboardInterrupt) still goes through: the budget still holds.
See docs/kernel.md "Jedi's cache".
"""
import gc
import os
import pickle
import tempfile

_PREFIX = ".cellvm-"        # a save's temporary file, in the cache's own directory


def install():
    """Harden parso's cache in this process (once); False when there is no parso."""
    try:
        from parso import cache
    except ImportError:
        return False
    if getattr(cache, "_cellvm_hardened", False):
        return True
    cache._load_from_file_system = load
    cache._save_to_file_system = save
    cache._remove_cache_and_update_lock = _quiet(cache._remove_cache_and_update_lock)
    cache._cellvm_hardened = True
    return True


def _unlink(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def _quiet(fn):
    """parso's clean-up after a save (a lock file, old files): an OSError is no failure."""
    def run(*args, **kw):
        try:
            return fn(*args, **kw)
        except OSError:
            return None
    return run


def _read(file):
    with open(file, "rb") as f:
        gc.disable()            # as parso: a big tree unpickles faster
        try:
            return pickle.load(f)
        finally:
            gc.enable()


def _is_item(item, cache):
    return isinstance(item, cache._NodeCacheItem) and all(
        hasattr(item, a) for a in ("node", "lines", "change_time"))


def load(hashed_grammar, path, p_time, cache_path=None):
    """parso.cache._load_from_file_system: the cached tree of path, or None (a miss)."""
    from parso import cache
    try:
        file = cache._get_hashed_path(hashed_grammar, path, cache_path=cache_path)
        if p_time > os.path.getmtime(file):
            return None         # outdated: parso parses again and saves over it
    except OSError:
        return None
    try:
        item = _read(file)
    except FileNotFoundError:
        return None
    except Exception:
        item = None
    if not _is_item(item, cache):
        _unlink(file)
        return None
    cache._set_cache_item(hashed_grammar, path, item)
    return item.node


def save(hashed_grammar, path, item, cache_path=None):
    """parso.cache._save_to_file_system, written whole or not at all."""
    from parso import cache
    tmp = None
    try:
        file = cache._get_hashed_path(hashed_grammar, path, cache_path=cache_path)
        fd, tmp = tempfile.mkstemp(prefix=_PREFIX, suffix=".tmp", dir=os.path.dirname(file))
        with os.fdopen(fd, "wb") as f:
            pickle.dump(item, f, pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, file)
        tmp = None
    except Exception:           # not saved; the tree stays in memory
        pass
    finally:
        if tmp is not None:
            _unlink(tmp)
