#!/usr/bin/env bash
# Says whether this machine can host the QEMU lab (cluster-tests): root,
# /dev/net/tun, a network namespace with a bridge and a tap, and mounts
# (debootstrap mounts /proc in the image it builds). Prints the first
# thing missing and exits 1; exits 0 when all are there.
set -u
[ "$(id -u)" -eq 0 ] || { echo "not root (uid $(id -u))"; exit 1; }
[ -c /dev/net/tun ] || { echo "no /dev/net/tun"; exit 1; }
ns=aluadprobe$$
cleanup() { ip netns del "$ns" 2>/dev/null; [ -n "${mnt:-}" ] && { umount "$mnt" 2>/dev/null; rmdir "$mnt"; }; }
trap cleanup EXIT
out=$(ip netns add "$ns" 2>&1) || { echo "cannot create a network namespace: $out"; exit 1; }
out=$(ip -n "$ns" link add br0 type bridge 2>&1) || { echo "cannot create a bridge: $out"; exit 1; }
out=$(ip -n "$ns" tuntap add tap0 mode tap 2>&1) || { echo "cannot create a tap: $out"; exit 1; }
mnt=$(mktemp -d)
out=$(mount -t tmpfs probe "$mnt" 2>&1) || { echo "cannot mount: $out"; exit 1; }
exit 0
