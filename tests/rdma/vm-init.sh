#!/bin/sh
# /init of the Soft-RoCE test VM (scripts/rdma-vm builds the initramfs around it). Prints exactly one
# "EPD-VM-RESULT: PASS|FAIL" line on the console, then powers off.
/bin/busybox mount -t devtmpfs dev /dev
# The kernel found no /dev/console in the initramfs (none can be made without root); reopen it now.
exec </dev/console >/dev/console 2>&1
/bin/busybox --install -s /bin
export PATH=/epd/bin:/bin:/sbin HOME=/tmp TMPDIR=/tmp
mount -t proc proc /proc
mount -t sysfs sys /sys
# No tmpfs over /tmp: the initramfs root is already in RAM and writable, and the test binaries are also
# linked at their host paths, which may lie under /tmp (a CI clone in /tmp) — a mount would hide them.
mount -t tmpfs shm /dev/shm 2>/dev/null || { mkdir -p /dev/shm && mount -t tmpfs shm /dev/shm; }
hostname epd-vm

finish() {
  echo "EPD-VM-RESULT: $1"
  sync
  poweroff -f
  sleep 5
  reboot -f  # -no-reboot turns this into a qemu exit too
}

echo "epd-vm: kernel $(uname -r), loading Soft-RoCE"
for m in crc32_generic udp_tunnel ip6_udp_tunnel ib_core ib_uverbs rdma_rxe; do
  insmod /modules/$m.ko || { echo "epd-vm: insmod $m failed"; finish FAIL; }
done
ip link set lo up
# rdma_rxe needs the "crc32" hash (crc32_generic) or this fails with ENOENT.
rdma link add rxe0 type rxe netdev lo || { echo "epd-vm: rdma link add failed"; finish FAIL; }
rdma link show
ibv_devices
n=0
while [ ! -e /sys/class/infiniband/rxe0/ports/1/gids/1 ] && [ $n -lt 20 ]; do sleep 0.2; n=$((n + 1)); done
echo "epd-vm: rxe0 gid[1] = $(cat /sys/class/infiniband/rxe0/ports/1/gids/1 2>/dev/null)" \
  "type $(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/1 2>/dev/null)"

t=$(cat /epd/timeout)
echo "epd-vm: running tests (limit ${t}s)"
start=$(date +%s)
cd /tmp
if timeout "$t" sh -e /epd/run.sh; then
  echo "epd-vm: tests passed in $(($(date +%s) - start))s"
  finish PASS
else
  echo "epd-vm: tests FAILED (status $?) after $(($(date +%s) - start))s"
  finish FAIL
fi
