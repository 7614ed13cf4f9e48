.PHONY: build check test generate

build:
	CGO_ENABLED=0 go build -trimpath -o warren ./cmd/warren

check:
	bash scripts/test.sh

# go test shows why a test skipped only with -v: say it here. The interop
# tests (interop/) and the console's browser tests (web/) skip a client
# that is not installed unless WARREN_INTEROP=1; make check installs them.
test:
	go test -race -count=1 ./...
	@[ "$$WARREN_INTEROP" = 1 ] || echo "NOTE: WARREN_INTEROP is not set: the interop tests (pika, amqplib, amqp-tools) and the browser tests skipped every client that is not installed. Run make check (bash scripts/test.sh) to install them and run everything."

generate:
	go generate ./amqp/
