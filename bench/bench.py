#!/usr/bin/python3
"""cellvm benchmarks: one run, every backend side by side, one table.

Every figure comes from the same jupyter_client driver code, so backends are
compared like for like. Results also go to build/bench/results.json (or
$CELLVM_BENCH_OUT) for A/B comparison between runs.

Environment: CELLVM_BUILD (build dir), BENCH_KERNELS (comma list of
kernelspec names; default: every cellvm kernelspec found, plus python3),
BENCH_QUICK=1 for fewer repeats, BENCH_SNAPSHOTS=0 to skip the start-path
section (cold boot / restore / pool hand-out, PSS per idle session).

The start-path section derives three kernelspecs from the `cellvm` one
(same gateway and image): `--no-templates` (cold boot), the default
(restore from a template), and `--pool 2` (hand-out from a pool daemon the
bench starts and stops by pid). See docs/snapshots.md.
"""
import json
import os
import pathlib
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
BUILD = pathlib.Path(os.environ.get("CELLVM_BUILD", ROOT / "build")).resolve()
os.environ["JUPYTER_PATH"] = str(BUILD / "share" / "jupyter")

from jupyter_client import KernelManager  # noqa: E402
from jupyter_client.kernelspec import KernelSpecManager  # noqa: E402

QUICK = os.environ.get("BENCH_QUICK") == "1"
STARTS = 3 if QUICK else 8
CELLS = 30 if QUICK else 200
STDOUT_MB = 4 if QUICK else 16
COLD_STARTS = 2 if QUICK else 3
SNAP_STARTS = 5 if QUICK else 12
IDLE_SESSIONS = (2, 3) if QUICK else (4, 8)     # held at once: measured at each count
BUDGET_GIB = 12


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
    kids = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids += [int(x) for x in f.read().split()]
    except OSError:
        return []
    out = list(kids)
    for k in kids:
        out += descendants(k)
    return out


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def start(name):
    km = KernelManager(kernel_name=name)
    t0 = time.perf_counter()
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=120)
    return km, kc, time.perf_counter() - t0


def stop(km, kc):
    kc.stop_channels()
    km.shutdown_kernel(now=False)


def run_cell(kc, code, timeout=120):
    """Execute and wait for reply and idle; returns (seconds, stdout bytes)."""
    t0 = time.perf_counter()
    msg_id = kc.execute(code, store_history=False)
    got = 0
    idle = reply = False
    while not (idle and reply):
        if not idle:
            m = kc.get_iopub_msg(timeout=timeout)
            if m["parent_header"].get("msg_id") != msg_id:
                continue
            if m["msg_type"] == "stream":
                got += len(m["content"]["text"])
            idle = m["msg_type"] == "status" and m["content"]["execution_state"] == "idle"
        else:
            r = kc.get_shell_msg(timeout=timeout)
            reply = r["parent_header"].get("msg_id") == msg_id
    return time.perf_counter() - t0, got


def bench_kernel(name):
    res = {"kernel": name}
    starts = []
    for _ in range(STARTS):
        km, kc, dt = start(name)
        starts.append(dt)
        stop(km, kc)
    res["start_to_ready_p50_s"] = pct(starts, 50)
    res["start_to_ready_p95_s"] = pct(starts, 95)
    km, kc, _ = start(name)
    try:
        run_cell(kc, "1+1")
        rtts = [run_cell(kc, "1+1")[0] for _ in range(CELLS)]
        res["cell_rtt_p50_ms"] = pct(rtts, 50) * 1000
        res["cell_rtt_p95_ms"] = pct(rtts, 95) * 1000
        n = STDOUT_MB * 1024
        code = ("import sys\nline = 'x' * 1023 + '\\n'\n"
                f"for _ in range({n}): sys.stdout.write(line)\n")
        dt, got = run_cell(kc, code, timeout=600)
        res["stdout_MiB_per_s"] = got / dt / (1 << 20)
        res["stdout_bytes_received"] = got
        time.sleep(1.0)
        res["idle_pss_MiB"] = pss_kib(km.provisioner.process.pid) / 1024
    finally:
        stop(km, kc)
    return res


# ---------------------------------------------------------------------------
# The start path: cold boot, restore, pool hand-out; PSS per idle session.

def derived_specs(root):
    """cellvm-bench-{cold,restore,pool} kernelspecs under root."""
    base = json.loads((BUILD / "share/jupyter/kernels/cellvm/kernel.json").read_text())
    extra = {"cold": ["--no-templates"], "restore": [], "pool": ["--pool", "2"]}
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
                first_cell.append(run_cell(kc, "x = 1")[0])
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


def print_start_paths(res):
    print("start path | client start_kernel..wait_for_ready p50 / p95 s | n"
          " | VM start in gateway p50 / p95 s | gateway up..kernel hello p50 s"
          " | client's own share p50 s | first cell after ready p50 s")
    print("--- | --- | --- | --- | --- | --- | ---")
    for k in ("cold boot", "restore", "restore, first kernel_info_reply", "pool hand-out",
              "pool hand-out, first kernel_info_reply"):
        r = res[k]
        vm = r["vm_start_s"]
        vm_txt = f"{vm['p50_s']:.3f} / {vm['p95_s']:.3f}" if vm["n"] else "-"
        fc = r["first_cell_s"]
        fc_txt = f"{fc['p50_s']:.3f}" if fc["n"] else "-"
        print(f"{k} | {r['p50_s']:.3f} / {r['p95_s']:.3f} | {r['n']} | {vm_txt}"
              f" | {r['gateway_to_kernel_ready_s']['p50_s']:.3f}"
              f" | {r['client_overhead_s']['p50_s']:.3f} | {fc_txt}")
    f = res["client_floor"]
    print(f"wait_for_ready alone, against a stub that answers at once | {f['p50_s']:.3f} / "
          f"{f['p95_s']:.3f} | {f['n']} | - | - | {f['p50_s']:.3f} | -")
    print()
    print("idle session | PSS MiB per session (median) by sessions held | QEMU only"
          " | private MiB | marginal MiB per extra session | shared base MiB"
          f" | sessions in {BUDGET_GIB} GiB")
    print("--- | --- | --- | --- | --- | --- | ---")
    for k in ("restored", "cold"):
        r = res[f"idle_pss_{k}"]
        by = ", ".join(f"{v:.1f} ({n} held)" for n, v in r["per_session_by_held_MiB"].items())
        print(f"{k} | {by} | {r['vm_only_MiB']:.1f} | {r['private_MiB']:.1f}"
              f" | {r['marginal_MiB']:.1f} | {r['shared_base_MiB']:.1f}"
              f" | {r[f'sessions_in_{BUDGET_GIB}GiB']}")
    print()


def main():
    found = KernelSpecManager().find_kernel_specs()
    names = os.environ.get("BENCH_KERNELS")
    if names:
        kernels = names.split(",")
    else:
        kernels = [k for k in ("cellvm", "cellvm-unsafe-local", "python3") if k in found]
        if "cellvm" in kernels and not (BUILD / "image").exists():
            kernels.remove("cellvm")
    snap = None
    if "cellvm" in kernels and os.environ.get("BENCH_SNAPSHOTS", "1") != "0":
        snap = bench_start_paths()
    rows = []
    for k in kernels:
        print(f"bench: {k} ...", file=sys.stderr, flush=True)
        rows.append(bench_kernel(k))
    if snap:
        print_start_paths(snap)
    cols = [("kernel", "{}"), ("start_to_ready_p50_s", "{:.3f}"), ("start_to_ready_p95_s", "{:.3f}"),
            ("cell_rtt_p50_ms", "{:.2f}"), ("cell_rtt_p95_ms", "{:.2f}"),
            ("stdout_MiB_per_s", "{:.1f}"), ("idle_pss_MiB", "{:.1f}")]
    print(" | ".join(c for c, _ in cols))
    print(" | ".join("---" for _ in cols))
    for r in rows:
        print(" | ".join(f.format(r[c]) for c, f in cols))
    out = pathlib.Path(os.environ.get("CELLVM_BENCH_OUT", BUILD / "bench" / "results.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "starts": STARTS,
            "cells": CELLS, "stdout_MiB": STDOUT_MB, "host_cpus": os.cpu_count()}
    out.write_text(json.dumps({"meta": meta, "results": rows, "start_paths": snap}, indent=2))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
