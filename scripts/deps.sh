#!/usr/bin/env bash
# Installs what the tests and benchmarks need on a bare Debian machine.
set -euo pipefail
need=()
command -v iscsi-test-cu >/dev/null || need+=(libiscsi-bin)
command -v tgtd >/dev/null || need+=(tgt)
command -v iperf3 >/dev/null || need+=(iperf3)
command -v python3 >/dev/null || need+=(python3)
command -v bc >/dev/null || need+=(bc)
# test/aluacheck builds an independent ALUA client in C against libiscsi.
command -v gcc >/dev/null || need+=(gcc)
# aluad qualify's JUnit XML is validated against its schema with xmllint.
command -v xmllint >/dev/null || need+=(libxml2-utils)
[ -f /usr/include/stdio.h ] || need+=(libc6-dev)
[ -f /usr/include/iscsi/iscsi.h ] || need+=(libiscsi-dev)
# The QEMU lab (cluster-tests): guests built by debootstrap, booted by
# QEMU (TCG), QEMU's libiscsi block driver, busybox for the initrd, and
# Vagrant to validate the Vagrantfile.
# (without recommends: Vagrant's would pull in libvirt and an initramfs)
lean=()
command -v qemu-system-x86_64 >/dev/null || lean+=(qemu-system-x86)
[ -e /usr/lib/x86_64-linux-gnu/qemu/block-iscsi.so ] || lean+=(qemu-block-extra)
command -v debootstrap >/dev/null || lean+=(debootstrap)
dpkg -s busybox-static >/dev/null 2>&1 || lean+=(busybox-static)   # the initrd needs it static
command -v mkfs.ext4 >/dev/null || lean+=(e2fsprogs)
# Newer releases' guest kernels ship compressed modules; the initrd's go in plain.
command -v xz >/dev/null || lean+=(xz-utils)
command -v zstd >/dev/null || lean+=(zstd)
command -v ip >/dev/null || lean+=(iproute2)
command -v vagrant >/dev/null || lean+=(vagrant)
# The example alert rules are checked and unit-tested by Prometheus's promtool.
command -v promtool >/dev/null || lean+=(prometheus)
# The dashboard's browser test loads it in headless Chromium.
command -v chromium >/dev/null || lean+=(chromium)
[ -d /usr/share/vagrant-plugins/plugins.d ] && ls /usr/share/vagrant-plugins/plugins.d | grep -q libvirt || lean+=(vagrant-libvirt)
if [ ${#need[@]} -gt 0 ] || [ ${#lean[@]} -gt 0 ]; then
  SUDO=; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  [ ${#need[@]} -eq 0 ] || DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
  [ ${#lean[@]} -eq 0 ] || DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${lean[@]}" >/dev/null
fi
command -v go >/dev/null || { echo "Go 1.26+ is required (https://go.dev/dl)"; exit 1; }
go mod download
