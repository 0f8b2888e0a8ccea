#!/usr/bin/python3
"""cellvm benchmarks: one run, every backend side by side, one table.

Every figure comes from the same jupyter_client driver code, so backends are
compared like for like. Results also go to build/bench/results.json (or
$CELLVM_BENCH_OUT) for A/B comparison between runs.

Environment: CELLVM_BUILD (build dir), BENCH_KERNELS (comma list of
kernelspec names; default: every cellvm kernelspec found, plus python3),
BENCH_QUICK=1 for fewer repeats.
"""
import json
import os
import pathlib
import statistics
import sys
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


def pct(values, p):
    v = sorted(values)
    if not v:
        return float("nan")
    k = (len(v) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def pss_kib(pid):
    """PSS of a process and all its descendants, from smaps_rollup."""
    total = 0
    for p in [pid] + descendants(pid):
        try:
            for line in open(f"/proc/{p}/smaps_rollup"):
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


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


def main():
    found = KernelSpecManager().find_kernel_specs()
    names = os.environ.get("BENCH_KERNELS")
    if names:
        kernels = names.split(",")
    else:
        kernels = [k for k in ("cellvm", "cellvm-unsafe-local", "python3") if k in found]
        if "cellvm" in kernels and not (BUILD / "image").exists():
            kernels.remove("cellvm")
    rows = []
    for k in kernels:
        print(f"bench: {k} ...", file=sys.stderr, flush=True)
        rows.append(bench_kernel(k))
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
    out.write_text(json.dumps({"meta": meta, "results": rows}, indent=2))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
