#!/usr/bin/python3
"""Egress (docs/network.md) the way a cell uses it, side by side with the anchor in one run:
an HTTPS server on this host's loopback (a test CA signed its certificate) serves 1 MiB and
16 MiB; the same GETs are timed
- from the host itself (the anchor: /usr/bin/python3's urllib, no proxy), and
- in a session's cell, through the guest's proxy, the channel stream and the gateway
  (urllib with the session's HTTPS_PROXY, timed in the cell around the GET and the read);
each GETS times, p50, with MiB/s. Then pip: `%pip install --force-reinstall` of a small wheel
from a local index (HTTP on loopback), INSTALLS times, the cell's round trip p50 (target: under
10 s on TCG). Then the cost of egress being on: start to the first `1` answered, STARTS
sessions with --egress-allow and STARTS without (target: the same; with it off nothing is
started).
Run alone: `bench/egress_bench.py`; in `make bench` it is its own section (BENCH_EGRESS=0
skips it, BENCH_ONLY=egress runs it alone). Every gateway and VM is killed by pid.
"""
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "integration"))

from cells import QUICK, Failed, attempt, pct, run_cell  # noqa: E402

GETS = 5 if QUICK else 9
INSTALLS = 3 if QUICK else 5
STARTS = 3 if QUICK else 5
READY = 240
SIZES = {"1 MiB": 1 << 20, "16 MiB": 16 << 20}

GET_CELL = """
import ssl, time, urllib.request, json
ctx = ssl.create_default_context(cafile={ca!r})
times = []
for _ in range({n}):
    t = time.perf_counter()
    b = urllib.request.urlopen({url!r}, context=ctx, timeout=120).read()
    times.append(time.perf_counter() - t)
    assert len(b) == {size}, len(b)
print(json.dumps(times))
"""


def _sessions():
    import sessions as S
    if S.LOG_ROOT is None:
        S.LOG_ROOT = tempfile.mkdtemp(prefix="cellvm-bench-egress-logs-")
    return S


def _value(s, code, timeout=READY):
    return "".join(run_cell(s.kc, code, timeout, keep=True).check().stdout).strip()


def _servers(d):
    from egresshelpers import serve, tls_files, tls_handler, wheel
    ca, cert, key = tls_files(d)
    wheel(d)
    big = max(SIZES.values())

    class Sized(tls_handler(big)):
        def do_GET(self):                       # /N: N bytes
            n = int(self.path.strip("/") or 0)
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            self.wfile.write(b"x" * n)
    return ca, serve(Sized, cert, key), serve(None, directory=d)


def _host_gets(ca, url, size):
    code = GET_CELL.format(ca=str(ca), n=GETS, url=url, size=size)
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    p = subprocess.run(["/usr/bin/python3", "-c", code], capture_output=True, text=True,
                       timeout=600, env=env)
    if p.returncode != 0:
        raise Failed(f"the host's GET failed: {p.stderr[-500:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def gets(s, ca, tls, label, size):
    url = f"https://127.0.0.1:{tls.server_address[1]}/{size}"
    host = _host_gets(ca, url, size)
    cell = json.loads(_value(s, GET_CELL.format(ca="/workspace/ca.pem", n=GETS, url=url,
                                                size=size), 600).splitlines()[-1])
    key = label.replace(" ", "").lower()
    mib = size / (1 << 20)
    return {f"get_{key}_host_s_p50": pct(host, 50), f"get_{key}_cell_s_p50": pct(cell, 50),
            f"get_{key}_host_mibs": mib / pct(host, 50), f"get_{key}_cell_mibs": mib / pct(cell, 50)}


def installs(s, index):
    from egresshelpers import PKG
    url = f"http://127.0.0.1:{index.server_address[1]}/simple/"
    times = []
    for _ in range(INSTALLS):
        t = time.perf_counter()
        out = _value(s, f"%pip install --force-reinstall --no-deps --no-cache-dir "
                        f"--index-url {url} {PKG}", 300)
        times.append(time.perf_counter() - t)
        if "Successfully installed" not in out:
            raise Failed(f"pip did not install: {out[-500:]}")
    return {"pip_install_s_p50": pct(times, 50), "pip_install_s_max": max(times)}


def starts(args):
    S = _sessions()
    on, off = [], []
    for i in range(STARTS):
        for label, extra, out in (("on", args, on), ("off", [], off)):
            s = S.Session("cellvm", name=f"bench-egress-start-{label}-{i}", extra_args=extra)
            try:
                t0 = time.perf_counter()
                s.start(wait=False)
                s.kc.wait_for_ready(timeout=READY)
                run_cell(s.kc, "1", READY).check("text/plain")
                out.append(time.perf_counter() - t0)
                s.track()
            finally:
                s.close()
    return {"start_on_s_p50": pct(on, 50), "start_off_s_p50": pct(off, 50)}


def bench_egress(kernels, ensure_template=None):
    res = {"kernel": "egress", "failures": {}, "quick": QUICK}
    if "cellvm" not in kernels:
        return res
    if ensure_template:
        ensure_template()
    t0 = time.perf_counter()
    d = pathlib.Path(tempfile.mkdtemp(prefix="cellvm-bench-egress-"))
    S = _sessions()
    ca, tls, index = _servers(d)
    args = ["--egress-allow", f"127.0.0.1:{tls.server_address[1]},"
                              f"127.0.0.1:{index.server_address[1]}"]
    s = S.Session("cellvm", name="bench-egress", extra_args=args,
                  env={"CELLVM_ENV_NO_PROXY": "", "CELLVM_ENV_no_proxy": ""})
    try:
        s.start(timeout=READY)
        _value(s, f"open('/workspace/ca.pem', 'w').write({ca.read_text()!r})")
        for label, size in SIZES.items():
            print(f"bench: egress: GET {label} ...", file=sys.stderr, flush=True)
            key = label.replace(" ", "").lower()
            attempt(res, [f"get_{key}_host_s_p50", f"get_{key}_cell_s_p50"],
                    lambda: gets(s, ca, tls, label, size))
        print("bench: egress: pip install ...", file=sys.stderr, flush=True)
        attempt(res, ["pip_install_s_p50"], lambda: installs(s, index))
    finally:
        s.close()
    print("bench: egress: starts with and without ...", file=sys.stderr, flush=True)
    try:
        attempt(res, ["start_on_s_p50", "start_off_s_p50"], lambda: starts(args))
    finally:
        S.close_all()
        tls.shutdown()
        index.shutdown()
        shutil.rmtree(d, ignore_errors=True)
    res["run_s"] = time.perf_counter() - t0
    res["host"] = socket.gethostname()
    return res


def _cell(res, key, spec):
    return spec.format(res[key]) if key in res else res["failures"].get(key, "-")


def print_egress(res):
    print(f"egress: HTTPS GET on this host's loopback (p50 of {GETS}) | from a cell, through the "
          f"proxy s | MiB/s | from the host (anchor) s | MiB/s")
    print("--- | --- | --- | --- | ---")
    for label in SIZES:
        k = label.replace(" ", "").lower()
        print(f"{label} | {_cell(res, f'get_{k}_cell_s_p50', '{:.3f}')} | "
              f"{_cell(res, f'get_{k}_cell_mibs', '{:.1f}')} | "
              f"{_cell(res, f'get_{k}_host_s_p50', '{:.3f}')} | "
              f"{_cell(res, f'get_{k}_host_mibs', '{:.1f}')}")
    print()
    print(f"egress: `%pip install` of a small wheel from a local index (of {INSTALLS}) | p50 s | "
          f"max s | target")
    print("--- | --- | --- | ---")
    print(f"cell round trip | {_cell(res, 'pip_install_s_p50', '{:.2f}')} | "
          f"{_cell(res, 'pip_install_s_max', '{:.2f}')} | < 10 s p50")
    print()
    print(f"egress: start..first `1` answered (p50 of {STARTS}) | --egress-allow | none "
          f"(anchor)")
    print("--- | --- | ---")
    print(f"restore from the template | {_cell(res, 'start_on_s_p50', '{:.3f}')} | "
          f"{_cell(res, 'start_off_s_p50', '{:.3f}')}")
    print()


if __name__ == "__main__":
    os.environ["BENCH_ONLY"] = "egress"
    import bench
    bench.main()
