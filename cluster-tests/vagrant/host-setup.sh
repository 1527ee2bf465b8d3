#!/bin/sh
# Make this machine ready for the Vagrant lab (make vagrant-box runs it):
# Vagrant, vagrant-libvirt, libvirt's daemons and qemu-img from Debian,
# and libvirtd running. Needs root.
#
# Where no udev runs (containers, some CI machines) /dev/kvm keeps the
# kernel's root-only mode: libvirtd, probing QEMU as root, then finds KVM
# but sees it unusable for its QEMU user, throws its capability cache
# away on every call and re-probes (seconds each; vagrant up with six
# machines timed out and hung). Debian's udev rule gives /dev/kvm to
# group kvm, mode 0660: this applies the same, nothing more. The lab's
# domains run under TCG either way (driver qemu in the Vagrantfile).
set -eu
[ "$(id -u)" = 0 ] || { echo "host-setup.sh: run as root (libvirt's system daemon)" >&2; exit 1; }
need=
command -v vagrant >/dev/null || need="$need vagrant"
ls /usr/share/vagrant-plugins/plugins.d 2>/dev/null | grep -q libvirt || need="$need vagrant-libvirt"
command -v libvirtd >/dev/null || need="$need libvirt-daemon-system"
command -v virsh >/dev/null || need="$need libvirt-clients"
command -v qemu-img >/dev/null || need="$need qemu-utils"
command -v qemu-system-x86_64 >/dev/null || need="$need qemu-system-x86"
command -v dnsmasq >/dev/null || [ -x /usr/sbin/dnsmasq ] || need="$need dnsmasq-base"
command -v iptables >/dev/null || need="$need iptables"
command -v debootstrap >/dev/null || need="$need debootstrap"
command -v ssh-keygen >/dev/null || need="$need openssh-client"
command -v rsync >/dev/null || need="$need rsync"
if [ -n "$need" ]; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need >/dev/null
fi
if [ -c /dev/kvm ] && getent group kvm >/dev/null && [ "$(stat -c %G /dev/kvm)" != kvm ]; then
	chgrp kvm /dev/kvm
	chmod 0660 /dev/kvm
fi
if ! virsh -c qemu:///system version >/dev/null 2>&1; then
	if [ -d /run/systemd/system ] && systemctl start libvirtd 2>/dev/null; then
		:
	else
		pgrep -x virtlogd >/dev/null || virtlogd -d
		pgrep -x libvirtd >/dev/null || libvirtd -d
	fi
	for i in $(seq 1 50); do virsh -c qemu:///system version >/dev/null 2>&1 && break; sleep 0.2; done
fi
virsh -c qemu:///system capabilities | grep -q "domain type='qemu'" || { echo "host-setup.sh: libvirt offers no qemu domains" >&2; exit 1; }
echo "host-setup.sh: libvirt ready ($(virsh -c qemu:///system version | grep -i 'running hypervisor' | sed 's/.*: //'))"
