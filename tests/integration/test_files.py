"""Files in and out of a session (docs/files.md), through both backends.

- cellvm_put_request writes into the session's workspace and a cell reads the bytes back;
- cellvm_get_request returns exact bytes, with size and sha256;
- paths outside the workspace, and through symlinks a cell planted, are refused;
- output_files of a cell are copied under --artifacts-dir (host_path), and a file over
  --artifact-max-file is marked skipped and not copied;
- the workspace outlives a kernel death.

The workspace is /workspace in a VM, and with unsafe-local a private directory of the gateway's:
cells find it as the parent of CELLVM_OUTDIR (docs/kernel.md), which is /workspace/out in a VM.

One kernel per backend serves the whole module (a cold microVM costs ~14 s under TCG), a
sessions.Session of the build's kernelspec plus --artifacts-dir (a tmp dir) and
--artifact-max-file. Everything it started is killed by pid at the end. A missing kernelspec or
guest image FAILS these tests.
"""
import ast
import hashlib
import json
import os
import pathlib
import posixpath
import stat
import uuid

import pytest

from sessions import BACKENDS, Session

MAX_FILE = 64 * 1024            # --artifact-max-file for these sessions
CAP_REASON = "larger than the per-file artifact cap"


def sha(data):
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module", params=list(BACKENDS))
def session(request, tmp_path_factory):
    """(kernel, artifacts dir) for one backend, shared by this module's tests."""
    backend = request.param
    artifacts = tmp_path_factory.mktemp(f"files-{backend}") / "artifacts"
    k = Session(BACKENDS[backend], name=f"files-{backend}",
                extra_args=["--artifacts-dir", artifacts, "--artifact-max-file", MAX_FILE])
    try:
        k.start()
        k.ws = probe(k, "import json, os\n"
                        "json.dumps(os.path.dirname(os.environ['CELLVM_OUTDIR']))")
        yield k, artifacts
    finally:
        k.close()


def put(k, path, data=None):
    return k.control("cellvm_put_request", {"path": path},
                     buffers=[data] if data is not None else None)


def get(k, path):
    return k.control("cellvm_get_request", {"path": path})


def probe(k, code):
    """Run a cell that ends with an expression whose value is JSON text; return that value."""
    return json.loads(ast.literal_eval(k.value(code)))


def assert_refused(reply, token):
    c = reply["content"]
    assert c["status"] == "error", c
    assert c["ename"] == "FileTransferError", c
    assert token in c["evalue"], f"{token} is not named in the refusal: {c['evalue']!r}"
    assert not reply.get("buffers"), "a refused get returned bytes"


# --------------------------------------------------------------------------

def test_workspace_is_where_the_docs_say(session):
    k, _ = session
    if k.kind == "microvm":
        assert k.ws == "/workspace"
        assert k.value("import os; os.getcwd()") == "'/workspace'"
    else:
        assert k.ws != "/workspace" and k.ws.endswith("/workspace"), k.ws


def test_put_then_a_cell_reads_it(session):
    k, _ = session
    data = os.urandom(300_000) + bytes(range(256))
    reply = put(k, "data/in/blob.bin", data)
    c = reply["content"]
    assert c["status"] == "ok", c
    assert c["size"] == len(data) and c["sha256"] == sha(data)
    assert c["path"].endswith("data/in/blob.bin"), c
    seen = probe(k, "import hashlib, json, os\n"
                    "b = open(os.path.join(os.path.dirname(os.environ['CELLVM_OUTDIR']),"
                    " 'data/in/blob.bin'), 'rb').read()\n"
                    "json.dumps([len(b), hashlib.sha256(b).hexdigest()])")
    assert seen == [len(data), sha(data)]
    if k.kind == "microvm":             # the kernel's cwd: relative paths just work
        assert probe(k, "import hashlib, json\n"
                        "json.dumps(hashlib.sha256(open('data/in/blob.bin', 'rb').read())"
                        ".hexdigest())") == sha(data)
    # A second put replaces the file; no buffer is an empty file.
    assert put(k, "data/in/blob.bin", b"short")["content"]["size"] == 5
    reply = put(k, "data/in/empty.txt")
    assert reply["content"]["status"] == "ok" and reply["content"]["size"] == 0
    assert reply["content"]["sha256"] == sha(b"")
    assert probe(k, "import json, os\n"
                    "ws = os.path.dirname(os.environ['CELLVM_OUTDIR'])\n"
                    "json.dumps([open(ws + '/data/in/blob.bin').read(),"
                    " os.path.getsize(ws + '/data/in/empty.txt')])") == ["short", 0]


def test_get_returns_exact_bytes(session):
    k, _ = session
    made = probe(k, "import hashlib, json, os\n"
                    "ws = os.path.dirname(os.environ['CELLVM_OUTDIR'])\n"
                    "os.makedirs(ws + '/gen', exist_ok=True)\n"
                    "b = bytes(range(256)) * 4096 + os.urandom(1000)\n"
                    "open(ws + '/gen/blob.bin', 'wb').write(b)\n"
                    "json.dumps([len(b), hashlib.sha256(b).hexdigest()])")
    reply = get(k, "gen/blob.bin")
    c = reply["content"]
    assert c["status"] == "ok", c
    assert [c["size"], c["sha256"]] == made
    assert len(reply["buffers"]) == 1
    data = bytes(reply["buffers"][0])
    assert [len(data), sha(data)] == made
    # The absolute spelling under /workspace is the same file.
    again = get(k, "/workspace/gen/blob.bin")
    assert again["content"]["status"] == "ok", again["content"]
    assert bytes(again["buffers"][0]) == data


@pytest.mark.parametrize("path", ["gen/missing.bin", "gen"])
def test_get_of_something_not_a_file_is_an_error(session, path):
    k, _ = session
    probe(k, "import os, json; os.makedirs(os.path.dirname(os.environ['CELLVM_OUTDIR'])"
             " + '/gen', exist_ok=True); json.dumps(0)")
    reply = get(k, path)
    assert reply["content"]["status"] == "error", reply["content"]
    assert reply["content"]["ename"] == "FileTransferError"
    assert not reply.get("buffers")


@pytest.mark.parametrize("path", ["../../etc/passwd", "/etc/passwd", "/workspace/../etc/passwd"])
def test_get_outside_the_workspace_is_refused(session, path):
    k, _ = session
    # The file is there to read, for the kernel at least.
    assert probe(k, "import json; json.dumps(len(open('/etc/passwd').read()) > 0)")
    assert_refused(get(k, path), "PathOutsideWorkspace")


@pytest.mark.parametrize("spelling", ["relative", "absolute"])
def test_put_outside_the_workspace_is_refused(session, spelling):
    k, _ = session
    # A spot in /tmp, which the kernel may write: through `..` from the workspace, or absolute.
    target = f"/tmp/cellvm-escape-{uuid.uuid4().hex[:8]}"
    path = posixpath.relpath(target, k.ws) if spelling == "relative" else target
    assert_refused(put(k, path, b"escaped"), "PathOutsideWorkspace")
    code = ("import json, os\n"
            f"json.dumps([os.path.exists({target!r}), os.access('/tmp', os.W_OK)])")
    assert probe(k, code) == [False, True]


def test_symlinks_a_cell_planted_are_refused(session):
    k, _ = session
    # The cell plants a link to a directory it can write, and one to a file it can read;
    # both links work for the cell itself.
    target = probe(k, "import json, os, tempfile\n"
                      "ws = os.path.dirname(os.environ['CELLVM_OUTDIR'])\n"
                      "t = tempfile.mkdtemp(prefix='cellvm-target-')\n"
                      "open(t + '/secret', 'w').write('s3cret')\n"
                      "os.symlink(t, ws + '/link')\n"
                      "os.symlink(t + '/secret', ws + '/secret-link')\n"
                      "assert open(ws + '/link/secret').read() == 's3cret'\n"
                      "assert open(ws + '/secret-link').read() == 's3cret'\n"
                      "json.dumps(t)")
    try:
        assert_refused(get(k, "link/secret"), "SymlinkRefused")
        assert_refused(get(k, "secret-link"), "SymlinkRefused")
        assert_refused(put(k, "link/planted", b"through the link"), "SymlinkRefused")
        assert_refused(put(k, "secret-link", b"overwritten"), "SymlinkRefused")
        assert probe(k, "import json, os\n"
                        f"json.dumps([os.path.exists({target!r} + '/planted'),"
                        f" open({target!r} + '/secret').read()])") == [False, "s3cret"]
    finally:
        probe(k, "import json, os, shutil\n"
                 "ws = os.path.dirname(os.environ['CELLVM_OUTDIR'])\n"
                 "os.unlink(ws + '/link'); os.unlink(ws + '/secret-link')\n"
                 f"shutil.rmtree({target!r}); json.dumps(0)")


def _output_files(k, code):
    c = k.run(code).content
    assert c["status"] == "ok", c
    return {pathlib.PurePosixPath(e["path"]).relative_to(k.ws + "/out").as_posix(): e
            for e in c["output_files"]}


def _check_copied(entry, artifacts, rel):
    assert "skipped" not in entry, entry
    host = pathlib.Path(entry["host_path"])
    assert not host.is_symlink()
    real = host.resolve()
    base = artifacts.resolve()
    assert real.is_relative_to(base), f"{real} is not under {base}"
    parts = real.relative_to(base).parts
    assert "/".join(parts[1:]) == rel, parts        # <artifacts>/<session id>/<path below out>
    data = real.read_bytes()
    assert len(data) == entry["size"] and sha(data) == entry["sha256"]
    assert stat.S_IMODE(real.stat().st_mode) == 0o600
    assert stat.S_IMODE((base / parts[0]).stat().st_mode) == 0o700
    return parts[0]


def test_output_files_are_copied_to_the_artifacts_dir(session):
    k, artifacts = session
    files = _output_files(k, "import os\n"
                             "out = os.environ['CELLVM_OUTDIR']\n"
                             "os.makedirs(out + '/sub', exist_ok=True)\n"
                             "open(out + '/report.txt', 'w').write('total: 42\\n')\n"
                             "open(out + '/sub/data.bin', 'wb').write(os.urandom(20000))")
    assert set(files) == {"report.txt", "sub/data.bin"}, files
    sessions = {_check_copied(files[rel], artifacts, rel) for rel in files}
    assert len(sessions) == 1, "one artifacts directory per session"
    assert pathlib.Path(files["report.txt"]["host_path"]).read_text() == "total: 42\n"


def test_an_artifact_over_the_file_cap_is_skipped(session):
    k, artifacts = session
    files = _output_files(k, "import os\n"
                             "out = os.environ['CELLVM_OUTDIR']\n"
                             f"open(out + '/big.bin', 'wb').write(os.urandom({MAX_FILE + 1}))\n"
                             "open(out + '/small.txt', 'w').write('fits')")
    big, small = files["big.bin"], files["small.txt"]
    assert big["size"] == MAX_FILE + 1
    assert "host_path" not in big, big
    assert CAP_REASON in big["skipped"], big
    assert not list(artifacts.rglob("big.bin")), "the skipped file was copied anyway"
    _check_copied(small, artifacts, "small.txt")      # the same cell's small file was


def test_the_workspace_outlives_a_kernel_death(session):
    k, _ = session
    data = os.urandom(50_000)
    assert put(k, "keep/me.bin", data)["content"]["status"] == "ok"
    qemu = k.qemu_pid() if k.kind == "microvm" else None
    assert k.run("z = 1").status == "ok"
    r = k.run("import os; os._exit(3)")
    c = r.content
    assert c["status"] == "error" and c["ename"] == "KernelDied", c
    assert "status 3" in c["evalue"], c["evalue"]
    assert [m["content"]["evalue"] for m in r.errors] == [c["evalue"]]
    assert k.run("z").content["ename"] == "NameError"  # a new kernel ...
    assert probe(k, "import hashlib, json, os\n"           # ... with the same workspace
                    "ws = os.path.dirname(os.environ['CELLVM_OUTDIR'])\n"
                    "json.dumps(hashlib.sha256(open(ws + '/keep/me.bin', 'rb').read())"
                    ".hexdigest())") == sha(data)
    got = get(k, "keep/me.bin")
    assert bytes(got["buffers"][0]) == data
    if qemu:        # a warm kernel in a new VM over the same disk (docs/sessions.md)
        assert k.qemu_pid() not in (None, qemu), "the template was restored over the disk"
