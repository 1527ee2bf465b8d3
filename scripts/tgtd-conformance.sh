#!/usr/bin/env bash
# Runs iscsi-test-cu -d --test=ALL against tgtd with a RAM-file LUN and
# prints the summary line in the same form as aluad's conformance test.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib-tgtd.sh
work=$(mktemp -d /dev/shm/aluad-tgt.XXXX)
cleanup() { stop_tgtd 9; rm -rf "$work"; }
trap cleanup EXIT
start_tgtd 3371 9 iqn.2026-11.org.aluad:tgtcu "$work/tgt.img" "$work/tgtd.log"
timeout 900 iscsi-test-cu -d --test=ALL iscsi://127.0.0.1:3371/iqn.2026-11.org.aluad:tgtcu/1 > "$work/cu.txt" 2>&1 || true
cp "$work/cu.txt" results/iscsi-test-cu-tgtd.txt 2>/dev/null || true
python3 scripts/cu-summary.py "$work/cu.txt" tgtd
