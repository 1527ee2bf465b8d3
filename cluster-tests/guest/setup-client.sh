#!/bin/sh
# Configure a Debian client guest of the aluad lab, and log in.
#
#   setup-client.sh MULTIPATH_CONF INITIATOR_IQN [PORTAL]
#
# Used by the QEMU lab (cluster-tests/qemulab sends it through the guest
# agent) and by the Vagrantfile's client VMs alike. MULTIPATH_CONF is one
# of cluster-tests/guest/multipath-*.conf. With PORTAL the guest discovers
# the array (SendTargets) there and logs in to every portal it returns;
# without it (QEMU's libiscsi drives) only multipathing is set up.
set -eu
conf=$1
iqn=$2
portal=${3:-}

install -m 0644 "$conf" /etc/multipath.conf
mkdir -p /etc/iscsi /run/lock/iscsi /var/log/aluad-lab
echo "InitiatorName=$iqn" >/etc/iscsi/initiatorname.iscsi
# Lab timeouts: a lost path is noticed in seconds, and a session that
# cannot come back is given up only after the whole scenario.
sed -i -e 's/^node.session.timeo.replacement_timeout = .*/node.session.timeo.replacement_timeout = 120/' \
	-e 's/^node.startup = .*/node.startup = manual/' /etc/iscsi/iscsid.conf

if [ -d /run/systemd/system ]; then
	systemctl restart iscsid.socket iscsid.service 2>/dev/null || systemctl restart iscsid
	if [ "$(basename "$conf")" != multipath-none.conf ]; then
		systemctl enable --now multipathd
		systemctl restart multipathd
	else
		systemctl disable --now multipathd 2>/dev/null || true
	fi
else
	# The QEMU lab's guests run no init system: start what systemd would.
	/lib/systemd/systemd-udevd --daemon
	udevadm trigger --action=add --type=subsystems
	udevadm trigger --action=add --type=devices
	udevadm settle --timeout=60 || true
	if [ -n "$portal" ]; then
		iscsid -f >/var/log/aluad-lab/iscsid.log 2>&1 &
	fi
	if [ "$(basename "$conf")" != multipath-none.conf ]; then
		multipathd -d -s >/var/log/aluad-lab/multipathd.log 2>&1 &
	fi
	sleep 1
fi

if [ -n "$portal" ]; then
	iscsiadm -m discovery -t sendtargets -p "$portal"
	# 15: every session exists already (provisioned again)
	iscsiadm -m node -L all || [ $? = 15 ]
fi
udevadm settle --timeout=60 || true
if [ "$(basename "$conf")" = multipath-pure.conf ]; then
	# The admin's part where find_multipaths is strict: each path's WWID
	# added to /etc/multipath/wwids, then the maps made. The scan after
	# the logins may still be adding disks: wait until their count holds
	# for 3 s (30 s at most).
	last=-1 same=0 i=0
	while [ $same -lt 3 ] && [ $i -lt 30 ]; do
		n=$(ls -d /sys/block/sd* 2>/dev/null | wc -l)
		if [ "$n" = "$last" ]; then same=$((same + 1)); else same=0; last=$n; fi
		sleep 1; i=$((i + 1))
	done
	for d in /sys/block/sd*; do
		[ -e "$d" ] && multipath -a "/dev/$(basename "$d")" >/dev/null 2>&1 || true
	done
	multipathd reconfigure >/dev/null 2>&1 || multipath >/dev/null 2>&1 || true
	udevadm settle --timeout=60 || true
fi
