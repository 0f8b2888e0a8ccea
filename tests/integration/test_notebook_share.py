"""The `cellvm-notebook` kernelspec (docs/files.md, "The notebook's folder"):
the folder Jupyter starts the kernel in is copied into the VM's /notebook, read-only, and is the
kernel's working directory; nothing else of the host is.

- a notebook reads the files beside it by relative paths, and imports a module beside it;
- the kernel cannot change the copy, and the host's files are never written;
- hidden entries, symlinks (which could point anywhere on the host) and what passes --share-max
  are left out, and the first cell's stderr says so;
- a client restart copies the folder again (a file changed on the host since shows its new
  bytes), and keeps the kernel in it;
- a client's cellvm_put_request cannot write into /notebook;
- notebooks/01-pandas-analysis.ipynb runs through nbclient with no upload at all.

Each session is a sessions.Session started in a folder of this test's (cwd=), closed (killed
by pid) at the end.
"""
import json
import os
import pathlib
import re

import pytest

from sessions import READY_TIMEOUT, TIMEOUT, Session, wait_gone

NOTEBOOKS = pathlib.Path(__file__).resolve().parents[2] / "notebooks"
KERNEL = "cellvm-notebook"


def folder(tmp_path):
    d = tmp_path / "project"
    (d / "data" / "deep").mkdir(parents=True)
    (d / "data" / "sales.csv").write_text("region,units\nEast,3\nWest,4\n")
    (d / "data" / "deep" / "note.txt").write_text("deep")
    (d / "helper.py").write_text("ANSWER = 42\n")
    (d / ".secret").write_text("host dotfile")
    (d / ".ipynb_checkpoints").mkdir()
    (d / ".ipynb_checkpoints" / "old.ipynb").write_text("{}")
    (d / "passwd").symlink_to("/etc/passwd")
    return d


def start(cwd, name, args=()):
    s = Session(KERNEL, name=name, cwd=cwd, extra_args=[str(a) for a in args])
    try:
        s.start()
    except BaseException:
        s.close()
        raise
    return s


def share_line(s, count=1):
    lines = [ln for ln in s.log_text().splitlines() if "event=share.done" in ln]
    assert len(lines) >= count, f"no share.done line:\n{s.log_text()[-3000:]}"
    return lines[count - 1]


def test_the_folder_is_the_working_directory_read_only_and_nothing_else(tmp_path):
    d = folder(tmp_path)
    s = start(d, "share")
    try:
        assert s.value("import os; os.getcwd()") == "'/notebook'"
        out = s.output("import pandas as pd, helper\n"
                       "print(pd.read_csv('data/sales.csv').units.sum(), helper.ANSWER,\n"
                       "      open('data/deep/note.txt').read())")
        assert out.split() == ["7", "42", "deep"]
        listing = json.loads(s.output(
            "import json; print(json.dumps(sorted(os.listdir('.'))))").strip())
        assert listing == ["data", "helper.py"], listing
        # Read-only for the kernel: no write, no new file, no delete.
        for code in ("open('data/sales.csv', 'a').write('x')", "open('new.txt', 'w')",
                     "os.remove('helper.py')"):
            r = s.run(code)
            assert r.status == "error" and r.content["ename"] == "PermissionError", \
                f"{code}: {r.describe()}"
        # The workspace is where it was, and still the kernel's to write.
        assert s.output("open('/workspace/w.txt', 'w').write('w'); "
                        "print(open('/workspace/w.txt').read())").strip() == "w"
        # A client cannot write there either.
        rep = s.control("cellvm_put_request", {"path": "/notebook/helper.py"}, [b"ANSWER = 0\n"])
        c = rep["content"]
        assert c["status"] == "error" and "PathOutsideWorkspace" in c["evalue"], c
        assert s.output("import importlib; print(importlib.reload(helper).ANSWER)").strip() \
            == "42"
        line = share_line(s)
        assert re.search(r"files=3 ", line) and "links=1" in line and "hidden=2" in line, line
    finally:
        s.close()
    assert (d / "helper.py").read_text() == "ANSWER = 42\n", "the host's file was written"
    assert not (d / "new.txt").exists()


def test_what_passes_the_cap_is_left_out_and_said(tmp_path):
    d = folder(tmp_path)
    (d / "big.bin").write_bytes(os.urandom(2 << 20))
    s = start(d, "share-cap", ["--share-max", "1M"])
    try:
        # The words come once, on stderr, as output of the first cell that runs.
        r = s.run("import os; os.path.exists('big.bin')")
        assert r.status == "ok" and r.results() == ["False"], r.describe()
        assert "past the size" in r.streams and "/notebook" in r.streams, r.streams
        assert "past the size" not in s.run("1").streams
        assert s.value("open('data/sales.csv').read().count(chr(10))") == "3"
        assert "over_cap=1" in share_line(s)
    finally:
        s.close()


def test_a_restart_copies_the_folder_again(tmp_path):
    d = folder(tmp_path)
    s = start(d, "share-restart")
    try:
        assert s.value("open('helper.py').read()") == repr("ANSWER = 42\n")
        s.output("x = 1")
        (d / "helper.py").write_text("ANSWER = 43\n")
        old = s.gateway_pid
        s.km.restart_kernel(now=False)
        s.kc.wait_for_ready(timeout=READY_TIMEOUT)
        s.track()
        assert wait_gone([old], TIMEOUT)
        r = s.run("x")
        assert r.status == "error" and r.content["ename"] == "NameError", r.describe()
        assert s.value("import os; os.getcwd()") == "'/notebook'"
        assert s.value("open('helper.py').read()") == repr("ANSWER = 43\n")
    finally:
        s.close()


def test_the_sales_notebook_runs_without_an_upload():
    import nbformat
    from nbclient import NotebookClient
    nb = nbformat.read(NOTEBOOKS / "01-pandas-analysis.ipynb", as_version=4)
    s = Session(KERNEL, name="share-nbclient", cwd=NOTEBOOKS)
    try:
        s.start()
        NotebookClient(nb, km=s.km, timeout=300, allow_errors=False).execute()
    finally:
        s.close()
    outs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                   for o in c.get("outputs", []))
    assert "total revenue: 432.50" in outs and "best region: East" in outs, outs
