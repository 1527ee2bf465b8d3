#!/bin/sh
# A controller's fence command (cluster.yaml fence_command) and its
# unfence at boot: both ask the witness VM, over SSH with a key that may
# run only cluster-tests/vagrant/nfs-fence.sh there.
#
#   aluad-fence fence|unfence|check NODE BOOT_ID
#   aluad-fence rejoin          (this machine) reboot at once if the
#                               witness fenced this boot, as a power
#                               fence would have reset it
if [ "${1:-}" = rejoin ]; then
	rc=0
	"$0" check "$(cat /etc/aluad/node)" "$(cat /proc/sys/kernel/random/boot_id)" || rc=$?
	if [ $rc = 3 ]; then
		echo "aluad-fence: this boot is fenced: rebooting now to rejoin" >&2
		systemctl reboot --force --force
	fi
	exit 0
fi
# The witness's host key is not pinned: a re-created witness has a new
# one, and a pinned old key would fail every fence (lab networks only).
exec ssh -i /etc/aluad/fence-key -o BatchMode=yes -o StrictHostKeyChecking=no \
	-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o ConnectTimeout=10 \
	root@10.77.3.30 "$@"
