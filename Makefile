.PHONY: build test lab bench serve
build:
	go build -o bin/aluad ./cmd/aluad
test:
	scripts/test.sh
bench:
	scripts/bench.sh
serve: build
	bin/aluad serve
lab: build
	bin/aluad lab
