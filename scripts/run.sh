#!/usr/bin/env bash
# run.sh - `make run`: execute a real notebook through a cellvm session and
# show what came back. Uses the microVM kernelspec (`cellvm`) when the guest
# image is built, which `make run` does first.
#   CELLVM_BUILD   build dir (absolute)
#   RUN_KERNEL     kernelspec to use (default: cellvm)
#   RUN_NOTEBOOK   notebook to run (default: notebooks/01-pandas-analysis.ipynb)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${CELLVM_BUILD:-$PWD/build}
KERNEL=${RUN_KERNEL:-cellvm}
NB=${RUN_NOTEBOOK:-notebooks/01-pandas-analysis.ipynb}
export JUPYTER_PATH=$BUILD/share/jupyter
exec /usr/bin/python3 - "$KERNEL" "$NB" <<'PY'
import sys, time, pathlib
import nbformat
from nbclient import NotebookClient

from jupyter_client import AsyncKernelClient, KernelManager

kernel, path = sys.argv[1], pathlib.Path(sys.argv[2])
nb = nbformat.read(path, as_version=4)
t0 = time.time()
km = KernelManager(kernel_name=kernel)
km.start_kernel(cwd=str(path.parent))
try:
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=300)
    print(f"kernel {kernel!r} ready in {time.time() - t0:.1f} s")
    # A microVM holds nothing of the host: send the notebook's data in.
    data = path.parent / "data"
    for f in sorted(p for p in data.rglob("*") if p.is_file()) if data.is_dir() else []:
        rel = f.relative_to(path.parent).as_posix()
        msg = kc.session.msg("cellvm_put_request", {"path": rel})
        kc.session.send(kc.control_channel.socket, msg, buffers=[f.read_bytes()])
        while True:
            r = kc.get_control_msg(timeout=60)
            if r["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
                break
        c = r["content"]
        print(f"put {rel}: {c['status']} {c.get('size', c.get('evalue'))}")
    kc.stop_channels()
    del kc              # its __del__ must not run during interpreter shutdown
    km.client_factory = AsyncKernelClient
    client = NotebookClient(nb, km=km, timeout=600, startup_timeout=300,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
finally:
    km.shutdown_kernel(now=False)
print(f"ran {path} on kernelspec {kernel!r} in {time.time() - t0:.1f} s\n")
for i, cell in enumerate(nb.cells):
    if cell.cell_type != "code":
        continue
    print(f"In [{cell.get('execution_count')}]: {cell.source.splitlines()[0] if cell.source else ''}")
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            print("   " + out.text.rstrip().replace("\n", "\n   "))
        elif out.output_type in ("execute_result", "display_data"):
            data = out.get("data", {})
            if "image/png" in data:
                print(f"   [image/png, {len(data['image/png'])} base64 chars]")
            elif "text/plain" in data:
                print("   " + data["text/plain"].rstrip().replace("\n", "\n   "))
        elif out.output_type == "error":
            print(f"   {out.ename}: {out.evalue}")
PY
