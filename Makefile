.PHONY: build build-static test lab lab-qemu lab-qemu-smoke bench serve
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
bench:
	scripts/bench.sh
serve: build
	bin/aluad serve
lab: build
	bin/aluad lab
