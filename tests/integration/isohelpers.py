"""What the isolation modules (test_isolation.py, test_isolation_more.py) share: how a secret
travels inside cell code, the probe code both run (the file-system search), and how each module
boots its sessions and checks, at the end, that they left nothing behind.
"""
from sessions import BACKENDS, PROBE_MARK, Session, kernel_spec, wait_no_leftovers


def rev_hex(text):
    """How a secret travels inside cell code: reversed, hex. The literal never appears as is,
    so the code (in IPython's history, in /proc/self/cmdline on the host) cannot be a false hit."""
    data = text.encode() if isinstance(text, str) else text
    return data[::-1].hex()


# --------------------------------------------------------------------------
# Probe code. Each string defines one function and is run unchanged in the guest (as a cell)
# and on the host (python3 -c). The function prints PROBE_MARK + JSON.

P_HEAD = f"import os, json, errno, socket, stat, time\nMARK = {PROBE_MARK!r}\n"

P_FIND = P_HEAD + r'''
def probe_find(names_hex, contents_hex, walk_roots, grep_roots, grep_depth=None, plant=None):
    """Walk walk_roots for files/dirs named like a canary; grep grep_roots for canary bytes.
    plant: [dir, name_hex, content_hex] planted first, as an in-place positive control."""
    names = {bytes.fromhex(h)[::-1].decode() for h in names_hex}
    contents = [bytes.fromhex(h)[::-1] for h in contents_hex]
    planted = None
    if plant:
        d, n, c = plant
        planted = os.path.join(d, bytes.fromhex(n)[::-1].decode())
        names.add(os.path.basename(planted))
        contents.append(bytes.fromhex(c)[::-1])
        with open(planted, "wb") as f:
            f.write(bytes.fromhex(c)[::-1])
    skip = {"/proc", "/sys"}
    res = {"name_hits": [], "content_hits": [], "entries": 0, "grepped": 0, "walk_errors": 0,
           "planted": planted, "mounts": []}
    def err(e):
        res["walk_errors"] += 1
    for root in walk_roots:
        for dirpath, dirnames, filenames in os.walk(root, onerror=err):
            dirnames[:] = [d for d in dirnames if os.path.join(dirpath, d) not in skip]
            for n in dirnames + filenames:
                res["entries"] += 1
                if n in names:
                    res["name_hits"].append(os.path.join(dirpath, n))
    for root in grep_roots:
        base = root.rstrip("/").count("/")
        for dirpath, dirnames, filenames in os.walk(root, onerror=err):
            if grep_depth is not None and dirpath.rstrip("/").count("/") - base >= grep_depth:
                dirnames[:] = []
            for n in filenames:
                p = os.path.join(dirpath, n)
                try:
                    st = os.lstat(p)
                    if not stat.S_ISREG(st.st_mode) or st.st_size > (4 << 20):
                        continue
                    with open(p, "rb") as f:
                        data = f.read()
                except OSError:
                    continue
                res["grepped"] += 1
                for i, c in enumerate(contents):
                    if c in data:
                        res["content_hits"].append([p, i])
    for path in ("/proc/cmdline", "/proc/self/environ", "/proc/self/cmdline"):
        try:
            with open(path, "rb") as f:
                data = f.read()
            for i, c in enumerate(contents):
                if c in data:
                    res["content_hits"].append([path, i])
        except OSError:
            pass
    with open("/proc/mounts") as f:
        res["mounts"] = [line.split()[:3] for line in f]
    if planted:
        os.unlink(planted)
    print(MARK + json.dumps(res))
'''


def call(src, fn, *args, **kw):
    """Cell code: the probe's source, then one call. Arguments are str/int/None/lists of them."""
    return f"{src}\n{fn}(*{list(args)!r}, **{kw!r})\n"


# --------------------------------------------------------------------------
# Sessions

def booted(tmp_path_factory, specs):
    """For a module-scoped fixture to `yield from`: the sessions {name: (kernelspec, extra
    gateway arguments)}, booted at once, yielded as {name: Session}; then closed (by pid) and
    checked for leftovers (no QEMU, run dir, socket or disk of theirs)."""
    for spec in {spec for spec, _ in specs.values()}:
        kernel_spec(spec)                       # fails (never skips) without build or image
    d = tmp_path_factory.mktemp("isolation")
    env = {"XDG_DATA_HOME": str(d / "data")}       # artifacts land here, not in ~/.local
    sessions = {name: Session(spec, name=name, extra_args=list(extra), env=env)
                for name, (spec, extra) in specs.items()}
    try:
        for s in sessions.values():
            s.start(wait=False)
        for name, s in sessions.items():
            s.wait_ready()
            if specs[name][0] != BACKENDS["unsafe-local"]:
                s.qemu_pid()
        yield sessions
    finally:
        pids = [s.gateway_pid for s in sessions.values() if s.gateway_pid]
        for s in sessions.values():
            s.close()
        left = wait_no_leftovers(pids, timeout=10)
        assert not left, f"the isolation sessions left things behind: {left}"
