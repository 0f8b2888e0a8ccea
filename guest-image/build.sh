#!/bin/bash
# guest-image/build.sh - build the cellvm guest image (see docs/guest-image.md).
#
#   guest-image/build.sh CELLVM_KERNEL_BINARY CELLVM_INIT_BINARY OUTDIR (both built by `make image`)
#
# Both binaries come from the Makefile (`make image` builds them with the project's warnings).
# Writes OUTDIR/{vmlinux,initrd.img,rootfs.ext4,cellvm-init,image.json}. Runs as root, unattended.
# Every slow step is cached by a hash of its inputs under $CELLVM_IMAGE_CACHE
# (default /var/cache/cellvm/image), outside the work tree, so CI and later runs reuse it:
#   kernel-<key>/   vmlinux + the few modules, from linux-image-*-cloud-amd64
#   base-<key>.ext4 the root file system: debootstrap, security updates, packages (minutes)
#   base-<key>.json its package list (name, version, suite), published as OUTDIR/packages.json
#   final-<key>/    base + cellvm-kernel + cellvm-init (seconds), keyed by base + binaries
set -euo pipefail

# Bump when a change here must rebuild the cached base/kernel (the package list is hashed anyway).
BASE_VERSION=4
KERNEL_VERSION_TAG=2
SUITE=bookworm
PACKAGES=(python3 python3-numpy python3-pandas python3-matplotlib python3-scipy python3-ipython
          python3-matplotlib-inline python3-ipywidgets python3-debugpy libpython3.11 libjansson4
          libssl3 e2fsprogs python3-pip ca-certificates
          python3-ipython-genutils)  # ipywidgets imports it but only the notebook depends on it
# Dependencies the kernel never runs, kept out by a local package that Provides them:
# python3-scipy Depends on python3-pythran (a build-time compiler: gcc, g++, libboost-dev,
# python3-dev, ~500 MB), python3-ipywidgets on python3-widgetsnbextension (the notebook server
# and its JavaScript), python3-debugpy's pydevd on gdb (only for attaching to another pid).
EXCLUDE=(python3-pythran python3-widgetsnbextension gdb)
# Never in the image (checked after the install; tests/integration/test_image.py too).
ABSENT=(gcc gcc-12 g++ cpp binutils libc6-dev python3-dev libpython3.11-dev make)
# Loaded by the initramfs in dependency order (computed from modinfo; no modules.dep shipped).
MODULES=(virtio_mmio virtio_blk virtio_console overlay virtio-rng virtio_balloon)
HOST_TOOLS=(debootstrap:debootstrap qemu-system-x86_64:qemu-system-x86 lz4:lz4
            mkfs.ext4:e2fsprogs debugfs:e2fsprogs cpio:cpio busybox:busybox-static
            modinfo:kmod gcc:gcc pkg-config:pkg-config)

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
CACHE=${CELLVM_IMAGE_CACHE:-/var/cache/cellvm/image}
ms() { echo $(( $(date +%s%N) / 1000000 )); }
secs() { printf '%d.%d' $(( $1 / 1000 )) $(( $1 % 1000 / 100 )); }
T0=$(ms)
STEP_T=$T0

log() { printf '[image %6ss] %s\n' "$(secs $(( $(ms) - T0 )))" "$*"; }
step() {
    local now; now=$(ms)
    if [ -n "${STEP_NAME:-}" ]; then
        log "done  $STEP_NAME ($(secs $(( now - STEP_T )))s)"
    fi
    STEP_NAME=$1; STEP_T=$now
    [ -n "$1" ] && log "step  $1"
    return 0
}
die() { log "error: $*"; exit 1; }
sha() { sha256sum | cut -c1-16; }

usage() { echo "usage: $0 CELLVM_KERNEL_BINARY CELLVM_INIT_BINARY OUTDIR | $0 --prefetch" >&2; exit 2; }
PREFETCH=0
if [ "${1:-}" = --prefetch ]; then PREFETCH=1; set -- /bin/true /bin/true /nonexistent; fi
[ $# -eq 3 ] || usage
KBIN=$(readlink -f "$1"); IBIN=$(readlink -f "$2"); OUT=$3
[ -x "$KBIN" ] || die "cellvm-kernel binary '$1' not found (run make kernel first)"
[ -x "$IBIN" ] || die "cellvm-init binary '$2' not found (run make init first)"
[ "$(id -u)" = 0 ] || die "must run as root (debootstrap, mkfs of device nodes)"

# --- host tools: a fresh machine has none of them -------------------------------------------
host_tools() {
    local missing=() t
    for t in "${HOST_TOOLS[@]}"; do
        command -v "${t%%:*}" >/dev/null 2>&1 || [ -x "/usr/sbin/${t%%:*}" ] || missing+=("${t#*:}")
    done
    [ -f /usr/include/jansson.h ] || missing+=(libjansson-dev)
    [ -f /usr/include/openssl/evp.h ] || missing+=(libssl-dev)
    if [ ${#missing[@]} -gt 0 ]; then
        echo "[image] installing host packages: ${missing[*]}"
        # The same lock as scripts/deps.sh: a parallel make runs both, and apt allows one at once.
        local lock=/var/lock/cellvm-deps.lock
        [ -w /var/lock ] || lock=${TMPDIR:-/tmp}/cellvm-deps.$(id -u).lock
        exec 7>"$lock"; flock 7
        apt-get -o DPkg::Lock::Timeout=600 update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 \
            $(printf '%s\n' "${missing[@]}" | sort -u) >/dev/null
        exec 7>&-
    fi
}

# The Debian mirror this machine's apt uses (deb822 or one-line sources).
mirror() {
    local m
    m=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' \
        | grep -v security | head -n1 || true)
    [ -n "$m" ] || m=$(grep -hs "^deb .* $SUITE " /etc/apt/sources.list | awk '{print $2}' \
        | grep -v security | head -n1 || true)
    echo "${m:-http://deb.debian.org/debian}"
}
security_mirror() {
    local m
    m=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' \
        | grep security | head -n1 || true)
    [ -n "$m" ] || m=$(grep -hs "^deb .* $SUITE-security " /etc/apt/sources.list | awk '{print $2}' \
        | head -n1 || true)
    echo "${m:-http://security.debian.org/debian-security}"
}

# --- kernel: linux-image-*-cloud-amd64, uncompressed vmlinux + modules ----------------------
build_kernel() {
    local dir=$1 tmp
    tmp=$(mktemp -d "$CACHE/tmp.kernel.XXXXXX"); chmod 755 "$tmp"  # apt-get download runs as _apt
    (cd "$tmp" && apt-get download -qq linux-image-cloud-amd64 >/dev/null)
    local meta; meta=$(ls "$tmp"/linux-image-cloud-amd64_*.deb)
    local dep; dep=$(dpkg-deb -f "$meta" Depends | grep -o 'linux-image-[^ ,]*-cloud-amd64' | head -n1)
    [ -n "$dep" ] || die "cannot resolve the cloud kernel package from $meta"
    (cd "$tmp" && apt-get download -qq "$dep" >/dev/null)
    dpkg-deb -x "$tmp/${dep}"_*.deb "$tmp/x"
    local vmlinuz; vmlinuz=$(ls "$tmp"/x/boot/vmlinuz-*)
    # vmlinuz is a bzImage whose payload is LZ4 (legacy frame, magic 02 21 4c 18).
    local off; off=$(grep -obUaP '\x02\x21\x4c\x18' "$vmlinuz" | head -n1 | cut -d: -f1)
    [ -n "$off" ] || die "no LZ4 payload in $vmlinuz"
    tail -c +"$((off + 1))" "$vmlinuz" | lz4 -dc > "$tmp/vmlinux" 2>/dev/null || true
    file "$tmp/vmlinux" 2>/dev/null | grep -q ELF || head -c 4 "$tmp/vmlinux" | grep -q ELF \
        || die "extracted vmlinux is not an ELF"
    mkdir -p "$tmp/out/modules"
    mv "$tmp/vmlinux" "$tmp/out/vmlinux"
    local kver; kver=$(basename "$(ls -d "$tmp"/x/lib/modules/*)")
    echo "$kver" > "$tmp/out/release"
    module_order "$tmp/x/lib/modules/$kver" "$tmp/out/modules"
    rm -rf "$dir"; mv "$tmp/out" "$dir"; rm -rf "$tmp"
}

# Copy each wanted module and its dependencies, and write modules.order (deps first).
module_order() {
    local moddir=$1 out=$2 seen=" " order=()
    visit() {
        local name=${1//-/_} f deps d
        case "$seen" in *" $name "*) return 0;; esac
        seen="$seen$name "
        f=$(find "$moddir" -name "$name.ko*" -o -name "${1}.ko*" | head -n1)
        if [ -z "$f" ]; then
            f=$(find "$moddir" -name "${name//_/-}.ko*" | head -n1)
        fi
        [ -n "$f" ] || { log "module $1: built in"; return 0; }
        deps=$(modinfo -F depends "$f")
        for d in ${deps//,/ }; do visit "$d"; done
        cp "$f" "$out/"
        order+=("$(basename "$f")")
    }
    local m
    for m in "${MODULES[@]}"; do visit "$m"; done
    printf '%s\n' "${order[@]}" > "$out/modules.order"
    log "modules: ${order[*]}"
}

# --- base root file system: debootstrap, cleaned of anything host-specific ------------------
build_base() {
    local img=$1 meta=$2 tmp tree
    tmp=$(mktemp -d "$CACHE/tmp.base.XXXXXX"); tree=$tmp/root
    log "debootstrap $SUITE minbase from $(mirror)"
    debootstrap --variant=minbase "$SUITE" "$tree" "$(mirror)" \
        > "$tmp/debootstrap.log" 2>&1 || { tail -n 30 "$tmp/debootstrap.log"; die "debootstrap failed"; }
    step "base: security updates and packages"
    install_packages "$tree" "$tmp"
    package_list "$tree" "$tmp" > "$tmp/packages.json"
    step "base: configure"
    configure_base "$tree"
    step "base: mkfs.ext4"
    local mb; mb=$(du -sm "$tree" | cut -f1)
    truncate -s "$((mb * 115 / 100 + 200))M" "$tmp/base.ext4"
    mkfs.ext4 -q -F -L cellvm-root -m 0 -O ^has_journal -E root_owner=0:0 \
        -d "$tree" "$tmp/base.ext4" "$((mb * 115 / 100 + 200))M"
    mv "$tmp/packages.json" "$meta"
    mv "$tmp/base.ext4" "$img"
    rm -rf "$tmp"
}

# debootstrap installs the release as first published: add -updates and -security, upgrade,
# then install PACKAGES (Depends only, as debootstrap did) with EXCLUDE stood in for.
install_packages() {
    local r=$1 tmp=$2 p
    rm -f "$r/etc/apt/sources.list"
    cat > "$r/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $(mirror)
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $(security_mirror)
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    mkdir -p "$tmp/stub/DEBIAN"
    cat > "$tmp/stub/DEBIAN/control" <<EOF
Package: cellvm-guest-exclusions
Version: 1
Architecture: all
Maintainer: cellvm <root@localhost>
Provides: $(printf '%s, ' "${EXCLUDE[@]}" | sed 's/, $//')
Description: stands in for dependencies the cellvm guest never runs
 See EXCLUDE in guest-image/build.sh.
EOF
    dpkg-deb --root-owner-group -b "$tmp/stub" "$r/tmp/exclusions.deb" >/dev/null
    local apt=(chroot "$r" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8
               DEBIAN_FRONTEND=noninteractive)
    "${apt[@]}" apt-get update > "$tmp/apt.log" 2>&1 \
        && "${apt[@]}" apt-get -y dist-upgrade >> "$tmp/apt.log" 2>&1 \
        && date -u +%Y-%m-%dT%H:%M:%SZ > "$tmp/upgraded" \
        && "${apt[@]}" dpkg -i /tmp/exclusions.deb >> "$tmp/apt.log" 2>&1 \
        && "${apt[@]}" apt-get -y --no-install-recommends install "${PACKAGES[@]}" \
            >> "$tmp/apt.log" 2>&1 \
        || { tail -n 30 "$tmp/apt.log"; die "apt-get in the new root failed"; }
    "${apt[@]}" apt-get clean
    rm -f "$r/tmp/exclusions.deb"
    for p in "${EXCLUDE[@]}" "${ABSENT[@]}"; do
        if "${apt[@]}" dpkg -s "$p" >/dev/null 2>&1; then die "$p got installed"; fi
    done
}

# The installed packages as JSON (one line each), with the suite each version came from;
# needs the apt lists, so it runs before configure_base deletes them.
package_list() {
    local r=$1 tmp=$2 f
    # shellcheck disable=SC2016
    chroot "$r" dpkg-query -W -f '${Package}\t${Version}\t${Architecture}\n' | sort > "$tmp/dpkg.tsv"
    # shellcheck disable=SC2046
    chroot "$r" apt-cache policy $(cut -f1 "$tmp/dpkg.tsv") > "$tmp/policy.txt"
    # The suite: the first archive under the installed (***) version. A candidate newer than
    # the installed version would be an update the upgrade missed.
    awk -F'\t' '
        FNR == NR {
            if ($0 ~ /^[^ ]/) { p = $0; sub(/:.*/, "", p); star = 0 }
            else if ($0 ~ /^  Candidate: /) cand[p] = substr($0, 14)
            else if ($0 ~ /^ \*\*\* /) star = 1
            else if ($0 ~ /^     [^ ]/) star = 0
            else if (star && $0 !~ /\/var\/lib\/dpkg\/status/ && !(p in suite)) {
                split($0, w, " "); s = w[3]; sub(/\/.*/, "", s); suite[p] = s }
            next }
        { print $1 "\t" $2 "\t" $3 "\t" (($1 in suite) ? suite[$1] : "local") "\t" cand[$1] }
    ' "$tmp/policy.txt" "$tmp/dpkg.tsv" > "$tmp/packages.tsv"
    if awk -F'\t' '$5 != $2 { print; bad = 1 } END { exit !bad }' "$tmp/packages.tsv" >&2; then
        die "installed versions older than the archive's (held back?)"
    fi
    printf '{"suite": "%s",\n "sources": ["%s %s %s-updates", "%s %s-security"],\n' \
        "$SUITE" "$(mirror)" "$SUITE" "$SUITE" "$(security_mirror)" "$SUITE"
    printf ' "upgraded_at": "%s",\n "archive_dates": {' "$(cat "$tmp/upgraded")"
    for f in "$r"/var/lib/apt/lists/*_InRelease; do
        awk '/^Codename:/ { c = $2 } /^Date:/ { d = substr($0, 7) }
             END { printf "\"%s\": \"%s\", ", c, d }' "$f"
    done | sed 's/, $//'
    printf '},\n "excluded": [%s],\n "packages": [\n' \
        "$(printf '"%s", ' "${EXCLUDE[@]}" | sed 's/, $//')"
    awk -F'\t' '{ printf "%s  {\"name\": \"%s\", \"version\": \"%s\", \"arch\": \"%s\", \"suite\": \"%s\"}",
                   (NR > 1 ? ",\n" : ""), $1, $2, $3, $4 } END { print "" }' "$tmp/packages.tsv"
    printf ' ]}\n'
}

# Nothing of the host may stay in the image: debootstrap copies resolv.conf and the hostname.
configure_base() {
    local r=$1
    rm -rf "$r"/var/cache/apt/archives/*.deb "$r"/var/lib/apt/lists/* "$r"/var/log/* \
           "$r"/etc/resolv.conf "$r"/etc/machine-id "$r"/etc/ssh "$r"/root/.bash_history
    : > "$r/etc/resolv.conf"; : > "$r/etc/machine-id"
    echo cellvm > "$r/etc/hostname"
    printf '127.0.0.1\tlocalhost cellvm\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' > "$r/etc/hosts"
    chroot "$r" groupadd -g 1000 cellvm
    chroot "$r" useradd -u 1000 -g 1000 -d /tmp/home -M -s /usr/sbin/nologin cellvm
    mkdir -p "$r/workspace" "$r/var/cache/cellvm/matplotlib"
    # Build matplotlib's font cache now: under TCG the first import would spend seconds on it.
    chroot "$r" env -i MPLCONFIGDIR=/var/cache/cellvm/matplotlib MPLBACKEND=Agg \
        python3 -c 'import matplotlib.pyplot' >/dev/null 2>&1 || log "warning: matplotlib cache not built"
    chroot "$r" chown -R 1000:1000 /var/cache/cellvm/matplotlib
    # Byte-compile what postinst scripts did not (the root is read-only in the guest).
    chroot "$r" python3 -m compileall -q -j0 /usr/lib/python3/dist-packages /usr/lib/python3.11 \
        >/dev/null 2>&1 || true
}

# --- initramfs: busybox, the modules, a script that mounts the root and switches to it ------
build_initrd() {
    local kdir=$1 out=$2 tmp
    tmp=$(mktemp -d "$CACHE/tmp.initrd.XXXXXX")
    mkdir -p "$tmp"/{bin,dev,proc,sys,newroot,lower,rw,lib/modules}
    cp "$(command -v busybox)" "$tmp/bin/busybox"
    cp "$kdir"/modules/*.ko* "$kdir/modules/modules.order" "$tmp/lib/modules/"
    install -m 755 "$HERE/initramfs-init.sh" "$tmp/init"
    (cd "$tmp" && find . -print0 | sort -z | cpio --null -o -H newc --quiet -R 0:0) \
        | gzip -1 -n > "$out"
    rm -rf "$tmp"
}

# --- final image: base + cellvm-kernel + cellvm-init, written in place with debugfs ---------
assemble() {
    local base=$1 init=$2 dir=$3 tmp
    tmp=$(mktemp -d "$CACHE/tmp.final.XXXXXX")
    cp --sparse=always "$base" "$tmp/rootfs.ext4"
    debugfs -w "$tmp/rootfs.ext4" -f - >/dev/null 2>"$tmp/debugfs.err" <<EOF
cd /usr/local/bin
write $KBIN cellvm-kernel
sif cellvm-kernel mode 0100755
sif cellvm-kernel uid 0
sif cellvm-kernel gid 0
cd /usr/sbin
write $init cellvm-init
sif cellvm-init mode 0100755
sif cellvm-init uid 0
sif cellvm-init gid 0
EOF
    if grep -v '^debugfs ' "$tmp/debugfs.err" | grep -q .; then
        cat "$tmp/debugfs.err"; die "debugfs failed"
    fi
    e2fsck -fn "$tmp/rootfs.ext4" >/dev/null 2>&1 || die "assembled rootfs fails e2fsck"
    chmod 0444 "$tmp/rootfs.ext4"
    rm -f "$tmp/debugfs.err"
    rm -rf "$dir"; mv "$tmp" "$dir"
}

# Link (or copy) a cached file into OUT.
publish() {
    rm -f "$OUT/$2"
    ln "$1" "$OUT/$2" 2>/dev/null || cp --sparse=always "$1" "$OUT/$2"
}

main() {
    mkdir -p "$CACHE"; [ "$PREFETCH" = 1 ] || mkdir -p "$OUT"
    exec 9>"$CACHE/.lock"
    flock 9          # one build at a time per cache
    rm -rf "$CACHE"/tmp.*

    step "host tools"
    host_tools

    step "kernel"
    local kkey; kkey=$(printf 'k%s %s' "$KERNEL_VERSION_TAG" "${MODULES[*]}" | sha)
    local kdir=$CACHE/kernel-$kkey
    if [ -f "$kdir/vmlinux" ]; then log "cached $kdir"; else build_kernel "$kdir"; fi

    step "base root file system"
    local bkey; bkey=$(printf 'b%s %s %s / %s' "$BASE_VERSION" "$SUITE" "${PACKAGES[*]}" \
                       "${EXCLUDE[*]}" | sha)
    local base=$CACHE/base-$bkey.ext4 pkgs=$CACHE/base-$bkey.json
    if [ -f "$base" ] && [ -f "$pkgs" ]; then log "cached $base"; else build_base "$base" "$pkgs"; fi

    if [ "$PREFETCH" = 1 ]; then step ""; log "kernel and base cached"; return 0; fi

    step "init"
    local ikey; ikey=$(cat "$IBIN" | sha)
    local init=$CACHE/init-$ikey
    if [ -x "$init" ]; then log "cached $init"; else install -m 755 "$IBIN" "$init.tmp" && mv "$init.tmp" "$init"; fi

    step "initramfs"
    local rkey; rkey=$(cat "$HERE/initramfs-init.sh" "$kdir/modules/modules.order" | sha)
    local initrd=$CACHE/initrd-$kkey-$rkey.img
    if [ -f "$initrd" ]; then log "cached $initrd"; else build_initrd "$kdir" "$initrd.tmp" && mv "$initrd.tmp" "$initrd"; fi

    step "assemble rootfs"
    local fkey; fkey=$(cat "$KBIN" "$init" | sha)
    local final=$CACHE/final-$bkey-$fkey
    if [ -f "$final/rootfs.ext4" ]; then log "cached $final"; else assemble "$base" "$init" "$final"; fi

    step "publish $OUT"
    publish "$kdir/vmlinux" vmlinux
    publish "$initrd" initrd.img
    publish "$final/rootfs.ext4" rootfs.ext4
    publish "$init" cellvm-init
    publish "$pkgs" packages.json
    local npkg nsec
    npkg=$(grep -c '^  {"name"' "$pkgs")
    nsec=$(grep -c "\"suite\": \"$SUITE-security\"" "$pkgs" || true)
    local ihash; ihash=$(printf '%s %s %s %s' "$kkey" "$rkey" "$bkey" "$fkey" | sha)
    cat > "$OUT/image.json.tmp" <<EOF
{"image_hash": "$ihash", "kernel_release": "$(cat "$kdir/release")",
 "vmlinux": "vmlinux", "initrd": "initrd.img", "rootfs": "rootfs.ext4",
 "cmdline": "console=ttyS0 quiet panic=-1 reboot=t",
 "kernel_port": "cellvm.kernel", "control_port": "cellvm.init",
 "packages": "$(printf '%s ' "${PACKAGES[@]}" | sed 's/ $//')",
 "package_list": "packages.json", "installed_packages": $npkg, "security_updates": $nsec,
 "cache": "$CACHE"}
EOF
    mv "$OUT/image.json.tmp" "$OUT/image.json"
    # Old cache entries of the fast steps pile up: keep the newest few (a final is ~1.4 GB).
    ls -dt "$CACHE"/final-* 2>/dev/null | tail -n +3 | xargs -r rm -rf
    for kind in init- initrd-; do
        ls -dt "$CACHE/$kind"* 2>/dev/null | tail -n +4 | xargs -r rm -rf
    done
    step ""
    log "$npkg packages (name=version, * from $SUITE-security: $nsec), in $OUT/packages.json:"
    sed -n 's/^  {"name": "\([^"]*\)", "version": "\([^"]*\)".*"suite": "\([^"]*\)"}.*/\1=\2 \3/p' "$pkgs" \
        | awk -v sec="$SUITE-security" '{ printf "%s%s ", $1, ($2 == sec ? "*" : "") } END { print "" }' \
        | fold -s -w 110 | sed 's/^/    /'
    log "image $ihash ready in $OUT"
}

main
