#!/usr/bin/env bash
# Replicated streams over AMQP 0-9-1: a 3-node Warren cluster against a 3-node
# RabbitMQ cluster on this machine, with `warren bench` as the load tool of
# both (modelled on scripts/quorum-perf.sh).
#
# For each system in SYSTEMS ("rabbit warren"), one after the other: start the
# cluster (RabbitMQ with scripts/rabbitmq-cluster.sh; Warren from WARREN_BIN,
# or a build of this checkout), then, RUNS (1) runs each, the median:
#   streams     for 1 and 4 streams (STREAM_COUNTS): the streams spread over
#               the nodes (node i declares its share, x-queue-leader-locator
#               client-local: the first replica on the declaring node) and
#               one `warren bench` per node publishes to and consumes its
#               share there, one producer and one consumer per stream,
#               consumers from x-stream-offset=first (basic.qos 1000, a
#               multiple ack every 100, as stream consumers require),
#               persistent 100 B bodies, confirm window CONFIRM (500), for
#               SECONDS (15); confirmed publishes/s and deliveries/s, summed
#               over the nodes;
#   super       a super stream's layout of PARTITIONS (6) partitions: a
#               direct exchange and PARTITIONS streams bound to it with keys
#               0..N-1, declared with x-queue-leader-locator=balanced (their
#               leaders spread over the 3 nodes), one producer and one
#               consumer per partition, all through node 1 (one bench
#               publishing through the exchange) — same figures.
# Each system's figures go to RESULTS_DIR/<system>.env (default: a temp dir),
# and a table of both, with Warren / RabbitMQ ratios, is printed from whatever
# RESULTS_DIR holds, so the halves may run at different times:
#
#   SYSTEMS=rabbit RESULTS_DIR=/tmp/sperf bash scripts/stream-perf.sh
#   SYSTEMS=warren RESULTS_DIR=/tmp/sperf WARREN_BIN=/tmp/warren bash scripts/stream-perf.sh
#
# SYSTEMS=table only prints the table of RESULTS_DIR. WARREN_FLAGS adds flags
# to every Warren node. SCENARIOS ("streams super") picks scenarios. The bench
# client is the Warren binary (WARREN_BIN, or the build). The ports differ
# from the other perf scripts' (W_AMQP 5900, AMQP_BASE 5890, ...), so they
# may run at once; nothing but 127.0.0.1 is contacted; everything started is
# stopped on exit.
set -euo pipefail
if [ -n "${WARREN_BIN:-}" ]; then WARREN_BIN=$(realpath "$WARREN_BIN"); fi
if [ -n "${RESULTS_DIR:-}" ]; then mkdir -p "$RESULTS_DIR"; RESULTS_DIR=$(realpath "$RESULTS_DIR"); fi
cd "$(dirname "$0")/.."

SYSTEMS=${SYSTEMS:-rabbit warren}
SCENARIOS=${SCENARIOS:-streams super}
RUNS=${RUNS:-1}
STREAM_COUNTS=${STREAM_COUNTS:-1 4}
PARTITIONS=${PARTITIONS:-6}
CONFIRM=${CONFIRM:-500}
SIZE=${SIZE:-100}
SECONDS_RUN=${SECONDS_RUN:-15}
W_AMQP=${W_AMQP:-5900} W_HTTP=${W_HTTP:-15900} W_METRICS=${W_METRICS:-} W_CLUSTER=${W_CLUSTER:-25900}
export AMQP_BASE=${AMQP_BASE:-5890} MGMT_BASE=${MGMT_BASE:-15890} DIST_BASE=${DIST_BASE:-25890} RMQC_EPMD_PORT=${RMQC_EPMD_PORT:-4490}

log() { printf '[stream-perf %4ds] %s\n' "$SECONDS" "$*" >&2; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
jf() { grep -o "\"$2\":[^,}]*" <<<"$1" | head -n 1 | cut -d: -f2; }
median() { tr ' ' '\n' <<<"$*" | grep -v '^$' | sort -g | awk '{a[NR] = $1} END {if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

TMP=$(mktemp -d /tmp/warren-stream-perf.XXXXXX)
RESULTS_DIR=${RESULTS_DIR:-$TMP/results}
mkdir -p "$RESULTS_DIR"
BENCH_PIDS=()

# RabbitMQ ------------------------------------------------------------------

export STATE="$TMP/rabbit"
RMQC_SOURCE=1 source scripts/rabbitmq-cluster.sh

# RABBIT_EXTERNAL=1: a cluster already running on AMQP_BASE + 1..3 (started
# with scripts/rabbitmq-cluster.sh and the same AMQP_BASE), left running.
rabbit_start() { [ -n "${RABBIT_EXTERNAL:-}" ] || rmqc_start; }
rabbit_stop() { [ -n "${RABBIT_EXTERNAL:-}" ] || rmqc_stop >/dev/null 2>&1 || true; }
rabbit_uri() { rmqc_uri "$1"; }
rabbit_version() { echo "RabbitMQ $(dpkg-query -W -f '${Version}' rabbitmq-server 2>/dev/null || echo '?')"; }

# Warren --------------------------------------------------------------------

WDIR="$TMP/warren"
source scripts/warren-cluster.sh

# warren_stream_ready: until a stream declared through each node is a
# replicated one (the data groups are planned and have leaders): the
# management API reports its replicas.
warren_stream_ready() {
  local i j q
  for i in 1 2 3; do
    q="stream-perf-probe-$i"
    for _ in $(seq 240); do
      "$W" bench queues --uri "$(warren_uri "$i")" --count 1 --clients 1 --prefix "$q" \
        --queue-args x-queue-type=stream --json >/dev/null 2>&1 || true
      j=$(curl -fsS -u guest:guest "http://127.0.0.1:$((W_HTTP + i))/api/queues/%2F/$q-0" 2>/dev/null || true)
      "$W" bench queues --uri "$(warren_uri "$i")" --count 1 --clients 1 --prefix "$q" --delete --json >/dev/null 2>&1 || true
      if grep -q '"replicas":\[{' <<<"$j"; then continue 2; fi
      sleep 0.5
    done
    log "warren node $i: streams never replicated"; return 1
  done
}

warren_start() { warren_boot_all && warren_stream_ready; }
warren_version() { echo "Warren $("$W" --version | awk '{print $NF}')"; }

# ---------------------------------------------------------------------------

cleanup() {
  set +e
  local p
  for p in "${BENCH_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  warren_stop
  rabbit_stop
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

warren_pick_binary

put() { echo "$2=$3" >>"$RESULTS_DIR/$1.env"; }

STREAM_ARGS=(--queue-args x-queue-type=stream --auto-delete=false --persistent --confirm "$CONFIRM"
  --prefetch 1000 --multi-ack 100 --consumer-args x-stream-offset=first -s "$SIZE")

# sum FILES...: "publish consume" msg/s summed over bench JSON summaries.
sum() {
  local f j p=0 c=0
  for f in "$@"; do
    j=$(tail -n 1 "$f")
    [ "$(jf "$j" failures)" = 0 ] || log "$(jf "$j" failures) failures ($f)"
    p=$(awk -v t="$p" -v c="$(jf "$j" confirmed)" -v d="$(jf "$j" duration_s)" 'BEGIN { printf "%.1f", t + c / d }')
    c=$(awk -v t="$c" -v r="$(jf "$j" receive_rate)" 'BEGIN { printf "%.1f", t + r }')
  done
  echo "$p $c"
}

# streams S N RUN: N streams spread over the nodes, a bench per node.
streams() {
  local s=$1 n=$2 run=$3 i share files=()
  BENCH_PIDS=()
  for i in 1 2 3; do
    share=$((n / 3 + (i <= n % 3 ? 1 : 0)))
    [ "$share" -gt 0 ] || continue
    "$W" bench --uri "$("${s}_uri" "$i")" --queues "$share" -x "$share" -y "$share" \
      --queue-pattern "sperf-$run-$n-n$i-%d" --exchange "sperf-$run-$n-n$i" "${STREAM_ARGS[@]}" \
      --queue-args x-queue-leader-locator=client-local \
      --duration "${SECONDS_RUN}s" --json >"$TMP/st$i.json" 2>>"$TMP/bench.log" &
    BENCH_PIDS+=($!)
    files+=("$TMP/st$i.json")
  done
  for i in "${BENCH_PIDS[@]}"; do wait "$i" || log "$s: a bench run failed"; done
  BENCH_PIDS=()
  sum "${files[@]}"
}

# super S RUN: the partitions, a producer and a consumer each, through node 1.
super() {
  local s=$1 run=$2
  "$W" bench --uri "$("${s}_uri" 1)" --queues "$PARTITIONS" -x "$PARTITIONS" -y "$PARTITIONS" \
    --queue-pattern "sperf-ss-$run-%d" --exchange "sperf-ss-$run" "${STREAM_ARGS[@]}" \
    --queue-args x-queue-leader-locator=balanced \
    --duration "${SECONDS_RUN}s" --json >"$TMP/ss.json" 2>>"$TMP/bench.log" || log "$s: a bench run failed"
  sum "$TMP/ss.json"
}

# record S KEY "RESULTS...": medians of each run's publish and consume rates.
record() {
  local s=$1 k=$2 v=$3 p c
  p=$(awk '{for (i = 1; i <= NF; i += 2) printf "%s ", $i}' <<<"$v")
  c=$(awk '{for (i = 2; i <= NF; i += 2) printf "%s ", $i}' <<<"$v")
  put "$s" "${k}_pub_runs" "\"${p% }\""
  put "$s" "${k}_pub" "$(median "$p")"
  put "$s" "${k}_con_runs" "\"${c% }\""
  put "$s" "${k}_con" "$(median "$c")"
}

measure() {
  local s=$1 k v n
  : >"$RESULTS_DIR/$s.env"
  put "$s" version "\"$("${s}_version")\""
  put "$s" date "$(date -u +%Y-%m-%dT%H:%MZ)"
  put "$s" load_start "\"$(cut -d' ' -f1-3 /proc/loadavg)\""
  log "$s: starting a 3-node cluster"
  "${s}_start"
  if [[ " $SCENARIOS " == *" streams "* ]]; then
    for n in $STREAM_COUNTS; do
      v=''
      for k in $(seq "$RUNS"); do
        log "$s: $n stream(s) spread over the nodes, run $k/$RUNS"
        v="$v $(streams "$s" "$n" "$k")"
      done
      record "$s" "st_$n" "$v"
    done
  fi
  if [[ " $SCENARIOS " == *" super "* ]]; then
    v=''
    for k in $(seq "$RUNS"); do
      log "$s: super stream of $PARTITIONS partitions, run $k/$RUNS"
      v="$v $(super "$s" "$k")"
    done
    record "$s" ss "$v"
  fi
  put "$s" load_end "\"$(cut -d' ' -f1-3 /proc/loadavg)\""
  log "$s: stopping"
  "${s}_stop"
}

get() { [ -f "$RESULTS_DIR/$1.env" ] && (set +u; source "$RESULTS_DIR/$1.env"; eval "echo \"\${$2:-}\"") || true; }

for s in $SYSTEMS; do
  case "$s" in rabbit | warren) measure "$s" ;; table) ;; *) echo "unknown system $s (rabbit, warren, table)" >&2; exit 2 ;; esac
done

# The table, from whatever RESULTS_DIR holds. ---------------------------------

ratio() { awk -v r="$1" -v w="$2" 'BEGIN { if (r == "" || w == "" || r + 0 == 0) print "—"; else printf "%.2f", w / r }'; }
row() { # row LABEL KEY [noratio]
  local r w
  r=$(get rabbit "$2") w=$(get warren "$2")
  if [ "${3:-}" = noratio ]; then printf '| %s | %s | %s | — |\n' "$1" "${r:-—}" "${w:-—}"
  else printf '| %s | %s | %s | %s |\n' "$1" "${r:-—}" "${w:-—}" "$(ratio "$r" "$w")"; fi
}

echo
for s in rabbit warren; do
  [ -f "$RESULTS_DIR/$s.env" ] && printf '%s (%s, load %s → %s). ' "$(get "$s" version)" "$(get "$s" date)" "$(get "$s" load_start)" "$(get "$s" load_end)"
done
echo "$(nproc) CPUs, 127.0.0.1."
echo "Ratio = Warren / RabbitMQ. Messages of $SIZE B, persistent, confirm window $CONFIRM, prefetch 1000."
echo
echo "| scenario | RabbitMQ | Warren | ratio |"
echo "| --- | ---: | ---: | ---: |"
for n in $STREAM_COUNTS; do
  row "$n stream(s) spread over the nodes: confirmed publish msg/s" "st_${n}_pub"
  row "… consume msg/s" "st_${n}_con"
done
row "super stream of $PARTITIONS partitions (leaders balanced), through node 1: confirmed publish msg/s" ss_pub
row "… consume msg/s" ss_con
