#!/usr/bin/env bash
# Installs what the tests and benchmarks need on a bare Debian machine.
set -euo pipefail
need=()
command -v iscsi-test-cu >/dev/null || need+=(libiscsi-bin)
command -v tgtd >/dev/null || need+=(tgt)
command -v python3 >/dev/null || need+=(python3)
command -v bc >/dev/null || need+=(bc)
# test/aluacheck builds an independent ALUA client in C against libiscsi.
command -v gcc >/dev/null || need+=(gcc)
[ -f /usr/include/stdio.h ] || need+=(libc6-dev)
[ -f /usr/include/iscsi/iscsi.h ] || need+=(libiscsi-dev)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
command -v go >/dev/null || { echo "Go 1.26+ is required (https://go.dev/dl)"; exit 1; }
go mod download
