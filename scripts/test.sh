#!/usr/bin/env bash
# The project's test command (README, docs/testing.md): installs what it
# needs on a bare Debian machine, then runs vet, the race-enabled unit and integration
# tests, short fuzz runs of every parser, and libiscsi's iscsi-test-cu
# against aluad (test/conformance) with tgtd run the same way for comparison.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
mkdir -p results
export ALUAD_RESULTS="$PWD/results"
# Tests that need libiscsi tools fail here instead of skipping.
export ALUAD_REQUIRE_EXTERNAL=1
echo "== go vet"; go vet ./...
echo "== gofmt"; test -z "$(gofmt -l cmd pkg test ownership cluster-tests tcmu-handler)" || { gofmt -l cmd pkg test ownership cluster-tests tcmu-handler; exit 1; }
echo "== go test -race"
go test -race -count=1 ./... 2>&1 | tee results/go-test.txt
# The deterministic whole-array simulation, a fixed budget of seeds
# (docs/simulation.md: how to run 10,000); a failing seed is shrunk and saved.
echo "== simulation: ${SIM_SEEDS:-300} seeds"
go run ./cmd/aluad sim --seeds "${SIM_SEEDS:-300}" --steps 400 --shrink 60s --out results/sim-failures | tee results/sim.txt
# Cluster seeds: the real controllers in a synctest bubble under random
# pauses, kills, store partitions and interlink cuts (docs/cluster.md),
# then the planted defects they must catch; without the race detector
# (the bubbles are built only without it).
echo "== cluster seeds: ${CLUSTER_SEEDS:-200}"
go run ./cmd/aluad sim --cluster --seeds "${CLUSTER_SEEDS:-200}" --jobs 2 --out results/cluster-sim-failures | tee results/cluster-seeds.txt
go test -count=1 -timeout 20m ./pkg/clustersim -run 'TestClusterSeedsCatchPlanted|TestBubble|TestKillUnmaps' -v 2>&1 | tee -a results/cluster-seeds.txt
echo "== fuzz (every target, ${FUZZTIME:-10s} each)"
scripts/fuzz.sh
echo "== CHAP, login ACL and LUN mapping, checked with libiscsi's tools"
scripts/libiscsi-access.sh | tee results/libiscsi-access.txt
# The soak and abuse runs, short versions (docs/security.md: the 30-minute soak).
echo "== soak (short): 256 sessions, verified I/O, a fault every 10 s"
go run ./cmd/aluad soak --sessions 256 --duration 80s --fault-every 10s --json results/soak-ci.json | tee results/soak-ci.txt
echo "== abuse (short)"
go run ./cmd/aluad abuse --attackers 48 --duration 40s --json results/abuse-ci.json | tee results/abuse-ci.txt
echo "== iscsi-test-cu against tgtd (same command, for comparison)"
scripts/tgtd-conformance.sh | tee results/tgtd-conformance.txt
cat results/tgtd-conformance.txt | head -1
echo "== vagrant validate"
vagrant validate
# The QEMU lab's smoke scenario: a real Debian guest (open-iscsi +
# dm-multipath) against aluad, one failover and one failback under fio.
# It needs root (a network namespace, bridges, taps) and /dev/net/tun; a
# machine without them says so and goes on. ALUAD_QEMU=0 leaves it out.
echo "== QEMU lab smoke (cluster-tests)"
if [ "${ALUAD_QEMU:-1}" = 0 ]; then
  echo "SKIPPED: ALUAD_QEMU=0"
elif ! why=$(scripts/qemu-lab-probe.sh 2>&1); then
  echo "SKIPPED: this machine cannot host the QEMU lab: $why"
else
  go run ./cluster-tests/cmd/qemulab --scenario smoke --out results/qemu-lab-smoke
  # The same scenario against LIO: a storage guest runs LIO's iSCSI
  # target over aluad's TCMU devices (aluad serve --fabric tcmu).
  echo "== QEMU lab smoke, TCMU fabric (cluster-tests)"
  go run ./cluster-tests/cmd/qemulab --scenario smoke --fabric tcmu --out results/qemu-lab-smoke-tcmu
fi
# The Vagrant lab (docs/vagrant.md): the box built offline, two
# controller VMs, the witness and one client (c3; ALUAD_VAGRANT_CLIENTS
# picks others), the smoke, then vagrant destroy and the check that
# nothing of the lab is left. It needs root (libvirt's system daemon)
# and libvirt's QEMU; a machine without them, or with a lab already up
# (its networks are the lab's fixed ones), says so and goes on. Each
# stage has a time bound, and the machines go on any exit.
# ALUAD_VAGRANT=0 leaves it out.
echo "== Vagrant lab smoke"
if [ "${ALUAD_VAGRANT:-1}" = 0 ]; then
  echo "SKIPPED: ALUAD_VAGRANT=0"
elif [ "$(id -u)" != 0 ]; then
  echo "SKIPPED: the Vagrant lab needs root (libvirt's system daemon)"
elif ! why=$(cluster-tests/vagrant/host-setup.sh 2>&1); then
  echo "SKIPPED: this machine cannot host the Vagrant lab: $why"
elif virsh net-info aluad-cluster >/dev/null 2>&1; then
  echo "SKIPPED: a Vagrant lab is up on this machine (libvirt network aluad-cluster): vagrant destroy -f it first"
else
  rm -rf results/vagrant-smoke
  make build-static
  timeout 20m cluster-tests/vagrant/build-box.sh
  export ALUAD_CLIENTS=${ALUAD_VAGRANT_CLIENTS:-c3}
  trap 'timeout 5m vagrant destroy -f >/dev/null 2>&1 || true' EXIT
  trap 'exit 143' INT TERM
  timeout 30m vagrant up --provider libvirt
  timeout 30m go run ./cluster-tests/cmd/vagrant-smoke --destroy --out results/vagrant-smoke
  trap - EXIT INT TERM
  unset ALUAD_CLIENTS
fi
# Closing line: aluad's libiscsi conformance result.
sed -E 's/^aluad: ([0-9]+) real passes, ([0-9]+) skips, ([0-9]+) failures/iscsi-test-cu: \1 passed, \3 failed, \2 skipped/' results/aluad-conformance.txt
