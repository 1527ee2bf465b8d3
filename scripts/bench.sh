#!/usr/bin/env bash
# Benchmarks aluad against tgtd in the same run with the same clients:
# iscsi-perf 4K random reads at QD 32, iscsi-perf 1 MiB sequential reads,
# and 4K random writes at QD 16 through aluad's Go initiator. Each is run
# ROUNDS times alternating the targets; medians and ratios are printed.
# Both targets keep their LUN on tmpfs (/dev/shm), page cache for aluad.
# Last, aluad alone: iscsi-perf 4K random reads at QD 1 on the owner's port
# (AO) and the other node's port (ANO, forwarded with the default 50 µs
# interlink penalty), alternating, as mean latency = 1/IOPS.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-8}
OUT=${OUT:-results/bench.txt}
mkdir -p "$(dirname "$OUT")" bin
command -v iscsi-perf >/dev/null && command -v tgtd >/dev/null || scripts/deps.sh
go build -o bin/aluad ./cmd/aluad
go build -o bin/writeload ./test/bench/writeload

. scripts/lib-tgtd.sh
work=$(mktemp -d /dev/shm/aluad-bench.XXXX)
cleanup() { stop_tgtd 7; kill "${APID:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

cat > "$work/aluad.yaml" <<YAML
target: iqn.2026-11.org.aluad:bench
data: $work/aluad
nodes:
  - name: a
    ports: [{name: a0, addr: "127.0.0.1:3360"}]
  - name: b
    ports: [{name: b0, addr: "127.0.0.1:3361"}]
luns:
  - {id: 0, size: 1GiB, preferred: a}
# The ownership core stays off: it would rightly ship LUN 0 to node b
# after the ANO rounds (ship_window), and the "ANO" rows would then
# measure an owner (iscsi-perf also miscounts the 2A/06 that follows,
# in_flight -1, and never exits).
ownership: {off: true}
YAML
bin/aluad serve --api off --config "$work/aluad.yaml" >"$work/aluad.out" 2>"$work/aluad.err" & APID=$!
start_tgtd 3370 7 iqn.2026-11.org.aluad:tgtbench "$work/tgt.img" "$work/tgtd.log"
A_URL=iscsi://127.0.0.1:3360/iqn.2026-11.org.aluad:bench/0
ANO_URL=iscsi://127.0.0.1:3361/iqn.2026-11.org.aluad:bench/0
T_URL=iscsi://127.0.0.1:3370/iqn.2026-11.org.aluad:tgtbench/1
# Pre-fill so reads hit allocated data on both.
dd if=/dev/urandom of="$work/fill" bs=1M count=64 status=none
for u in "$A_URL" "$T_URL"; do iscsi-dd --src "file://$work/fill" --dst "$u" >/dev/null 2>&1 || true; done

perf() { # url blocks random -> average IOPS
  local out rc=0
  out=$(timeout $((SECS+20)) iscsi-perf -m "$4" -b "$2" $3 -t "$SECS" "$1" 2>&1) || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "bench.sh: iscsi-perf -m $4 -b $2 $3 $1 failed (exit $rc): $(echo "$out" | tr '\r' '\n' | tail -3)" >&2
    return 1
  fi
  echo "$out" | tr '\r' '\n' | grep -o 'iops average [0-9]*' | tail -1 | awk '{print $3}'
}
wl() { # addr target lun -> IOPS
  bin/writeload -addr "$1" -target "$2" -lun "$3" -size 4096 -qd 16 -t "${SECS}s" | awk '{print $2}'
}
median() { sort -n | awk '{a[NR]=$1} END{print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}'; }
declare -A R
for r in $(seq "$ROUNDS"); do
  R[a4k]+="$(perf "$A_URL" 8 -r 32) "; R[t4k]+="$(perf "$T_URL" 8 -r 32) "
  R[a1m]+="$(perf "$A_URL" 2048 "" 8) "; R[t1m]+="$(perf "$T_URL" 2048 "" 8) "
  R[aw]+="$(wl 127.0.0.1:3360 iqn.2026-11.org.aluad:bench 0) "; R[tw]+="$(wl 127.0.0.1:3370 iqn.2026-11.org.aluad:tgtbench 1) "
  R[ao]+="$(perf "$A_URL" 8 -r 1) "; R[ano]+="$(perf "$ANO_URL" 8 -r 1) "
done
m() { echo ${R[$1]} | tr ' ' '\n' | grep . | median; }
{
  echo "aluad vs tgtd, median of $ROUNDS rounds x ${SECS}s, same clients, same run ($(date -u +%F))"
  printf "%-38s %12s %12s %8s\n" workload aluad tgtd ratio
  for w in "4k:iscsi-perf 4 KiB random read QD32 (IOPS)" "1m:iscsi-perf 1 MiB seq read QD8 (IOPS)" "w:Go initiator 4 KiB random write QD16 (IOPS)"; do
    k=${w%%:*}; name=${w#*:}
    if [ "$k" = w ]; then a=$(m aw); t=$(m tw); else a=$(m a$k); t=$(m t$k); fi
    printf "%-38s %12.0f %12.0f %7.2fx\n" "$name" "$a" "$t" "$(echo "$a / $t" | bc -l)"
  done
  ao=$(m ao); ano=$(m ano)
  echo
  echo "aluad alone: iscsi-perf 4 KiB random read QD1 on LUN 0, owner's port vs the other node's port"
  printf "%-38s %12s %12s %8s\n" path IOPS "latency us" "vs AO"
  printf "%-38s %12.0f %12.1f %7.2fx\n" "AO (node a, local)" "$ao" "$(echo "1000000 / $ao" | bc -l)" 1
  printf "%-38s %12.0f %12.1f %7.2fx\n" "ANO (node b, forwarded, 50us penalty)" "$ano" "$(echo "1000000 / $ano" | bc -l)" "$(echo "$ao / $ano" | bc -l)"
  printf "%-38s %25.1f\n" "added latency of ANO (us)" "$(echo "1000000 / $ano - 1000000 / $ao" | bc -l)"
} | tee "$OUT"
