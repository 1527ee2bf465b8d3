#!/usr/bin/env bash
# Build the libvirt box the Vagrantfile boots, offline, and add it to
# Vagrant (make vagrant-box).
#
#   cluster-tests/vagrant/build-box.sh [--no-add]
#
# The image is the QEMU lab's Debian bookworm, built by debootstrap from
# the mirror apt uses (cluster-tests/build-image.sh vagrant): systemd,
# sshd, the vagrant user with Vagrant's insecure key and passwordless
# sudo, DHCP on the management interface, open-iscsi, multipath-tools,
# sg3-utils, fio, the NFS client and server and nftables, so provisioning
# needs no network. The box boots Debian's kernel and initrd directly
# (libvirt's <kernel>, no boot loader in the disk): its Vagrantfile puts
# them under /var/lib/libvirt/boot, where the QEMU process may read them.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
name=${ALUAD_BOX:-aluad/debian12}
add=1
[ "${1:-}" = --no-add ] && add=0

command -v qemu-img >/dev/null || { echo "build-box.sh: qemu-img not found (apt-get install qemu-utils)" >&2; exit 1; }
img=$("$here/../build-image.sh" vagrant bookworm)   # the box is Debian 12 whatever ALUAD_LAB_RELEASE says
key=$(basename "$img" | sed 's/^vagrant-//')
cache=$(dirname "$img")
# The box's name covers the image and the box's own Vagrantfile.
bkey=$( (echo "$key"; cat "$here/box.Vagrantfile") | sha256sum | cut -c1-12)
box=$cache/aluad-debian12-$bkey.box
if [ ! -s "$box" ]; then
	work=$(mktemp -d "$cache/box.XXXXXX")
	trap 'rm -rf "$work"' EXIT
	qemu-img convert -q -f raw -O qcow2 "$img/root.img" "$work/box.img"
	vsize=$(( ($(stat -c %s "$img/root.img") + (1<<30) - 1) >> 30 ))
	printf '{"provider": "libvirt", "format": "qcow2", "virtual_size": %d}\n' "$vsize" >"$work/metadata.json"
	cp "$img/vmlinuz" "$work/vmlinuz"
	cp "$img/initrd.img" "$work/initrd.img"
	sed "s/@KEY@/$key/" "$here/box.Vagrantfile" >"$work/Vagrantfile"
	tar -C "$work" -cf "$work/out.box" metadata.json Vagrantfile box.img vmlinuz initrd.img
	mv "$work/out.box" "$box"
fi
echo "build-box.sh: $box ($(du -h "$box" | cut -f1))" >&2
# Earlier builds: their boxes and images are stale now.
for old in "$cache"/aluad-debian12-*.box "$cache"/vagrant-*; do
	[ -e "$old" ] && [ "$old" != "$box" ] && [ "$old" != "$img" ] && rm -rf "$old"
done
if [ $add = 1 ]; then
	vagrant box add --force --name "$name" "$box" >&2
	echo "build-box.sh: added as $name" >&2
	# vagrant-libvirt uploads a box into the storage pool once and keeps
	# it; an earlier build's copy that no machine's disk is backed by
	# any more is deleted.
	if command -v virsh >/dev/null && virsh -c qemu:///system pool-info default >/dev/null 2>&1; then
		vols=$(virsh -c qemu:///system vol-list default | awk -v p="$(echo "$name" | sed 's|/|-VAGRANTSLASH-|')_vagrant_box_image_" 'index($1, p) == 1 {print $2}')
		used=$(for v in $(virsh -c qemu:///system vol-list default | awk 'NR > 2 && NF {print $2}'); do
			qemu-img info -U --output=json "$v" 2>/dev/null | sed -n 's/.*"backing-filename": "\(.*\)".*/\1/p'; done)
		for v in $vols; do
			if ! echo "$used" | grep -qxF "$v"; then
				virsh -c qemu:///system vol-delete "$v" >/dev/null && echo "build-box.sh: deleted the unused $v" >&2
			fi
		done
	fi
fi
echo "$box"
