#!/bin/sh
# SCSI fidelity from a real Linux host: run in a lab guest logged in to two
# aluad arrays (go run ./cluster-tests/cmd/qemu-boot --array --arrays 2
# --setup multipath-alua.conf 'sh /run/lab/scsi-fidelity.sh'; see
# docs/scsi.md). Prints what each tool says; the lines starting with
# CHECK are the verdicts.
set -u
TGT=iqn.2026-11.org.aluad:lab
check() { if eval "$2"; then echo "CHECK ok: $1"; else echo "CHECK FAILED: $1"; fi; }

# The second array (port 3270 of the same addresses).
iscsiadm -m discovery -t sendtargets -p 10.77.1.10:3270 >/dev/null
iscsiadm -m node -L all >/dev/null 2>&1 || true
udevadm settle --timeout=60 || true
sleep 5
multipath -ll
maps=$(multipath -ll | grep -c ALUAD)
wwids=$(for d in /sys/block/sd*; do /lib/udev/scsi_id -g -u -d /dev/${d##*/}; done | sort -u | wc -l)
check "two arrays, two LUNs each: 4 multipath maps (got $maps), 4 WWIDs (got $wwids)" '[ "$maps" = 4 ] && [ "$wwids" = 4 ]'

M=/dev/mapper/$(multipath -ll | awk '/ALUAD/{print $1; exit}')
P=/dev/$(multipath -ll "$M" | grep -o 'sd[a-z]*' | head -1)
echo "map $M, a path $P"

echo "== sg_vpd -p ei"; sg_vpd -p ei "$P"; check "VPD 0x86 (Extended INQUIRY)" 'sg_vpd -p ei "$P" >/dev/null'
echo "== sg_logs"; sg_logs "$P"; sg_logs -p 0xd "$P"; sg_logs -p 0x2f "$P"; sg_logs -p 0x3 "$P"
check "LOG SENSE pages" 'sg_logs -p 0xd "$P" >/dev/null && sg_logs -p 0x2f "$P" >/dev/null && sg_logs -p 0x2 "$P" >/dev/null'
echo "== sg_get_lba_status"
dd if=/dev/urandom of="$M" bs=1M count=1 seek=8 oflag=direct 2>/dev/null
sg_get_lba_status --lba=0 --maxlen=1024 "$P"
mapped=$(sg_get_lba_status --lba=16384 "$P" | head -3)
echo "$mapped"
check "GET LBA STATUS: the first descriptor starts at the LBA asked and is mapped" 'sg_get_lba_status --lba=16384 "$P" | grep -i "4000" | grep -qi "mapped"'
echo "== write cache (Linux sd: MODE SELECT with SP=PS)"
CT=$(echo /sys/block/${P#/dev/}/device/scsi_disk/*/cache_type)
cat "$CT"
echo "write through" >"$CT"
cat "$CT"
echo "saved caching page:"; sg_modes --control=3 --page=8 "$P"
check "WCE=0 through sd's cache_type" 'grep -q "write through" "$CT"'
check "and saved (the saved caching page has WCE=0)" 'sg_modes --control=3 --page=8 --raw "$P" 2>/dev/null | od -An -tx1 | tr -s " \n" " " | grep -q " 08 12 00 \| 88 12 00 "'
echo "write back" >"$CT"

echo "== fence_mpath: register on every path, reserve, another host preempts and aborts"
mpathpersist --out --register --param-sark=0xa1 "$M"
mpathpersist --in -k "$M"
mpathpersist --out --reserve --param-rk=0xa1 --prout-type=5 "$M"
mpathpersist --in -r "$M"
nkeys=$(sg_persist --in -k "$P" | grep -c 0xa1)
check "registered on every path of the map ($nkeys keys)" '[ "$nkeys" -ge 4 ]'
# A second host: another initiator name on its own iface, one path.
iscsiadm -m iface -I fence -o new >/dev/null
iscsiadm -m iface -I fence -o update -n iface.initiatorname -v iqn.2026-11.org.example:fence >/dev/null
# One path to each array (the map may be on either).
for port in 3260 3270; do
	iscsiadm -m discovery -t sendtargets -p 10.77.1.10:$port -I fence 2>&1 | grep -v "a session is using it" || true
	iscsiadm -m node -T $TGT -p 10.77.1.10:$port -I fence --login
done
udevadm settle --timeout=30 || true
sleep 2
iscsiadm -m session
# The fencing host's disks: those attached to the session of its initiator name.
F=$(iscsiadm -m session -P 3 | awk '/Iface Initiatorname:/ { f = ($3 ~ /:fence$/) } f && /Attached scsi disk/ { print $4 }' |
	while read -r b; do
		if [ "$(/lib/udev/scsi_id -g -u -d /dev/$b)" = "$(/lib/udev/scsi_id -g -u -d $P)" ]; then echo /dev/$b; fi
	done | head -1)
echo "the fencing host's path to the same LUN: $F"
multipathd del path "${F#/dev/}" >/dev/null 2>&1 || true # the other host has no part in this host's map
sg_persist --out --register --param-sark=0xb2 "$F"
(dd if=/dev/zero of="$M" bs=64k count=2000 oflag=direct 2>/tmp/dd.err; echo "dd exit $?" >>/tmp/dd.err) &
sleep 1
sg_persist --out --preempt-abort --param-rk=0xb2 --param-sark=0xa1 --prout-type=5 "$F"
rc=$?
check "PREEMPT AND ABORT from the other host" '[ $rc = 0 ]'
sg_persist --in --read-full-status "$F"
wait
cat /tmp/dd.err
check "the fenced host's writes stop (its dd fails)" 'grep -q "dd exit [1-9]" /tmp/dd.err'
check "only the fencing host's key is left" '[ "$(sg_persist --in -k "$F" | grep -c "^ *0x")" = 1 ] && sg_persist --in -k "$F" | grep -q "^ *0xb2"'
check "the fencing host holds the reservation" 'sg_persist --in -r "$F" | grep -q 0xb2'
