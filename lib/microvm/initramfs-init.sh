#!/bin/busybox sh
# shellcheck shell=dash
# /init of the microVM guest's initramfs (built by scripts/microvm-kernel.sh). Kernel parameters it reads:
#   sandbox.ip=ADDR/PREFIX sandbox.gw=ADDR   the tenant-subnet address of eth0 and its default route
#   sandbox.key=BASE64                       the agent's SSH public key (a tmpfs, as the container's mount)
# /dev/vda is the root (a copy-on-write overlay of the sandbox image), /dev/vdb the home disk.
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
fail() {
  echo "sandbox-init: ERROR: $*"
  poweroff -f
}

ip_addr='' gw='' key='' mmio=''
read -r cmdline </proc/cmdline
for arg in $cmdline; do
  case "$arg" in
    sandbox.ip=*) ip_addr=${arg#sandbox.ip=} ;;
    sandbox.gw=*) gw=${arg#sandbox.gw=} ;;
    sandbox.key=*) key=${arg#sandbox.key=} ;;
    # Built-in drivers read virtio_mmio.device= from the command line; a module gets them from insmod.
    virtio_mmio.device=*) mmio="$mmio device=${arg#virtio_mmio.device=}" ;;
  esac
done
for module in virtio_ring virtio virtio_mmio virtio_blk failover net_failover virtio_net; do
  if [ "$module" = virtio_mmio ]; then
    # shellcheck disable=SC2086 # one device= argument per device
    insmod /lib/modules/virtio_mmio.ko $mmio || fail "insmod virtio_mmio"
  else
    insmod "/lib/modules/$module.ko" || fail "insmod $module"
  fi
done

i=0
while [ ! -b /dev/vda ] || [ ! -b /dev/vdb ]; do
  i=$((i + 1))
  [ $i -gt 100 ] && fail "no /dev/vda and /dev/vdb after 10 s"
  sleep 0.1
done
mount -t ext4 /dev/vda /newroot || fail "cannot mount the root disk /dev/vda"
mkdir -p /newroot/home/agent
mount -t ext4 /dev/vdb /newroot/home/agent || fail "cannot mount the home disk /dev/vdb"
mount -t tmpfs -o mode=0755 tmpfs /newroot/run
mount -t tmpfs -o mode=1777 tmpfs /newroot/tmp
mkdir -p /newroot/etc/ssh/authorized_keys
mount -t tmpfs -o mode=0755 tmpfs /newroot/etc/ssh/authorized_keys
[ -n "$key" ] && echo "$key" | base64 -d >/newroot/etc/ssh/authorized_keys/agent
chmod 0644 /newroot/etc/ssh/authorized_keys/agent 2>/dev/null
mount -o remount,ro /newroot/etc/ssh/authorized_keys

ip link set lo up
if [ -n "$ip_addr" ]; then
  ip link set eth0 up || fail "no eth0"
  ip addr add "$ip_addr" dev eth0 || fail "bad sandbox.ip=$ip_addr"
  [ -n "$gw" ] && { ip route add default via "$gw" || fail "bad sandbox.gw=$gw"; }
fi
echo "sandbox-init: root, home and network ready; starting the sandbox entrypoint"
mount --move /dev /newroot/dev
mount --move /proc /newroot/proc
mount --move /sys /newroot/sys
exec switch_root /newroot /usr/local/sbin/sandbox-entrypoint
