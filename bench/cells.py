"""The driver every figure of bench.py comes from, and the measurements each
kernel gets (bench.py's main table): start-to-ready, trivial cells, output
throughput, a DataFrame's HTML, PSS, and first use in fresh sessions.

The driver sends what a frontend sends: `kc.execute(code)` with
jupyter_client's defaults (store_history=True, not silent); see bench.py's
docstring for what each figure is. bench.py sets JUPYTER_PATH (the build's
kernelspecs) before it imports this module.
"""
import os
import queue
import sys
import time

from jupyter_client import KernelManager

QUICK = os.environ.get("BENCH_QUICK") == "1"
STARTS = 3 if QUICK else 8
WARM = 5                                        # trivial cells before the timed ones
CELLS = 20 if QUICK else 50                     # timed `1` cells, and as many `pass`
PANDAS_RENDERS = 5 if QUICK else 15             # timed, after 2 untimed
PRINT_LINES = 200_000
LINES_MB = 20                                   # as 100-byte lines, in one write
BIG_WRITE_MB = 50                               # one print
READY_TIMEOUT = 120                             # start_kernel .. wait_for_ready
CELL_TIMEOUT = 60                               # a trivial or pandas cell
OUTPUT_TIMEOUT = 300                            # each output-throughput cell
FIRST_USE_TIMEOUT = 120                         # each first-use case (and its setup)

PANDAS_IMPORT = "import pandas as pd, numpy as np"
PANDAS_DF = "df = pd.DataFrame(np.random.rand(2000, 8))"
PANDAS_RENDER = f"{PANDAS_DF}; df"


def pct(values, p):
    v = sorted(values)
    if not v:
        return float("nan")
    k = (len(v) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def pss_kib(pid, fields=("Pss:",)):
    """PSS (or other smaps_rollup fields, summed) of a process and all its
    descendants."""
    total = 0
    for p in [pid] + descendants(pid):
        try:
            for line in open(f"/proc/{p}/smaps_rollup"):
                if line.startswith(fields):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


PRIVATE = ("Private_Clean:", "Private_Dirty:")


def descendants(pid):
    kids = children(pid)
    out = list(kids)
    for k in kids:
        out += descendants(k)
    return out


def children(pid):
    """Children of every thread of pid (a child started from a thread other
    than the main one is listed under that thread only)."""
    kids = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return kids


class Timeout(Exception):
    """A case that did not finish within its cap."""


class Failed(Exception):
    """A case whose result was wrong: output missing or out of order, an
    error, a reply that says it did not work."""


def start(name, timeout=READY_TIMEOUT):
    km = KernelManager(kernel_name=name)
    t0 = time.perf_counter()
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=timeout)
    except RuntimeError as e:                   # jupyter_client 7.x: not ready, or died
        stop(km, kc, now=True)
        if "didn't respond" in str(e):
            raise Timeout(f"not ready in {timeout:g} s") from None
        raise Failed(f"start: {e}") from None
    return km, kc, time.perf_counter() - t0


def stop(km, kc, now=False):
    kc.stop_channels()
    km.shutdown_kernel(now=now)


class Cell:
    """What one execute_request brought back."""

    def __init__(self, code):
        self.code, self.dt, self.stdout, self.nbytes, self.nstream = code, None, [], 0, 0
        self.stderr, self.mimes, self.errors, self.reply = 0, [], [], None

    def check(self, mime=None):
        """Self, or Failed if the cell raised, or `mime` never came."""
        if self.errors or (self.reply or {}).get("status") != "ok":
            why = self.errors[0] if self.errors else (self.reply or {}).get("status")
            raise Failed(f"{self.code[:40]!r} -> {why}")
        if mime and mime not in self.mimes:
            raise Failed(f"{self.code[:40]!r} -> no {mime} (got {sorted(set(self.mimes))})")
        return self


def _take(kc, get, deadline, what):
    left = deadline - time.perf_counter()
    try:
        if left <= 0:
            raise queue.Empty
        return get(timeout=left)
    except queue.Empty:
        raise Timeout(what) from None


def run_cell(kc, code, timeout=CELL_TIMEOUT, keep=False):
    """kc.execute(code) with jupyter_client's defaults, as a frontend sends it
    (store_history=True); waits for the reply and idle. keep: the stdout text
    too, not only its size."""
    t0 = time.perf_counter()
    deadline = t0 + timeout
    msg_id = kc.execute(code)
    out = Cell(code)
    idle = False
    what = f"> {timeout:g} s"
    while not idle:
        m = _take(kc, kc.get_iopub_msg, deadline, what)
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        t, c = m["msg_type"], m["content"]
        if t == "stream" and c["name"] == "stdout":
            out.nbytes += len(c["text"])
            out.nstream += 1
            if keep:
                out.stdout.append(c["text"])
        elif t == "stream":
            out.stderr += len(c["text"])
        elif t in ("display_data", "execute_result"):
            out.mimes += list(c["data"])
        elif t == "error":
            out.errors.append(f"{c['ename']}: {c['evalue']}"[:120])
        idle = t == "status" and c["execution_state"] == "idle"
    while out.reply is None:
        r = _take(kc, kc.get_shell_msg, deadline, what)
        if r["parent_header"].get("msg_id") == msg_id:
            out.reply = r["content"]
    out.dt = time.perf_counter() - t0
    return out


def shell_request(kc, send, timeout):
    """(seconds, reply content) of a shell request that send() made."""
    t0 = time.perf_counter()
    msg_id = send()
    while True:
        r = _take(kc, kc.get_shell_msg, t0 + timeout, f"> {timeout:g} s")
        if r["parent_header"].get("msg_id") == msg_id:
            return time.perf_counter() - t0, r["content"]


def attempt(res, keys, fn):
    """res.update(fn()); a timeout or failure is recorded against each of
    keys instead (and said at once on stderr). True when it worked."""
    try:
        got = fn()
    except Timeout as e:
        why = f"timeout ({e})"
    except Failed as e:
        why = f"FAIL: {e}"
    except Exception as e:                      # a dead kernel, a closed socket
        why = f"FAIL: {type(e).__name__}: {e}"
    else:
        res.update(got)
        return True
    for k in keys:
        res["failures"][k] = why
    print(f"bench: {res['kernel']}: {', '.join(keys)}: {why}", file=sys.stderr, flush=True)
    return False


def session_pss_mib(km):
    time.sleep(1.0)
    return pss_kib(km.provisioner.process.pid) / 1024


# The long-lived session's cases: each takes the client, returns its figures.

def trivial_cells(kc):
    for _ in range(WARM):
        run_cell(kc, "1").check("text/plain")
        run_cell(kc, "pass").check()
    out = {}
    for code, key, mime in (("1", "cell_1", "text/plain"), ("pass", "cell_pass", None)):
        t = [run_cell(kc, code).check(mime).dt for _ in range(CELLS)]
        out[f"{key}_p50_ms"], out[f"{key}_p95_ms"] = pct(t, 50) * 1000, pct(t, 95) * 1000
    return out


def pandas_html(kc):
    t_import = run_cell(kc, PANDAS_IMPORT, FIRST_USE_TIMEOUT).check().dt
    for _ in range(2):
        run_cell(kc, PANDAS_RENDER).check("text/html")
    t = [run_cell(kc, PANDAS_RENDER).check("text/html").dt for _ in range(PANDAS_RENDERS)]
    return {"pandas_html_p50_ms": pct(t, 50) * 1000, "pandas_html_p95_ms": pct(t, 95) * 1000,
            "pandas_import_cell_s": t_import}


def print_lines(kc):
    c = run_cell(kc, f"for i in range({PRINT_LINES}): print(i)", OUTPUT_TIMEOUT,
                 keep=True).check()
    lines = "".join(c.stdout).split("\n")
    if lines[-1] == "":
        lines.pop()
    bad = next((i for i, ln in enumerate(lines) if ln != str(i)), None)
    if bad is not None or len(lines) != PRINT_LINES:
        where = f"; line {bad} is {lines[bad][:20]!r}" if bad is not None else ""
        raise Failed(f"{len(lines):,} of {PRINT_LINES:,} lines in {c.dt:.1f} s{where}")
    return {"print_lines_per_s": PRINT_LINES / c.dt, "print_s": c.dt,
            "print_stream_msgs": c.nstream}


def _stdout_exact(kc, code, want, key):
    c = run_cell(kc, code, OUTPUT_TIMEOUT, keep=True).check()
    got = "".join(c.stdout)
    if got != want:
        same = len(got) == len(want)
        raise Failed(f"{len(got):,} of {len(want):,} bytes in {c.dt:.1f} s"
                     + ("; contents differ" if same else ""))
    return {f"{key}_MB_per_s": len(got) / c.dt / 1e6, f"{key}_s": c.dt,
            f"{key}_stream_msgs": c.nstream}


def stdout_lines(kc):
    n = LINES_MB * 10**6 // 100
    return _stdout_exact(kc, f"import sys; sys.stdout.write(('x'*99+'\\n')*{n})",
                         ("x" * 99 + "\n") * n, "stdout_100B_lines")


def stdout_one_write(kc):
    n = BIG_WRITE_MB * 10**6
    return _stdout_exact(kc, f"print('x' * {n:_})", "x" * n + "\n", "stdout_one_write")


# First use, each in a fresh session: (key, setup cell or None, case(kc) -> s).

def _complete(kc):
    dt, c = shell_request(kc, lambda: kc.complete("df.gro", 6), FIRST_USE_TIMEOUT)
    if c.get("status") != "ok" or not any(m.endswith("groupby") for m in c.get("matches", [])):
        raise Failed(f"complete df.gro -> {c.get('status')} {c.get('matches', [])[:5]}")
    return dt


def _inspect(kc):
    dt, c = shell_request(kc, lambda: kc.inspect("df.groupby", 10, detail_level=0),
                          FIRST_USE_TIMEOUT)
    if c.get("status") != "ok" or not c.get("found"):
        raise Failed(f"inspect df.groupby -> {c.get('status')} found={c.get('found')}")
    return dt


def _pager_cell(kc):
    c = run_cell(kc, "df.groupby?", FIRST_USE_TIMEOUT).check()
    if not (c.reply.get("payload") or c.mimes or c.nbytes):
        raise Failed("df.groupby? -> no page, no output")
    return c.dt


FIRST_USE = [
    ("first_complete_s", f"{PANDAS_IMPORT}; {PANDAS_DF}", _complete),
    ("first_inspect_s", f"{PANDAS_IMPORT}; {PANDAS_DF}", _inspect),
    ("first_inspect_cell_s", f"{PANDAS_IMPORT}; {PANDAS_DF}", _pager_cell),
    ("first_matplotlib_s", None, lambda kc: run_cell(
        kc, "import matplotlib.pyplot as plt; plt.plot([1,2,3]); plt.show()",
        FIRST_USE_TIMEOUT).check("image/png").dt),
    ("first_pandas_html_s", None, lambda kc: run_cell(
        kc, f"{PANDAS_IMPORT}; {PANDAS_RENDER}", FIRST_USE_TIMEOUT).check("text/html").dt),
]


def first_use(name, key, setup, case):
    km, kc, ready = start(name)
    ok = False
    try:
        out = {f"{key}_ready_s": ready}
        if setup:
            try:
                out[f"{key}_setup_s"] = run_cell(kc, setup, FIRST_USE_TIMEOUT).check().dt
            except Timeout as e:
                raise Timeout(f"the setup cell, {e}") from None
        out[key] = case(kc)
        ok = True
        return out
    finally:
        stop(km, kc, now=not ok)


class Live:
    """The long-lived session the steady-state cases share; dropped (killed)
    after a case that failed, and started again for the next."""

    def __init__(self, name):
        self.name, self.km, self.kc = name, None, None

    def run(self, res, keys, case):
        def go():
            if self.kc is None:
                self.km, self.kc, _ = start(self.name)
            return case(self)
        if not attempt(res, keys, go):
            self.close(now=True)

    def close(self, now=False):
        if self.kc is not None:
            stop(self.km, self.kc, now=now)
        self.km = self.kc = None


def bench_kernel(name, with_first_use=True):
    res = {"kernel": name, "failures": {}}

    def starts():
        t = []
        for _ in range(STARTS):
            km, kc, dt = start(name)
            t.append(dt)
            stop(km, kc)
        return {"start_to_ready_p50_s": pct(t, 50), "start_to_ready_p95_s": pct(t, 95)}
    attempt(res, ["start_to_ready_p50_s", "start_to_ready_p95_s"], starts)

    live = Live(name)
    try:
        live.run(res, ["cell_1_p50_ms", "cell_1_p95_ms", "cell_pass_p50_ms", "cell_pass_p95_ms"],
                 lambda s: trivial_cells(s.kc))
        live.run(res, ["idle_pss_MiB"], lambda s: {"idle_pss_MiB": session_pss_mib(s.km)})
        live.run(res, ["pandas_html_p50_ms", "pandas_html_p95_ms"], lambda s: pandas_html(s.kc))
        live.run(res, ["print_lines_per_s"], lambda s: print_lines(s.kc))
        live.run(res, ["stdout_100B_lines_MB_per_s"], lambda s: stdout_lines(s.kc))
        live.run(res, ["stdout_one_write_MB_per_s"], lambda s: stdout_one_write(s.kc))
        live.run(res, ["pss_after_workload_MiB"],
                 lambda s: {"pss_after_workload_MiB": session_pss_mib(s.km)})
    finally:
        live.close()
    if with_first_use:
        for key, setup, case in FIRST_USE:
            print(f"bench: {name}: {key} ...", file=sys.stderr, flush=True)
            attempt(res, [key], lambda: first_use(name, key, setup, case))
    return res
