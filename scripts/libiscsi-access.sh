#!/usr/bin/env bash
# External check of CHAP, the login ACL and LUN mapping: libiscsi's tools
# (not aluad's own initiator) against `aluad serve` on loopback.
#   - one-way CHAP: the right secret logs in, a wrong one gets
#     "Authentication failure" (status 02/01);
#   - mutual CHAP: libiscsi checks the array's answer, and refuses an array
#     that does not know the secret it expects;
#   - an initiator no host declares gets "Authorization failure" (02/02);
#   - each host sees exactly its LUNs, at its LUN numbers, and a mapping
#     added with `aluad map` shows at once.
set -uo pipefail
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
go build -o "$dir/aluad" ./cmd/aluad || exit 1
pa=${ALUAD_TEST_PORT:-23260}; pb=$((pa+1))
cat > "$dir/aluad.yaml" <<YAML
data: $dir/data
nodes:
  - {name: a, ports: [{name: a0, addr: "127.0.0.1:$pa"}]}
  - {name: b, ports: [{name: b0, addr: "127.0.0.1:$pb"}]}
luns:
  - {id: 0, size: 64MiB}
  - {id: 1, size: 64MiB}
  - {id: 2, size: 64MiB}
hosts:
  - name: h1
    initiators: [iqn.2026-11.org.example:h1]
    chap: {user: h1, secret: h1-secret-0123, target_user: array, target_secret: array-secret-456}
  - name: h2
    initiators: [iqn.2026-11.org.example:h2]
mappings:
  - {lun: 2, host: h1, host_lun: 0}
  - {lun: 1, host: h2}
access:
  unknown_initiators: refuse
YAML
"$dir/aluad" serve --config "$dir/aluad.yaml" --api off --control "$dir/ctl.sock" > "$dir/serve.log" 2>&1 &
pid=$!
for _ in $(seq 50); do [ -S "$dir/ctl.sock" ] && break; sleep 0.1; done
T=iqn.2026-11.org.aluad:array
fails=0
check() { # name, expected regexp, command...
  local name=$1 want=$2; shift 2
  local out; out=$("$@" 2>&1)
  if grep -Eq "$want" <<<"$out"; then echo "ok   $name"; else echo "FAIL $name: wanted /$want/, got:"; echo "$out" | head -5; fails=$((fails+1)); fi
}
h1=iqn.2026-11.org.example:h1; h2=iqn.2026-11.org.example:h2
check "one-way CHAP, right secret" "Peripheral Qualifier:CONNECTED" iscsi-inq -i $h1 "iscsi://h1%h1-secret-0123@127.0.0.1:$pa/$T/0"
check "one-way CHAP, wrong secret" "Authentication failure\(513\)" iscsi-inq -i $h1 "iscsi://h1%wrong-secret-99@127.0.0.1:$pa/$T/0"
check "CHAP required, none offered" "Authentication failure\(513\)" iscsi-inq -i $h1 "iscsi://127.0.0.1:$pa/$T/0"
check "mutual CHAP, both right" "Peripheral Qualifier:CONNECTED" iscsi-inq -i $h1 "iscsi://h1%h1-secret-0123@127.0.0.1:$pa/$T/0?target_user=array&target_password=array-secret-456"
check "mutual CHAP, initiator expects another array secret" "Invalid CHAP_R response from the target" iscsi-inq -i $h1 "iscsi://h1%h1-secret-0123@127.0.0.1:$pa/$T/0?target_user=array&target_password=not-the-array-one"
check "unknown initiator refused" "Authorization failure\(514\)" iscsi-inq -i iqn.2026-11.org.example:stranger "iscsi://127.0.0.1:$pa/$T/0"
out=$(iscsi-ls -i $h1 -s "iscsi://h1%h1-secret-0123@127.0.0.1:$pa" 2>&1)
if [ "$(grep -c '^Lun:0 ' <<<"$out")" = 2 ] && [ "$(grep -c '^Lun:' <<<"$out")" = 2 ]; then echo "ok   h1 sees only LUN 0 (the array's LUN 2), on both portals"; else echo "FAIL h1 view"; echo "$out"; fails=$((fails+1)); fi
out=$(iscsi-ls -i $h2 -s "iscsi://127.0.0.1:$pa" 2>&1)
if [ "$(grep -c '^Lun:' <<<"$out")" = 2 ] && grep -q '^Lun:1 ' <<<"$out"; then echo "ok   h2 sees only LUN 1 (per portal)"; else echo "FAIL h2 view"; echo "$out"; fails=$((fails+1)); fi
"$dir/aluad" map add --lun 0 --host h2 --host-lun 5 --control "$dir/ctl.sock" || fails=$((fails+1))
out=$(iscsi-ls -i $h2 -s "iscsi://127.0.0.1:$pa" 2>&1)
if grep -q '^Lun:5 ' <<<"$out" && grep -q '^Lun:1 ' <<<"$out"; then echo "ok   h2 sees LUN 5 after aluad map add"; else echo "FAIL h2 after map"; echo "$out"; fails=$((fails+1)); fi
if grep -q 'secret-' "$dir/serve.log"; then echo "FAIL a secret is in the log"; fails=$((fails+1)); else echo "ok   no secret in the daemon's log"; fi
if grep -q '"who":"control socket uid' "$dir/data/state/audit.log"; then echo "ok   the map change is in the audit log with its caller"; else echo "FAIL audit log"; fails=$((fails+1)); fi
echo "libiscsi access checks: $fails failed"
[ $fails = 0 ]
