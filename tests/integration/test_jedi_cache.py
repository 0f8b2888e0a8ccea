"""A broken jedi cache never breaks completion (docs/kernel.md "Jedi's cache").

Jedi keeps parso's trees as pickles under ~/.cache/jedi/CPython-311-33/, shared by every kernel
and editor of the user's. parso reads a file cut short (a kernel killed mid-write, two writers,
or the kernel's own completion budget landing inside the write) as an error, and wrote in place:
from then on every completion that reached that file failed, in every session.

Here a HOME's cache is filled by jedi itself (/usr/bin/python3, the kernel's jedi and parso),
then spoiled: typing.pyi's pickle cut at 262,185 bytes (as found on a fresh machine, where every
completion of a plain name then answered `status: error`, `EOFError: Ran out of input`), every
pickle cut to half its length, or every one replaced by garbage. On cellvm-kernel run directly
and on cellvm-unsafe-local (where the kernel runs on the host with the user's HOME), `zi` must
complete to `zip` and `os.pa` to `os.path`, status ok; the spoiled pickle of a stub every
completion reads must not be left as planted once a cell has read what those completions read
(jedi unbounded); and no save of the kernel's may leave a partial file behind. The microvm guest's cache lives in the VM's own tmpfs HOME
(/tmp/home), shared with no other session; the same code reads and writes it.
"""
import hashlib
import json
import os
import pathlib
import pickle
import subprocess

import pytest

from kernel_driver import assert_execute_ok, new_kernel  # noqa: F401  (fixture)
from sessions import start_session

VERSION_DIR = "CPython-311-33"      # parso's _VERSION_TAG for Debian's Python 3.11 and parso 0.8
FILL = r'''
import jedi, json, sys
jedi.Interpreter("zi", [{}]).complete()
jedi.Interpreter("import os\nos.pa", [{}]).complete()
import jedi.inference.gradual.typeshed as t
print(json.dumps(str(t.TYPESHED_PATH)))
'''


def _fill(home):
    """Jedi's own cache in home: its directory, its pickles, those of builtins.pyi and
    typing.pyi (what every completion of a plain name reads)."""
    p = subprocess.run(["/usr/bin/python3", "-c", FILL], env=dict(os.environ, HOME=str(home)),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    typeshed = pathlib.Path(json.loads(p.stdout))
    cache = home / ".cache" / "jedi" / VERSION_DIR
    files = sorted(cache.glob("*.pkl"))
    assert len(files) >= 2, f"jedi cached nothing under {cache}"
    stubs = []
    for name in ("builtins.pyi", "typing.pyi"):
        digest = hashlib.sha256(str(typeshed / "stdlib" / "3" / name).encode()).hexdigest()
        found = [f for f in files if f.stem.endswith("-" + digest)]
        assert found, f"no pickle of {name} among {[f.name for f in files]}"
        stubs += found
    return cache, files, stubs


def _spoil(files, stubs, how):
    """Spoil the cache; what was planted, and the file the kernel must have mended."""
    if how == "typing-cut":     # as found on a fresh machine: typing.pyi's cut at 262,185 bytes
        typing = stubs[1]
        bad = typing.read_bytes()[:262185]
        typing.write_bytes(bad)
        return {typing: bad}, typing
    planted = {}
    for i, f in enumerate(files):
        data = f.read_bytes()
        bad = data[:len(data) // 2] if how == "halved" else b"\x80\x05" + os.urandom(64 + i)
        f.write_bytes(bad)
        planted[f] = bad
    return planted, stubs[0]


# A cell that reads what completing `zi` and `os.pa` reads, with no time budget (a
# complete_request's may run out, on a busy host, before jedi reaches typing.pyi).
READ_ALL = r'''
import jedi, os
from IPython.core.completer import provisionalcompleter
with provisionalcompleter():
    for code in ("zi", "os.pa"):
        [c.type for c in get_ipython().Completer.completions(code, len(code))]
        [c.type for c in jedi.Interpreter(code, [globals()]).complete()]
'''


def _completed(reply, code):
    assert reply.get("status") == "ok", reply
    return {code[:reply["cursor_start"]] + m + code[reply["cursor_end"]:]
            for m in reply["matches"]}


def _check_cache(cache, planted, mended):
    """What the kernel left: the planted bytes of `mended` (a file every completion reads)
    gone, no temporary file, and every pickle it wrote readable."""
    assert not mended.exists() or mended.read_bytes() != planted[mended], \
        f"the planted {mended.name} is still there: the kernel never read it"
    assert not list(cache.glob(".cellvm-*")), list(cache.iterdir())
    for f in cache.glob("*.pkl"):
        if f not in planted or f.read_bytes() != planted[f]:
            pickle.loads(f.read_bytes())


@pytest.fixture(params=["typing-cut", "halved", "garbage"])
def spoiled_home(request, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    cache, files, stubs = _fill(home)
    planted, mended = _spoil(files, stubs, request.param)
    return home, cache, planted, mended


def test_kernel_completes_over_a_spoiled_cache(new_kernel, spoiled_home):
    home, cache, planted, mended = spoiled_home
    k = new_kernel(env=dict(os.environ, HOME=str(home)))
    r = k.roundtrip("shell", "complete_request", {"code": "zi", "cursor_pos": 2})
    assert "zip" in _completed(r.reply.content, "zi"), r.reply.content
    assert_execute_ok(k.execute("import os"))
    r = k.roundtrip("shell", "complete_request", {"code": "os.pa", "cursor_pos": 5})
    assert "os.path" in _completed(r.reply.content, "os.pa"), r.reply.content
    assert_execute_ok(k.execute(READ_ALL))
    _check_cache(cache, planted, mended)


def test_unsafe_local_completes_over_a_spoiled_cache(spoiled_home):
    home, cache, planted, mended = spoiled_home
    s = start_session("cellvm-unsafe-local", env={"HOME": str(home)})
    try:
        for code, want, setup in (("zi", "zip", None), ("os.pa", "os.path", "import os")):
            if setup:
                assert s.run(setup).status == "ok"
            msg_id = s.kc.complete(code, len(code))
            reply = s.kc.get_shell_msg(timeout=30)
            while reply["parent_header"].get("msg_id") != msg_id:     # kernel_info's, late
                reply = s.kc.get_shell_msg(timeout=30)
            assert want in _completed(reply["content"], code), reply["content"]
        r = s.run(READ_ALL)
        assert r.status == "ok", r.describe()
    finally:
        s.close()
    _check_cache(cache, planted, mended)


# ------------------------------------------------------------------ cellvm_jedi's own functions
# (run here, in /usr/bin/python3 with the kernel's parso, without the kernel)

@pytest.fixture
def cj():
    import importlib.util
    path = pathlib.Path(__file__).parents[2] / "kernel" / "py" / "cellvm_jedi.py"
    spec = importlib.util.spec_from_file_location("cellvm_jedi_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _parsed(tmp_path):
    import parso
    from parso import cache
    src = tmp_path / "m.py"
    src.write_text("def f(x):\n    return x\n")
    grammar = parso.load_grammar()
    module = grammar.parse(path=str(src), cache=False)
    item = cache._NodeCacheItem(module, src.read_text().splitlines(True), src.stat().st_mtime)
    return grammar._hashed, src, item, tmp_path / "cache"


def test_a_save_cut_short_leaves_the_old_pickle_whole(cj, tmp_path, monkeypatch):
    from parso import cache
    hashed, src, item, cache_path = _parsed(tmp_path)
    cj.save(hashed, src, item, cache_path=cache_path)
    file = pathlib.Path(cache._get_hashed_path(hashed, src, cache_path=cache_path))
    whole = file.read_bytes()
    real_dump = pickle.dump

    def dump_then_deadline(obj, f, protocol=None):     # a budget's _Deadline mid-write
        data = pickle.dumps(obj, protocol)
        f.write(data[:len(data) // 2])
        raise KeyboardInterrupt
    monkeypatch.setattr(cj.pickle, "dump", dump_then_deadline)
    with pytest.raises(KeyboardInterrupt):
        cj.save(hashed, src, item, cache_path=cache_path)
    monkeypatch.setattr(cj.pickle, "dump", real_dump)
    assert file.read_bytes() == whole
    assert sorted(p.name for p in file.parent.iterdir()) == [file.name]
    assert cj.load(hashed, src, src.stat().st_mtime, cache_path=cache_path) is not None


def test_a_bad_pickle_is_a_miss_and_goes(cj, tmp_path):
    from parso import cache
    hashed, src, item, cache_path = _parsed(tmp_path)
    file = pathlib.Path(cache._get_hashed_path(hashed, src, cache_path=cache_path))
    for bad in (b"", b"\x80\x05garbage", pickle.dumps({"not": "a tree"}),
                pickle.dumps(item)[:-7]):
        file.write_bytes(bad)
        assert cj.load(hashed, src, src.stat().st_mtime, cache_path=cache_path) is None
        assert not file.exists(), bad[:20]


def test_an_unwritable_cache_is_no_error(cj, tmp_path):
    hashed, src, item, _ = _parsed(tmp_path)
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    cj.save(hashed, src, item, cache_path=blocked)     # makedirs fails: NotADirectoryError
    assert cj.load(hashed, src, src.stat().st_mtime, cache_path=blocked) is None
