#!/usr/bin/python3
"""cellvm benchmarks, past one host (docs/cluster.md): side by side in one run,

- a remote launch: cellvm-remote started as Enterprise Gateway starts it, to its encrypted reply
  and to the first `1` answered through the reply's ports, against the local `cellvm`
  kernelspec's start to its first `1` (the anchor: the same VM, no launcher);
- a drain and a resume on another host, at three sizes of live memory: SIGTERM to the gateway on
  host A until it exited (the session saved into the store), then a launch of the same name on
  host B until its first cell answered with the state checked, against a fresh session on host
  B (the anchor: what a client gets without a move, its state lost); p50 of REPS each;
- a Slurm drain (tests/cluster/slurm_cluster.py, the cellvm-slurm provisioner and kernelspec):
  `scontrol requeue` of a kernel's job until the provisioner has its answer from another node,
  and until a new client's first cell there answered with the state checked, against that
  kernel's own launch to its first cell (the anchor: what the move costs next to a start);
- a checkpoint (--checkpoint-every): the guest's stop (`pause_ms`) and the whole snapshot
  (`ms`) after a cell dirtied the live memory, at the same sizes, against a trivial cell's
  round trip on the same session.

Hosts are network namespaces with their own address and hostname (tests/cluster/hosts.py);
the store is a directory both see, as NFS would give. `bench/bench.py` runs this as its
"move" section (BENCH_MOVE=0 skips it, BENCH_ONLY=move runs it alone).
"""
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
for p in (HERE, ROOT / "tests" / "integration", ROOT / "tests" / "cluster"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))
os.environ.setdefault("CELLVM_LOG_LEVEL", "info")

from cells import QUICK, Failed, attempt, pct, run_cell  # noqa: E402

REPS = 2 if QUICK else 3
LAUNCHES = 3 if QUICK else 5
SIZES_MB = (0, 64, 192)                     # live memory in a 512 MiB guest
READY = 240
SUSPEND_TIMEOUT = 300


def _perf():
    return time.perf_counter()


def _sessions():
    import sessions as S
    if S.LOG_ROOT is None:
        S.LOG_ROOT = tempfile.mkdtemp(prefix="cellvm-bench-move-logs-")
    return S


def _fill(mb):
    """A cell that holds mb MB of touched memory in `a`, and its check."""
    n = mb * 1_000_000 // 8
    return (f"import numpy as np; a = np.ones({n}); float(a.sum())",
            "print(float(a.sum()))", f"{float(n)}")


def _started(label, args, hosts=None, host=None):
    """(Session, seconds from start to the first `1` answered)."""
    S = _sessions()
    kw = {"launcher": hosts.prefix(host), "ip": hosts.addr[host]} if hosts else {}
    s = S.Session("cellvm", name=f"bench-{label}", extra_args=[str(a) for a in args], **kw)
    try:
        t0 = _perf()
        s.start(wait=False)
        s.kc.wait_for_ready(timeout=READY)
        run_cell(s.kc, "1", READY).check("text/plain")
        s.track()
        return s, _perf() - t0
    except BaseException:
        s.close()
        raise


def _value(s, code):
    """What the cell printed."""
    return "".join(run_cell(s.kc, code, READY, keep=True).check().stdout).strip()


def _suspend(s):
    """SIGTERM until the gateway exited 0: seconds."""
    t0 = _perf()
    os.kill(s.gateway_pid, signal.SIGTERM)
    try:
        rc = s.km.provisioner.process.wait(timeout=SUSPEND_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise Failed(f"no exit {SUSPEND_TIMEOUT} s after SIGTERM") from None
    if rc != 0 or "event=session.suspended" not in s.log_text():
        raise Failed(f"the suspend failed (exit {rc}): {s.log_text()[-500:]}")
    return _perf() - t0


def move_once(hosts, store, name, mb):
    """One drain on hosta and resume on hostb: (suspend s, resume s, fresh-start s)."""
    fill, check, want = _fill(mb)
    args = ["--snapshot-dir", store, "--session-name", name]
    a, _ = _started(f"{name}-a", args, hosts, "hosta")
    try:
        run_cell(a.kc, fill, READY).check("text/plain")
        suspend_s = _suspend(a)
    finally:
        a.close()
    b, resume_s = _started(f"{name}-b", args, hosts, "hostb")
    try:
        got = _value(b, check)
        if got != want:
            raise Failed(f"the resumed session's a.sum() is {got}, not {want}")
        b.km.shutdown_kernel(now=False)             # the end: discarded
    finally:
        b.close()
    fresh, fresh_s = _started(f"{name}-fresh", ["--snapshot-dir", store], hosts, "hostb")
    fresh.close()
    return suspend_s, resume_s, fresh_s


def moves(hosts, store, mb):
    sus, res, fresh = [], [], []
    for i in range(REPS):
        s, r, f = move_once(hosts, store, f"move-{mb}-{i}", mb)
        sus.append(s), res.append(r), fresh.append(f)
    return {f"suspend_{mb}_s_p50": pct(sus, 50), f"resume_{mb}_s_p50": pct(res, 50),
            f"fresh_{mb}_s_p50": pct(fresh, 50)}


def _log_field(text, event, field):
    return [float(ln.split(f" {field}=")[1].split()[0]) for ln in text.splitlines()
            if f"event={event} " in ln and f" {field}=" in ln]


def checkpoints(store, mb):
    """pause_ms and ms of REPS checkpoints after a cell dirtied mb MB; a `1` cell's round trip."""
    fill, _, _ = _fill(mb)
    s, _ = _started(f"ckpt-{mb}", ["--snapshot-dir", store, "--session-name", f"ckpt-{mb}",
                                   "--checkpoint-every", 1])
    try:
        run_cell(s.kc, fill, READY).check("text/plain")
        cells = []
        for i in range(REPS):
            deadline = time.monotonic() + READY
            while s.log_text().count("event=session.checkpoint ") < i + 1:
                if time.monotonic() > deadline:
                    raise Failed(f"no checkpoint {i + 1} within {READY} s")
                time.sleep(0.1)
            t0 = _perf()
            run_cell(s.kc, "a += 1; 1", READY).check("text/plain")
            cells.append(_perf() - t0)
        text = s.log_text()
        s.km.shutdown_kernel(now=False)
    finally:
        s.close()
    pause, ms = _log_field(text, "session.checkpoint", "pause_ms"), _log_field(
        text, "session.checkpoint", "ms")
    return {f"ckpt_{mb}_pause_ms_p50": pct(pause, 50), f"ckpt_{mb}_ms_p50": pct(ms, 50),
            f"ckpt_{mb}_cell_ms_p50": pct(cells, 50) * 1000}


class Launch:
    """cellvm-remote as EG starts it, answering a front of ours (tests/cluster/egfront.py)."""

    def __init__(self, front, build, image):
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="cellvm-bench-remote-"))
        lo = 20000 + (os.getpid() * 7) % 30000
        argv = [str(build / "cellvm-remote"), "--kernel-id", f"bench-{os.getpid()}-{id(self)}",
                "--response-address", front.address, "--public-key", front.public_key,
                "--port-range", f"{lo}..{lo + 999}", "--", "--backend", "microvm",
                "--image", str(image)]
        self.log = open(self.dir / "launcher.log", "wb")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def close(self):
        S = _sessions()
        procs = [S.proc(p) for p in [self.proc.pid] + S.descendants(self.proc.pid)]
        S.kill_procs([p for p in procs if p])
        S.wait_procs_gone([p for p in procs if p], 10)
        self.proc.wait(timeout=10)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def remote_launches(n):
    from egfront import Front
    from jupyter_client import BlockingKernelClient
    S = _sessions()
    replies, cells = [], []
    for _ in range(n):
        front = Front()
        t0 = _perf()
        launch = Launch(front, S.BUILD, S.IMAGE)
        try:
            info = front.receive(timeout=READY)
            replies.append(_perf() - t0)
            kc = BlockingKernelClient()
            kc.load_connection_info(dict(info, ip="127.0.0.1", key=info["key"].encode()))
            kc.start_channels()
            kc.wait_for_ready(timeout=READY)
            run_cell(kc, "1", READY).check("text/plain")
            cells.append(_perf() - t0)
            kc.stop_channels()
        finally:
            launch.close()
            front.close()
    local = []
    for i in range(n):
        s, t = _started(f"local-{i}", [])
        s.close()
        local.append(t)
    return {"remote_reply_s_p50": pct(replies, 50), "remote_cell_s_p50": pct(cells, 50),
            "local_cell_s_p50": pct(local, 50)}


def slurm_moves(reps):
    from slurm_cluster import SlurmCluster, exported
    import slurm_kernel as K
    launch, moved, cell = [], [], []
    with SlurmCluster() as c, exported(c), \
            tempfile.TemporaryDirectory(prefix="cellvm-bench-slurm-") as d:
        for i in range(reps):
            km = K.manager(c, pathlib.Path(d) / f"k{i}", pathlib.Path(d) / f"store-{i}")
            t0 = _perf()
            km.start_kernel()
            try:
                K.run(km, "x = 41", READY)
                launch.append(_perf() - t0)
                host = km.provisioner.host
                c.drain(host, reason="bench")
                try:
                    t0 = _perf()
                    c.slurm("scontrol", "requeue", km.provisioner.job_id)
                    K.wait_moved(km, c, host, READY)
                    moved.append(_perf() - t0)
                    if K.run(km, "print(x + 1)", READY).strip() != "42":
                        raise Failed("the moved kernel lost x")
                    cell.append(_perf() - t0)
                finally:
                    c.resume(host)
            finally:
                km.shutdown_kernel(now=True)
    return {"slurm_launch_s_p50": pct(launch, 50), "slurm_moved_s_p50": pct(moved, 50),
            "slurm_cell_s_p50": pct(cell, 50)}


def bench_move(kernels, ensure_template=None):
    res = {"kernel": "move", "failures": {}, "quick": QUICK}
    if "cellvm" not in kernels:
        return res
    if ensure_template:
        ensure_template()
    from hosts import Hosts
    t0 = _perf()
    store = pathlib.Path(tempfile.mkdtemp(prefix="cellvm-bench-move-store-"))
    try:
        print("bench: move: remote launches ...", file=sys.stderr, flush=True)
        attempt(res, ["remote_reply_s_p50", "remote_cell_s_p50", "local_cell_s_p50"],
                lambda: remote_launches(LAUNCHES))
        with Hosts(("hosta", "hostb")) as hosts:
            for mb in SIZES_MB:
                print(f"bench: move: drain and resume, {mb} MB ...", file=sys.stderr, flush=True)
                attempt(res, [f"suspend_{mb}_s_p50", f"resume_{mb}_s_p50", f"fresh_{mb}_s_p50"],
                        lambda: moves(hosts, store, mb))
        print("bench: move: Slurm drain and requeue ...", file=sys.stderr, flush=True)
        attempt(res, ["slurm_launch_s_p50", "slurm_moved_s_p50", "slurm_cell_s_p50"],
                lambda: slurm_moves(REPS))
        for mb in SIZES_MB:
            print(f"bench: move: checkpoints, {mb} MB ...", file=sys.stderr, flush=True)
            attempt(res, [f"ckpt_{mb}_pause_ms_p50", f"ckpt_{mb}_ms_p50",
                          f"ckpt_{mb}_cell_ms_p50"], lambda: checkpoints(store, mb))
    finally:
        _sessions().close_all()
        shutil.rmtree(store, ignore_errors=True)
    res["run_s"] = _perf() - t0
    res["host"] = socket.gethostname()
    return res


def _cell(res, prev, key, spec):
    if key not in res:
        return res["failures"].get(key, "-")
    text = spec.format(res[key])
    if prev and key in prev:
        text += f" (prev {spec.format(prev[key])})"
    return text


def print_move(res, prev=None):
    print("move: remote launch | cellvm-remote (EG's protocol) | local `cellvm` (anchor)")
    print("--- | --- | ---")
    print(f"start..encrypted reply received, p50 s | {_cell(res, prev, 'remote_reply_s_p50', '{:.3f}')} | -")
    print(f"start..first `1` answered, p50 s | {_cell(res, prev, 'remote_cell_s_p50', '{:.3f}')} | "
          f"{_cell(res, prev, 'local_cell_s_p50', '{:.3f}')}")
    print()
    print(f"move: drain on host A, resume on host B (p50 of {REPS}) | SIGTERM..exited s | "
          f"launch..first cell s (state checked) | fresh session on B s (anchor, state lost)")
    print("--- | --- | --- | ---")
    for mb in SIZES_MB:
        print(f"{mb} MB live | {_cell(res, prev, f'suspend_{mb}_s_p50', '{:.3f}')} | "
              f"{_cell(res, prev, f'resume_{mb}_s_p50', '{:.3f}')} | "
              f"{_cell(res, prev, f'fresh_{mb}_s_p50', '{:.3f}')}")
    print()
    print(f"move: Slurm drain and requeue (p50 of {REPS}) | requeue..the provisioner has the new "
          f"node s | requeue..a new client's first cell, state checked s | launch..first cell s "
          f"(anchor)")
    print("--- | --- | --- | ---")
    print(f"512 MiB guest | {_cell(res, prev, 'slurm_moved_s_p50', '{:.3f}')} | "
          f"{_cell(res, prev, 'slurm_cell_s_p50', '{:.3f}')} | "
          f"{_cell(res, prev, 'slurm_launch_s_p50', '{:.3f}')}")
    print()
    print(f"move: a checkpoint every 1 s after a cell (p50 of {REPS}) | guest stopped ms | "
          f"snapshot ms | the next cell's round trip ms (anchor)")
    print("--- | --- | --- | ---")
    for mb in SIZES_MB:
        print(f"{mb} MB live | {_cell(res, prev, f'ckpt_{mb}_pause_ms_p50', '{:.0f}')} | "
              f"{_cell(res, prev, f'ckpt_{mb}_ms_p50', '{:.0f}')} | "
              f"{_cell(res, prev, f'ckpt_{mb}_cell_ms_p50', '{:.1f}')}")
    print()


if __name__ == "__main__":
    os.environ["BENCH_ONLY"] = "move"
    import bench
    bench.main()
