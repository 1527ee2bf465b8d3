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
