"""Privilege separation (docs/security.md): a gateway started as root with
`--user NAME` runs as that user, and only a small helper (`cellvm-privd`) stays root, to jail
QEMU. On the microvm backend, as root.

A system user is made for the module (`useradd --system`) and removed after it, with its run
base. Its template is built once, by `--build-template --user`, so that the template build
(a shared RAM file handed to the VM's group by the helper), a restore (the template's RAM
mounted read-only, its layers made readable), an idle pause and a resume (a state file that
one jailed uid wrote and another reads) all run through the helper.

Each probe first shows what it looks for in a control: a root gateway without `--user`.
Everything started here is killed by pid at the end.
"""
import json
import re
import os
import pathlib
import pwd
import shutil
import signal
import subprocess
import time

import psutil
import pytest

from sessions import GATEWAY, IMAGE, Session, require_image, wait_gone

# One user per run: two suites at once (a CI clone beside `make check`) must not remove each
# other's user or run base.
USER = f"cellvm-ps-{os.getpid()}"
HOME = pathlib.Path("/var/lib") / USER
BASE = 64000                                        # the jail's default uid range
TIMEOUT = 600

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="privilege separation needs root")


def status(pid):
    fields = {}
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        fields[k] = v.strip()
    return fields


def ns(pid, name):
    return os.readlink(f"/proc/{pid}/ns/{name}")


def family(gateway_pid):
    """The gateway's helper (cellvm-privd, root) and the helper's QEMU children."""
    kids = psutil.Process(gateway_pid).children()
    helpers = [k for k in kids if k.name() == "cellvm-privd"]
    qemus = [q for h in helpers for q in h.children() if q.name().startswith("qemu-system")]
    return helpers, qemus


@pytest.fixture(scope="module")
def user():
    require_image(IMAGE)
    made = False
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--shell", "/usr/sbin/nologin", "--home-dir",
                        str(HOME), "--create-home", USER], check=True)
        made = True
    uid = pwd.getpwnam(USER).pw_uid
    base = pathlib.Path(f"/var/tmp/cellvm-{uid}")
    try:
        build = subprocess.run([str(GATEWAY), "--build-template", "--user", USER, "--image",
                                str(IMAGE), "--log-level", "info"], capture_output=True,
                               text=True, timeout=TIMEOUT)
        assert build.returncode == 0, build.stderr[-3000:]
        assert f"event=gateway.user user={USER}" in build.stderr, build.stderr[-3000:]
        assert re.search(r"^template \S+ (built|is up to date)$", build.stdout, re.M), build.stdout
        yield uid
    finally:
        shutil.rmtree(base, ignore_errors=True)
        if made:
            subprocess.run(["userdel", "--remove", USER], capture_output=True)


@pytest.fixture(scope="module")
def pair(user):
    """A session whose gateway runs as USER (idle pause after 8 s), and a root control."""
    sep = Session("cellvm", extra_args=["--user", USER, "--idle-pause", "8"], name="privsep")
    control = Session("cellvm", name="privsep-control")
    try:
        for s in (sep, control):
            s.start(wait=False)
        for s in (sep, control):
            s.wait_ready(timeout=TIMEOUT)
        yield sep, control
    finally:
        for s in (sep, control):
            s.close()


@pytest.mark.slow
def test_the_gateway_runs_as_the_service_user_and_only_the_helper_is_root(pair, user):
    sep, control = pair
    assert sep.output("print(6 * 7)").strip() == "42"
    # The control: a root gateway, with every capability.
    st = status(control.gateway_pid)
    assert st["Uid"].split()[0] == "0" and int(st["CapEff"], 16) != 0
    st = status(sep.gateway_pid)
    assert st["Uid"].split() == [str(user)] * 4
    assert int(st["CapEff"], 16) == 0 and int(st["CapPrm"], 16) == 0
    assert st["NoNewPrivs"] == "1"
    groups = {int(g) for g in st["Groups"].split()}
    assert 0 not in groups and {BASE, BASE + 1023} <= groups
    helpers, qemus = family(sep.gateway_pid)
    assert len(helpers) == 1 and len(qemus) == 1, (helpers, qemus)
    h, q = helpers[0], qemus[0]
    assert status(h.pid)["Uid"].split()[0] == "0"
    assert h.cmdline() == psutil.Process(sep.gateway_pid).cmdline()   # forked, never exec'd
    qs = status(q.pid)
    quid = int(qs["Uid"].split()[0])
    assert BASE <= quid < BASE + 1024 and quid != user
    assert int(qs["CapEff"], 16) == 0 and qs["NoNewPrivs"] == "1"
    for name in ("mnt", "pid", "net"):
        assert ns(q.pid, name) != ns(sep.gateway_pid, name)
    log = sep.log_text()
    assert f"event=gateway.user user={USER}" in log
    assert f"event=vm.restored pid={q.pid} template=/var/tmp/cellvm-{user}/templates/" in log, \
        log[-2000:]
    assert "event=vm.cold_boot" not in log


def test_the_gateway_cannot_read_what_root_can(pair, user):
    sep, control = pair
    canary = pathlib.Path("/root") / f"cellvm-privsep-canary-{os.getpid()}"
    canary.write_text("secret")
    canary.chmod(0o600)
    try:
        probe = ["cat", str(canary)]
        # With the control gateway's credentials (root), the canary reads.
        st = status(control.gateway_pid)
        assert st["Uid"].split()[0] == "0"
        assert subprocess.run(probe, capture_output=True, text=True).stdout == "secret"
        # With the separated gateway's exact credentials (uid, gid, groups): denied.
        st = status(sep.gateway_pid)
        groups = ",".join(st["Groups"].split())
        as_gw = subprocess.run(["setpriv", f"--reuid={st['Uid'].split()[0]}",
                                f"--regid={st['Gid'].split()[0]}", f"--groups={groups}"] + probe,
                               capture_output=True, text=True)
        assert as_gw.returncode != 0 and "secret" not in as_gw.stdout
        assert "Permission denied" in as_gw.stderr
    finally:
        canary.unlink()


@pytest.mark.allow_slow_reactor(reason="an idle pause writes the VM's state and the disk "
                                "chain on the reactor (known)")
@pytest.mark.slow
def test_an_idle_pause_and_resume_go_through_the_helper(pair, user):
    sep, _ = pair
    sep.output("x = 5; open('/workspace/privsep.txt', 'w').write('kept')")
    paused = sep.log_text().count("event=session.paused")
    deadline = time.monotonic() + 120
    while sep.log_text().count("event=session.paused") == paused:
        assert time.monotonic() < deadline, sep.log_text()[-3000:]
        time.sleep(0.3)
    #  The VM is killed and reaped by the starter's thread, just after the event.
    deadline = time.monotonic() + 15
    while family(sep.gateway_pid)[1]:
        assert time.monotonic() < deadline, family(sep.gateway_pid)[1]    # paused: no VM
        time.sleep(0.1)
    out = sep.output("print(x, open('/workspace/privsep.txt').read())")
    assert out.strip() == "5 kept"
    _, qemus = family(sep.gateway_pid)
    assert len(qemus) == 1
    assert BASE <= int(status(qemus[0].pid)["Uid"].split()[0]) < BASE + 1024


def test_a_killed_gateway_takes_its_helper_and_vm_with_it(user):
    s = Session("cellvm", extra_args=["--user", USER], name="privsep-kill")
    try:
        s.start(timeout=TIMEOUT)
        assert s.output("print(1)").strip() == "1"
        helpers, qemus = family(s.gateway_pid)
        assert len(helpers) == 1 and len(qemus) == 1
        pids = [helpers[0].pid, qemus[0].pid]
        os.kill(s.gateway_pid, signal.SIGKILL)
        assert wait_gone(pids, 15), [p for p in pids if psutil.pid_exists(p)]
    finally:
        s.close()


def test_a_connection_file_only_root_can_reach_is_read_before_the_drop(user, tmp_path):
    """As jupyter_client does it as root: the file in a 0700 dir (~/.local/share/jupyter/
    runtime). The gateway reads it, and its identity and kernel name, before it drops."""
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    s = Session("cellvm", extra_args=["--user", USER], name="privsep-runtime")
    s.km.connection_file = str(runtime / "kernel-privsep.json")
    try:
        s.start(timeout=TIMEOUT)
        assert s.output("print(6 * 7)").strip() == "42"
        assert status(s.gateway_pid)["Uid"].split()[0] == str(user)
        assert subprocess.run(["setpriv", f"--reuid={user}", f"--regid={user}",
                               "--clear-groups", "cat", s.km.connection_file],
                              capture_output=True).returncode != 0     # the user cannot
    finally:
        s.close()


@pytest.mark.parametrize("args, words", [
    (["--user", "root"], "that is root"),
    (["--user", "no-such-user-cellvm"], "no such user"),
    (["--user", USER, "--jail", "off"], "needs the jail"),
    (["--user", USER, "--backend", "unsafe-local"], "is for --backend microvm"),
])
def test_user_refusals_are_explained(user, tmp_path, args, words):
    conn = tmp_path / "conn.json"
    ports = {f"{c}_port": 41000 + i for i, c in enumerate(("shell", "iopub", "stdin", "control",
                                                             "hb"))}
    conn.write_text(json.dumps(dict(ports, transport="tcp", ip="127.0.0.1", key="k",
                                    signature_scheme="hmac-sha256")))
    argv = [str(GATEWAY), "--connection-file", str(conn), "--image", str(IMAGE)]
    if "--backend" not in args:
        argv += ["--backend", "microvm"]
    p = subprocess.run(argv + args, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert words in p.stderr, p.stderr
