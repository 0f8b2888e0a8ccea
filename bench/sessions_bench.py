#!/usr/bin/python3
"""Sessions that outlive a process (docs/sessions.md), measured the way a
client sees them: one section of `make bench`, run by bench.py after the
start paths (BENCH_SESSIONS=0 skips it; BENCH_ONLY=sessions, or running this
file, runs it alone and appends that to the history all the same).

Every session is a tests/integration/sessions.py Session (the integration
tests' factory: the build's kernelspecs, extra gateway args in a private
copy of the spec, every pid it started killed by pid on close), driven with
jupyter_client as a frontend drives it: `kc.execute(code)` with the
defaults (store_history=True). Per kernel (`cellvm`, `cellvm-unsafe-local`,
and ipykernel's `python3` for reference):

- client restart: `km.restart_kernel()` (a shutdown_request with restart
  true, then a new launch on the same connection file), `kc.wait_for_ready()`,
  until a `1` cell is answered; p50/p95 over RESTARTS;
- kernel death: the cell `import os; os.kill(os.getpid(), 9)` is sent; time
  until the next `1` cell is answered (cellvm replies KernelDied and starts a
  new kernel itself; ipykernel has no restart of its own: a client-side
  restarter polls `is_alive()` every 3 s, jupyter_client's
  KernelRestarter.time_to_dead, which is what Jupyter Server runs, then
  `restart_kernel(now=True)`).

microvm only, in a store of its own (a temp dir, removed at the end):

- `cellvm_snapshot_request` (control) of a fresh session (one `1` cell run;
  SNAPS of them) and of one holding a 200 MB DataFrame: the reply's ms,
  pause_ms and bytes, the client's round trip, the store's size of it;
- resume-to-ready: a session started with CELLVM_FROM_SNAPSHOT and
  CELLVM_SNAPSHOT_DIR in its env (as Jupyter Server passes a kernel's env),
  start_kernel .. first `1` answered (RESUMES, from the fresh snapshot); the
  gateway's own `vm.resumed ms=` beside it; once from the DataFrame's;
- FORKS sessions from the fresh snapshot started at once (threads):
  start-to-first-cell p50 and max;
- idle: a session with `--idle-pause 2`, after `cellvm ls --json` says
  paused: its host PSS (that listing's host_pss_bytes, /proc's own figure,
  and its private part: PSS also carries a share of the shared libraries,
  larger when fewer processes map them) and the paused snapshot's size
  (`cellvm snapshot ls`); then the first cell after the pause (the
  transparent resume), IDLE_CYCLES times.
  Beside it an idle running session (no --idle-pause) after the same wait:
  PSS of the gateway + its QEMU (qemu_pid from `cellvm ls --json`) and its
  workspace bytes.
- notebook share: cellvm-notebook against cellvm, both started in notebooks/ and
  alternated: start..first `1`, and the copy's own time (its share.done line); then
  once in a folder of 50 x 1 MiB.

Targets are printed beside the figures, not asserted: restart p50 < 1 s
(both kinds), resume-to-ready p50 < 1 s for a fresh session, an idle-paused
session < 5 MiB of host RAM.
"""
import math
import os
import pathlib
import shutil
import sys
import tempfile
import threading
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

RESTARTS = 5 if QUICK else 10
SNAPS = 2 if QUICK else 3                       # snapshots of the fresh session
RESUMES = 4 if QUICK else 8
SHARES = 3 if QUICK else 5                  # cellvm / cellvm-notebook pairs
FORKS = 4
IDLE_PAUSE_S = 2
IDLE_CYCLES = 2 if QUICK else 3                 # pause, then a cell wakes it
READY = 240                                     # a session (or a restart) to answer at all
SNAP_TIMEOUT = 600                              # a snapshot's reply, under TCG
CELL_TIMEOUT = 600                              # the DataFrame cell, under TCG
KILL = "import os; os.kill(os.getpid(), 9)"
DF_CELL = ("import numpy as np, pandas as pd; df = pd.DataFrame(np.random.rand(3_125_000, 8))\n"
           "print(int(df.memory_usage().sum()))")
DF_BYTES = 200_000_000
DEFAULT_MEM_MIB = 512
RESTARTER_S = 3.0                               # jupyter_client KernelRestarter.time_to_dead
TARGET_S = 1.0
TARGET_PAUSED_MIB = 5.0
MiB = 1024 * 1024


def _perf():
    return time.perf_counter()


def _sessions():
    """tests/integration/sessions.py, its logs under our own temp dir."""
    import sessions as S
    if S.LOG_ROOT is None:
        S.LOG_ROOT = tempfile.mkdtemp(prefix="cellvm-bench-sessions-logs-")
    return S


def _cell1(kc, timeout=READY):
    run_cell(kc, "1", timeout).check("text/plain")


def _ready_and_cell(s, t0):
    """wait_for_ready, then a `1` cell: (seconds to ready, to the cell answered) from t0."""
    try:
        s.kc.wait_for_ready(timeout=READY)
    except RuntimeError as e:
        raise Timeout(f"not ready in {READY} s: {e}") from None
    t_ready = _perf()
    _cell1(s.kc)
    t_cell = _perf()
    s.track()
    return t_ready - t0, t_cell - t0


def started(kernel, name, **kw):
    """A Session started as a client starts one: (session, s to ready, s to first `1`)."""
    S = _sessions()
    s = S.Session(kernel, name=f"bench-{name}", **kw)
    try:
        t0 = _perf()
        s.start(wait=False)
        ready, cell = _ready_and_cell(s, t0)
    except BaseException:
        s.close()
        raise
    return s, ready, cell


PRIVATE = ("Private_Clean:", "Private_Dirty:")


def _pss_one(pid, fields=("Pss:",)):
    """PSS bytes (or other smaps_rollup fields, summed) of one process, not its
    children; None when it is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return sum(int(ln.split()[1]) for ln in f if ln.startswith(fields)) * 1024
    except OSError:
        return None


def _log_ms(text, event, field="ms"):
    out = []
    for ln in text.splitlines():
        if f"event={event} " in ln and f" {field}=" in ln:
            out.append(float(ln.split(f" {field}=")[1].split()[0]))
    return out


def _p(values, prefix, scale=1.0):
    """{prefix_p50, prefix_p95} of values (scaled)."""
    v = [x * scale for x in values]
    return {f"{prefix}_p50": pct(v, 50), f"{prefix}_p95": pct(v, 95)}


# ---------------------------------------------------------------------------
# Restarts and deaths, per kernel

def restarts(kernel, n):
    s, _, _ = started(kernel, f"restart-{kernel}")
    total, call, ready = [], [], []
    try:
        for _ in range(n):
            t0 = _perf()
            s.km.restart_kernel(now=False)
            t1 = _perf()
            r, c = _ready_and_cell(s, t0)
            total.append(c)
            call.append(t1 - t0)
            ready.append(r)
    finally:
        s.close()
    k = kernel
    return {**_p(total, f"{k}:restart_s"), f"{k}:restart_call_p50_s": pct(call, 50),
            f"{k}:restart_ready_p50_s": pct(ready, 50), f"{k}:restart_n": len(total),
            f"{k}:restart_all_s": total}


def deaths(kernel, n):
    s, _, _ = started(kernel, f"death-{kernel}")
    t_restarter = _perf()                       # the client-side restarter's first tick
    total, noticed = [], []
    try:
        for _ in range(n):
            t0 = _perf()
            if s.backend:                       # cellvm: the gateway starts a new kernel
                c = run_cell(s.kc, KILL, READY)
                if (c.reply or {}).get("ename") != "KernelDied":
                    raise Failed(f"the kill cell's reply is not KernelDied: {c.reply}")
                noticed.append(_perf() - t0)
            else:                               # ipykernel: a restarter as Jupyter Server's
                s.kc.execute(KILL)
                while True:
                    k = math.floor((_perf() - t_restarter) / RESTARTER_S) + 1
                    time.sleep(max(0.0, t_restarter + k * RESTARTER_S - _perf()))
                    if not s.km.is_alive():
                        break
                    if _perf() - t0 > READY:
                        raise Timeout(f"the kernel still runs {READY} s after the kill cell")
                noticed.append(_perf() - t0)
                s.km.restart_kernel(now=True)
                s.kc.wait_for_ready(timeout=READY)
            _cell1(s.kc)
            total.append(_perf() - t0)
            s.track()
    finally:
        s.close()
    k = kernel
    return {**_p(total, f"{k}:death_s"), f"{k}:death_noticed_p50_s": pct(noticed, 50),
            f"{k}:death_n": len(total), f"{k}:death_all_s": total}


# ---------------------------------------------------------------------------
# Snapshots, resumes, forks (microvm)

def _snapshot(s, name):
    S = _sessions()
    t0 = _perf()
    rep = S.snapshot_request(s, name, timeout=SNAP_TIMEOUT)
    rt = _perf() - t0
    c = rep["content"]
    if c.get("status") != "ok":
        raise Failed(f"cellvm_snapshot_request {name}: {c.get('ename')}: {c.get('evalue')}")
    return c, rt


def _store_item(store, name):
    return _sessions().snapshot_list(store).get(name) or {}


def snapshot_fresh(store):
    s, _, _ = started("cellvm", "snap-fresh", extra_args=["--snapshot-dir", store])
    ms, pause, nbytes, rts = [], [], [], []
    try:
        for i in range(SNAPS):
            c, rt = _snapshot(s, f"fresh-{i + 1}")
            ms.append(c["ms"])
            pause.append(c["pause_ms"])
            nbytes.append(c["bytes"])
            rts.append(rt)
        _cell1(s.kc)                            # the source goes on
    finally:
        s.close()
    item = _store_item(store, "fresh-1")
    meta = item.get("meta") or {}
    return {"snap_fresh_ms": pct(ms, 50), "snap_fresh_pause_ms": pct(pause, 50),
            "snap_fresh_bytes_MB": pct(nbytes, 50) / 1e6, "snap_fresh_rt_s": pct(rts, 50),
            "snap_fresh_store_MiB": item.get("bytes", float("nan")) / MiB,
            "snap_fresh_state_MiB": meta.get("state_bytes", float("nan")) / MiB,
            "snap_fresh_disk_MiB": meta.get("disk_file_bytes", float("nan")) / MiB,
            "snap_fresh_n": len(ms),
            "snap_fresh_all": {"ms": ms, "pause_ms": pause, "bytes": nbytes, "rt_s": rts}}


def snapshot_df(store):
    """The 200 MB DataFrame: at the default guest memory, else 1024 MiB (said)."""
    why = None
    for mem in (None, 1024):
        more = ["--memory", str(mem), "--no-templates"] if mem else []
        s, _, _ = started("cellvm", f"snap-df-{mem or DEFAULT_MEM_MIB}",
                          extra_args=["--snapshot-dir", store] + more)
        try:
            c = run_cell(s.kc, DF_CELL, CELL_TIMEOUT, keep=True)
            got = "".join(c.stdout).split()
            if c.errors or (c.reply or {}).get("status") != "ok" or not got \
                    or int(got[-1]) < DF_BYTES:
                why = (c.errors[:1] or [f"reply {c.reply}, stdout {got[-1:]}"])[0]
                print(f"bench: sessions: the DataFrame at "
                      f"{mem or DEFAULT_MEM_MIB} MiB: {why}", file=sys.stderr, flush=True)
                continue
            df_cell_s = c.dt
            snap, rt = _snapshot(s, "df200")
            _cell1(s.kc)
        finally:
            s.close()
        item = _store_item(store, "df200")
        meta = item.get("meta") or {}
        return {"snap_df_ms": snap["ms"], "snap_df_pause_ms": snap["pause_ms"],
                "snap_df_bytes_MB": snap["bytes"] / 1e6, "snap_df_rt_s": rt,
                "snap_df_store_MiB": item.get("bytes", float("nan")) / MiB,
                "snap_df_state_MiB": meta.get("state_bytes", float("nan")) / MiB,
                "snap_df_disk_MiB": meta.get("disk_file_bytes", float("nan")) / MiB,
                "snap_df_mem_MiB": mem or DEFAULT_MEM_MIB, "snap_df_cell_s": df_cell_s,
                "snap_df_default_mem_failed": why, "_df_args": more}
    raise Failed(f"the 200 MB DataFrame did not fit at {DEFAULT_MEM_MIB} or 1024 MiB: {why}")


def _from_snapshot(store, name, label, extra_args=()):
    env = {"CELLVM_FROM_SNAPSHOT": name, "CELLVM_SNAPSHOT_DIR": str(store)}
    s, ready, cell = started("cellvm", label, env=env, extra_args=list(extra_args))
    try:
        vm = _log_ms(s.log_text(), "vm.resumed")
        if not vm:
            raise Failed(f"{label}: no event=vm.resumed in the gateway's log: did it resume?")
    finally:
        s.close()
    return ready, cell, vm[0] / 1000


def resumes(store, n):
    ready, cell, vm = [], [], []
    for i in range(n):
        r, c, v = _from_snapshot(store, "fresh-1", f"resume-{i}")
        ready.append(r)
        cell.append(c)
        vm.append(v)
    return {**_p(cell, "resume_s"), "resume_ready_p50_s": pct(ready, 50),
            "resume_vm_p50_s": pct(vm, 50), "resume_n": len(cell), "resume_all_s": cell}


def resume_df(store, df_args):
    r, c, v = _from_snapshot(store, "df200", "resume-df", df_args)
    return {"resume_df_s": c, "resume_df_ready_s": r, "resume_df_vm_s": v}


def start_at_once(held):
    """Start every Session of held at the same instant (threads behind a barrier): each one's
    seconds to its first `1` cell. Raises Failed naming those that did not get there."""
    n = len(held)
    times, errors = [None] * n, []
    go = threading.Barrier(n)

    def one(i):
        try:
            go.wait()
            t0 = _perf()
            held[i].start(wait=False)
            times[i] = _ready_and_cell(held[i], t0)[1]
        except BaseException as e:               # said below, for the whole case
            errors.append(f"fork {i}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise Failed("; ".join(errors)[:300])
    return times


def forks(store, n):
    S = _sessions()
    env = {"CELLVM_FROM_SNAPSHOT": "fresh-1", "CELLVM_SNAPSHOT_DIR": str(store)}
    held = [S.Session("cellvm", name=f"bench-fork-{i}", env=env) for i in range(n)]
    try:
        times = start_at_once(held)
    finally:
        for s in held:
            s.close()
    return {"forks_p50_s": pct(times, 50), "forks_max_s": max(times), "forks_n": n,
            "forks_all_s": times}


# ---------------------------------------------------------------------------
# Idle sessions: paused vs running

def _status(pid):
    st = _sessions().session_status(pid)
    if st is None:
        raise Failed(f"gateway {pid} is not in `cellvm ls --json`")
    return st


def _wait_state(pid, state, timeout):
    deadline = _perf() + timeout
    while _perf() < deadline:
        st = _status(pid)
        if st.get("state") == state:
            return st
        time.sleep(0.1)
    raise Timeout(f"gateway {pid} not {state} within {timeout} s")


def idle(store):
    S = _sessions()
    s, _, _ = started("cellvm", "idle-paused",
                      extra_args=["--idle-pause", str(IDLE_PAUSE_S), "--snapshot-dir", store])
    out, woke, to_pause = {}, [], []
    try:
        for cycle in range(IDLE_CYCLES):
            t_last = _perf()                    # just after a cell was answered
            st = _wait_state(s.gateway_pid, "paused", 120 + IDLE_PAUSE_S)
            to_pause.append(_perf() - t_last)
            if cycle == 0:
                time.sleep(1.0)                 # settled
                st = _status(s.gateway_pid)
                if st.get("qemu_pid"):
                    raise Failed(f"paused, yet qemu_pid={st['qemu_pid']}")
                name = st.get("paused_snapshot")
                item = S.snapshot_list(store).get(name) or {}
                pids = [s.gateway_pid] + S.descendants(s.gateway_pid)
                own = sum(_pss_one(p) or 0 for p in pids)
                private = sum(_pss_one(p, PRIVATE) or 0 for p in pids)
                out.update({"paused_pss_MiB": (st.get("host_pss_bytes") or float("nan")) / MiB,
                            "paused_pss_proc_MiB": own / MiB,
                            "paused_private_MiB": private / MiB,
                            "paused_snapshot_MiB": item.get("bytes", float("nan")) / MiB,
                            "paused_workspace_MiB":
                                (st.get("workspace_bytes") or float("nan")) / MiB})
            t0 = _perf()
            _cell1(s.kc)                        # wakes it: the client only sees latency
            woke.append(_perf() - t0)
    finally:
        s.close()
    wait = pct(to_pause, 50) + 1.0
    r, _, _ = started("cellvm", "idle-running", extra_args=["--snapshot-dir", store])
    try:
        time.sleep(wait)
        st = _status(r.gateway_pid)
        q = st.get("qemu_pid") or 0
        if not q:
            raise Failed(f"the running session has no qemu_pid: {st}")
        gw_pss, q_pss = _pss_one(r.gateway_pid), _pss_one(q)
        private = (_pss_one(r.gateway_pid, PRIVATE) or 0) + (_pss_one(q, PRIVATE) or 0)
        out.update({"running_state": st.get("state"),
                    "running_pss_MiB": (gw_pss + q_pss) / MiB,
                    "running_private_MiB": private / MiB,
                    "running_gateway_pss_MiB": gw_pss / MiB,
                    "running_pss_ls_MiB": (st.get("host_pss_bytes") or float("nan")) / MiB,
                    "running_workspace_MiB": (st.get("workspace_bytes") or float("nan")) / MiB})
    finally:
        r.close()
    out.update({**_p(woke, "pause_wake_s"), "pause_wake_n": len(woke), "pause_wake_all_s": woke,
                "pause_after_s": pct(to_pause, 50), "running_waited_s": wait})
    return out


def notebook_share(n):
    """cellvm-notebook against cellvm, alternated, both started in notebooks/ (what Jupyter
    does for a notebook there): start..first `1` answered, and the copy's own time (its
    share.done line). Then a 50 x 1 MiB folder, once."""
    S = _sessions()
    nb_dir = pathlib.Path(S.__file__).resolve().parents[2] / "notebooks"
    plain, shared, copy_ms = [], [], []
    for i in range(n):
        for kernel, out in (("cellvm", plain), ("cellvm-notebook", shared)):
            s, _, cell = started(kernel, f"share-{kernel}-{i}", cwd=nb_dir)
            try:
                out.append(cell)
                if kernel == "cellvm-notebook":
                    copy_ms += _log_ms(s.log_text(), "share.done")
            finally:
                s.close()
    big = pathlib.Path(tempfile.mkdtemp(prefix="cellvm-bench-share-"))
    try:
        for i in range(50):
            (big / f"f{i:02d}.bin").write_bytes(os.urandom(1 << 20))
        s, _, big_cell = started("cellvm-notebook", "share-50MiB", cwd=big)
        try:
            big_ms = (_log_ms(s.log_text(), "share.done") or [float("nan")])[-1]
        finally:
            s.close()
    finally:
        shutil.rmtree(big, ignore_errors=True)
    return {**_p(plain, "share_plain_s"), **_p(shared, "share_nb_s"),
            "share_copy_ms": pct(copy_ms, 50), "share_big_s": big_cell, "share_big_ms": big_ms}


# ---------------------------------------------------------------------------

def bench_sessions(kernels, ensure_template=None):
    """Every figure of this section in one flat dict ("kernel:key" for the
    per-kernel ones), with "failures" {key: why} as cells.attempt records them."""
    res = {"kernel": "sessions", "failures": {}, "quick": QUICK}
    t0 = _perf()
    if "cellvm" in kernels and ensure_template:
        ensure_template()
    for k in [k for k in ("cellvm", "cellvm-unsafe-local", "python3") if k in kernels]:
        print(f"bench: sessions: {k}: restarts ...", file=sys.stderr, flush=True)
        attempt(res, [f"{k}:restart_s_p50", f"{k}:restart_s_p95"],
                lambda: restarts(k, RESTARTS))
        print(f"bench: sessions: {k}: deaths ...", file=sys.stderr, flush=True)
        attempt(res, [f"{k}:death_s_p50", f"{k}:death_s_p95"], lambda: deaths(k, RESTARTS))
    if "cellvm" in kernels:
        store = pathlib.Path(tempfile.mkdtemp(prefix="cellvm-bench-store-"))
        try:
            print("bench: sessions: snapshots ...", file=sys.stderr, flush=True)
            fresh = attempt(res, ["snap_fresh_ms", "snap_fresh_pause_ms", "snap_fresh_bytes_MB",
                                  "snap_fresh_rt_s"], lambda: snapshot_fresh(store))
            df = attempt(res, ["snap_df_ms", "snap_df_pause_ms", "snap_df_bytes_MB",
                               "snap_df_rt_s"], lambda: snapshot_df(store))
            if fresh:
                print("bench: sessions: resumes and forks ...", file=sys.stderr, flush=True)
                attempt(res, ["resume_s_p50", "resume_s_p95"], lambda: resumes(store, RESUMES))
                attempt(res, ["forks_p50_s", "forks_max_s"], lambda: forks(store, FORKS))
            if df:
                attempt(res, ["resume_df_s"], lambda: resume_df(store, res["_df_args"]))
            print("bench: sessions: notebook share ...", file=sys.stderr, flush=True)
            attempt(res, ["share_nb_s_p50", "share_plain_s_p50"], lambda: notebook_share(SHARES))
            print("bench: sessions: idle pause ...", file=sys.stderr, flush=True)
            attempt(res, ["paused_pss_MiB", "pause_wake_s_p50", "running_pss_MiB"],
                    lambda: idle(store))
        finally:
            shutil.rmtree(store, ignore_errors=True)
    S = _sessions()
    S.close_all()                               # the safety net: kill by pid what is left
    res.pop("_df_args", None)
    res["run_s"] = _perf() - t0
    if not res["failures"]:
        shutil.rmtree(S.LOG_ROOT, ignore_errors=True)
    else:
        res["logs"] = str(S.LOG_ROOT)
        print(f"bench: sessions: gateway logs kept in {S.LOG_ROOT}", file=sys.stderr)
    return res


# ---------------------------------------------------------------------------
# The report

KERNEL_ROWS = [
    ("client restart: restart_kernel..first `1` answered p50 s", "restart_s_p50", "{:.3f}", "< 1 s"),
    ("client restart p95 s", "restart_s_p95", "{:.3f}", None),
    ("  restart_kernel() returned at, p50 s", "restart_call_p50_s", "{:.3f}", None),
    ("  wait_for_ready() returned at, p50 s", "restart_ready_p50_s", "{:.3f}", None),
    ("kernel death: kill cell sent..next `1` answered p50 s", "death_s_p50", "{:.3f}", "< 1 s"),
    ("kernel death p95 s", "death_s_p95", "{:.3f}", None),
    ("  the death seen (KernelDied reply; ipykernel: the restarter) at, p50 s",
     "death_noticed_p50_s", "{:.3f}", None),
]

ROWS = [
    ("snapshot", None, None, None),
    ("fresh session: gateway ms (reply `ms`) p50", "snap_fresh_ms", "{:.0f}", None),
    ("fresh session: VM paused ms (reply `pause_ms`) p50", "snap_fresh_pause_ms", "{:.0f}", None),
    ("fresh session: reply `bytes` MB", "snap_fresh_bytes_MB", "{:.1f}", None),
    ("fresh session: client round trip s p50", "snap_fresh_rt_s", "{:.3f}", None),
    ("fresh session: in the store MiB", "snap_fresh_store_MiB", "{:.1f}", None),
    ("200 MB DataFrame: gateway ms", "snap_df_ms", "{:.0f}", None),
    ("200 MB DataFrame: VM paused ms", "snap_df_pause_ms", "{:.0f}", None),
    ("200 MB DataFrame: reply `bytes` MB", "snap_df_bytes_MB", "{:.1f}", None),
    ("200 MB DataFrame: client round trip s", "snap_df_rt_s", "{:.3f}", None),
    ("200 MB DataFrame: in the store MiB", "snap_df_store_MiB", "{:.1f}", None),
    ("200 MB DataFrame: guest memory MiB", "snap_df_mem_MiB", "{:.0f}", None),
    ("start from a snapshot", None, None, None),
    ("resume fresh snapshot: start_kernel..first `1` answered p50 s", "resume_s_p50", "{:.3f}",
     "< 1 s"),
    ("resume fresh snapshot: p95 s", "resume_s_p95", "{:.3f}", None),
    ("  wait_for_ready() returned at, p50 s", "resume_ready_p50_s", "{:.3f}", None),
    ("  the gateway's VM resume (its log: vm.resumed ms) p50 s", "resume_vm_p50_s", "{:.3f}",
     None),
    ("resume 200 MB DataFrame snapshot: ..first `1` answered s", "resume_df_s", "{:.3f}", None),
    (f"{FORKS} forks at once: start..first `1` answered p50 s", "forks_p50_s", "{:.3f}", None),
    (f"{FORKS} forks at once: max s", "forks_max_s", "{:.3f}", None),
    ("notebook share (cellvm-notebook, started in notebooks/)", None, None, None),
    ("cellvm: start..first `1` answered p50 s", "share_plain_s_p50", "{:.3f}", None),
    ("cellvm-notebook: start..first `1` answered p50 s", "share_nb_s_p50", "{:.3f}", None),
    ("  its copy of notebooks/ (share.done ms) p50", "share_copy_ms", "{:.0f}", None),
    ("cellvm-notebook in a 50 x 1 MiB folder: start..first `1` s", "share_big_s", "{:.3f}", None),
    ("  its copy (share.done ms)", "share_big_ms", "{:.0f}", None),
    ("idle session", None, None, None),
    (f"paused (--idle-pause {IDLE_PAUSE_S}): host PSS MiB (cellvm ls)", "paused_pss_MiB",
     "{:.2f}", f"< {TARGET_PAUSED_MIB:g} MiB"),
    ("paused: host PSS MiB (/proc, gateway and children)", "paused_pss_proc_MiB", "{:.2f}",
     None),
    ("paused: private MiB (gateway and children: no share of shared libraries)",
     "paused_private_MiB", "{:.2f}", None),
    ("paused: its snapshot on disk MiB", "paused_snapshot_MiB", "{:.1f}", None),
    ("paused: first cell after the pause (transparent resume) p50 s", "pause_wake_s_p50",
     "{:.3f}", None),
    ("paused: first cell after the pause p95 s", "pause_wake_s_p95", "{:.3f}", None),
    ("paused: last cell..paused s", "pause_after_s", "{:.2f}", None),
    ("running idle: PSS gateway + QEMU MiB", "running_pss_MiB", "{:.1f}", None),
    ("running idle: PSS MiB (cellvm ls)", "running_pss_ls_MiB", "{:.1f}", None),
    ("running idle: private MiB (gateway + QEMU)", "running_private_MiB", "{:.1f}", None),
    ("running idle: workspace on disk MiB", "running_workspace_MiB", "{:.1f}", None),
]


def _fig(r, key, spec):
    if not r:
        return None
    why = (r.get("failures") or {}).get(key)
    if why:
        return why.replace("|", "/")[:120]
    v = r.get(key)
    if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v)):
        return spec.format(v)
    return None


def _prev(r, key, spec):
    txt = _fig(r, key, spec)
    return txt.split(":")[0].split(" (")[0] if txt and txt[0].isalpha() else txt


def _cell(r, prev, key, spec, more=""):
    txt, p = (_fig(r, key, spec) or "-") + more, _prev(prev, key, spec)
    return f"{txt} (prev {p})" if p is not None else txt


def _target(r, key, target):
    if not target:
        return ""
    v = r.get(key)
    if not isinstance(v, (int, float)) or (isinstance(v, float) and math.isnan(v)):
        return target
    limit = TARGET_PAUSED_MIB if "MiB" in target else TARGET_S
    return f"{target} ({'met' if v < limit else 'MISSED'})"


def print_sessions(res, prev=None):
    kernels = [k for k in ("cellvm", "cellvm-unsafe-local", "python3")
               if any(key.startswith(f"{k}:") for key in list(res) + list(res["failures"]))]
    n = {k: res.get(f"{k}:restart_n") for k in kernels}
    print(" | ".join(["sessions: restart / death"]
                     + [f"{k} (n={n[k]})" if n[k] else k for k in kernels] + ["target"]))
    print(" | ".join(["---"] * (len(kernels) + 2)))
    for label, key, spec, target in KERNEL_ROWS:
        cells = [_cell(res, prev, f"{k}:{key}", spec) for k in kernels]
        tgt = ", ".join(f"{k}: {_target(res, f'{k}:{key}', target)}" for k in kernels
                        if k != "python3") if target else ""
        print(" | ".join([label] + cells + [tgt]))
    if "python3" in kernels:
        print(f"(python3 is ipykernel for reference; its death row: a client-side restarter "
              f"polling every {RESTARTER_S:g} s, as Jupyter Server's)")
    print()
    print("sessions: microvm | figure | target")
    print("--- | --- | ---")
    for label, key, spec, target in ROWS:
        if key is None:
            print(f"**{label}** | |")
            continue
        more = ""
        for which in ("fresh", "df"):
            if key == f"snap_{which}_store_MiB" and f"snap_{which}_state_MiB" in res:
                more = (f" = {res[f'snap_{which}_state_MiB']:.1f} state"
                        f" + {res[f'snap_{which}_disk_MiB']:.1f} disk")
        print(f"{label} | {_cell(res, prev, key, spec, more)} | {_target(res, key, target)}")
    if res.get("snap_df_default_mem_failed"):
        print(f"(the DataFrame did not fit in {DEFAULT_MEM_MIB} MiB: "
              f"{res['snap_df_default_mem_failed']}; taken at {res.get('snap_df_mem_MiB')} MiB)")
    print(f"(n: restarts and deaths {RESTARTS} per kernel, fresh snapshots {res.get('snap_fresh_n')},"
          f" resumes {res.get('resume_n')}, wakes {res.get('pause_wake_n')};"
          f" this section {res.get('run_s', 0):.0f} s)")
    print()


if __name__ == "__main__":
    os.environ.setdefault("BENCH_ONLY", "sessions")
    import bench
    bench.main()
