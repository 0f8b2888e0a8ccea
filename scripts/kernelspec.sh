#!/usr/bin/env bash
# kernelspec.sh - write a kernel.json for cellvm-gateway.
#
#   bash scripts/kernelspec.sh NAME DIR OUT_JSON [bin]
#
# NAME      cellvm (microVM backend), cellvm-agent, cellvm-5.5 (microVM, Jupyter
#           protocol 5.5: XPUB IOPub with iopub_welcome), cellvm-notebook (microVM
#           with a read-only copy of the notebook's folder), cellvm-unsafe-local
#           (no isolation), cellvm-slurm (microVM on a Slurm node, started by the
#           cellvm-slurm provisioner through cellvm-remote: docs/slurm.md) or
#           cellvm-remote (microVM, started by Enterprise Gateway on a node through
#           cellvm-remote: docs/cluster.md)
# DIR       absolute directory holding cellvm-gateway, or with "bin" the
#           prefix whose bin/ holds it (make install)
# OUT_JSON  the kernel.json to write (its directory is created)
set -euo pipefail

if [ $# -lt 3 ] || [ $# -gt 4 ]; then
  echo "usage: $0 NAME ABS_DIR OUT_JSON [bin]" >&2
  exit 2
fi
name=$1 dir=$2 out=$3 sub=${4:-}
case "$dir" in
  /*) ;;
  *) echo "$0: DIR must be absolute: $dir" >&2; exit 2 ;;
esac
# cellvm-launch listens on the ports, then execs cellvm-gateway beside it
# (docs/gateway.md): a client's first connect is never refused.
gateway="${dir%/}/cellvm-launch"
[ "$sub" = bin ] && gateway="${dir%/}/bin/cellvm-launch"

extra="" protocol="" remote=""
case "$name" in
  cellvm)
    backend=microvm
    display="Python 3 (cellvm microVM)" ;;
  cellvm-agent)
    # For agents (README, docs/sessions.md): a runaway cell is interrupted after
    # 120 s, then killed and restarted; 5 idle minutes put the VM on disk (the next
    # cell resumes it); 12 idle hours, or 24 hours in all, end the session.
    backend=microvm
    extra=', "--cell-timeout", "120", "--idle-pause", "300", "--idle-timeout", "43200", "--ttl", "86400"'
    display="Python 3 (cellvm microVM for agents: 120 s cells, paused when idle)" ;;
  cellvm-5.5)
    # Opt-in: a 5.3 client does not expect iopub_welcome (docs/gateway.md).
    backend=microvm protocol=5.5
    extra=', "--protocol", "5.5"'
    display="Python 3 (cellvm microVM, protocol 5.5)" ;;
  cellvm-notebook)
    # The notebook's folder (Jupyter starts the kernel there) copied into the VM's
    # /notebook, read-only, and the kernel's working directory (docs/files.md).
    backend=microvm
    extra=', "--share-cwd"'
    display="Python 3 (cellvm microVM, with the notebook's folder)" ;;
  cellvm-slurm)
    # The provisioner (provisioner/cellvm_slurm.py) submits argv as a Slurm job and fills
    # the placeholders; cellvm-remote on the node binds the ports, answers the provisioner
    # and runs cellvm-gateway with the arguments after "--".
    # A requeued job can start on another node before the lease of a node that died has
    # expired (30 s, plus 5 s of clock skew): the gateway waits that long for it.
    backend=microvm remote=slurm
    extra=', "--lease-wait", "45"'
    display="Python 3 (cellvm microVM on a Slurm node)" ;;
  cellvm-remote)
    # EG's remote-kernel protocol (docs/cluster.md): EG fills the placeholders, cellvm-remote
    # picks ports and key, reports them and runs the gateway after "--". EG's own
    # kernelspecs spell the launcher's options --RemoteProcessProxy.*.
    backend=microvm remote=eg
    extra=', "--lease-wait", "45"'
    display="Python 3 (cellvm microVM, remote through Enterprise Gateway)" ;;
  cellvm-unsafe-local)
    backend=unsafe-local
    display="Python 3 (cellvm unsafe-local, NO isolation)" ;;
  *) echo "$0: unknown kernelspec name: $name" >&2; exit 2 ;;
esac

# JSON-escape a string (backslash and double quote; paths hold nothing else
# that JSON cares about, control characters are refused).
json_str() {
  local s=$1
  if [[ "$s" == *[$'\x01'-$'\x1f']* ]]; then
    echo "$0: control character in: $s" >&2; exit 2
  fi
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  printf '"%s"' "$s"
}

# The guest image: CELLVM_IMAGE_DIR, else the gateway's default (image/ beside it).
if [ "$backend" = microvm ] && [ -n "${CELLVM_IMAGE_DIR:-}" ]; then
  extra="$extra, \"--image\", $(json_str "$CELLVM_IMAGE_DIR")"
fi

# jupyter_client 8.8+ reads the top-level kernel_protocol_version; only the 5.5
# spec has one (7.x warns about keys it does not know).
proto_line=""
[ -n "$protocol" ] && proto_line="
  \"kernel_protocol_version\": \"$protocol\","

# "debugger": true (JupyterLab then offers its debugger) only where the kernel can import
# debugpy and IPython (docs/kernel.md "Debugger"): for the microVM, the guest image's package
# list; for unsafe-local, Debian's Python on this host (the kernel embeds its libpython).
debugger=false
if [ "$backend" = microvm ]; then
  pkgs="${CELLVM_IMAGE_DIR:-$(dirname "$gateway")/image}/packages.json"
  grep -q '"name": "python3-debugpy"' "$pkgs" 2>/dev/null && debugger=true
elif /usr/bin/python3 -c 'import debugpy, IPython' >/dev/null 2>&1; then
  debugger=true
fi

argv="$(json_str "$gateway"), \"--connection-file\", \"{connection_file}\",
           \"--backend\", \"$backend\"$extra"
meta=""
if [ -n "$remote" ]; then
  opt="--"
  [ "$remote" = eg ] && opt="--RemoteProcessProxy."
  argv="$(json_str "$(dirname "$gateway")/cellvm-remote"),
           \"${opt}kernel-id\", \"{kernel_id}\", \"${opt}response-address\", \"{response_address}\",
           \"${opt}public-key\", \"{public_key}\", \"${opt}port-range\", \"{port_range}\",
           \"--\", \"--backend\", \"$backend\"$extra"
fi
case "$remote" in
  # A microVM's cold boot on a node under TCG takes tens of seconds (docs/slurm.md).
  slurm) meta=', "kernel_provisioner": {"provisioner_name": "cellvm-slurm", "config": {"launch_timeout": 120}}' ;;
  eg) meta=', "process_proxy": {"class_name": "enterprise_gateway.services.processproxies.distributed.DistributedProcessProxy"}' ;;
esac
# The gateway is a CurveZMQ server on all five ports when the connection file carries
# curve_publickey/curve_secretkey (docs/security.md): jupyter_client 8.9 provisions the keys
# (transport_encryption "auto") only for a kernelspec that says so, in the list form of the JEP.
# Older clients (Debian's 7.4.9) ignore metadata they do not know.

mkdir -p "$(dirname "$out")"
tmp="$out.tmp.$$"
cat > "$tmp" <<JSON
{
  "argv": [$argv],
  "display_name": $(json_str "$display"),
  "language": "python",
  "interrupt_mode": "message",$proto_line
  "metadata": {"debugger": $debugger, "cellvm_backend": "$backend",
               "supported_encryption": ["curve"]$meta}
}
JSON
mv -f "$tmp" "$out"
