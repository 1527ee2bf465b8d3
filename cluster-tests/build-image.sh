#!/usr/bin/env bash
# Build (or reuse) a Debian guest image for the QEMU lab.
#
#   cluster-tests/build-image.sh [client|storage|vagrant] [RELEASE]   -> prints the image dir
#
# RELEASE is a Debian release the mirror serves: bookworm (the default),
# bullseye, trixie or sid ($ALUAD_LAB_RELEASE when not given).
#
# Offline from Debian packages only: debootstrap from the mirror this
# machine's apt is configured with (no other network). The result, cached
# under $ALUAD_LAB_CACHE (default ~/.cache/aluad-lab/<variant>-<release>-<hash>):
#   vmlinuz      the release's Debian kernel (linux-image-amd64)
#   root.img     ext4 root file system, booted read-only or snapshot=on
#   modules.tar  the kernel modules the small initrd needs
# The small initrd itself (busybox + a few modules + the Go guest agent)
# is rebuilt per run by the lab in seconds (cluster-tests/qemulab/initrd.go).
# The vagrant variant is a whole Debian system instead (systemd, sshd, a
# vagrant user, Debian's own initrd.img beside vmlinuz) that
# cluster-tests/vagrant/build-box.sh packages as a libvirt box.
set -euo pipefail
variant=${1:-client}
release=${2:-${ALUAD_LAB_RELEASE:-bookworm}}
here=$(cd "$(dirname "$0")" && pwd)

kernel=linux-image-amd64
case $variant in
client)  pkgs="open-iscsi,multipath-tools,sg3-utils,fio,kmod,iproute2,procps,udev" ;;
storage) pkgs="open-iscsi,multipath-tools,sg3-utils,fio,kmod,iproute2,procps,udev,targetcli-fb,python3-rtslib-fb,dbus" ;;
vagrant) pkgs="initramfs-tools,systemd-sysv,dbus,openssh-server,sudo,rsync,open-iscsi,multipath-tools,sg3-utils,fio,kmod,iproute2,procps,udev,nfs-common,nfs-kernel-server,nftables,ca-certificates,less" ;;
*) echo "build-image.sh: unknown variant \"$variant\" (client, storage or vagrant)" >&2; exit 2 ;;
esac
case $release in
bullseye|bookworm|trixie|sid) ;;
*) echo "build-image.sh: unknown release \"$release\" (bullseye, bookworm, trixie or sid)" >&2; exit 2 ;;
esac

# The cache key covers everything that shapes the image (comments aside).
key=$( (echo "$kernel $pkgs $release"; grep -v '^[[:space:]]*#' "$0") | sha256sum | cut -c1-12)
cache=${ALUAD_LAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/aluad-lab}
out=$cache/$variant-$release-$key
if [ -s "$out/root.img" ] && [ -s "$out/vmlinuz" ]; then
	echo "$out"
	exit 0
fi

need() { command -v "$1" >/dev/null 2>&1 || { echo "build-image.sh: $1 not found (scripts/deps.sh qemu installs it)" >&2; exit 1; }; }
need debootstrap
need mkfs.ext4
need xz     # trixie's and later kernels' modules
need zstd
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
root=$work/root
# A debootstrap that failed may leave its /proc or /sys mounted: unmount
# what is, and never descend into another file system.
cleanup() {
	for m in proc sys; do
		if mountpoint -q "$root/$m" 2>/dev/null; then umount "$root/$m" || true; fi
	done
	rm -rf --one-file-system "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
echo "build-image.sh: debootstrap $release ($variant) ..." >&2
start=$(date +%s)
# The kernel comes after, by apt: debootstrap takes the first of a
# dependency's alternatives, and from forky on that gives linux-image
# dracut while sg3-utils-udev takes initramfs-tools, which conflict.
# (apt in the chroot reads the mirror debootstrap used: an http one.)
debootstrap --variant=minbase --include="$pkgs" "$release" "$root" "$mirror" >"$work/debootstrap.log" 2>&1 || {
	tail -30 "$work/debootstrap.log" >&2; exit 1; }
mount -t proc proc "$root/proc"
made_resolv=0
if [ ! -e "$root/etc/resolv.conf" ] && [ -e /etc/resolv.conf ]; then
	cp /etc/resolv.conf "$root/etc/resolv.conf" && made_resolv=1
fi
chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$kernel" \
	>>"$work/debootstrap.log" 2>&1 || { tail -30 "$work/debootstrap.log" >&2; exit 1; }
umount "$root/proc"
[ $made_resolv = 0 ] || rm -f "$root/etc/resolv.conf"

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

if [ "$variant" = vagrant ]; then
	# What a Vagrant box promises: the vagrant user with Vagrant's
	# well-known insecure key (replaced by vagrant up) and passwordless
	# sudo, sshd, DHCP on the first (management) interface; vagrant up
	# writes 50-vagrant-*.network for the private networks, which match
	# first.
	chroot "$root" useradd -m -s /bin/bash -G sudo vagrant
	echo 'vagrant:vagrant' | chroot "$root" chpasswd
	echo 'root:vagrant' | chroot "$root" chpasswd
	echo 'vagrant ALL=(ALL) NOPASSWD: ALL' >"$root/etc/sudoers.d/vagrant"
	chmod 0440 "$root/etc/sudoers.d/vagrant"
	install -d -m 0700 -o 1000 -g 1000 "$root/home/vagrant/.ssh"
	install -m 0600 -o 1000 -g 1000 "$here/vagrant/insecure.pub" "$root/home/vagrant/.ssh/authorized_keys"
	printf '[Match]\nName=eth0\n[Network]\nDHCP=ipv4\n' >"$root/etc/systemd/network/99-mgmt.network"
	chroot "$root" systemctl enable systemd-networkd >/dev/null 2>&1
	printf '/dev/vda / ext4 defaults,errors=remount-ro 0 1\n' >"$root/etc/fstab"
	# sshd's host keys: made at first boot, so no two machines share them.
	rm -f "$root"/etc/ssh/ssh_host_*
	# Ed25519 only: an RSA key takes most of a minute under TCG.
	cat >"$root/etc/systemd/system/ssh-hostkeys.service" <<'UNIT'
[Unit]
Description=Make sshd's host key
Before=ssh.service
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key
[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -q -t ed25519 -N "" -f /etc/ssh/ssh_host_ed25519_key
[Install]
WantedBy=multi-user.target
UNIT
	echo 'HostKey /etc/ssh/ssh_host_ed25519_key' >"$root/etc/ssh/sshd_config.d/aluad.conf"
	# What slows a boot under TCG and a lab machine does not need: the
	# e2scrub runs, logind (no one logs in at a console), NFSv4's
	# Kerberos and id mapping (the lab's NFS is v3), and an initrd with
	# most of the kernel's drivers. multipathd runs where a client's
	# provisioning enables it (cluster-tests/guest/setup-client.sh).
	for u in e2scrub_reap.service e2scrub_all.timer fstrim.timer systemd-logind.service \
		run-rpc_pipefs.mount rpc-gssd.service rpc-svcgssd.service nfs-idmapd.service nfs-blkmap.service; do
		chroot "$root" systemctl mask "$u" >/dev/null 2>&1 || true
	done
	chroot "$root" systemctl disable multipathd.service multipathd.socket >/dev/null 2>&1 || true
	printf 'MODULES=list\n' >"$root/etc/initramfs-tools/conf.d/aluad"
	printf '%s\n' virtio_pci virtio_blk virtio_net virtio_console ext4 >>"$root/etc/initramfs-tools/modules"
	chroot "$root" update-initramfs -u -k "$kver" >"$work/initramfs.log" 2>&1 || { tail "$work/initramfs.log" >&2; exit 1; }
	cp "$root/boot/initrd.img-$kver" "$work/initrd.img"
	chroot "$root" systemctl enable ssh-hostkeys.service >/dev/null 2>&1
	# A machine id of its own per machine, made at first boot.
	: >"$root/etc/machine-id"
	rm -f "$root/var/lib/dbus/machine-id"
	# The NFS server runs only where the Vagrantfile starts it.
	chroot "$root" systemctl disable nfs-server.service >/dev/null 2>&1 || true
fi

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
# Kernels from trixie on ship their modules compressed (.ko.xz): the
# initrd's busybox insmod takes them plain, so they go in decompressed,
# and modules.dep names them so.
mods=$work/initrd-modules
mkdir -p "$mods"
(cd "$root/lib/modules/$kver" && cp --parents modules.dep modules.builtin \
	$(cut -d: -f1 modules.dep | grep -E '/(virtio_blk|virtio_net|virtio_console|virtio_pci|virtio_pci_modern_dev|virtio_pci_legacy_dev|virtio_ring|virtio|net_failover|failover|ext4|jbd2|mbcache|crc16|crc32c_generic|crc32c_cpu|libcrc32c)\.ko(\.xz|\.zst)?$') "$mods")
find "$mods" -name '*.ko.xz' -exec xz -d {} +
find "$mods" -name '*.ko.zst' -exec zstd -q -d --rm {} +
sed -i -E 's/\.ko\.(xz|zst)/.ko/g' "$mods/modules.dep"
(cd "$mods" && tar cf "$work/modules.tar" modules.dep modules.builtin $(find . -name '*.ko' | sed 's|^\./||'))
rm -rf "$mods"

# One ext4 image, written without a loop mount.
size_mb=$(( $(du -sm "$root" | cut -f1) + 384 ))
[ "$variant" = vagrant ] && size_mb=$(( size_mb + 3712 ))   # room for packages and logs
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
