# bloatbench: `sudo make demo` runs tcp_4down on a local lab; `sudo make test` runs
# every test, the VM lab stage last. Both install what they need first (Debian
# packages, as root).
GO ?= go
# staticcheck, pinned so that CI judges the code by the same rules every time.
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
export PATH := $(PATH):/usr/local/go/bin:/usr/sbin:/sbin

.PHONY: build deps demo test lint bench clean man generate

build:
	$(GO) build -o bloatbench ./cmd/bloatbench

deps:
	bash scripts/install-deps --vm

demo: deps build
	./bloatbench run -H local --local-rate 100mbit --local-queue bfifo:300000 --local-gso off -l 20 -d 2 -t 'htb 100mbit, bfifo 300000' tcp_4down

test: deps
	@# Each stage timed, the times printed at the end (scripts/test).
	GO=$(GO) STATICCHECK=$(STATICCHECK) bash scripts/test

# docs/man/bloatbench.1, from the command tree (urfave/cli-docs' markdown through
# go-md2man); cmd/bloatbench's TestManPage fails while the committed page is stale.
man:
	$(GO) test -count=1 -run '^TestManPage$$' ./cmd/bloatbench -args -update-man

# The BPF object and its Go bindings (bpf2go): committed, checked by make test.
generate:
	$(GO) generate ./sojourn

lint:
	$(GO) run $(STATICCHECK) ./...

bench: deps build
	bash bench/compare.sh

clean:
	-./bloatbench testbed down
	rm -f bloatbench
