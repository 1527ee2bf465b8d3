#!/bin/sh
# Provision a client VM of the Vagrant lab: wait until the array answers
# discovery on a portal of either controller, then configure multipathing
# and log in to every portal (cluster-tests/guest/setup-client.sh).
#
#   client.sh MULTIPATH_CONF INITIATOR_IQN
set -eu
mkdir -p /etc/iscsi /run/lock/iscsi
echo "InitiatorName=$2" >/etc/iscsi/initiatorname.iscsi
systemctl restart iscsid
# Both controllers first: discovery through either names all four
# portals, and a login to a portal that does not answer yet would be
# given up (node.startup is manual).
up() { iscsiadm -m discovery -t sendtargets -p "$1" >/dev/null 2>&1; }
for i in $(seq 1 300); do
	if up 10.77.1.10 && up 10.77.1.20; then
		/vagrant/cluster-tests/guest/setup-client.sh "$1" "$2" 10.77.1.10
		# Every portal logged in (a slow one again).
		for j in $(seq 1 30); do
			[ "$(iscsiadm -m session 2>/dev/null | wc -l)" -ge 4 ] && exit 0
			iscsiadm -m node -L all >/dev/null 2>&1 || true
			sleep 2
		done
		echo "client.sh: fewer than 4 sessions after 60 s" >&2
		iscsiadm -m session >&2 || true
		exit 1
	fi
	sleep 2
done
echo "client.sh: the controllers did not both answer discovery in 10 min" >&2
exit 1
