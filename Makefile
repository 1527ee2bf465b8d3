.PHONY: build build-static test lab lab-qemu lab-qemu-smoke lab-qemu-tcmu bench serve vagrant-box vagrant-smoke
build:
	go build -o bin/aluad ./cmd/aluad
build-static:
	CGO_ENABLED=0 go build -o bin/aluad-linux-amd64 ./cmd/aluad
test:
	scripts/test.sh
# The QEMU cluster lab: real Linux multipath clients (needs root).
lab-qemu:
	go run ./cluster-tests/cmd/qemulab --scenario full
lab-qemu-smoke:
	go run ./cluster-tests/cmd/qemulab --scenario smoke
# The same against LIO + aluad --fabric tcmu in a storage guest.
lab-qemu-tcmu:
	go run ./cluster-tests/cmd/qemulab --scenario smoke --fabric tcmu
bench:
	scripts/bench.sh
serve: build
	bin/aluad serve
lab: build
	bin/aluad lab
# The Vagrant lab (docs/vagrant.md): the box, built offline, then
# vagrant up, then the smoke (fio on every client, a move and back, a
# controller VM's power loss and start).
vagrant-box: build-static
	cluster-tests/vagrant/host-setup.sh
	cluster-tests/vagrant/build-box.sh
vagrant-smoke:
	go run ./cluster-tests/cmd/vagrant-smoke $(SMOKE_FLAGS)
