#!/usr/bin/python3
"""The MCP `run_python` round trip for a trivial cell, against the same cell
through jupyter_client, in one run: one section of `make bench`, run by
bench.py after the sessions section (BENCH_MCP=0 skips it; BENCH_ONLY=mcp, or
running this file, runs it alone and appends that to the history all the same).

Per kernelspec (`cellvm`, microvm; `cellvm-unsafe-local` too when it is in
the run's kernels, with `--allow-unsafe-local`):

- MCP: `build/cellvm-mcp --kernelspec NAME` on pipes, driven as
  tests/integration/test_mcp.py drives it (docs/mcp.md): `initialize`,
  `notifications/initialized`, then `tools/call run_python {"code": "1"}`.
  The first call starts the session (its time is shown: initialize written ..
  first result line); then CALLS calls, each timed from the JSON-RPC request's
  write to the end of its response line, each checked (`isError` false,
  `structuredContent.result` == "1"). cellvm-mcp's own `elapsed_s` for the
  cell (structuredContent, ms resolution: execute_request sent .. result
  shaped) is kept beside it.
- jupyter_client: a tests/integration/sessions.py Session of the same
  kernelspec (every pid it started killed by pid on close), the cell `1`
  sent as bench.py sends it (`kc.execute`, store_history=True, reply and
  idle awaited: cells.run_cell). Its first cell is timed from start_kernel.

Both sessions are up at once and the timed calls alternate (MCP first on even
rounds, jupyter_client first on odd ones), so load from anything else on the
host falls on both alike. Each side is warmed with WARM calls (the first of
which starts it) before the timed ones. The MCP overhead is MCP minus
jupyter_client, at p50 and at p95, and the median of the per-round
differences.

Every process started here is killed by pid (psutil handles, which never hit
a recycled pid): cellvm-mcp gets end of stdin (it then shuts its gateways
down and exits), then SIGKILL if it is still there, and so does whatever it
started that is still there after that.
"""
import json
import os
import pathlib
import select
import shutil
import subprocess
import sys
import tempfile
import time
# The figures come from the gateways' info lines (vm.resumed, pool.size, ...); they log
# warnings only by default.
os.environ.setdefault("CELLVM_LOG_LEVEL", "info")

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
sys.path.append(str(ROOT / "tests" / "integration"))

from cells import QUICK, Failed, Timeout, attempt, pct, run_cell  # noqa: E402

BUILD = pathlib.Path(os.environ.get("CELLVM_BUILD", ROOT / "build")).resolve()
MCP = BUILD / "cellvm-mcp"
CALLS = 20 if QUICK else 30                     # timed calls, each side
WARM = 1                                        # untimed calls first; the first starts the session
START_TIMEOUT = 240                             # the first call (a cold boot under TCG, busy host)
CALL_TIMEOUT = 60                               # a timed call
PROTOCOL = "2025-11-25"
KERNELS = ("cellvm", "cellvm-unsafe-local")


def _perf():
    return time.perf_counter()


class McpServer:
    """build/cellvm-mcp on pipes: requests written whole, responses read by line."""

    def __init__(self, kernelspec, log_dir, extra=()):
        import psutil
        self.log_path = pathlib.Path(log_dir) / f"cellvm-mcp-{kernelspec}.log"
        self._log = open(self.log_path, "wb")
        env = dict(os.environ)
        env.setdefault("JUPYTER_PATH", str(BUILD / "share" / "jupyter"))
        self.p = subprocess.Popen([str(MCP), "--kernelspec", kernelspec, *extra],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self._log, env=env, bufsize=0)
        self.procs = {self.p.pid: psutil.Process(self.p.pid)}
        self.buf = b""
        self.next_id = 1

    def track(self):
        """Remember every process below cellvm-mcp (gateways, QEMU), to kill by pid."""
        import psutil
        try:
            for c in psutil.Process(self.p.pid).children(recursive=True):
                self.procs.setdefault(c.pid, c)
        except psutil.NoSuchProcess:
            pass

    def _write(self, msg):
        data = (json.dumps(msg) + "\n").encode()
        fd = self.p.stdin.fileno()
        while data:
            data = data[os.write(fd, data):]

    def _line(self, deadline):
        while b"\n" not in self.buf:
            left = deadline - _perf()
            if left <= 0:
                raise Timeout("no response line from cellvm-mcp")
            if select.select([self.p.stdout], [], [], left)[0]:
                chunk = os.read(self.p.stdout.fileno(), 1 << 20)
                if not chunk:
                    raise Failed("cellvm-mcp closed stdout: " + self.log_tail())
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def request(self, method, params, timeout):
        """(seconds from the request's write to its response line, the response)."""
        rid = self.next_id
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        t0 = _perf()
        self._write(msg)
        deadline = t0 + timeout
        while True:
            m = self._line(deadline)
            if m.get("id") == rid:
                dt = _perf() - t0
                if "error" in m:
                    raise Failed(f"{method}: JSON-RPC error {m['error']}")
                return dt, m["result"]

    def notify(self, method, params=None):
        self._write({"jsonrpc": "2.0", "method": method, "params": params or {}})

    def initialize(self):
        dt, r = self.request("initialize", {"protocolVersion": PROTOCOL, "capabilities": {},
                                            "clientInfo": {"name": "cellvm-bench", "version": "1"}},
                             30)
        if r.get("protocolVersion") != PROTOCOL:
            raise Failed(f"initialize: protocolVersion {r.get('protocolVersion')}")
        self.notify("notifications/initialized")
        return dt

    def run_one(self, timeout=CALL_TIMEOUT):
        """run_python `1`: (client round trip s, cellvm-mcp's elapsed_s), checked."""
        dt, r = self.request("tools/call", {"name": "run_python", "arguments": {"code": "1"}},
                             timeout)
        sc = r.get("structuredContent") or {}
        if r.get("isError") or sc.get("status") != "ok" or sc.get("result") != "1":
            text = (r.get("content") or [{}])[0].get("text", "")
            raise Failed(f"run_python `1` -> isError={r.get('isError')} status={sc.get('status')}"
                         f" result={sc.get('result')!r}: {text[:200]}")
        return dt, sc.get("elapsed_s")

    def log_tail(self, n=1500):
        try:
            self._log.flush()
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def close(self):
        """End of stdin (cellvm-mcp shuts its sessions down and exits 0), then SIGKILL by pid
        whatever is still there. Returns cellvm-mcp's exit status (None if it was killed)."""
        import psutil
        self.track()
        rc = None
        try:
            self.p.stdin.close()
        except OSError:
            pass
        try:
            rc = self.p.wait(15)
        except subprocess.TimeoutExpired:
            pass
        procs = list(self.procs.values())
        deadline = _perf() + 10
        while _perf() < deadline and any(_running(p) for p in procs):
            time.sleep(0.05)
        for p in procs:
            try:
                if _running(p):
                    p.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        if self.p.poll() is None:
            self.p.wait(5)
        self.p.stdout.close()
        self._log.close()
        return rc


def _running(p):
    import psutil
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _ms(values):
    return [v * 1000 for v in values]


def round_trips(kernel, log_dir):
    """Both sides of one kernelspec, interleaved: the figures, flat, keyed kernel:..."""
    import pytest
    import sessions as S
    extra = ["--allow-unsafe-local"] if kernel == "cellvm-unsafe-local" else []
    mcp = McpServer(kernel, log_dir, extra)
    s = None
    mcp_rt, mcp_el, jc_rt, first_mcp, first_jc = [], [], [], None, None
    ok = False
    try:
        t0 = _perf()
        init_s = mcp.initialize()
        mcp.run_one(START_TIMEOUT)
        first_mcp = _perf() - t0
        mcp.track()
        for _ in range(WARM - 1):
            mcp.run_one()
        try:
            s = S.Session(kernel, name=f"bench-mcp-{kernel}")
        except pytest.fail.Exception as e:      # a missing kernelspec: a failure, not a crash
            raise Failed(f"jupyter_client session: {e}") from None
        t0 = _perf()
        s.start(wait=False)
        try:
            s.kc.wait_for_ready(timeout=START_TIMEOUT)
        except RuntimeError as e:
            raise Timeout(f"jupyter_client session not ready: {e}") from None
        run_cell(s.kc, "1", START_TIMEOUT).check("text/plain")
        first_jc = _perf() - t0
        s.track()
        for _ in range(WARM - 1):
            run_cell(s.kc, "1").check("text/plain")

        def one_mcp():
            dt, el = mcp.run_one()
            mcp_rt.append(dt)
            mcp_el.append(el)

        def one_jc():
            jc_rt.append(run_cell(s.kc, "1").check("text/plain").dt)

        for i in range(CALLS):
            for f in ((one_mcp, one_jc) if i % 2 == 0 else (one_jc, one_mcp)):
                f()
        ok = True
    except Timeout as e:
        raise Timeout(f"{e}; cellvm-mcp log: {mcp.log_tail(400)}") from None
    except Failed as e:
        raise Failed(f"{e}; cellvm-mcp log: {mcp.log_tail(400)}") from None
    finally:
        if s is not None:
            s.close()
        rc = mcp.close()
        if ok and rc != 0:
            raise Failed(f"cellvm-mcp exited {rc} at end of stdin: {mcp.log_tail()}")
    k = kernel
    m, j = _ms(mcp_rt), _ms(jc_rt)
    diff = [a - b for a, b in zip(m, j)]
    el = _ms([e for e in mcp_el if isinstance(e, (int, float))])
    return {f"{k}:mcp_p50_ms": pct(m, 50), f"{k}:mcp_p95_ms": pct(m, 95),
            f"{k}:jc_p50_ms": pct(j, 50), f"{k}:jc_p95_ms": pct(j, 95),
            f"{k}:overhead_p50_ms": pct(m, 50) - pct(j, 50),
            f"{k}:overhead_p95_ms": pct(m, 95) - pct(j, 95),
            f"{k}:overhead_paired_p50_ms": pct(diff, 50),
            f"{k}:mcp_elapsed_p50_ms": pct(el, 50),
            f"{k}:mcp_outside_cell_p50_ms": pct([a - b for a, b in zip(m, el)], 50)
            if len(el) == len(m) else float("nan"),
            f"{k}:mcp_initialize_ms": init_s * 1000,
            f"{k}:mcp_first_call_s": first_mcp, f"{k}:jc_first_cell_s": first_jc,
            f"{k}:n": len(m), f"{k}:mcp_all_ms": m, f"{k}:jc_all_ms": j,
            f"{k}:mcp_elapsed_all_ms": el}


def bench_mcp(kernels, ensure_template=None):
    """Every figure of this section in one flat dict ("kernel:key"), with "failures"
    {key: why} as cells.attempt records them."""
    import sessions as S
    res = {"kernel": "mcp", "failures": {}, "quick": QUICK, "calls": CALLS, "warm": WARM,
           "loadavg_at_start": os.getloadavg()}
    t0 = _perf()
    log_dir = tempfile.mkdtemp(prefix="cellvm-bench-mcp-logs-")
    saved_root, S.LOG_ROOT = S.LOG_ROOT, log_dir
    try:
        todo = [k for k in KERNELS if k in kernels]
        if not MCP.exists():
            for k in todo:
                res["failures"][f"{k}:mcp_p50_ms"] = f"FAIL: {MCP} is missing: run `make`"
            todo = []
        if "cellvm" in todo and ensure_template:
            ensure_template()
        for k in todo:
            print(f"bench: mcp: {k} ...", file=sys.stderr, flush=True)
            attempt(res, [f"{k}:mcp_p50_ms", f"{k}:jc_p50_ms"], lambda: round_trips(k, log_dir))
    finally:
        S.LOG_ROOT = saved_root
    res["run_s"] = _perf() - t0
    res["loadavg_at_end"] = os.getloadavg()
    if res["failures"]:
        res["logs"] = log_dir
        print(f"bench: mcp: logs kept in {log_dir}", file=sys.stderr)
    else:
        shutil.rmtree(log_dir, ignore_errors=True)
    return res


# ---------------------------------------------------------------------------
# The report

ROWS = [
    ("MCP run_python `1`: request written..response line p50 ms", "mcp_p50_ms", "{:.2f}"),
    ("MCP run_python `1` p95 ms", "mcp_p95_ms", "{:.2f}"),
    ("jupyter_client `1` (store_history, reply and idle) p50 ms", "jc_p50_ms", "{:.2f}"),
    ("jupyter_client `1` p95 ms", "jc_p95_ms", "{:.2f}"),
    ("MCP overhead p50 ms (MCP p50 - jupyter_client p50)", "overhead_p50_ms", "{:+.2f}"),
    ("MCP overhead p95 ms (MCP p95 - jupyter_client p95)", "overhead_p95_ms", "{:+.2f}"),
    ("MCP overhead, median of the per-round differences ms", "overhead_paired_p50_ms", "{:+.2f}"),
    ("  cellvm-mcp's own elapsed_s for the cell p50 ms (ms resolution)", "mcp_elapsed_p50_ms",
     "{:.0f}"),
    ("  round trip minus that elapsed_s, p50 ms (request read..execute_request sent,"
     " result shaped..response line)", "mcp_outside_cell_p50_ms", "{:.2f}"),
    ("MCP initialize ms", "mcp_initialize_ms", "{:.2f}"),
    ("MCP first call (starts the session): initialize..first result s", "mcp_first_call_s",
     "{:.3f}"),
    ("jupyter_client start_kernel..first `1` answered s", "jc_first_cell_s", "{:.3f}"),
]


def print_mcp(res, prev=None):
    from sessions_bench import _cell
    kernels = [k for k in KERNELS
               if any(key.startswith(f"{k}:") for key in list(res) + list(res["failures"]))]
    if not kernels:
        print("mcp: no cellvm kernelspec in this run")
        print()
        return
    n = {k: res.get(f"{k}:n") for k in kernels}
    print(" | ".join(["mcp: run_python vs jupyter_client, cell `1`"]
                     + [f"{k} (n={n[k]})" if n[k] else k for k in kernels]))
    print(" | ".join(["---"] * (len(kernels) + 1)))
    for label, key, spec in ROWS:
        print(" | ".join([label] + [_cell(res, prev, f"{k}:{key}", spec) for k in kernels]))
    la, lb = res.get("loadavg_at_start") or [0], res.get("loadavg_at_end") or [0]
    print(f"(both sessions up at once, calls alternating; {res.get('warm')} warm-up call each"
          f" (the first starts it); this section {res.get('run_s', 0):.0f} s, load average"
          f" {la[0]:.2f} at start, {lb[0]:.2f} at end)")
    print()


if __name__ == "__main__":
    os.environ.setdefault("BENCH_ONLY", "mcp")
    import bench
    bench.main()
