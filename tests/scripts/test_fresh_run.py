"""scripts/fresh-run.sh, what CI runs `make test` through: the command it runs sees an empty HOME
of its own (and no per-user cache variable pointing elsewhere), SIGINT, SIGQUIT and SIGHUP
ignored, and stdin at end of file; its exit status comes back, and the HOME is gone afterwards,
whatever the caller's own signal state and environment were.
"""
import json
import os
import pathlib
import signal
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "fresh-run.sh"
PROBE = r'''
import json, os, sys
st = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
home = os.environ["HOME"]
print(json.dumps({"ignored": int(st["SigIgn"], 16), "home": home,
                  "home_entries": os.listdir(home), "home_mode": os.stat(home).st_mode & 0o777,
                  "xdg": {k: os.environ.get(k) for k in ("XDG_CACHE_HOME", "MPLCONFIGDIR",
                                                         "IPYTHONDIR", "JUPYTER_DATA_DIR")},
                  "stdin": sys.stdin.read()}))
sys.exit(int(sys.argv[1]))
'''


def run(code, **kw):
    env = dict(os.environ, HOME="/root", XDG_CACHE_HOME="/root/.cache", MPLCONFIGDIR="/tmp/mpl",
               IPYTHONDIR="/root/.ipython", JUPYTER_DATA_DIR="/root/.local/share/jupyter")
    return subprocess.run(["bash", str(SCRIPT), sys.executable, "-c", PROBE, str(code)],
                          env=env, input="typed at a terminal\n", capture_output=True,
                          text=True, **kw)


def bit(sig):
    return 1 << (sig - 1)


def test_the_command_starts_as_on_a_new_machine_in_the_background():
    p = run(0)
    assert p.returncode == 0, p.stderr
    seen = json.loads(p.stdout.splitlines()[-1])
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        assert seen["ignored"] & bit(sig), (sig, hex(seen["ignored"]))
    assert seen["home"] != "/root" and seen["home_entries"] == [], seen
    assert seen["home_mode"] == 0o700, oct(seen["home_mode"])
    assert seen["xdg"] == dict.fromkeys(seen["xdg"]), seen["xdg"]
    assert seen["stdin"] == "", "stdin was not closed"
    assert not pathlib.Path(seen["home"]).exists(), "the fresh HOME was left behind"


def test_the_exit_status_comes_back():
    p = run(7)
    assert p.returncode == 7, (p.returncode, p.stderr)


def test_a_caller_that_catches_sigint_still_hands_on_ignored():
    # The caller's own handler is not inherited through exec; the script's SIG_IGN is.
    p = run(0, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = json.loads(p.stdout.splitlines()[-1])
    assert seen["ignored"] & bit(signal.SIGINT), hex(seen["ignored"])


def test_no_command_is_a_usage_error():
    p = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True)
    assert p.returncode == 2 and "usage" in p.stderr, p
