#!/usr/bin/env bash
# Build (or reuse) the Debian bookworm guest image for the QEMU lab.
#
#   cluster-tests/build-image.sh [client|storage]   -> prints the image dir
#
# Offline from Debian packages only: debootstrap from the mirror this
# machine's apt is configured with (no other network). The result, cached
# under $ALUAD_LAB_CACHE (default ~/.cache/aluad-lab/<variant>-<hash>):
#   vmlinuz      the Debian kernel (linux-image-amd64)
#   root.img     ext4 root file system, booted read-only or snapshot=on
#   modules.tar  the kernel modules the small initrd needs
# The small initrd itself (busybox + a few modules + the Go guest agent)
# is rebuilt per run by the lab in seconds (cluster-tests/qemulab/initrd.go).
set -euo pipefail
variant=${1:-client}
here=$(cd "$(dirname "$0")" && pwd)

case $variant in
client)  pkgs="linux-image-amd64,open-iscsi,multipath-tools,sg3-utils,fio,kmod,iproute2,procps,udev" ;;
storage) pkgs="linux-image-amd64,open-iscsi,multipath-tools,sg3-utils,fio,kmod,iproute2,procps,udev,targetcli-fb,python3-rtslib-fb,dbus" ;;
*) echo "build-image.sh: unknown variant \"$variant\" (client or storage)" >&2; exit 2 ;;
esac

# The cache key covers everything that shapes the image (comments aside).
key=$( (echo "$pkgs"; grep -v '^[[:space:]]*#' "$0") | sha256sum | cut -c1-12)
cache=${ALUAD_LAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/aluad-lab}
out=$cache/$variant-$key
if [ -s "$out/root.img" ] && [ -s "$out/vmlinuz" ]; then
	echo "$out"
	exit 0
fi

need() { command -v "$1" >/dev/null 2>&1 || { echo "build-image.sh: $1 not found (scripts/deps.sh qemu installs it)" >&2; exit 1; }; }
need debootstrap
need mkfs.ext4
[ "$(id -u)" = 0 ] || { echo "build-image.sh: debootstrap needs root" >&2; exit 1; }

# The mirror apt already uses: never a host name written here.
mirror=${ALUAD_LAB_MIRROR:-}
if [ -z "$mirror" ]; then
	mirror=$( { grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}';
		grep -hE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk '{print $2}'; } |
		grep -v security | head -1 || true)
fi
[ -n "$mirror" ] || { echo "build-image.sh: no Debian mirror in /etc/apt sources; set ALUAD_LAB_MIRROR" >&2; exit 1; }

mkdir -p "$cache"
work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root
echo "build-image.sh: debootstrap bookworm ($variant) ..." >&2
start=$(date +%s)
debootstrap --variant=minbase --include="$pkgs" bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1 || {
	tail -30 "$work/debootstrap.log" >&2; exit 1; }

kver=$(ls "$root/lib/modules" | sort -V | tail -1)
cp "$root/boot/vmlinuz-$kver" "$work/vmlinuz"

# Slim the tree: the guest needs no docs, locales, firmware, initramfs or
# drivers for hardware it never sees.
rm -rf "$root"/usr/share/{doc,man,info,locale} "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/* \
	"$root"/boot/initrd.img-* "$root"/lib/firmware
for d in drivers/gpu drivers/net/wireless drivers/media drivers/infiniband drivers/staging sound net/wireless net/bluetooth drivers/bluetooth drivers/iio drivers/usb; do
	rm -rf "$root/lib/modules/$kver/kernel/$d"
done
chroot "$root" depmod "$kver"

# Guest configuration that the image carries. Each guest still gets its
# own initiator name and addresses from the kernel command line at boot.
cat >"$root/etc/multipath.conf" <<'CONF'
# Replaced per guest by the lab agent (cluster-tests/guests/*.conf).
defaults {
	user_friendly_names yes
}
CONF
mkdir -p "$root/run/lock/iscsi" "$root/etc/iscsi"
echo "aluad-guest" >"$root/etc/hostname"

# The initrd's modules: whatever the root disk, the file system, the agent
# channel and the lab network need, with their dependencies.
(cd "$root/lib/modules/$kver" && tar cf "$work/modules.tar" modules.dep modules.builtin \
	$(cut -d: -f1 modules.dep | grep -E '/(virtio_blk|virtio_net|virtio_console|virtio_pci|virtio_pci_modern_dev|virtio_pci_legacy_dev|virtio_ring|virtio|net_failover|failover|ext4|jbd2|mbcache|crc16|crc32c_generic|libcrc32c)\.ko$'))

# One ext4 image, written without a loop mount.
size_mb=$(( $(du -sm "$root" | cut -f1) + 384 ))
mkfs.ext4 -q -F -L aluadroot -d "$root" "$work/root.img" "${size_mb}M" >&2
rm -rf "$root"
echo "$kver" >"$work/kernel-version"
cp "$work/debootstrap.log" "$work/build.log"
mkdir -p "$cache"
rm -rf "$out"
mv "$work" "$out"
trap - EXIT
echo "build-image.sh: $variant image in $out ($(( $(date +%s) - start )) s)" >&2
echo "$out"
