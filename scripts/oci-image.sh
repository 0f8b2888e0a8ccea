#!/usr/bin/env bash
# oci-image.sh - build the OCI image of cellvm's node side (docs/cluster.md, "The node image").
#
#   bash scripts/oci-image.sh [BUILD_DIR [GUEST_IMAGE_DIR]]     (make oci-image)
#
# Offline, from the build tree and this host's own files: no registry, no network, no base
# image. buildah starts from scratch and copies in cellvm-remote, cellvm-gateway, cellvm-launch
# and the jail's shim, the guest image, QEMU (qemu-system-x86_64, qemu-img, the TCG module, the
# microvm firmware) with their shared-library closure as ldd resolves it here, an /etc with the
# non-root user, and /tmp, /var/tmp, /store. The ENTRYPOINT is cellvm-remote, which reads the
# kernel pod's environment (KERNEL_ID, RESPONSE_ADDRESS, PUBLIC_KEY, PORT_RANGE, ...).
#
# Three layers, each its own image tagged by a hash of its inputs (paths, sizes, mtimes, and this
# script), so a rebuild redoes only what changed: the system (QEMU, libraries; rarely), the
# guest image (when cellvm-kernel or cellvm-init change), the cellvm programs (seconds). With
# nothing changed it returns at once. The result is tagged NAME:<git short rev>[-dirty] and
# NAME:dev.
#
# Environment: CELLVM_OCI_NAME (default localhost/cellvm-node), CELLVM_OCI_UID (1000),
# CELLVM_OCI_GID (100, EG's and the kernel-pod template's defaults), CELLVM_OCI_KVM_GID (the kvm
# group's gid here, else 108), QEMU (default: qemu-system-x86_64 on PATH).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
B=$(cd "${1:-$ROOT/build}" && pwd)
GI=$(cd "${2:-$B/image}" && pwd)
NAME=${CELLVM_OCI_NAME:-localhost/cellvm-node}
STAGE=${NAME}-stage
USER_ID=${CELLVM_OCI_UID:-1000}
GROUP_ID=${CELLVM_OCI_GID:-100}
KVM_GID=${CELLVM_OCI_KVM_GID:-$(getent group kvm | cut -d: -f3 || true)}
KVM_GID=${KVM_GID:-108}
QEMU_BIN=$(readlink -f "$(command -v "${QEMU:-qemu-system-x86_64}")")
QEMU_IMG=$(readlink -f "$(command -v qemu-img)")
QEMU_PREFIX=${QEMU_BIN%/bin/*}
TCG_MODULE=$QEMU_PREFIX/lib/x86_64-linux-gnu/qemu/accel-tcg-x86_64.so
# What QEMU's microvm opens from its data dir (strace of a session): the firmware (qboot, as
# bios-microvm.bin) and the option ROM that boots a PVH kernel given with -kernel.
QEMU_DATA=(bios-microvm.bin qboot.rom pvh.bin)
PROGRAMS=(cellvm-remote cellvm-gateway cellvm-launch cellvm-jailshim.so)
GUEST=(vmlinux initrd.img rootfs.ext4 image.json packages.json cellvm-init)

die() { echo "oci-image: $*" >&2; exit 1; }
log() { echo "oci-image: $*"; }

for t in buildah podman; do
  command -v $t >/dev/null || die "$t is missing (scripts/deps.sh installs it)"
done
for p in "${PROGRAMS[@]}"; do [ -f "$B/$p" ] || die "$B/$p is missing: run make"; done
for g in "${GUEST[@]}"; do [ -f "$GI/$g" ] || die "$GI/$g is missing: run make image"; done
for f in "$QEMU_BIN" "$QEMU_IMG" "$TCG_MODULE"; do [ -f "$f" ] || die "$f is missing"; done

# One build at a time (two test workers, make and a test): the second finds the first's work.
exec 9>"${TMPDIR:-/tmp}/cellvm-oci-image.lock"
flock 9

# The ELF files' shared-library closure, as ldd resolves it on this host (the loader included).
libs_of() {
  ldd "$@" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// && $1 !~ /:$/ { print $1 }' |
    sort -u
}
SYSTEM_ELF=("$QEMU_BIN" "$QEMU_IMG" "$TCG_MODULE")
SYSTEM_LIBS=($(libs_of "${SYSTEM_ELF[@]}"))
PROGRAM_LIBS=($(libs_of "${PROGRAMS[@]/#/$B/}"))

# A layer's key: the previous layer's key, this script, and each input: its path and size, and
# its content when small (make image rewrites image.json each time), else its mtime.
key_of() {
  local prev=$1 f; shift
  { echo "$prev"; sha256sum < "${BASH_SOURCE[0]}"; echo "$USER_ID $GROUP_ID $KVM_GID";
    for f in "$@"; do
      if [ "$(stat -L -c %s "$f")" -lt 1048576 ]; then echo "$f $(sha256sum < "$f")"
      else stat -L -c '%n %s %Y' "$f"; fi
    done; } | sha256sum | cut -c1-24
}
have() { podman image exists "$1"; }

# Copy a file to the same path under root (symlinks followed), and name it there as it is
# named here when that differs (a soname link, /lib -> /usr/lib).
put() {
  local root=$1 src=$2 real
  real=$(readlink -f "$src")
  install -D -m "$(stat -c %a "$real")" -p "$real" "$root$real"
  [ "$src" = "$real" ] && return 0
  local dir; dir=$(readlink -f "$(dirname "$src")")
  [ "$dir/$(basename "$src")" = "$real" ] && return 0
  [ -e "$root$dir/$(basename "$src")" ] || ln -s "$real" "$root$dir/$(basename "$src")"
}

# One layer: a working container from the previous image (or scratch), fill_NAME into its
# mounted root, commit as $STAGE:key. The container is removed whatever happens.
CTR=""
cleanup() { [ -z "$CTR" ] || buildah rm "$CTR" >/dev/null 2>&1 || true; }
trap cleanup EXIT
layer() {
  local name=$1 from=$2 key=$3 mnt
  if have "$STAGE:$key"; then log "$name layer up to date ($key)"; return 0; fi
  log "building the $name layer ($key)"
  CTR=$(buildah from --pull-never "$from")
  mnt=$(buildah mount "$CTR")
  "fill_$name" "$mnt"
  buildah umount "$CTR" >/dev/null
  buildah commit --quiet --rm "$CTR" "$STAGE:$key" >/dev/null
  CTR=""
}

fill_system() {
  local r=$1 f
  # Debian's merged /usr, so the loader path and /lib/... names resolve as here.
  mkdir -p "$r/usr/bin" "$r/usr/sbin" "$r/usr/lib64" "$r/usr/lib/x86_64-linux-gnu" \
           "$r/usr/local/bin" "$r/etc" "$r/dev" "$r/proc" "$r/sys" "$r/run"
  for d in bin sbin lib lib64; do ln -sfn "usr/$d" "$r/$d"; done
  for f in "${SYSTEM_ELF[@]}" "${SYSTEM_LIBS[@]}" "${PROGRAM_LIBS[@]}"; do put "$r" "$f"; done
  mkdir -p "$r$QEMU_PREFIX/share/qemu"
  for f in "${QEMU_DATA[@]}"; do
    if [ -L "$QEMU_PREFIX/share/qemu/$f" ]; then
      cp -P "$QEMU_PREFIX/share/qemu/$f" "$r$QEMU_PREFIX/share/qemu/$f"
    else
      install -D -m 644 -p "$QEMU_PREFIX/share/qemu/$f" "$r$QEMU_PREFIX/share/qemu/$f"
    fi
  done
  install -D -m 644 /etc/ssl/openssl.cnf "$r/etc/ssl/openssl.cnf"
  mkdir -p "$r/usr/lib/ssl"
  ln -sfn /etc/ssl/openssl.cnf "$r/usr/lib/ssl/openssl.cnf"
  install -m 644 /etc/protocols "$r/etc/protocols"
  printf 'passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n' > "$r/etc/nsswitch.conf"
  # The kernel's user: not root (EG and GP refuse uid 0), in the kvm group so a /dev/kvm that
  # the node gives that group opens without --group-add.
  cat > "$r/etc/passwd" <<EOF
root:x:0:0:root:/root:/usr/sbin/nologin
cellvm:x:$USER_ID:$GROUP_ID:cellvm kernel:/home/cellvm:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
EOF
  local group=users                            # gid 100 is Debian's users
  [ "$GROUP_ID" = 100 ] || group=cellvm
  cat > "$r/etc/group" <<EOF
root:x:0:
$group:x:$GROUP_ID:cellvm
kvm:x:$KVM_GID:cellvm
nogroup:x:65534:
EOF
  : > "$r/etc/hosts"; : > "$r/etc/resolv.conf"
  install -d -m 1777 "$r/tmp" "$r/var/tmp"
  install -d -m 0750 -o "$USER_ID" -g "$GROUP_ID" "$r/home/cellvm"
  # The snapshot store: a volume in a pod (RWX claim); a directory of the container otherwise.
  # The gateway takes only its own directory that nobody else can write (gw_snapstore).
  install -d -m 0700 -o "$USER_ID" -g "$GROUP_ID" "$r/store"
}

fill_guest() {
  local r=$1 g dst=$1/usr/local/share/cellvm/image
  install -d "$dst"
  # --sparse: rootfs.ext4 is mostly holes in the build tree; -p keeps the mtimes the snapshot
  # template's key is made of.
  for g in "${GUEST[@]}"; do cp --sparse=always -p -L "$GI/$g" "$dst/$g"; done
  chmod 0444 "$dst/rootfs.ext4"
}

fill_programs() {
  local r=$1 p
  for p in "${PROGRAMS[@]}"; do install -m 755 -p "$B/$p" "$r/usr/local/bin/$p"; done
  chmod 644 "$r/usr/local/bin/cellvm-jailshim.so"
  # cellvm-gateway's default --image is image/ beside it, so the pod's args need no --image.
  ln -sfn ../share/cellvm/image "$r/usr/local/bin/image"
}

K1=$(key_of "" "${SYSTEM_ELF[@]}" "${SYSTEM_LIBS[@]}" "${PROGRAM_LIBS[@]}" \
             "${QEMU_DATA[@]/#/$QEMU_PREFIX/share/qemu/}" /etc/ssl/openssl.cnf /etc/protocols)
K2=$(key_of "$K1" "${GUEST[@]/#/$GI/}")
K3=$(key_of "$K2" "${PROGRAMS[@]/#/$B/}")

REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$ROOT" diff --quiet HEAD 2>/dev/null || REV="$REV-dirty"
FINAL=$(podman image inspect --format '{{index .Labels "dev.cellvm.inputs"}}' "$NAME:dev" \
        2>/dev/null || true)
if [ "$FINAL" = "$K3" ]; then
  podman tag "$NAME:dev" "$NAME:$REV"
  log "$NAME:dev up to date ($K3), tagged $NAME:$REV"
  exit 0
fi

T0=$(date +%s)
OLD=$(podman image inspect --format '{{.Id}}' "$NAME:dev" 2>/dev/null || true)
layer system scratch "$K1"
layer guest "$STAGE:$K1" "$K2"
layer programs "$STAGE:$K2" "$K3"

# The final image: the programs layer with its configuration (no layer of its own). The user is
# the bare uid: podman then adds the groups /etc/group gives it (kvm), which it skips for uid:gid;
# the gid is passwd's.
CTR=$(buildah from --pull-never "$STAGE:$K3")
buildah config \
  --user "$USER_ID" --workingdir /home/cellvm \
  --env PATH=/usr/local/bin:/usr/bin --env HOME=/home/cellvm --env TMPDIR=/tmp \
  --env CELLVM_SNAPSHOT_DIR=/store \
  --entrypoint '["/usr/local/bin/cellvm-remote"]' \
  --cmd '["--", "--backend", "microvm", "--accel", "auto"]' \
  --stop-signal SIGTERM \
  --label "dev.cellvm.inputs=$K3" --label "dev.cellvm.revision=$REV" \
  --label "org.opencontainers.image.title=cellvm node" \
  --label "org.opencontainers.image.description=cellvm-remote, cellvm-gateway, QEMU and the guest image: Enterprise Gateway's launcher on a node" \
  --port 40000-40005/tcp \
  "$CTR"
buildah commit --quiet --rm "$CTR" "$NAME:dev" >/dev/null
CTR=""
podman tag "$NAME:dev" "$NAME:$REV"
# The image this one replaces goes unless another tag holds it, and so do stage images of
# older inputs (one still under a kept image stays).
[ -z "$OLD" ] || [ -n "$(podman image inspect --format '{{.RepoTags}}' "$OLD" | tr -d '[]')" ] ||
  podman rmi "$OLD" >/dev/null 2>&1 || true
for old in $(podman images --format '{{.Repository}}:{{.Tag}}' --filter "reference=$STAGE"); do
  case "$old" in *":$K1"|*":$K2"|*":$K3") ;; *) podman rmi "$old" >/dev/null 2>&1 || true ;; esac
done
SIZE=$(podman image inspect --format '{{.Size}}' "$NAME:dev")
log "$NAME:dev and $NAME:$REV built in $(( $(date +%s) - T0 )) s, $(( SIZE / 1000000 )) MB"
