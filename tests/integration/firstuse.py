"""The host's first-use work, done before the first kernel that runs on the host with a given
HOME (cellvm-kernel run directly, the unsafe-local backend), within BUDGET_S.

matplotlib builds its font cache (fontlist-v330.json in $MPLCONFIGDIR, else
$XDG_CACHE_HOME/matplotlib or ~/.cache/matplotlib) at its first import in a HOME: 1.7 s on a
warm machine, over a minute on a cold one, which a test's cell timeout (60 s in
test_kernel_noipython::test_matplotlib_png) then counted. Here it is the set-up of the first test
that starts such a kernel, with /usr/bin/python3 (the kernel's matplotlib) and the environment
the kernel gets, so `HOME=$(mktemp -d) make integration` works. Debian's packages come with
their bytecode compiled (py3compile, at install): nothing to do for that. The guest image builds
its own cache (guest-image/build.sh). KernelDriver and sessions.Session call ensure().
"""
import os
import subprocess
import sys
import time

import pytest

BUDGET_S = 900              # a cold disk on a loaded 2-core machine; measured 1.7 s warm
WARM = ("import io, matplotlib\n"
        "matplotlib.use('Agg')\n"
        "import matplotlib.pyplot as plt\n"
        "fig = plt.figure()\n"
        "fig.text(0.5, 0.5, 'first use')\n"
        "fig.savefig(io.BytesIO(), format='png')\n")
_done = {}                  # (HOME, MPLCONFIGDIR, XDG_CACHE_HOME) -> seconds it took


def ensure(env=None):
    """Build matplotlib's font cache where a kernel with env will look for it (once per run
    and place); the seconds it took. Fails the test when it cannot, or not within BUDGET_S."""
    env = dict(os.environ if env is None else env)
    key = tuple(env.get(k) for k in ("HOME", "MPLCONFIGDIR", "XDG_CACHE_HOME"))
    if key in _done:
        return _done[key]
    t0 = time.monotonic()
    try:
        p = subprocess.run(["/usr/bin/python3", "-c", WARM], env=env, capture_output=True,
                           text=True, timeout=BUDGET_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"matplotlib's first import (its font cache) took over {BUDGET_S} s",
                    pytrace=False)
    if p.returncode != 0:
        pytest.fail(f"matplotlib's first import failed (scripts/deps.sh installs it):\n"
                    f"{p.stderr[-2000:]}", pytrace=False)
    took = _done[key] = time.monotonic() - t0
    print(f"firstuse: matplotlib's font cache for HOME={key[0]}: {took:.1f} s", file=sys.stderr)
    return took
