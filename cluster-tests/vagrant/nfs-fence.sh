#!/bin/sh
# The Vagrant lab's fence agent, on the witness VM that exports the LUN
# files: it cuts a controller from the storage. A controller runs it over
# SSH (cluster-tests/vagrant/fence.sh; the key may run nothing else):
#
#   fence NODE BOOT_ID     nothing from NODE's machine reaches this VM
#                          again but SSH, and every NFS request it sent
#                          before has finished: exit 0 only then
#   unfence NODE BOOT_ID   let NODE's machine in again; refused while
#                          BOOT_ID is the boot that was fenced (that
#                          kernel may still hold dirty pages of the files)
#   check NODE BOOT_ID     exit 3 if BOOT_ID is the boot fenced (the
#                          controller then reboots itself: fence.sh)
#   status                 the fenced nodes and their boot ids
#
# The barrier: the nftables set drops the node's packets first; then the
# NFS server's threads are stopped (each finishes the request it runs)
# and started again. With NFSv3 there is no grace period, and the other
# controller's client resends what was in flight.
#
# ALUAD_FENCE_ROOT prefixes its files (a test runs it in a directory, with
# nft, rpc.nfsd and logger stubbed: cluster-tests/vagrantlab); run by sshd
# (SSH_CONNECTION set) it is ignored, whatever sshd lets a client send.
set -euf
root=
[ -n "${SSH_CONNECTION:-}" ] || root=${ALUAD_FENCE_ROOT:-}
state=$root/var/lib/aluad-fence
nodes=$root/etc/aluad/fence-nodes     # NODE ADDRESS, one per line
log() { logger -t aluad-fence "$*"; echo "aluad-fence: $*" >&2; }
set -- ${SSH_ORIGINAL_COMMAND:-$*}
[ $# -ge 1 ] || { echo "usage: fence|unfence|check NODE BOOT_ID | status" >&2; exit 2; }
op=$1
if [ "$op" = status ]; then
	set +f
	for f in "$state"/*; do
		case $f in
		*.up) echo "$(basename "$f" .up) unfenced, boot $(cat "$f")" ;;
		*) [ -f "$f" ] && echo "$(basename "$f") fenced, boot $(cat "$f")" ;;
		esac
	done
	nft list set inet aluad_fence fenced
	exit 0
fi
[ $# -eq 3 ] || { echo "usage: $op NODE BOOT_ID" >&2; exit 2; }
node=$2 boot=$3
case $node in *[!a-z0-9-]*|'') echo "bad node name" >&2; exit 2 ;; esac
case $boot in *[!a-f0-9-]*|'') echo "bad boot id" >&2; exit 2 ;; esac
addr=$(awk -v n="$node" '$1 == n {print $2}' "$nodes")
[ -n "$addr" ] || { echo "unknown node $node" >&2; exit 2; }
mkdir -p "$state"
exec 9>"$state/.lock"
flock 9
case $op in
fence)
	# A boot that the node has rebooted from is gone: its unfence
	# recorded a later boot, and cutting that one would stall it for good.
	if [ -e "$state/$node.up" ] && [ "$(cat "$state/$node.up")" != "$boot" ]; then
		log "node $node: boot $boot is gone (it runs boot $(cat "$state/$node.up")): nothing to cut"
		exit 0
	fi
	# The record reaches the disk before the cut is reported: a witness
	# that loses power after the fence must still drop the node at boot.
	echo "$boot" >"$state/$node.tmp"
	sync "$state/$node.tmp"
	mv "$state/$node.tmp" "$state/$node"
	rm -f "$state/$node.up"
	sync "$state"
	nft add element inet aluad_fence fenced "{ $addr }"
	threads=$(cat "$root/proc/fs/nfsd/threads")
	[ "${threads:-0}" -gt 0 ] 2>/dev/null || threads=8
	rpc.nfsd 0
	rpc.nfsd "$threads"
	log "fenced node $node ($addr, boot $boot)"
	;;
check)
	if [ -e "$state/$node" ] && [ "$(cat "$state/$node")" = "$boot" ]; then
		echo "node $node: boot $boot is fenced"
		exit 3
	fi
	echo "node $node: boot $boot is not fenced"
	;;
unfence)
	if [ -e "$state/$node" ] && [ "$(cat "$state/$node")" = "$boot" ]; then
		log "refused to unfence node $node: boot $boot is the one fenced; reboot it"
		exit 1
	fi
	echo "$boot" >"$state/$node.tmp"
	sync "$state/$node.tmp"
	mv "$state/$node.tmp" "$state/$node.up"
	rm -f "$state/$node"
	sync "$state"
	nft delete element inet aluad_fence fenced "{ $addr }" 2>/dev/null || true
	log "unfenced node $node ($addr, boot $boot)"
	;;
*) echo "unknown operation $op" >&2; exit 2 ;;
esac
