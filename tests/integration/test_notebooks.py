"""Execute every notebook in notebooks/ with nbclient through each backend's kernelspec
(`cellvm-unsafe-local` and the microvm `cellvm`) and check what came out.

Each notebook gets a fresh kernel, a sessions.Session whose KernelManager is handed to
nbclient's NotebookClient(km=...), so this module knows every pid it started and kills them. With
unsafe-local the kernel starts in notebooks/ (as nbclient and Jupyter start it), so relative
paths like data/sales.csv resolve as with ipykernel. A microVM kernel starts in /workspace
inside its VM: every file under notebooks/data/ is first uploaded there with the control
channel's cellvm_put_request (docs/files.md), so the same relative paths work unchanged.

A missing kernelspec or guest image is a failure, not a skip. CELLVM_NOTEBOOK_KERNEL=python3 runs
the same checks against Debian's ipykernel only, which is how the notebooks themselves are
sanity-checked.
"""
import base64
import hashlib
import os
import pathlib
import re

import pytest
from jupyter_client.asynchronous import AsyncKernelClient

from sessions import BACKENDS, READY_TIMEOUT, TIMEOUT, Session, kernel_spec

NOTEBOOKS = pathlib.Path(__file__).resolve().parents[2] / "notebooks"
KERNEL_NAMES = [os.environ["CELLVM_NOTEBOOK_KERNEL"]] if os.environ.get("CELLVM_NOTEBOOK_KERNEL") \
    else [BACKENDS["unsafe-local"], BACKENDS["microvm"]]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture(params=KERNEL_NAMES)
def kernel_name(request):
    kernel_spec(request.param)                  # fails (never skips) without spec or image
    return request.param


def upload_data(kernel):
    """Copy notebooks/data/ into the VM's /workspace/data/ (the kernel's cwd is /workspace)."""
    files = sorted(p for p in (NOTEBOOKS / "data").rglob("*") if p.is_file())
    assert files, "notebooks/data/ is empty"
    for p in files:
        rel = p.relative_to(NOTEBOOKS).as_posix()
        data = p.read_bytes()
        reply = kernel.control("cellvm_put_request", {"path": rel}, buffers=[data])
        assert reply["content"]["status"] == "ok", reply["content"]
        assert reply["content"]["size"] == len(data)
        assert reply["content"]["sha256"] == hashlib.sha256(data).hexdigest()


def run_notebook(name, kernel_name):
    import nbformat
    from nbclient import NotebookClient
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    kernel = Session(kernel_name, cwd=NOTEBOOKS)
    try:
        kernel.start()
        if kernel.backend == "microvm":
            upload_data(kernel)
        # nbclient uses our running kernel (owns_km is False) and leaves it to us. It makes its
        # own client with km.client(), and awaits it: an asyncio one.
        kernel.km.client_factory = AsyncKernelClient
        client = NotebookClient(nb, km=kernel.km, timeout=TIMEOUT,
                                startup_timeout=READY_TIMEOUT,
                                resources={"metadata": {"path": str(NOTEBOOKS)}})
        client.execute()
    finally:
        kernel.close()
    code = [c for c in nb.cells if c.cell_type == "code"]
    counts = [c.execution_count for c in code]
    assert all(isinstance(n, int) for n in counts), f"{name}: unexecuted cells: {counts}"
    assert counts == sorted(counts) and len(set(counts)) == len(counts), counts
    assert nb.metadata.get("language_info", {}).get("name") == "python"
    return code


def text_of(cell, stream="stdout"):
    return "".join(o.get("text", "") for o in cell.outputs
                   if o.output_type == "stream" and o.name == stream)


def result_of(cell, mime="text/plain"):
    res = [o for o in cell.outputs if o.output_type == "execute_result"]
    assert len(res) == 1, f"expected one execute_result: {cell.outputs}"
    return res[0].data.get(mime)


def errors_of(cell):
    return [o for o in cell.outputs if o.output_type == "error"]


def pngs_of(cell):
    out = []
    for o in cell.outputs:
        if o.output_type in ("display_data", "execute_result") and "image/png" in o.get("data", {}):
            data = o.data["image/png"]
            out.append(base64.b64decode("".join(data) if isinstance(data, list) else data))
    return out


def test_all_notebooks_are_covered():
    names = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    assert names == ["01-pandas-analysis.ipynb", "02-matplotlib-chart.ipynb",
                     "03-errors.ipynb", "04-input.ipynb"], \
        f"every notebook needs its checks in this file: {names}"


def test_pandas_analysis(kernel_name):
    cells = run_notebook("01-pandas-analysis.ipynb", kernel_name)
    load, describe, by_region, by_month, pivot, summary = cells
    for c in cells:
        assert not errors_of(c), c.outputs
    assert text_of(load) == "12 orders, 4 regions, 3 products\n"
    head = result_of(load)
    assert "North" in head and "Widget" in head
    assert "<table" in result_of(load, "text/html")
    desc = result_of(describe)
    assert re.search(r"count\s+12\.0+\s+12\.0+\s+12\.0+", desc), desc
    assert re.search(r"mean\s+5\.25", desc), desc
    assert re.search(r"max\s+12\.0+\s+20\.0+\s+60\.0+", desc), desc
    region_lines = [l.split() for l in result_of(by_region).splitlines()[1:5]]
    assert region_lines == [["East", "117.5"], ["South", "110.0"], ["West", "110.0"],
                            ["North", "95.0"]] or \
        region_lines == [["East", "117.5"], ["West", "110.0"], ["South", "110.0"],
                         ["North", "95.0"]], region_lines
    month = result_of(by_month)
    for m, v in (("2024-01", "142.5"), ("2024-02", "140.0"), ("2024-03", "150.0")):
        assert re.search(rf"{m}\s+{re.escape(v)}", month), month
    piv = result_of(pivot)
    assert re.search(r"South\s+4\s+2\s+12", piv), piv     # Gadget Gizmo Widget
    out = text_of(summary)
    assert "total revenue: 432.50\n" in out
    assert "best region: East (117.50)\n" in out
    assert "mean units per order: 5.25\n" in out
    assert result_of(summary) == "{'2024-01': 142.5, '2024-02': 140.0, '2024-03': 150.0}"


def test_matplotlib_chart(kernel_name):
    cells = run_notebook("02-matplotlib-chart.ipynb", kernel_name)
    setup, bar, line, check = cells
    for c in cells:
        assert not errors_of(c), c.outputs
    assert pngs_of(setup) == []
    for cell in (bar, line):
        imgs = pngs_of(cell)
        assert len(imgs) == 1, f"exactly one image per chart cell: {cell.outputs}"
        assert imgs[0][:8] == PNG_MAGIC
        assert len(imgs[0]) > 2000, "a real chart, not an empty image"
    assert text_of(check) == "figures still open: 0\n", "displayed figures are closed"


def test_errors_notebook(kernel_name):
    ok, raising, after = run_notebook("03-errors.ipynb", kernel_name)
    assert result_of(ok) == "0.625"
    (err,) = errors_of(raising)
    assert err.ename == "ZeroDivisionError"
    assert err.evalue == "division by zero"
    tb = ANSI_RE.sub("", "\n".join(err.traceback))
    for frame in ("mean_ratio", "parse_ratio", "<genexpr>", "ZeroDivisionError"):
        assert frame in tb, f"{frame} missing from traceback:\n{tb}"
    assert [o.output_type for o in raising.outputs] == ["error"], raising.outputs
    assert text_of(after) == "after the error, state is kept\n"


def test_input_notebook(kernel_name):
    direct, fallback = run_notebook("04-input.ipynb", kernel_name)
    (err,) = errors_of(direct)
    assert err.ename == "StdinNotImplementedError", err
    assert text_of(direct) == ""
    assert not errors_of(fallback)
    assert text_of(fallback) == ("(no stdin here: using the default 'notebook-user')\n"
                                 "Hello, notebook-user!\n")
