# Sourced by the scripts that measure tgtd beside aluad.
# start_tgtd PORT CONTROL_PORT IQN IMAGE LOG: starts tgtd on 127.0.0.1:PORT
# with one RAM-file LUN (LUN 1) open to every initiator; sets TPID.
start_tgtd() {
  local port=$1 ctl=$2 iqn=$3 img=$4 log=$5
  truncate -s 1G "$img"
  tgtd -C "$ctl" -f --iscsi portal=127.0.0.1:"$port" >"$log" 2>&1 & TPID=$!
  sleep 1
  tgtadm -C "$ctl" --lld iscsi --op new --mode target --tid 1 -T "$iqn"
  tgtadm -C "$ctl" --lld iscsi --op new --mode logicalunit --tid 1 --lun 1 -b "$img"
  tgtadm -C "$ctl" --lld iscsi --op bind --mode target --tid 1 -I ALL
}

# stop_tgtd CONTROL_PORT: tgtd ignores SIGTERM while it has targets; ask it
# to shut down, then make sure.
stop_tgtd() {
  [ -n "${TPID:-}" ] || return 0
  tgtadm -C "$1" --op delete --mode system >/dev/null 2>&1 || true
  sleep 0.5
  kill -9 "$TPID" 2>/dev/null || true
  wait "$TPID" 2>/dev/null || true
  TPID=
}
