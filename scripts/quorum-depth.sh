#!/usr/bin/env bash
# RSS per node of a 3-node cluster holding one deep quorum queue: Warren
# against RabbitMQ on this machine (issue: "RSS per node with 1,000,000
# messages queued").
#
# For each system in SYSTEMS ("rabbit warren"), one after the other: start a
# 3-node cluster (RabbitMQ with scripts/rabbitmq-cluster.sh; Warren from
# WARREN_BIN, or a build of this checkout, three processes on 127.0.0.1 with
# data dirs in a temp dir), declare the quorum queue "depth" through node 1's
# management API, publish MESSAGES (1,000,000) persistent messages of SIZE
# (16) bytes to it through node 1 with `warren bench` (1 producer, confirms,
# CONFIRM (1000) outstanding, no consumer), wait until every node's
# management API reports the confirmed ones queued, SETTLE (20) s more, then read each
# node's RSS (VmRSS of the process: RabbitMQ's Erlang VM, Warren's process).
# Prints one line per system and the Warren / RabbitMQ ratio:
#
#   bash scripts/quorum-depth.sh
#   SYSTEMS=warren MESSAGES=200000 bash scripts/quorum-depth.sh
#
# WARREN_FLAGS adds flags to every Warren node. With HEAP_DIR set, each
# Warren node serves pprof (127.0.0.1:W_PPROF+i) and its heap profile is
# saved there as node<i>.heap before it stops. Nothing but 127.0.0.1 is
# contacted; everything started is stopped on exit.
set -euo pipefail
if [ -n "${WARREN_BIN:-}" ]; then WARREN_BIN=$(realpath "$WARREN_BIN"); fi
cd "$(dirname "$0")/.."

SYSTEMS=${SYSTEMS:-rabbit warren}
MESSAGES=${MESSAGES:-1000000}
SIZE=${SIZE:-16}
CONFIRM=${CONFIRM:-1000}
SETTLE=${SETTLE:-20}
W_AMQP=${W_AMQP:-5830} W_HTTP=${W_HTTP:-15830} W_CLUSTER=${W_CLUSTER:-25830} W_PPROF=${W_PPROF:-6830}
HEAP_DIR=${HEAP_DIR:-}

log() { printf '[quorum-depth %4ds] %s\n' "$SECONDS" "$*" >&2; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
rss_mib() { awk '/^VmRSS:/ {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }

TMP=$(mktemp -d /tmp/warren-quorum-depth.XXXXXX)

export STATE="$TMP/rabbit"
RMQC_SOURCE=1 source scripts/rabbitmq-cluster.sh

rabbit_start() { rmqc_start; }
rabbit_stop() { rmqc_stop >/dev/null 2>&1 || true; }
rabbit_pid() { rmqc_pid "$1"; }
rabbit_uri() { rmqc_uri "$1"; }
rabbit_http() { echo "127.0.0.1:$((MGMT_BASE + $1))"; }

WDIR="$TMP/warren" W_METRICS=
source scripts/warren-cluster.sh
# With HEAP_DIR, each node serves pprof (its heap is saved before it stops).
warren_node_flags() { [ -z "$HEAP_DIR" ] || WARREN_NODE_FLAGS=(--pprof-addr "127.0.0.1:$((W_PPROF + $1))"); }
warren_start() { warren_boot_all; }

cleanup() {
  set +e
  warren_stop
  rabbit_stop
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

warren_pick_binary

# queued HTTP: the messages the node's management API reports in "depth".
queued() {
  curl -fsS -u guest:guest "http://$1/api/queues/%2F/depth" 2>/dev/null | grep -o '"messages":[0-9]*' | head -n 1 | cut -d: -f2
}

declare -A RESULT=()
for s in $SYSTEMS; do
  log "$s: starting three nodes"
  "${s}_start"
  if [ "$s" = warren ]; then
    # A quorum queue declared before the data groups are planned would
    # stay on its node: wait for the plan on every node.
    for i in 1 2 3; do
      for _ in $(seq 240); do
        curl -fsS -u guest:guest "http://$(warren_http "$i")/api/global-parameters/warren_data_groups" >/dev/null 2>&1 && break
        sleep 0.5
      done
    done
  fi
  # The quorum queue, declared once the cluster (and its data groups)
  # take it.
  for _ in $(seq 240); do
    curl -fsS -u guest:guest -X PUT -H 'content-type: application/json' \
      -d '{"durable":true,"auto_delete":false,"arguments":{"x-queue-type":"quorum"}}' \
      "http://$("${s}_http" 1)/api/queues/%2F/depth" >/dev/null 2>&1 && break
    sleep 0.5
  done
  if [ "$s" = warren ]; then
    members=$(curl -fsS -u guest:guest "http://$(warren_http 1)/api/queues/%2F/depth" | grep -o '"members":\["[^"]*",[^]]*\]' || true)
    [ -n "$members" ] || { log "warren: the queue is not replicated (one member or none)"; exit 1; }
    log "warren: queue $members"
  fi
  log "$s: publishing $MESSAGES messages of $SIZE B with confirms"
  start=$SECONDS
  "$W" bench --uri "$("${s}_uri" 1)" --producers 1 --consumers 0 --predeclared --queue-pattern depth \
    --exchange amq.default --routing-key depth --size "$SIZE" --persistent --confirm "$CONFIRM" \
    --pmessages "$MESSAGES" --json >"$TMP/$s.bench" 2>"$TMP/$s.bench.err" || { log "$s: bench failed"; tail "$TMP/$s.bench.err" >&2; exit 1; }
  log "$s: published in $((SECONDS - start)) s"
  # Wait for what was confirmed: a publish nacked (a propose that timed out
  # on a loaded machine) may be queued or not.
  want=$(grep -o '"confirmed":[0-9]*' "$TMP/$s.bench" | head -n 1 | cut -d: -f2)
  want=${want:-$MESSAGES}
  [ "$want" = "$MESSAGES" ] || log "$s: $want of $MESSAGES confirmed"
  for i in 1 2 3; do
    for _ in $(seq 600); do
      n=$(queued "$("${s}_http" "$i")")
      [ -n "$n" ] && [ "$n" -ge "$want" ] && break
      sleep 1
    done
  done
  sleep "$SETTLE"
  line="$s:"
  for i in 1 2 3; do
    line="$line node$i $(rss_mib "$("${s}_pid" "$i")") MiB (queued $(queued "$("${s}_http" "$i")"))"
    RESULT[$s$i]=$(rss_mib "$("${s}_pid" "$i")")
  done
  echo "$line"
  if [ "$s" = warren ] && [ -n "$HEAP_DIR" ]; then
    mkdir -p "$HEAP_DIR"
    for i in 1 2 3; do curl -fsS "http://127.0.0.1:$((W_PPROF + i))/debug/pprof/heap" >"$HEAP_DIR/node$i.heap" || true; done
  fi
  "${s}_stop"
done

if [ -n "${RESULT[rabbit1]:-}" ] && [ -n "${RESULT[warren1]:-}" ]; then
  for i in 1 2 3; do
    awk -v r="${RESULT[rabbit$i]}" -v w="${RESULT[warren$i]}" -v i="$i" 'BEGIN { printf "node%d Warren/RabbitMQ RSS: %.3f\n", i, w / r }'
  done
fi
