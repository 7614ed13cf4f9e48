.PHONY: build check test generate

build:
	CGO_ENABLED=0 go build -trimpath -o warren ./cmd/warren

check:
	bash scripts/test.sh

test:
	go test -race -count=1 ./...

generate:
	go generate ./amqp/
