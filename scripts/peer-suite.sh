#!/usr/bin/env bash
# peer-suite.sh - run another project's installed test suite against one of our kernelspecs:
# nbclient's (Debian's python3-nbclient ships it in nbclient/tests, with its notebooks), each
# kernel it starts being PEER_KERNEL. The suite is run where it is installed, never copied;
# tests/peer/cellvm_peer.py maps the kernel names it asks for onto PEER_KERNEL and prints
# `peer-suite: kernel=... passed=N failed=N ...` and one `peer-suite: failed <test>` per failure.
#   CELLVM_BUILD   build dir (absolute; default build/): its share/jupyter holds the kernelspecs
#   PEER_KERNEL    kernelspec to run the suite against (default: cellvm)
#   PEER_SUITE     the suite's package (default: nbclient.tests)
# Extra arguments go to pytest (-k EXPR, -x, a test id under the suite's directory, ...).
# Exit status: pytest's (0 when every test passed).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${CELLVM_BUILD:-$ROOT/build}
SUITE=${PEER_SUITE:-nbclient.tests}
PY=/usr/bin/python3
export PEER_KERNEL=${PEER_KERNEL:-cellvm}
export JUPYTER_PATH=$BUILD/share/jupyter
SUITE_DIR=$("$PY" -c 'import importlib, os, sys; print(os.path.dirname(importlib.import_module(sys.argv[1]).__file__))' "$SUITE")
SITE=$(dirname "$(dirname "$SUITE_DIR")")

# Whatever the gateways keep (artifacts) goes to a private directory, deleted at the end; and
# nothing is written into the installed package (no bytecode, no .pytest_cache).
PRIVATE=$(mktemp -d -t cellvm-peer-run-XXXXXX)
trap 'rm -rf "$PRIVATE"' EXIT
export XDG_DATA_HOME=$PRIVATE/xdg-data
export PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH=$ROOT/tests/peer${PYTHONPATH:+:$PYTHONPATH}

cd "$PRIVATE"
rc=0
"$PY" -m pytest -p cellvm_peer -p no:cacheprovider -c "$ROOT/tests/peer/pytest.ini" \
  --rootdir "$SITE" -q -rfE "$@" "$SUITE_DIR/${PEER_TESTS:-test_client.py}" || rc=$?
exit $rc
