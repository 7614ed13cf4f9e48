#!/usr/bin/env bash
# Delayed messages against a `warren server` process: the memory of a
# backlog of WAITING (1,000,000) delayed messages with random delays of up to
# an hour, then the firing accuracy of a steady flow of RATE (1,000) delayed
# messages a second behind it, and of a burst of BURST (10,000) due at one
# moment. With LOAD_RATE (default 10,000; 0 = none) a `warren bench` of
# persistent messages with confirms (1 producer, 1 consumer, at that rate)
# runs on another queue throughout, so that accuracy is measured under load.
#
#   bash scripts/delayed-perf.sh
#   WARREN_BIN=/tmp/warren WAITING=100000 LOAD_RATE=0 bash scripts/delayed-perf.sh
#
# The server runs as shipped (its own GC target), on fresh random ports and
# a fresh data dir on 127.0.0.1; it is stopped at the end. Prints
# `warren bench delayed`'s report (RSS above idle, lateness p50 / p99 / max
# at the consumer), how late a timer fired on the machine through the steady
# phase (`warren bench jitter`), the broker's own histogram of how late it
# routed them (warren_delayed_messages_lateness_seconds, all phases
# together) and the load's rates.
set -euo pipefail
cd "$(dirname "$0")/.."
WAITING=${WAITING:-1000000}
RATE=${RATE:-1000}
STEADY=${STEADY:-20s}
BURST=${BURST:-10000}
SETTLE=${SETTLE:-10s}
LOAD_RATE=${LOAD_RATE:-10000}
TMP=$(mktemp -d /tmp/warren-delayed.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $TMP" >&2; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
log() { printf '[delayed %4ds] %s\n' "$SECONDS" "$*" >&2; }
# shellcheck source=scripts/ports.sh
. scripts/ports.sh # the repository root is the working directory

if [ -n "${WARREN_BIN:-}" ]; then
  W=$(realpath "$WARREN_BIN")
else
  W=$TMP/warren
  log "building warren"
  go build -o "$W" ./cmd/warren
fi
AMQP=$(free_port)
HTTP=$(free_port)
METRICS=$(free_port)
"$W" server --amqp-addr "127.0.0.1:$AMQP" --http-addr "127.0.0.1:$HTTP" --metrics-addr "127.0.0.1:$METRICS" --data-dir "$TMP/data" --log-level warn >"$TMP/warren.log" 2>&1 &
WPID=$!
PIDS+=("$WPID")
for _ in $(seq 200); do port_open "$AMQP" && break; sleep 0.05; done
port_open "$AMQP" || { echo "warren did not start" >&2; cat "$TMP/warren.log" >&2; exit 1; }
URI="amqp://guest:guest@127.0.0.1:$AMQP"
sleep 2 # idle RSS after start, not during it
log "warren $W (pid $WPID) on 127.0.0.1:$AMQP; load $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$LOAD_RATE" != 0 ]; then
  "$W" bench --uri "$URI" -x 1 -y 1 --persistent --confirm 500 --rate "$LOAD_RATE" \
    --queue-pattern warren-delayed-load >"$TMP/load.log" 2>&1 &
  PIDS+=("$!")
  log "background load: $LOAD_RATE persistent msg/s with confirms"
fi
# Through the steady phase, `warren bench jitter` measures how late a timer
# fires on the machine itself, in a process of its own: what the machine's
# stalls add to every figure (the broker's and the clients' alike).
"$W" bench delayed --uri "$URI" --pid "$WPID" --waiting "$WAITING" --settle "$SETTLE" --rate "$RATE" --steady "$STEADY" --burst "$BURST" |
  while IFS= read -r line; do
    printf '%s\n' "$line"
    case $line in
      "steady: $RATE msg/s"*) "$W" bench jitter --duration "$STEADY" >"$TMP/jitter.log" 2>&1 & ;;
    esac
  done
if [ "$RATE" != 0 ]; then
  for _ in $(seq 300); do [ -s "$TMP/jitter.log" ] && break; sleep 0.1; done
  cat "$TMP/jitter.log" 2>/dev/null || true
fi
log "load $(cut -d' ' -f1-3 /proc/loadavg)"
# The broker's own account: how late its scheduler routed each message
# (backlog, steady and burst together), cumulative per bucket.
if command -v curl >/dev/null; then
  curl -s "http://127.0.0.1:$METRICS/metrics" | grep '^warren_delayed_messages_lateness' || true
fi
if [ "$LOAD_RATE" != 0 ]; then
  kill -INT "${PIDS[1]}" 2>/dev/null || true
  wait "${PIDS[1]}" 2>/dev/null || true
  grep -E '^summary' "$TMP/load.log" || tail -n 3 "$TMP/load.log"
fi
