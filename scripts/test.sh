#!/usr/bin/env bash
# Warren's full check: installs what the interoperability tests need, then
# runs gofmt, go vet, the generated-code check, every test under -race, and
# a short fuzz smoke of the codec and of a connection. Run from anywhere:
# bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "need root to install: $*" >&2; return 1; fi
}

step "installing the interop clients (Debian: python3-pika amqp-tools nodejs npm chromium iptables; npm: amqplib)"
need_pkgs=()
[ -d /usr/lib/python3/dist-packages/pika ] || need_pkgs+=(python3-pika)
[ -x /usr/bin/amqp-publish ] || need_pkgs+=(amqp-tools)
command -v node >/dev/null || need_pkgs+=(nodejs)
command -v npm >/dev/null || need_pkgs+=(npm)
[ -x /usr/bin/chromium ] || need_pkgs+=(chromium) # web/browser_test.go drives the console
command -v iptables >/dev/null || need_pkgs+=(iptables) # cluster/partition_test.go cuts a node off
if [ ${#need_pkgs[@]} -gt 0 ]; then
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi
(cd interop && npm ci --no-audit --no-fund --loglevel=error)
export WARREN_INTEROP=1

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './interop/node_modules/*'))
if [ -n "$unformatted" ]; then echo "gofmt would change:"; echo "$unformatted"; exit 1; fi

step "go vet"
go vet ./...
# Warren's copy of hashicorp/raft (third_party/raft, a module of its own).
go vet github.com/hashicorp/raft github.com/hashicorp/raft/bench

step "generated code is up to date"
go generate ./amqp/
if ! git diff --quiet -- amqp/; then git --no-pager diff --stat -- amqp/; echo "go generate changed amqp/"; exit 1; fi

step "tests (-race)"
go test -race -count=1 -timeout 15m ./...

# The memory-bound test (a million 1 KiB persistent messages, heap budget) is built
# without -race: the race detector's own memory and speed would swamp what it measures.
step "memory bound (no -race)"
go test -count=1 -timeout 10m -run '^TestMillionPersistentMessagesBoundedHeap$' -v ./broker/ | grep -v 'logger.go'

step "fuzz smoke"
# Counted runs (-fuzztime Nx), not timed ones: a timed run can end with a
# spurious "context deadline exceeded" when its time is up mid-input.
fuzz() { go test "./$1/" -run '^$' -fuzz "^$2\$" -fuzztime "$3" -parallel 2 2>&1; }
for target in amqp:FuzzReadFrame:400000x amqp:FuzzDecodeMethod:400000x amqp:FuzzDecodeTable:400000x \
  amqp:FuzzDecodeContentHeader:400000x broker:FuzzConn:30000x; do
  IFS=: read -r pkg f n <<<"$target"
  if ! out=$(fuzz "$pkg" "$f" "$n"); then
    # The fuzzer's own deadline hiccup is retried once; a real finding
    # ("Failing input written to testdata/...") is not.
    if grep -q 'context deadline exceeded' <<<"$out" && ! grep -q 'Failing input' <<<"$out"; then
      out=$(fuzz "$pkg" "$f" "$n") || { echo "$out"; echo "$pkg $f: FAILED"; exit 1; }
    else
      echo "$out"
      echo "$pkg $f: FAILED"
      exit 1
    fi
  fi
  echo "$pkg $f: ok"
done
echo
echo "all checks passed"
