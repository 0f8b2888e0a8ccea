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
  # test and client tooling (run with /usr/bin/python3)
  python3-jupyter-client python3-ipykernel python3-nbclient python3-nbformat
  python3-jupyter-kernel-test python3-pytest python3-psutil
  # the microvm backend (guest-image/build.sh installs its own build tools)
  qemu-system-x86 qemu-utils
)
[ "${CELLVM_DEPS_EXTRA:-}" ] && PKGS+=(${CELLVM_DEPS_EXTRA})

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#PKGS[@]} packages present"
  exit 0
fi
echo "deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
