#!/usr/bin/env bash
# The microVM guest's kernel and initramfs (issue 19), from Debian's package archive, cached outside the
# repository keyed by the package version: $(cache_root)/microvm/kernel-<version>/{vmlinuz,initrd.img,initrd-nested.img}.
# Prints that directory on its last line. Idempotent: a cached version is reused; a partial build never is.
#
# Debian's cloud-amd64 kernel builds virtio, virtio_mmio, virtio_blk and virtio_net as modules (and has no
# CONFIG_IP_PNP), so the guest boots through a small initramfs: busybox-static (also from the archive), those
# modules, and lib/microvm/initramfs-init.sh, which loads them, mounts the root and home disks, sets the
# static address given on the kernel command line and switch_roots into the sandbox image's entrypoint.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"

meta=${MICROVM_KERNEL_PACKAGE:-linux-image-cloud-amd64}
for tool in apt-cache apt-get dpkg-deb cpio gzip; do
  command -v "$tool" >/dev/null || die "$tool is not installed (the microVM kernel is built from Debian packages)"
done

# The metapackage names the versioned image package (linux-image-6.1.0-NN-cloud-amd64).
package=$(apt-cache depends "$meta" 2>/dev/null | sed -n 's/^  Depends: \(linux-image-[^ ]*\)$/\1/p' | head -n 1)
[ -n "$package" ] || die "the package archive has no $meta (run apt-get update, or set MICROVM_KERNEL_PACKAGE)"
version=$(apt-cache policy "$package" | sed -n 's/^  Candidate: //p')
if [ -z "$version" ] || [ "$version" = "(none)" ]; then die "the package archive has no installable $package"; fi

init_hash=$(sha256sum "$root/lib/microvm/initramfs-init.sh" | cut -c1-12)
dir="$(cache_root)/microvm/kernel-$package-$version-$init_hash"
if [ -f "$dir/vmlinuz" ] && [ -f "$dir/initrd.img" ] && [ -f "$dir/initrd-nested.img" ]; then
  echo "$dir"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download -q "$package=$version" busybox-static >/dev/null 2>&1) ||
  die "apt-get download $package=$version busybox-static failed (is the Debian mirror reachable?)"
dpkg-deb -x "$work/${package}_"*.deb "$work/kernel"
dpkg-deb -x "$work/busybox-static_"*.deb "$work/busybox"

kver=${package#linux-image-}
modules="$work/kernel/lib/modules/$kver/kernel"
initramfs="$work/initramfs"
mkdir -p "$initramfs"/{bin,dev,proc,sys,newroot,lib/modules}
cp "$work/busybox/bin/busybox" "$initramfs/bin/busybox"
# Load order: each module after the ones it depends on.
for module in drivers/virtio/virtio_ring.ko drivers/virtio/virtio.ko drivers/virtio/virtio_mmio.ko \
  drivers/block/virtio_blk.ko net/core/failover.ko drivers/net/net_failover.ko drivers/net/virtio_net.ko; do
  [ -f "$modules/$module" ] || die "$package has no $module"
  cp "$modules/$module" "$initramfs/lib/modules/"
done
install -m 0755 "$root/lib/microvm/initramfs-init.sh" "$initramfs/init"

mkdir -p "$work/out"
cp "$work/kernel/boot/vmlinuz-$kver" "$work/out/vmlinuz"
cp "$work/kernel/boot/config-$kver" "$work/out/config"
(cd "$initramfs" && find . | cpio -o -H newc --quiet | gzip -9) >"$work/out/initrd.img"
# Nested virtualisation's initramfs: the same with KVM's modules (about 0.8 MB more) in a second archive
# after it (the kernel unpacks each in turn), so that only the guests that run VMs of their own load them.
kvm="$work/initramfs-kvm"
mkdir -p "$kvm/lib/modules"
for module in virt/lib/irqbypass.ko arch/x86/kvm/kvm.ko arch/x86/kvm/kvm-intel.ko arch/x86/kvm/kvm-amd.ko; do
  [ -f "$modules/$module" ] || die "$package has no $module"
  cp "$modules/$module" "$kvm/lib/modules/"
done
{
  cat "$work/out/initrd.img"
  (cd "$kvm" && find . | cpio -o -H newc --quiet | gzip -9)
} >"$work/out/initrd-nested.img"
mkdir -p "$(dirname "$dir")"
rm -rf "$dir"
mv "$work/out" "$dir"
echo "$dir"
