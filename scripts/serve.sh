#!/usr/bin/env bash
# serve.sh - cellvm behind Jupyter Server: the REST + WebSocket door (docs/remote.md).
#
#   make serve                     # or: bash scripts/serve.sh [extra jupyter_server options]
#
# Starts Debian's jupyter_server (/usr/bin/python3 -m jupyter_server) with cellvm's
# kernelspecs, a token, idle-kernel culling and nothing else (no browser, no terminals),
# prints the URL, the token and how to point clients at it, and runs until SIGINT or
# SIGTERM; then the server shuts every kernel down (no gateway or QEMU is left behind).
#
# Environment (every one optional; docs/remote.md says why each default is what it is):
#   CELLVM_SERVE_IP             bind address                          127.0.0.1
#   CELLVM_SERVE_PORT           port                                  8890
#   CELLVM_SERVE_TOKEN          the token (at least 16 characters)    secrets.token_hex(32)
#   CELLVM_SERVE_IDLE_TIMEOUT   seconds idle before a kernel is culled (0: never)   3600
#   CELLVM_SERVE_CULL_INTERVAL  seconds between culling checks        min(60, timeout/4), >= 1
#   CELLVM_SERVE_CULL_CONNECTED 1: cull idle kernels even with a client connected; 0: not  1
#   CELLVM_SERVE_KERNELS        kernelspecs offered (space-separated), or "all"  "cellvm cellvm-agent"
#   CELLVM_SERVE_DEFAULT_KERNEL kernelspec of a POST /api/kernels without "name"  cellvm
#   CELLVM_SERVE_ROOT           the server's root_dir (contents API, kernels' cwd)  a private temp dir
#   CELLVM_SERVE_ARGS           more jupyter_server options, appended (word-split)
#   CELLVM_BUILD                the build whose kernelspecs are served  <repo>/build
# JUPYTER_PATH, if set, is searched after the build's kernelspecs (your own kernelspecs, e.g.
# one per snapshot with CELLVM_FROM_SNAPSHOT in its "env"; list them in CELLVM_SERVE_KERNELS).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=/usr/bin/python3
BUILD=${CELLVM_BUILD:-$ROOT/build}
IP=${CELLVM_SERVE_IP:-127.0.0.1}
PORT=${CELLVM_SERVE_PORT:-8890}
IDLE=${CELLVM_SERVE_IDLE_TIMEOUT:-3600}
CONNECTED=${CELLVM_SERVE_CULL_CONNECTED:-1}
KERNELS=${CELLVM_SERVE_KERNELS:-cellvm cellvm-agent}
DEFAULT_KERNEL=${CELLVM_SERVE_DEFAULT_KERNEL:-cellvm}

die() { echo "serve.sh: $*" >&2; exit 2; }

is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }
is_uint "$PORT" && [ "$PORT" -ge 1 ] && [ "$PORT" -le 65535 ] \
  || die "CELLVM_SERVE_PORT must be a port number (1-65535), not '$PORT'"
is_uint "$IDLE" || die "CELLVM_SERVE_IDLE_TIMEOUT must be whole seconds (0: no culling), not '$IDLE'"
if [ -n "${CELLVM_SERVE_CULL_INTERVAL:-}" ]; then
  INTERVAL=$CELLVM_SERVE_CULL_INTERVAL
  is_uint "$INTERVAL" && [ "$INTERVAL" -ge 1 ] \
    || die "CELLVM_SERVE_CULL_INTERVAL must be whole seconds, at least 1, not '$INTERVAL'"
else
  INTERVAL=$(( IDLE / 4 < 60 ? IDLE / 4 : 60 ))
  [ "$INTERVAL" -ge 1 ] || INTERVAL=1
fi
case "$CONNECTED" in
  1|true|True|yes) CONNECTED=True ;;
  0|false|False|no) CONNECTED=False ;;
  *) die "CELLVM_SERVE_CULL_CONNECTED must be 1 or 0, not '$CONNECTED'" ;;
esac

"$PY" -c 'import jupyter_server' 2>/dev/null \
  || die "Jupyter Server is not installed for $PY: run 'bash scripts/deps.sh' (python3-jupyter-server)"

TOKEN=${CELLVM_SERVE_TOKEN:-$("$PY" -c 'import secrets; print(secrets.token_hex(32))')}
[ "${#TOKEN}" -ge 16 ] || die "CELLVM_SERVE_TOKEN is too short (at least 16 characters)"
[[ "$TOKEN" =~ ^[A-Za-z0-9._~-]+$ ]] || die "CELLVM_SERVE_TOKEN may hold only [A-Za-z0-9._~-]"

# A private directory (0700) for this server: the token file (read once at start-up, removed
# as soon as the server answers), connection files (JUPYTER_RUNTIME_DIR) and, unless
# CELLVM_SERVE_ROOT is set, an empty root_dir. Removed when the server exits.
umask 077
STATE=$(mktemp -d "${TMPDIR:-/tmp}/cellvm-serve.XXXXXX")
[[ "$STATE" != *"'"* ]] || { rm -rf "$STATE"; die "TMPDIR must not hold a quote: $STATE"; }
SERVER=""
cleanup() {
  if [ -n "$SERVER" ] && kill -0 "$SERVER" 2>/dev/null; then
    kill -TERM "$SERVER" 2>/dev/null || true
    wait "$SERVER" 2>/dev/null || true
  fi
  rm -rf "$STATE"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 0' TERM
trap 'exit 0' HUP

ROOTDIR=${CELLVM_SERVE_ROOT:-$STATE/root}
mkdir -p "$ROOTDIR" "$STATE/runtime"
printf '%s' "$TOKEN" > "$STATE/token"

# The kernelspecs offered, found on JUPYTER_PATH (the build's first). jupyter_client 7.4 lists
# only KernelSpecManager.allowed_kernelspecs but STARTS any kernelspec it finds by name, and
# "python3" always resolves to the host's ipykernel (/usr/share/jupyter/kernels/python3). So a
# config file of this server's own replaces the KernelSpecManager: a name not offered cannot be
# started either, and "python3" (what many clients ask for) is the default kernelspec.
export JUPYTER_PATH="$BUILD/share/jupyter${JUPYTER_PATH:+:$JUPYTER_PATH}"
CONFIG=()
if [ "$KERNELS" != all ]; then
  names=()
  for k in $KERNELS; do
    [[ "$k" =~ ^[A-Za-z0-9._-]+$ ]] || die "bad kernelspec name in CELLVM_SERVE_KERNELS: '$k'"
    names+=("${k,,}")
  done
  [[ " ${names[*]} " == *" ${DEFAULT_KERNEL,,} "* ]] \
    || die "the default kernelspec '$DEFAULT_KERNEL' is not in CELLVM_SERVE_KERNELS ('$KERNELS')"
  "$PY" - "${names[@]}" <<'PY' || die "run 'make' first (or fix CELLVM_SERVE_KERNELS / JUPYTER_PATH)"
import sys
from jupyter_client.kernelspec import KernelSpecManager
found = KernelSpecManager().find_kernel_specs()
missing = [n for n in sys.argv[1:] if n not in found]
if missing:
    print("serve.sh: no kernelspec " + ", ".join(missing) + " on JUPYTER_PATH", file=sys.stderr)
    sys.exit(1)
PY
  offered=""
  for n in "${names[@]}"; do offered+="'$n', "; done
  cat > "$STATE/jupyter_server_config.py" <<PY
# Written by scripts/serve.sh for one server (docs/remote.md); removed when it exits.
import re

from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
from tornado import web

OFFERED = {${offered%, }}
DEFAULT = '${DEFAULT_KERNEL,,}'


class NotOffered(NoSuchKernel, web.HTTPError):
    """A NoSuchKernel that the REST API answers with 404 and a sentence (not 500 and a
    traceback, what jupyter_server 1.23 does with a plain NoSuchKernel)."""

    def __init__(self, name):
        name = re.sub(r"[^A-Za-z0-9._-]", "?", str(name))[:80]
        web.HTTPError.__init__(self, 404, "No such kernelspec: %s. This server offers: %s."
                               % (name, ", ".join(sorted(OFFERED))))

    def __str__(self):
        return self.log_message


class CellvmKernelSpecManager(KernelSpecManager):
    """Lists and starts only OFFERED; "python3" is the default kernelspec unless offered."""

    def get_kernel_spec(self, kernel_name):
        name = kernel_name.lower()
        if name == "python3" and name not in OFFERED:
            name = DEFAULT
        if name not in OFFERED:
            raise NotOffered(kernel_name)
        return super().get_kernel_spec(name)


c.ServerApp.kernel_spec_manager_class = CellvmKernelSpecManager
c.KernelSpecManager.allowed_kernelspecs = OFFERED
c.KernelSpecManager.ensure_native_kernel = False
PY
  CONFIG=(--config="$STATE/jupyter_server_config.py")
fi
[ "$(id -u)" -eq 0 ] && CONFIG+=(--ServerApp.allow_root=True)

export JUPYTER_RUNTIME_DIR="$STATE/runtime"
export JUPYTER_TOKEN_FILE="$STATE/token"
unset JUPYTER_TOKEN

# shellcheck disable=SC2086  # CELLVM_SERVE_ARGS is word-split on purpose
"$PY" -m jupyter_server \
  --ServerApp.ip="$IP" --ServerApp.port="$PORT" --ServerApp.port_retries=0 \
  --ServerApp.open_browser=False --ServerApp.root_dir="$ROOTDIR" \
  --ServerApp.terminals_enabled=False \
  --MappingKernelManager.default_kernel_name="$DEFAULT_KERNEL" \
  --MappingKernelManager.cull_idle_timeout="$IDLE" \
  --MappingKernelManager.cull_interval="$INTERVAL" \
  --MappingKernelManager.cull_busy=False \
  --MappingKernelManager.cull_connected="$CONNECTED" \
  "${CONFIG[@]}" \
  ${CELLVM_SERVE_ARGS:-} "$@" </dev/null &
SERVER=$!

case "$IP" in
  *:*) HOSTPART="[$IP]" ;;
  0.0.0.0|"") HOSTPART=$(hostname -f 2>/dev/null || echo localhost) ;;
  *) HOSTPART=$IP ;;
esac
URL="http://$HOSTPART:$PORT"
[ "$IP" = 0.0.0.0 ] && PROBE="http://127.0.0.1:$PORT" || PROBE=$URL

# Wait until the server answers (or has exited), then print how to reach it.
ready=0
for _ in $(seq 1 300); do
  kill -0 "$SERVER" 2>/dev/null || break
  if "$PY" - "$PROBE/api/status" "$TOKEN" <<'PY' 2>/dev/null
import sys, urllib.request
req = urllib.request.Request(sys.argv[1], headers={"Authorization": "token " + sys.argv[2]})
urllib.request.urlopen(req, timeout=2).read()
PY
  then ready=1; break; fi
  sleep 0.2
done
if [ "$ready" != 1 ]; then
  wait "$SERVER" 2>/dev/null && rc=0 || rc=$?
  SERVER=""
  echo "serve.sh: Jupyter Server did not start (exit status $rc): see its log above" >&2
  exit 1
fi
rm -f "$STATE/token"

if [ "$IDLE" -gt 0 ]; then
  cull="idle kernels are shut down after $IDLE s (checked every $INTERVAL s; busy kernels never"
  [ "$CONNECTED" = True ] && cull+=", connected ones too)" || cull+=", connected ones never)"
else
  cull="idle kernels are never culled (CELLVM_SERVE_IDLE_TIMEOUT=0)"
fi
cat <<EOF

cellvm behind Jupyter Server (docs/remote.md)
  URL:      $URL/
  token:    $TOKEN
  kernels:  ${KERNELS} (default: $DEFAULT_KERNEL); $cull

  REST + WebSocket, e.g.:
    curl -H "Authorization: token $TOKEN" $URL/api/kernelspecs
    $PY $ROOT/examples/rest_client.py --url $URL --token $TOKEN
  JupyterLab or Notebook elsewhere, with its kernels here:
    jupyter lab --gateway-url=$URL --GatewayClient.auth_token=$TOKEN
  Any Kernel Gateway client (jupyter_server's GatewayClient, nb2kg, ...):
    JUPYTER_GATEWAY_URL=$URL JUPYTER_GATEWAY_AUTH_TOKEN=$TOKEN
  Stop with Ctrl-C or SIGTERM: every kernel is shut down.

EOF

wait "$SERVER" && rc=0 || rc=$?
SERVER=""
exit "$rc"
