#!/usr/bin/python3
"""cellvm benchmarks: one run, every backend side by side, one table.

Every figure comes from the same jupyter_client driver code, so backends are
compared like for like, and the driver sends what a frontend sends:
`kc.execute(code)` with jupyter_client's defaults (store_history=True, not
silent). Per kernel (`cellvm`, `cellvm-unsafe-local` and Debian's ipykernel
`python3`):

- start-to-ready; trivial cells `1` and `pass` (p50/p95 ms);
- `for i in range(200000): print(i)` in lines/s, every line checked to have
  arrived, in order (a row that did not FAILs loudly: exit status 1);
- 20 MB as 100-byte lines in one write, and one 50 MB `print`, in MB/s
  (1 MB = 10^6 bytes; the bytes are checked too);
- a 2,000-row DataFrame rendered as HTML (p50/p95 ms);
- first use, each in a FRESH session (one per case): Tab completion of
  `df.gro`, `inspect_request` of `df.groupby`, `df.groupby?` as a cell, a
  matplotlib chart, a DataFrame's HTML; seconds each, capped (a timeout is
  recorded as such);
- PSS of the session (gateway + QEMU, or the ipykernel process), idle after
  the trivial cells and again after the whole workload.

Results go to build/bench/results.json (or $CELLVM_BENCH_OUT) and are
appended, one line per run with its time, host and git commit, to
history.jsonl beside it; every figure printed carries the previous run's
(the last in history with the same BENCH_QUICK setting) beside it.

Environment: CELLVM_BUILD (build dir), BENCH_KERNELS (comma list of
kernelspec names; default: cellvm, cellvm-unsafe-local and python3, those
found), BENCH_QUICK=1 for fewer repeats (the workloads stay the same),
BENCH_SNAPSHOTS=0 to skip the start-path section (cold boot / restore / pool
hand-out, PSS per idle session), BENCH_FIRST_USE=0 to skip the fresh-session
cases, BENCH_SESSIONS=0 to skip the sessions section (restarts, kernel
deaths, snapshots, resumes, forks, idle pause: sessions_bench.py, beside this
file), BENCH_ONLY=sessions to run that section alone (as
`bench/sessions_bench.py` does), BENCH_MCP=0 to skip the MCP section (the
cellvm-mcp run_python round trip of a trivial cell against the same cell
through jupyter_client, side by side: mcp_bench.py), BENCH_ONLY=mcp to run
that section alone (as `bench/mcp_bench.py` does), BENCH_MOVE=0 to skip the
move section (a remote launch, a drain and resume on another host, checkpoints:
move_bench.py), BENCH_ONLY=move to run that section alone, BENCH_BURST=0 to skip the burst
section (N sessions started at once with and without the admission line: burst_bench.py),
BENCH_ONLY=burst to run that section alone, BENCH_RAM=0 to skip resume and fork against live
memory (the RAM layouts side by side: ram_bench.py), BENCH_ONLY=ram to run that alone,
BENCH_EGRESS=0 to skip egress (HTTPS GETs through a session's proxy beside the host's own,
pip from a local index, starts with and without: egress_bench.py), BENCH_ONLY=egress alone.

The start-path section derives three kernelspecs from the `cellvm` one
(same gateway and image): `--no-templates` (cold boot), the default
(restore from a template), and `--pool 2` (hand-out from a pool daemon the
bench starts and stops by pid). See docs/snapshots.md.

The driver and each kernel's measurements (the main table) are in cells.py,
beside this file; the start path, the report and main are here.
"""
import json
import os
import pathlib
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
# The figures come from the gateways' info lines (vm.resumed, pool.size, ...); they log
# warnings only by default.
os.environ.setdefault("CELLVM_LOG_LEVEL", "info")

ROOT = pathlib.Path(__file__).resolve().parents[1]
BUILD = pathlib.Path(os.environ.get("CELLVM_BUILD", ROOT / "build")).resolve()
os.environ["JUPYTER_PATH"] = str(BUILD / "share" / "jupyter")
# cells.py sits beside this file: importable however bench.py is run or imported.
HERE = str(pathlib.Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from jupyter_client import KernelManager  # noqa: E402
from jupyter_client.kernelspec import KernelSpecManager  # noqa: E402

from cells import (BIG_WRITE_MB, CELLS, FIRST_USE_TIMEOUT, LINES_MB,  # noqa: E402
                   OUTPUT_TIMEOUT, PANDAS_RENDERS, PRINT_LINES, PRIVATE, QUICK, STARTS,
                   bench_kernel, children, pct, pss_kib, run_cell, start, stop)

COLD_STARTS = 2 if QUICK else 3
SNAP_STARTS = 5 if QUICK else 12
IDLE_SESSIONS = (2, 3) if QUICK else (4, 8)     # held at once: measured at each count
BUDGET_GIB = 12


# ---------------------------------------------------------------------------
# The start path: cold boot, restore, pool hand-out; PSS per idle session.

def derived_specs(root):
    """cellvm-bench-{cold,restore,restore-nojail,pool} kernelspecs under root."""
    base = json.loads((BUILD / "share/jupyter/kernels/cellvm/kernel.json").read_text())
    extra = {"cold": ["--no-templates"], "restore": [], "pool": ["--pool", "2"],
             "restore-nojail": ["--jail", "off"]}      # the jailer's cost (docs/security.md)
    for name, more in extra.items():
        d = pathlib.Path(root) / "kernels" / f"cellvm-bench-{name}"
        d.mkdir(parents=True, exist_ok=True)
        spec = dict(base, argv=base["argv"] + more, display_name=f"bench {name}")
        (d / "kernel.json").write_text(json.dumps(spec))
    os.environ["JUPYTER_PATH"] = f"{root}:{BUILD / 'share' / 'jupyter'}"
    return base["argv"]


def gateway_opts(argv):
    """The cellvm spec's options that shape the VM (for the template and pool)."""
    out = []
    for i, a in enumerate(argv):
        if a in ("--image", "--memory", "--vcpus", "--disk-size", "--accel", "--qemu"):
            out += [a, argv[i + 1]]
    return out


def ensure_template(gw, opts):
    t0 = time.perf_counter()
    while True:
        p = subprocess.run([gw, "--build-template"] + opts, capture_output=True, text=True)
        if p.returncode != 3:                   # 3: another process is building it
            break
        time.sleep(5)
    if p.returncode != 0:
        raise SystemExit(f"bench: template build failed: {p.stderr[-2000:]}")
    return time.perf_counter() - t0


class PoolDaemon:
    def __init__(self, gw, opts, size):
        self.log = tempfile.NamedTemporaryFile("w+", prefix="pool-", suffix=".log")
        self.size = size
        self.proc = subprocess.Popen([gw, "--pool-daemon", "--pool", str(size)] + opts,
                                     stdout=self.log, stderr=self.log)

    def wait_full(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            self.log.flush()
            sizes = [ln for ln in pathlib.Path(self.log.name).read_text().splitlines()
                     if "event=pool.size" in ln]
            if sizes and f"ready={self.size} " in sizes[-1]:
                return
            time.sleep(0.1)
        raise SystemExit("bench: the pool never filled: "
                         + pathlib.Path(self.log.name).read_text()[-2000:])

    def pss_lines(self):
        return [ln for ln in pathlib.Path(self.log.name).read_text().splitlines()
                if "event=pool.size" in ln]

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def log_ms(text, event, field):
    """field=N (ms) of the first `event` line in a gateway log, or None."""
    for ln in text.splitlines():
        if f"event={event} " in ln and f" {field}=" in ln:
            return float(ln.split(f" {field}=")[1].split()[0])
    return None


def log_time(text, event):
    """Wall-clock seconds of the first `event` line (its UTC timestamp); of
    the gateway's first line when event is None."""
    import calendar
    for ln in text.splitlines():
        if " level=" in ln and (event is None or f"event={event} " in ln
                                or ln.endswith(f"event={event}")):
            stamp, frac = ln.split()[0].rstrip("Z").split(".")
            return calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S")) + int(frac) / 1000
    return None


def first_kernel_info(kc, timeout=180):
    """Poll kernel_info until a reply: ready as a client could see it
    without wait_for_ready's fixed 0.2 s IOPub checks (jupyter_client 7.x)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        kc.kernel_info()
        try:
            while True:
                if kc.get_shell_msg(timeout=0.05)["msg_type"] == "kernel_info_reply":
                    return
        except Exception:
            pass
    raise RuntimeError("no kernel_info_reply")


def time_starts(name, n, between=None, probe=False):
    """Client-side start-to-ready, and where it went, from the gateway's log;
    then the first cell's round trip (a restored guest's code is cold).
    probe: to the first kernel_info_reply instead of wait_for_ready."""
    times, inner, gw_ready, client_over, first_cell = [], [], [], [], []
    for _ in range(n):
        if between:
            between()
        with tempfile.NamedTemporaryFile("w+") as log:
            km = KernelManager(kernel_name=name)
            t0 = time.perf_counter()
            km.start_kernel(stderr=log)
            kc = km.client()
            kc.start_channels()
            if probe:
                first_kernel_info(kc)
            else:
                kc.wait_for_ready(timeout=180)
            dt = time.perf_counter() - t0
            if not probe:
                first_cell.append(run_cell(kc, "x = 1").dt)
            stop(km, kc)
            text = pathlib.Path(log.name).read_text()
        times.append(dt)
        ms = log_ms(text, "vm.restored", "ready_ms") or log_ms(text, "vm.from_pool", "ms")
        if ms is not None:
            inner.append(ms / 1000)
        first, ready = log_time(text, None), log_time(text, "kernel.ready")
        if first and ready:
            gw_ready.append(ready - first)      # gateway up .. kernel hello
            client_over.append(dt - (ready - first))
    return times, {"vm_start_s": inner, "gateway_to_kernel_ready_s": gw_ready,
                   "client_overhead_s": client_over, "first_cell_s": first_cell}


def _measure_held(held):
    """(PSS gateway+QEMU, QEMU only, private) MiB of each held session."""
    out = []
    for km, _, _ in held:
        gw = km.provisioner.process.pid
        vm = sum(pss_kib(p) for p in children(gw))      # QEMU and what it started
        out.append((pss_kib(gw) / 1024, vm / 1024, pss_kib(gw, PRIVATE) / 1024))
    return out


def idle_pss(name, steps):
    """Hold sessions at once, steps[0] of them, then steps[1], ...: each
    idle after one cell. Returns {held: [(pss, vm_pss, private) MiB]}."""
    held, out = [], {}
    try:
        for n in steps:
            while len(held) < n:
                km, kc, dt = start(name)
                held.append((km, kc, dt))
                run_cell(kc, "x = 1")
            time.sleep(2.0)
            out[n] = _measure_held(held)
        return out
    finally:
        for km, kc, _ in held:
            stop(km, kc)


def pss_summary(by_held):
    """Per-session PSS at each count held, the marginal cost of one more
    session (PSS added / sessions added: what the budget really pays), and
    the sessions a budget holds: (budget - shared base) / marginal."""
    counts = sorted(by_held)
    lo, hi = counts[0], counts[-1]
    tot = {n: sum(t for t, _, _ in by_held[n]) for n in counts}
    marginal = (tot[hi] - tot[lo]) / (hi - lo) if hi > lo else tot[hi] / hi
    base = max(tot[lo] - lo * marginal, 0.0)
    v = by_held[hi]
    return {"per_session_MiB": statistics.median(t for t, _, _ in v),
            "per_session_by_held_MiB": {n: statistics.median(t for t, _, _ in by_held[n])
                                        for n in counts},
            "vm_only_MiB": statistics.median(q for _, q, _ in v),
            "private_MiB": statistics.median(p for _, _, p in v),
            "marginal_MiB": marginal, "shared_base_MiB": base,
            "all_MiB": [t for t, _, _ in v], "sessions_held": hi,
            f"sessions_in_{BUDGET_GIB}GiB": int((BUDGET_GIB * 1024 - base) // marginal)}


# ---------------------------------------------------------------------------
# The client's own floor: wait_for_ready against a stub kernel that answers
# at once (no process start, no VM), to show what jupyter_client itself costs.

def _stub_kernel(conn, stop):
    import zmq
    from jupyter_client.session import Session
    session = Session(key=conn["key"].encode(), signature_scheme=conn["signature_scheme"])
    ctx = zmq.Context()
    url = f"tcp://{conn['ip']}:%d"
    shell, iopub, hb = ctx.socket(zmq.ROUTER), ctx.socket(zmq.PUB), ctx.socket(zmq.ROUTER)
    others = [ctx.socket(zmq.ROUTER) for _ in range(2)]
    shell.bind(url % conn["shell_port"])
    iopub.bind(url % conn["iopub_port"])
    hb.bind(url % conn["hb_port"])
    others[0].bind(url % conn["control_port"])
    others[1].bind(url % conn["stdin_port"])
    poller = zmq.Poller()
    poller.register(shell, zmq.POLLIN)
    poller.register(hb, zmq.POLLIN)
    info = {"status": "ok", "protocol_version": "5.3", "implementation": "stub",
            "implementation_version": "0", "banner": "", "help_links": [],
            "language_info": {"name": "python", "version": "3", "mimetype": "text/x-python",
                              "file_extension": ".py"}}
    while not stop.is_set():
        for sock, _ in poller.poll(20):
            if sock is hb:
                hb.send_multipart(hb.recv_multipart())
                continue
            idents, msg = session.feed_identities(shell.recv_multipart())
            req = session.deserialize(msg)
            session.send(iopub, "status", {"execution_state": "busy"}, parent=req)
            session.send(shell, req["msg_type"].replace("_request", "_reply"), info,
                         parent=req, ident=idents)
            session.send(iopub, "status", {"execution_state": "idle"}, parent=req)
    for sock in [shell, iopub, hb, *others]:
        sock.close(linger=0)
    ctx.term()


def client_floor(n):
    """wait_for_ready against the stub: seconds each."""
    import threading
    from jupyter_client import BlockingKernelClient
    from jupyter_client.connect import write_connection_file
    out = []
    for _ in range(n):
        path = tempfile.mktemp(suffix=".json", prefix="cellvm-stub-")
        write_connection_file(path, ip="127.0.0.1", key=os.urandom(16).hex().encode())
        conn = json.loads(pathlib.Path(path).read_text())
        stop = threading.Event()
        t = threading.Thread(target=_stub_kernel, args=(conn, stop))
        t.start()
        time.sleep(0.1)                         # the stub is listening
        kc = BlockingKernelClient(connection_file=path)
        kc.load_connection_file()
        t0 = time.perf_counter()
        kc.start_channels()
        kc.wait_for_ready(timeout=30)
        out.append(time.perf_counter() - t0)
        kc.stop_channels()
        stop.set()
        t.join()
        os.unlink(path)
    return out



def bench_start_paths():
    gw_argv = derived_specs(tempfile.mkdtemp(prefix="cellvm-bench-"))
    gw, opts = gw_argv[0], gateway_opts(gw_argv)
    res = {"template_build_or_check_s": ensure_template(gw, opts)}
    rows = {}
    print("bench: cold boot ...", file=sys.stderr, flush=True)
    rows["cold boot"] = time_starts("cellvm-bench-cold", COLD_STARTS)
    print("bench: restore ...", file=sys.stderr, flush=True)
    time_starts("cellvm-bench-restore", 1)      # page cache warm, like a host in use
    rows["restore"] = time_starts("cellvm-bench-restore", SNAP_STARTS)
    rows["restore, first kernel_info_reply"] = time_starts("cellvm-bench-restore", SNAP_STARTS,
                                                            probe=True)
    time_starts("cellvm-bench-restore-nojail", 1)
    rows["restore, --jail off"] = time_starts("cellvm-bench-restore-nojail", SNAP_STARTS)
    print("bench: pool hand-out ...", file=sys.stderr, flush=True)
    pool = PoolDaemon(gw, opts, 2)
    try:
        pool.wait_full()
        rows["pool hand-out"] = time_starts("cellvm-bench-pool", SNAP_STARTS, pool.wait_full)
        rows["pool hand-out, first kernel_info_reply"] = time_starts(
            "cellvm-bench-pool", SNAP_STARTS, pool.wait_full, probe=True)
        res["pool_size_lines"] = pool.pss_lines()[-3:]
    finally:
        pool.stop()
    for k, (v, parts) in rows.items():
        res[k] = {"p50_s": pct(v, 50), "p95_s": pct(v, 95), "n": len(v), "all_s": v}
        for part, pv in parts.items():
            res[k][part] = {"p50_s": pct(pv, 50), "p95_s": pct(pv, 95), "n": len(pv)}
    floor = client_floor(SNAP_STARTS)
    res["client_floor"] = {"p50_s": pct(floor, 50), "p95_s": pct(floor, 95), "n": len(floor),
                           "all_s": floor}
    print("bench: idle PSS ...", file=sys.stderr, flush=True)
    res["idle_pss_restored"] = pss_summary(idle_pss("cellvm-bench-restore", IDLE_SESSIONS))
    res["idle_pss_cold"] = pss_summary(idle_pss("cellvm-bench-cold", (1, 2)))
    return res


def _with_prev(txt, prev_txt):
    return f"{txt} (prev {prev_txt})" if prev_txt is not None else txt


def _pair(r, spec="{:.3f}"):
    """'p50 / p95' of a {p50_s, p95_s, n} dict, or None."""
    if not r or not r.get("n"):
        return None
    return f"{spec.format(r['p50_s'])} / {spec.format(r['p95_s'])}"


def print_start_paths(res, prev=None):
    prev = prev or {}
    print("start path | client start_kernel..wait_for_ready p50 / p95 s | n"
          " | VM start in gateway p50 / p95 s | gateway up..kernel hello p50 s"
          " | client's own share p50 s | first cell after ready p50 s")
    print("--- | --- | --- | --- | --- | --- | ---")

    def p50(r, part):
        return f"{r[part]['p50_s']:.3f}" if r and r.get(part, {}).get("n") else None

    for k in ("cold boot", "restore", "restore, --jail off", "restore, first kernel_info_reply",
              "pool hand-out", "pool hand-out, first kernel_info_reply"):
        if k not in res:
            continue
        r, pr = res[k], prev.get(k)
        cells = [_with_prev(_pair(r), _pair(pr)), str(r["n"]),
                 _with_prev(_pair(r["vm_start_s"]) or "-", _pair((pr or {}).get("vm_start_s")))]
        for part in ("gateway_to_kernel_ready_s", "client_overhead_s", "first_cell_s"):
            cells.append(_with_prev(p50(r, part) or "-", p50(pr, part)))
        print(" | ".join([k] + cells))
    f, pf = res["client_floor"], prev.get("client_floor")
    print(f"wait_for_ready alone, against a stub that answers at once"
          f" | {_with_prev(_pair(f), _pair(pf))} | {f['n']} | - | - | {f['p50_s']:.3f} | -")
    print()
    print("idle session | PSS MiB per session (median) by sessions held | QEMU only"
          " | private MiB | marginal MiB per extra session | shared base MiB"
          f" | sessions in {BUDGET_GIB} GiB")
    print("--- | --- | --- | --- | --- | --- | ---")
    for k in ("restored", "cold"):
        r, pr = res[f"idle_pss_{k}"], prev.get(f"idle_pss_{k}") or {}
        pby = pr.get("per_session_by_held_MiB", {})
        by = ", ".join(f"{v:.1f} ({n} held" + (f"; prev {pby[str(n)]:.1f})" if str(n) in pby
                                                else ")")
                       for n, v in r["per_session_by_held_MiB"].items())
        cells = [by]
        for f_ in ("vm_only_MiB", "private_MiB", "marginal_MiB", "shared_base_MiB"):
            cells.append(_with_prev(f"{r[f_]:.1f}", f"{pr[f_]:.1f}" if f_ in pr else None))
        b = f"sessions_in_{BUDGET_GIB}GiB"
        cells.append(_with_prev(str(r[b]), str(pr[b]) if b in pr else None))
        print(" | ".join([k] + cells))
    print()


# The main table: one row per figure, one column per kernel.
ROWS = [
    ("start_kernel..wait_for_ready p50 s", "start_to_ready_p50_s", "{:.3f}"),
    ("start_kernel..wait_for_ready p95 s", "start_to_ready_p95_s", "{:.3f}"),
    ("cell `1` p50 ms", "cell_1_p50_ms", "{:.2f}"),
    ("cell `1` p95 ms", "cell_1_p95_ms", "{:.2f}"),
    ("cell `pass` p50 ms", "cell_pass_p50_ms", "{:.2f}"),
    ("cell `pass` p95 ms", "cell_pass_p95_ms", "{:.2f}"),
    (f"print {PRINT_LINES:,} lines, lines/s", "print_lines_per_s", "{:,.0f}"),
    (f"{LINES_MB} MB as 100-byte lines in one write, MB/s", "stdout_100B_lines_MB_per_s",
     "{:.2f}"),
    (f"one {BIG_WRITE_MB} MB print, MB/s", "stdout_one_write_MB_per_s", "{:.2f}"),
    ("2,000-row DataFrame as HTML p50 ms", "pandas_html_p50_ms", "{:.1f}"),
    ("2,000-row DataFrame as HTML p95 ms", "pandas_html_p95_ms", "{:.1f}"),
    ("fresh session: first complete `df.gro` s", "first_complete_s", "{:.3f}"),
    ("fresh session: first inspect `df.groupby` s", "first_inspect_s", "{:.3f}"),
    ("fresh session: first `df.groupby?` cell s", "first_inspect_cell_s", "{:.3f}"),
    ("fresh session: first matplotlib chart s", "first_matplotlib_s", "{:.3f}"),
    ("fresh session: first DataFrame HTML (with import) s", "first_pandas_html_s", "{:.3f}"),
    ("PSS idle after trivial cells MiB", "idle_pss_MiB", "{:.1f}"),
    ("PSS after the workload MiB", "pss_after_workload_MiB", "{:.1f}"),
]


def _figure(r, key, spec):
    """The text of one figure: the number, or what went wrong, or None."""
    if r is None:
        return None
    why = r.get("failures", {}).get(key)
    if why:
        return why.replace("|", "/")
    v = r.get(key)
    return spec.format(v) if isinstance(v, (int, float)) else None


def _prev_figure(r, key, spec):
    """As _figure, but a failure in one word."""
    txt = _figure(r, key, spec)
    return txt.split(":")[0].split(" (")[0] if txt and txt[0].isalpha() else txt


def print_table(rows, prev_rows):
    prev = {r["kernel"]: r for r in prev_rows or []}
    print(" | ".join(["figure"] + [r["kernel"] for r in rows]))
    print(" | ".join(["---"] * (len(rows) + 1)))
    for label, key, spec in ROWS:
        cells = [_with_prev(_figure(r, key, spec) or "-", _prev_figure(prev.get(r["kernel"]), key, spec))
                 for r in rows]
        print(" | ".join([label] + cells))


def git_commit():
    try:
        p = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                           text=True, timeout=10)
        return p.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def previous_run(history, quick, section=None):
    """The last run in history with the same BENCH_QUICK setting, else the last;
    with section, the last that has that section (a run of one section alone
    is not the previous run of the others)."""
    last = same = None
    try:
        with open(history) as f:
            for line in f:
                try:
                    run = json.loads(line)
                except ValueError:
                    continue
                if section and not run.get(section):
                    continue
                last = run
                if run.get("meta", {}).get("quick") == quick:
                    same = run
    except OSError:
        pass
    return same or last


def cellvm_template():
    """The cellvm kernelspec's template, built (or checked) as the start paths do."""
    argv = json.loads((BUILD / "share/jupyter/kernels/cellvm/kernel.json").read_text())["argv"]
    return ensure_template(argv[0], gateway_opts(argv))


def main():
    t_run = time.perf_counter()
    only = os.environ.get("BENCH_ONLY")
    found = KernelSpecManager().find_kernel_specs()
    names = os.environ.get("BENCH_KERNELS")
    if names:
        kernels = names.split(",")
    else:
        kernels = [k for k in ("cellvm", "cellvm-unsafe-local", "python3") if k in found]
        if "cellvm" in kernels and not (BUILD / "image").exists():
            kernels.remove("cellvm")
    out = pathlib.Path(os.environ.get("CELLVM_BENCH_OUT", BUILD / "bench" / "results.json"))
    history = out.parent / "history.jsonl"
    prev = previous_run(history, QUICK, "results")
    prev_snap = previous_run(history, QUICK, "start_paths")
    prev_sess = previous_run(history, QUICK, "sessions")
    prev_mcp = previous_run(history, QUICK, "mcp")
    prev_move = previous_run(history, QUICK, "move")
    meta = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": git_commit(),
            "host": socket.gethostname(), "host_cpus": os.cpu_count(),
            "loadavg_at_start": os.getloadavg(), "quick": QUICK, "kernels": kernels,
            "starts": STARTS, "trivial_cells": CELLS, "pandas_renders": PANDAS_RENDERS,
            "print_lines": PRINT_LINES, "lines_MB": LINES_MB, "one_write_MB": BIG_WRITE_MB,
            "first_use_timeout_s": FIRST_USE_TIMEOUT, "output_timeout_s": OUTPUT_TIMEOUT,
            "store_history": True}
    snap = sess = mcp = move = burst = ram = egress = None
    if "cellvm" in kernels and os.environ.get("BENCH_SNAPSHOTS", "1") != "0" and not only:
        snap = bench_start_paths()
    if os.environ.get("BENCH_SESSIONS", "1") != "0" and only in (None, "sessions"):
        import sessions_bench
        sess = sessions_bench.bench_sessions(kernels, cellvm_template)
    if os.environ.get("BENCH_MCP", "1") != "0" and only in (None, "mcp"):
        import mcp_bench
        mcp = mcp_bench.bench_mcp(kernels, cellvm_template)
    if os.environ.get("BENCH_MOVE", "1") != "0" and only in (None, "move"):
        import move_bench
        move = move_bench.bench_move(kernels, cellvm_template)
    if os.environ.get("BENCH_BURST", "1") != "0" and only in (None, "burst"):
        import burst_bench
        burst = burst_bench.bench_burst(kernels)
    if os.environ.get("BENCH_RAM", "1") != "0" and only in (None, "ram"):
        import ram_bench
        ram = ram_bench.bench_ram(kernels)
    if os.environ.get("BENCH_EGRESS", "1") != "0" and only in (None, "egress"):
        import egress_bench
        egress = egress_bench.bench_egress(kernels, cellvm_template)
    rows = []
    for k in (kernels if not only else []):
        print(f"bench: {k} ...", file=sys.stderr, flush=True)
        rows.append(bench_kernel(k, os.environ.get("BENCH_FIRST_USE", "1") != "0"))
    meta["run_s"] = time.perf_counter() - t_run
    meta["loadavg_at_end"] = os.getloadavg()
    shown = set()
    for what, p in (("main table", prev if rows else None),
                    ("start paths", prev_snap if snap else None),
                    ("sessions", prev_sess if sess else None),
                    ("mcp", prev_mcp if mcp else None),
                    ("move", prev_move if move else None)):
        if p is None or id(p) in shown:
            continue
        shown.add(id(p))
        pm = p.get("meta", {})
        print(f"(prev ...) is the previous run in {history} ({what}): {pm.get('when')}, commit "
              f"{(pm.get('commit') or '?')[:12]}, host {pm.get('host')}"
              + (", BENCH_QUICK" if pm.get("quick") else ""))
    if not shown:
        print(f"no previous run in {history}")
    print(f"this run: {meta['when']}, commit {(meta['commit'] or '?')[:12]}, host {meta['host']},"
          f" {meta['run_s']:.0f} s, load average {meta['loadavg_at_start'][0]:.2f} at start,"
          f" {meta['loadavg_at_end'][0]:.2f} at end")
    print()
    if snap:
        print_start_paths(snap, (prev_snap or {}).get("start_paths"))
    if sess:
        import sessions_bench
        sessions_bench.print_sessions(sess, (prev_sess or {}).get("sessions"))
    if mcp:
        import mcp_bench
        mcp_bench.print_mcp(mcp, (prev_mcp or {}).get("mcp"))
    if move:
        import move_bench
        move_bench.print_move(move, (prev_move or {}).get("move"))
    if burst:
        import burst_bench
        burst_bench.print_burst(burst)
    if ram:
        import ram_bench
        ram_bench.print_ram(ram)
    if egress:
        import egress_bench
        egress_bench.print_egress(egress)
    if rows:
        print_table(rows, (prev or {}).get("results"))
    result = {"meta": meta, "results": rows, "start_paths": snap, "sessions": sess, "mcp": mcp,
              "move": move, "burst": burst, "ram": ram, "egress": egress}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    with open(history, "a") as f:
        f.write(json.dumps(result) + "\n")
    print(f"results: {out} (and a line in {history.name})")
    failed = [f"{r['kernel']}: {k}: {v}" for r in rows + [x for x in (sess, mcp, move, ram,
                                                                       egress) if x]
              for k, v in r["failures"].items() if v.startswith("FAIL")]
    if failed:
        print("bench: FAILED:\n  " + "\n  ".join(failed), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
