#!/usr/bin/env bash
# Benchmarks aluad in its default configuration (`aluad serve` as a user
# starts it: the embedded two-node array, ownership core on, statistics on,
# write-back cache with mirroring, LUN data on disk) against tgtd in the
# same run, with the same clients:
#   - iscsi-perf 4 KiB random reads at QD 32 and 1 MiB sequential reads at
#     QD 8 (libiscsi);
#   - 4 KiB random writes at QD 16 (test/bench/writeperf.c, libiscsi's
#     asynchronous API: iscsi-perf's counterpart for writes);
#   - the loopback TCP ceiling (iperf3, one stream) the 1 MiB reads are
#     held against;
#   - the target's CPU per I/O: utime+stime of the target process from
#     /proc over each workload, divided by the I/Os it served;
#   - aluad alone: 4 KiB reads at QD 1 on the owner's port (AO) and the
#     other node's port (ANO, forwarded with the default 50 us penalty).
# A warm-up round, not counted, writes aluad's CPU and allocation profiles
# per workload (pprof, under $PROFILES). Then ROUNDS rounds alternate the
# targets; each figure is printed as median [min-max] over the rounds.
# Both targets keep their LUN on the same disk.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-5}
OUT=${OUT:-results/bench.txt}
PROFILES=${PROFILES:-results/profiles}
mkdir -p "$(dirname "$OUT")" "$PROFILES" bin
command -v iscsi-perf >/dev/null && command -v tgtd >/dev/null && command -v iperf3 >/dev/null || scripts/deps.sh
go build -o bin/aluad ./cmd/aluad
go build -o bin/writeload ./test/bench/writeload
gcc -O2 -Wall -o bin/writeperf test/bench/writeperf.c -liscsi

. scripts/lib-tgtd.sh
work=$(mktemp -d "${TMPDIR:-/tmp}/aluad-bench.XXXX")
cleanup() {
  stop_tgtd 7
  kill "${APID:-}" "${IPID:-}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

API=127.0.0.1:8090
bin/aluad serve --data "$work/aluad" --pprof >"$work/aluad.out" 2>"$work/aluad.err" & APID=$!
start_tgtd 3370 7 iqn.2026-11.org.aluad:tgtbench "$work/tgt.img" "$work/tgtd.log"
for _ in $(seq 50); do curl -sf "http://$API/v1/status" >/dev/null && break; sleep 0.1; done
curl -sf "http://$API/v1/status" >/dev/null || { echo "bench.sh: aluad did not start: $(tail -3 "$work/aluad.err")" >&2; exit 1; }
IQN=iqn.2026-11.org.aluad:array
A_URL=iscsi://127.0.0.1:3260/$IQN/0   # node a's port a0: LUN 0's owner (AO)
ANO_URL=iscsi://127.0.0.1:3262/$IQN/0 # node b's port b0 (ANO)
T_URL=iscsi://127.0.0.1:3370/iqn.2026-11.org.aluad:tgtbench/1
# Pre-fill 64 MiB so reads hit allocated data on both (the same client).
bin/writeload -addr 127.0.0.1:3260 -target $IQN -lun 0 -fill $((64 << 20))
bin/writeload -addr 127.0.0.1:3370 -target iqn.2026-11.org.aluad:tgtbench -lun 1 -fill $((64 << 20))

HZ=$(getconf CLK_TCK)
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
# run PID KIND ARGS...: runs a workload against the target with process PID;
# prints "IOPS CPU_US_PER_IO".
run() {
  local pid=$1 kind=$2 out rc=0 t0 t1 n
  shift 2
  t0=$(ticks "$pid")
  case $kind in
    perf) out=$(timeout $((SECS+20)) iscsi-perf -m "$1" -b "$2" ${4:-} -t "$SECS" "$3" 2>&1) || rc=$?
          n=$(echo "$out" | tr '\r' '\n' | grep -o 'iops average [0-9]*' | tail -1 | awk '{print $3}') ;;
    wl)   out=$(timeout $((SECS+20)) bin/writeperf -m 16 -b 8 -t "$SECS" "$1" 2>&1) || rc=$?
          n=$(echo "$out" | awk '/^iops/{print $2}') ;;
  esac
  t1=$(ticks "$pid")
  if [ "$rc" -ne 0 ] || [ -z "$n" ] || [ "$n" = 0 ]; then
    echo "bench.sh: $kind $* failed (exit $rc): $(echo "$out" | tr '\r' '\n' | tail -3)" >&2
    return 1
  fi
  echo "$n $(echo "($t1 - $t0) / $HZ * 1000000 / ($n * $SECS)" | bc -l)"
}
# profiled NAME CMD...: runs CMD while taking aluad's CPU and allocation
# profiles over the same seconds.
profiled() {
  local name=$1
  shift
  curl -sf -o "$PROFILES/$name.cpu.pprof" "http://$API/debug/pprof/profile?seconds=$SECS" & local c=$!
  curl -sf -o "$PROFILES/$name.allocs.pprof" "http://$API/debug/pprof/allocs?seconds=$SECS" & local a=$!
  "$@" >/dev/null
  wait "$c" "$a"
}
ceiling() { # loopback TCP, one stream, 1 MiB writes -> MB/s
  iperf3 -s -1 -p 5299 >/dev/null 2>&1 & IPID=$!
  sleep 0.3
  iperf3 -c 127.0.0.1 -p 5299 -t "$SECS" -l 1M -J | python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8e6)'
  wait "$IPID" 2>/dev/null || true
  IPID=
}
A4K="32 8 $A_URL -r"; T4K="32 8 $T_URL -r"
A1M="8 2048 $A_URL"; T1M="8 2048 $T_URL"
AW=$A_URL; TW=$T_URL

# Warm-up round: aluad's profiles per workload.
profiled read4k run "$APID" perf $A4K
profiled read1m run "$APID" perf $A1M
profiled write4k run "$APID" wl $AW
run "$TPID" perf $T4K >/dev/null; run "$TPID" perf $T1M >/dev/null; run "$TPID" wl $TW >/dev/null

declare -A R
add() { R[$1]+="$2 "; }
for r in $(seq "$ROUNDS"); do
  set -- $(run "$APID" perf $A4K); add a4k "$1"; add a4kc "$2"
  set -- $(run "$TPID" perf $T4K); add t4k "$1"; add t4kc "$2"
  set -- $(run "$APID" perf $A1M); add a1m "$1"; add a1mc "$2"
  set -- $(run "$TPID" perf $T1M); add t1m "$1"; add t1mc "$2"
  add ceil "$(ceiling)"
  set -- $(run "$APID" wl $AW); add aw "$1"; add awc "$2"
  set -- $(run "$TPID" wl $TW); add tw "$1"; add twc "$2"
  set -- $(run "$APID" perf 1 8 "$A_URL" -r); add ao "$1"
  set -- $(run "$APID" perf 1 8 "$ANO_URL" -r); add ano "$1"
  # Per-round ratios, so their spread is over rounds measured side by side.
  a=(${R[a4k]}); t=(${R[t4k]}); add r4k "$(echo "${a[-1]} / ${t[-1]}" | bc -l)"
  a=(${R[a1m]}); c=(${R[ceil]}); add r1m "$(echo "${a[-1]} * 1.048576 / ${c[-1]}" | bc -l)"
  a=(${R[a1m]}); t=(${R[t1m]}); add r1mt "$(echo "${a[-1]} / ${t[-1]}" | bc -l)"
  a=(${R[aw]}); t=(${R[tw]}); add rw "$(echo "${a[-1]} / ${t[-1]}" | bc -l)"
  a=(${R[ao]}); t=(${R[ano]}); add added "$(echo "1000000 / ${t[-1]} - 1000000 / ${a[-1]}" | bc -l)"
done
# stat KEY FMT: "median [min-max]" of a key's rounds.
stat() {
  echo ${R[$1]} | tr ' ' '\n' | grep . | sort -g | awk -v f="$2" '{a[NR]=$1} END{
    m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf f" ["f"-"f"]", m, a[1], a[NR]}'
}
owner=$(curl -sf "http://$API/v1/luns" | python3 -c 'import json,sys; print([l for l in json.load(sys.stdin) if l["id"]==0][0].get("owner","?"))' 2>/dev/null || echo "?")
{
  echo "aluad (default configuration) vs tgtd, same clients, same run: median [min-max] of $ROUNDS rounds x ${SECS}s ($(date -u +%F), $(nproc) cores)"
  printf "%-44s %-26s %-26s %s\n" workload aluad tgtd "aluad/tgtd"
  printf "%-44s %-26s %-26s %s\n" "4 KiB random read QD32, IOPS" "$(stat a4k %.0f)" "$(stat t4k %.0f)" "$(stat r4k %.2fx)"
  printf "%-44s %-26s %-26s\n" "  target CPU per I/O, us" "$(stat a4kc %.1f)" "$(stat t4kc %.1f)"
  printf "%-44s %-26s %-26s %s\n" "1 MiB sequential read QD8, IOPS" "$(stat a1m %.0f)" "$(stat t1m %.0f)" "$(stat r1mt %.2fx)"
  printf "%-44s %-26s %-26s\n" "  target CPU per I/O, us" "$(stat a1mc %.0f)" "$(stat t1mc %.0f)"
  printf "%-44s %-26s %-26s %s\n" "4 KiB random write QD16, IOPS" "$(stat aw %.0f)" "$(stat tw %.0f)" "$(stat rw %.2fx)"
  printf "%-44s %-26s %-26s\n" "  target CPU per I/O, us" "$(stat awc %.1f)" "$(stat twc %.1f)"
  echo
  printf "%-44s %s\n" "loopback TCP ceiling (iperf3, 1 stream), MB/s" "$(stat ceil %.0f)"
  printf "%-44s %s\n" "aluad 1 MiB reads / ceiling" "$(stat r1m %.2fx)"
  echo
  echo "aluad alone: 4 KiB random read QD1 on LUN 0 (owner at the end: node $owner)"
  printf "%-44s %s\n" "AO (node a's port), IOPS" "$(stat ao %.0f)"
  printf "%-44s %s\n" "ANO (node b's port, 50 us penalty), IOPS" "$(stat ano %.0f)"
  printf "%-44s %s\n" "added latency of ANO, us" "$(stat added %.1f)"
  echo
  echo "aluad's profiles (warm-up round): $PROFILES/{read4k,read1m,write4k}.{cpu,allocs}.pprof"
} | tee "$OUT"
