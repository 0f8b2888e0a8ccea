#!/usr/bin/env bash
# deps.sh - install every Debian package cellvm's build and tests need.
# Idempotent: installs only what is missing. Needs root (or sudo).
set -euo pipefail

PKGS=(
  # build
  build-essential pkg-config clang libclang-rt-14-dev
  libczmq-dev libzmq3-dev libjansson-dev libssl-dev libcmocka-dev
  libpython3.11-dev python3.11-dev
  # Python side of the kernel (embedded CPython sees Debian's dist-packages)
  python3-ipython python3-matplotlib python3-numpy python3-pandas
  python3-ipywidgets
  # test and client tooling (run with /usr/bin/python3)
  python3-jupyter-client python3-ipykernel python3-nbclient python3-nbformat
  python3-jupyter-kernel-test python3-pytest python3-pytest-xdist python3-psutil
  # nbclient's own tests, run by scripts/peer-suite.sh: what they import
  python3-testpath python3-xmltodict python3-nbconvert
  # make serve and its test (docs/remote.md): Jupyter Server, a WebSocket client
  python3-jupyter-server python3-websocket
  # the remote launcher's test (tests/integration/test_remote_launcher.py): EG's side of the reply
  python3-pycryptodome
  # the browser test (tests/integration/test_browser.py): classic Notebook in headless Chromium
  python3-notebook python3-widgetsnbextension chromium chromium-driver python3-selenium
  # the Slurm provisioner (provisioner/, docs/slurm.md) and the three-node test cluster
  # (tests/cluster/): the daemons, the client commands, munge, RSA/AES for the launch protocol
  slurm-wlm slurmctld slurmd slurm-client munge python3-pycryptodome
  # the microvm backend (guest-image/build.sh installs its own build tools)
  qemu-system-x86 qemu-utils
  # examples/kubernetes rendered offline (tests/integration/test_k8s_manifests.py): the kernel-pod
  # template rendered as EG's launcher does, the YAML parsed
  python3-jinja2 python3-yaml
  # the node's OCI image (scripts/oci-image.sh, tests/integration/test_oci_image.py): built with
  # buildah, run with podman; runc because crun refuses this host's hybrid cgroups (v1 with a
  # controller on the v2 hierarchy)
  podman buildah runc
)
# ... and `kubectl kustomize`: Debian's kubernetes-client, unless a kubectl is there already
# (Google Cloud SDK's kubectl package owns /usr/bin/kubectl, and the two would collide).
command -v kubectl >/dev/null 2>&1 || PKGS+=(kubernetes-client)
[ "${CELLVM_DEPS_EXTRA:-}" ] && PKGS+=(${CELLVM_DEPS_EXTRA})

# The MCP acceptance test's client (tests/mcp, docs/mcp.md): @modelcontextprotocol/sdk from npm,
# pinned by tests/mcp/package-lock.json. `npm ci` runs again only when the lockfile changed.
mcp_node_deps() {
  local dir stamp
  dir="$(cd "$(dirname "$0")/.." && pwd)/tests/mcp"
  stamp="$dir/node_modules/.cellvm-package-lock.json"
  [ -f "$dir/package-lock.json" ] || return 0
  if cmp -s "$dir/package-lock.json" "$stamp"; then
    echo "deps: tests/mcp node modules present"
    return 0
  fi
  if ! command -v npm >/dev/null 2>&1; then
    echo "deps: installing nodejs npm (tests/mcp)"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=600 update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends nodejs npm
  fi
  echo "deps: npm ci in tests/mcp"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  cp "$dir/package-lock.json" "$stamp"
}

# One install at a time: `make -j2 all template` reaches this script twice (the image target's
# own make), and two apt-gets at once fail on apt's lock. The second waits, then finds nothing
# missing. apt's own lock timeout covers an apt run by something else (unattended upgrades).
if [ -z "${CELLVM_DEPS_LOCKED:-}" ]; then
  lock=/var/lock/cellvm-deps.lock
  [ -w /var/lock ] || lock=${TMPDIR:-/tmp}/cellvm-deps.$(id -u).lock
  exec 8>"$lock"
  flock 8
  export CELLVM_DEPS_LOCKED=1
fi
APT_OPTS=(-o DPkg::Lock::Timeout=600)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#PKGS[@]} packages present"
  mcp_node_deps
  exit 0
fi
echo "deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get "${APT_OPTS[@]}" update -q
$SUDO apt-get "${APT_OPTS[@]}" install -y -q --no-install-recommends "${missing[@]}"
mcp_node_deps
