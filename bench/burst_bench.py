#!/usr/bin/python3
"""A burst of session starts on one host (docs/sessions.md, "Admission"), as a product's busy
morning makes it: N jupyter_client KernelManagers on the `cellvm` kernelspec start at once, in
threads, and each then runs CELLS cells (`n = n + 1` after `n = 0`, each reply checked).

Reported: ready p50/p95/max (s, from the burst's start), cells run of cells asked, and what the
gateways' logs say of their starts: restores, cold boots (each with its reason), sessions given
up, how many waited for admission and the longest wait. Every gateway and VM is killed by pid.

Environment: CELLVM_BUILD; BURST_N (default 24, BENCH_QUICK: 8), BURST_CELLS (50, quick: 20),
BURST_ARGS (extra gateway arguments, space-separated, e.g. `--admit 0` for the row without
admission). Run alone: `bench/burst_bench.py`; `make bench` runs it in its own section
(BENCH_BURST=0 skips it, BENCH_ONLY=burst runs it alone), with and without the line.
"""
import os
import pathlib
import re
import sys
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "integration"))

from cells import QUICK, pct  # noqa: E402
from sessions_bench import _sessions  # noqa: E402

READY_S = 600
CELL_S = 120


def _one(S, i, args, out):
    rec = {"ready": None, "cells": 0, "error": None}
    out[i] = rec
    s = None
    try:
        s = S.Session("cellvm", name=f"burst-{i}", extra_args=args)
        t0 = time.perf_counter()
        s.start(wait=False)
        s.kc.wait_for_ready(timeout=READY_S)
        rec["ready"] = time.perf_counter() - t0
        rec["session"] = s
        if S.run_cell(s.kc, "n = 0", CELL_S).status != "ok":
            raise RuntimeError("n = 0 failed")
        for k in range(1, out["cells"] + 1):
            r = S.run_cell(s.kc, "n = n + 1\nn", CELL_S)
            if r.status != "ok" or r.results() != [str(k)]:
                raise RuntimeError(f"cell {k}: {r.describe()}")
            rec["cells"] = k
    except Exception as e:                      # the row says what was lost, and why
        rec["error"] = f"{type(e).__name__}: {e}"[:300]
    finally:
        rec["log"] = s.log_text() if s else ""


def _count(logs, event):
    return sum(len(re.findall(rf"event={re.escape(event)}\b", text)) for text in logs)


def burst(n, cells, args=()):
    """Start n sessions at once; the figures, every session closed."""
    S = _sessions()
    out = {"cells": cells}
    threads = [threading.Thread(target=_one, args=(S, i, list(args), out)) for i in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    recs = [out[i] for i in range(n)]
    for r in recs:
        if r.get("session"):
            r["session"].close()
    logs = [r["log"] for r in recs]
    ready = sorted(r["ready"] for r in recs if r["ready"] is not None)
    waits = [int(m) for text in logs for m in re.findall(r"event=vm\.admitted .*?waited_ms=(\d+)",
                                                           text)]
    reasons = sorted({m for text in logs
                      for m in re.findall(r'event=vm\.cold_boot reason="([^"]*)"', text)})
    return {
        "n": n, "cells_asked": n * cells, "cells_run": sum(r["cells"] for r in recs),
        "ready": len(ready), "ready_p50_s": pct(ready, 50) if ready else None,
        "ready_p95_s": pct(ready, 95) if ready else None, "ready_max_s": ready[-1] if ready else None,
        "restored": _count(logs, "vm.restored"), "cold_boots": _count(logs, "vm.cold_boot"),
        "cold_boot_reasons": reasons[:5], "gave_up": _count(logs, "session.give_up"),
        "admission_waits": len([w for w in waits if w > 0]), "admission_wait_max_ms": max(waits or [0]),
        "errors": sorted({r["error"] for r in recs if r["error"]})[:5], "wall_s": wall,
    }


def report(row, label):
    f = lambda v: "-" if v is None else f"{v:.1f}"          # noqa: E731
    print(f"burst {label}: {row['n']} starts at once, ready {row['ready']}/{row['n']}, "
          f"p50 {f(row['ready_p50_s'])} s, p95 {f(row['ready_p95_s'])} s, "
          f"max {f(row['ready_max_s'])} s; cells {row['cells_run']}/{row['cells_asked']}; "
          f"restored {row['restored']}, cold boots {row['cold_boots']}, gave up {row['gave_up']}; "
          f"waited for admission {row['admission_waits']} (max {row['admission_wait_max_ms']} ms)")
    for why in row["cold_boot_reasons"]:
        print(f"  cold boot: {why}")
    for e in row["errors"]:
        print(f"  lost: {e}")


ROWS = (("no line (--admit 0), the anchor", ["--admit", "0"]), ("default line", []))


def bench_burst(kernels):
    """make bench's burst section: the same burst without the admission line and with the
    default one, side by side in one run; None without the `cellvm` kernelspec."""
    if "cellvm" not in kernels:
        return None
    n = int(os.environ.get("BURST_N", "8" if QUICK else "24"))
    cells = int(os.environ.get("BURST_CELLS", "20" if QUICK else "50"))
    return [dict(burst(n, cells, args), label=label) for label, args in ROWS]


def print_burst(rows):
    print("burst: N `cellvm` sessions started at once, each then running cells "
          "(bench/burst_bench.py)")
    for row in rows:
        report(row, row["label"])
    print()


def main():
    n = int(os.environ.get("BURST_N", "8" if QUICK else "24"))
    cells = int(os.environ.get("BURST_CELLS", "20" if QUICK else "50"))
    args = os.environ.get("BURST_ARGS", "").split()
    row = burst(n, cells, args)
    report(row, " ".join(args) or "default")
    return 0 if row["cells_run"] == row["cells_asked"] else 1


if __name__ == "__main__":
    sys.exit(main())
