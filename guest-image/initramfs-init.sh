#!/bin/busybox sh
# cellvm initramfs /init: load the few modules in fixed order, mount the read-only root
# (/dev/vda, ext4) under a tmpfs+overlayfs for writes, and switch to /sbin/cellvm-init.
# Runs with busybox only; any failure is fatal (PID 1 exits, the kernel panics, QEMU exits
# because of panic=-1 -no-reboot), so the host sees a dead VM rather than a hung one.
B=/bin/busybox
fail() { echo "cellvm-initramfs: $*" > /dev/console; $B sleep 1; exit 1; }

$B mount -t devtmpfs devtmpfs /dev || fail "cannot mount /dev"
$B mount -t proc proc /proc
$B mount -t sysfs sysfs /sys
for m in $($B cat /lib/modules/modules.order); do
    $B insmod "/lib/modules/$m" || fail "insmod $m failed"
done

# virtio-mmio probing is asynchronous: wait up to 5 s for the root disk.
i=0
while [ ! -b /dev/vda ]; do
    i=$((i + 1)); [ $i -gt 500 ] && fail "no root disk /dev/vda"
    $B usleep 10000
done

$B mount -t ext4 -o ro,noatime /dev/vda /lower || fail "cannot mount /dev/vda"
# The overlay's upper layer lives in guest RAM; its size is bounded so a cell cannot fill RAM
# through /usr (and the kernel user cannot write there anyway).
$B mount -t tmpfs -o mode=0755,size=64m tmpfs /rw || fail "cannot mount tmpfs"
$B mkdir -p /rw/upper /rw/work
$B mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /newroot \
    || fail "cannot mount the overlay"
$B umount /proc /sys
$B umount /dev
exec $B switch_root /newroot /sbin/cellvm-init || fail "switch_root failed"
