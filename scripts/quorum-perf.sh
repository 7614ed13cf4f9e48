#!/usr/bin/env bash
# Replicated quorum queues: a 3-node Warren cluster against a 3-node RabbitMQ
# cluster on this machine, with `warren bench` as the load tool of both.
#
# For each system in SYSTEMS ("rabbit warren"), one after the other: start the
# cluster (RabbitMQ with scripts/rabbitmq-cluster.sh; Warren from WARREN_BIN,
# or a build of this checkout), then
#   throughput  confirmed publishes/s to 1, 10 and 100 quorum queues
#               (QUEUE_COUNTS), the queues spread over the nodes: node i
#               declares its share (client-local: each queue's leader is the
#               node it was declared through) and one `warren bench` per node
#               publishes (through an exchange of its own) to and consumes
#               from its share there, one producer
#               and one consumer per queue, persistent 16 B bodies, confirm
#               window CONFIRM (500), prefetch 1000, multi-ack 100, for
#               THROUGHPUT_SECONDS (15); the rates of the nodes are summed
#               (confirmed messages / seconds), RUNS (1) runs, the median;
#   latency     one quorum queue on node 1, a producer with confirms at
#               LATENCY_RATE (1000) msg/s and a consumer, both on node 1, for
#               LATENCY_SECONDS (20): end-to-end (publish to delivery) p50 and
#               p99, and the confirm's p99;
#   idle        MANY_SMALL (1000) quorum queues declared through the three
#               nodes (12 clients), each used once (a persistent message
#               published with a confirm, fetched and acked), IDLE_WARMUP (20)
#               s, then CPU (% of a core) and RSS per node over IDLE_SECONDS
#               (60);
#   many        more queues, as many as make MANY (10000) in all, declared and
#               used the same way; the time to declare them, then idle CPU and
#               RSS per node as above.
# Each system's figures go to RESULTS_DIR/<system>.env (default: a temp dir),
# and a table of both, with Warren / RabbitMQ ratios, is printed from whatever
# RESULTS_DIR holds, so the halves may run at different times:
#
#   SYSTEMS=rabbit RESULTS_DIR=/tmp/qperf bash scripts/quorum-perf.sh
#   SYSTEMS=warren RESULTS_DIR=/tmp/qperf WARREN_BIN=/tmp/warren bash scripts/quorum-perf.sh
#
# SYSTEMS=table only prints the table of RESULTS_DIR.
# WARREN_FLAGS adds flags to every Warren node. SCENARIOS ("throughput latency
# idle many") picks scenarios; "many" needs "idle" before it. The bench client
# is the Warren binary (WARREN_BIN, or the build). The ports differ from
# scripts/cluster-perf.sh's, so both may run at once; nothing but 127.0.0.1 is
# contacted; everything started is stopped on exit.
set -euo pipefail
if [ -n "${WARREN_BIN:-}" ]; then WARREN_BIN=$(realpath "$WARREN_BIN"); fi
if [ -n "${RESULTS_DIR:-}" ]; then mkdir -p "$RESULTS_DIR"; RESULTS_DIR=$(realpath "$RESULTS_DIR"); fi
cd "$(dirname "$0")/.."

SYSTEMS=${SYSTEMS:-rabbit warren}
SCENARIOS=${SCENARIOS:-throughput latency idle many}
RUNS=${RUNS:-1}
QUEUE_COUNTS=${QUEUE_COUNTS:-1 10 100}
CONFIRM=${CONFIRM:-500}
THROUGHPUT_SECONDS=${THROUGHPUT_SECONDS:-15}
LATENCY_RATE=${LATENCY_RATE:-1000}
LATENCY_SECONDS=${LATENCY_SECONDS:-20}
MANY_SMALL=${MANY_SMALL:-1000}
MANY=${MANY:-10000}
IDLE_SECONDS=${IDLE_SECONDS:-60}
IDLE_WARMUP=${IDLE_WARMUP:-20}
W_AMQP=${W_AMQP:-5880} W_HTTP=${W_HTTP:-15880} W_METRICS=${W_METRICS:-15980} W_CLUSTER=${W_CLUSTER:-25880}
export AMQP_BASE=${AMQP_BASE:-5870} MGMT_BASE=${MGMT_BASE:-15870} DIST_BASE=${DIST_BASE:-25870} RMQC_EPMD_PORT=${RMQC_EPMD_PORT:-4470}

log() { printf '[quorum-perf %4ds] %s\n' "$SECONDS" "$*" >&2; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
jf() { grep -o "\"$2\":[^,}]*" <<<"$1" | head -n 1 | cut -d: -f2; }
ja() { grep -o "\"$2\":\[[^]]*\]" <<<"$1" | head -n 1 | cut -d: -f2 | tr -d '[]"' | tr ',' ' '; }
median() { tr ' ' '\n' <<<"$*" | grep -v '^$' | sort -g | awk '{a[NR] = $1} END {if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
maxof() { tr ' ' '\n' <<<"$*" | grep -v '^$' | sort -g | tail -n 1; }

TMP=$(mktemp -d /tmp/warren-quorum-perf.XXXXXX)
RESULTS_DIR=${RESULTS_DIR:-$TMP/results}
mkdir -p "$RESULTS_DIR"
BENCH_PIDS=()

# RabbitMQ ------------------------------------------------------------------

export STATE="$TMP/rabbit"
RMQC_SOURCE=1 source scripts/rabbitmq-cluster.sh

rabbit_start() { rmqc_start; }
rabbit_stop() { rmqc_stop >/dev/null 2>&1 || true; }
rabbit_pid() { rmqc_pid "$1"; }
rabbit_uri() { rmqc_uri "$1"; }
rabbit_version() { echo "RabbitMQ $(dpkg-query -W -f '${Version}' rabbitmq-server 2>/dev/null || echo '?')"; }

# Warren --------------------------------------------------------------------

WDIR="$TMP/warren"
source scripts/warren-cluster.sh

# warren_quorum_ready: until a quorum queue declared through each node is a
# replicated one (the data groups are planned and have leaders): the
# management API reports its members, more than one.
warren_quorum_ready() {
  local i j q
  for i in 1 2 3; do
    q="quorum-perf-probe-$i"
    for _ in $(seq 240); do
      "$W" bench queues --uri "$(warren_uri "$i")" --count 1 --clients 1 --prefix "$q" \
        --queue-args x-queue-type=quorum --use --json >/dev/null 2>&1 || true
      j=$(curl -fsS -u guest:guest "http://127.0.0.1:$((W_HTTP + i))/api/queues/%2F/$q-0" 2>/dev/null || true)
      # Replicated: more than one member (an unreplicated quorum queue
      # lists its node as its only member, as on a single node).
      if grep -q '"members":\["[^"]*","' <<<"$j"; then
        "$W" bench queues --uri "$(warren_uri "$i")" --count 1 --clients 1 --prefix "$q" --delete --json >/dev/null 2>&1 || true
        continue 2
      fi
      # Declared before the plan: a single-replica queue. Delete it and
      # try again.
      "$W" bench queues --uri "$(warren_uri "$i")" --count 1 --clients 1 --prefix "$q" --delete --json >/dev/null 2>&1 || true
      sleep 0.5
    done
    log "warren node $i: quorum queues never replicated"; return 1
  done
}

warren_start() { warren_boot_all && warren_quorum_ready; }
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

# throughput S Q RUN: confirmed msg/s to Q quorum queues spread over the
# nodes, summed over the nodes' bench runs.
throughput() {
  local s=$1 q=$2 run=$3 i n total=0 files=() share
  BENCH_PIDS=()
  for i in 1 2 3; do
    # Node i's share of the Q queues: Q/3, the first Q mod 3 nodes one more.
    share=$((q / 3 + (i <= q % 3 ? 1 : 0)))
    [ "$share" -gt 0 ] || continue
    local conns=0
    [ "$share" -le 4 ] || conns=8
    "$W" bench --uri "$("${s}_uri" "$i")" --queues "$share" -x "$share" -y "$share" --connections "$conns" \
      --queue-pattern "qperf-$run-$q-n$i-%d" --exchange "qperf-$run-$q-n$i" --queue-args x-queue-type=quorum --auto-delete=false \
      --persistent --confirm "$CONFIRM" --prefetch 1000 --multi-ack 100 -s 16 \
      --duration "${THROUGHPUT_SECONDS}s" --json >"$TMP/tp$i.json" 2>>"$TMP/bench.log" &
    BENCH_PIDS+=($!)
    files+=("$TMP/tp$i.json")
  done
  for i in "${BENCH_PIDS[@]}"; do wait "$i" || log "$s: a bench run failed"; done
  BENCH_PIDS=()
  for f in "${files[@]}"; do
    local j; j=$(tail -n 1 "$f")
    [ "$(jf "$j" failures)" = 0 ] || log "$s: $(jf "$j" failures) failures ($f)"
    total=$(awk -v t="$total" -v c="$(jf "$j" confirmed)" -v d="$(jf "$j" duration_s)" 'BEGIN { printf "%.1f", t + c / d }')
  done
  echo "$total"
}

measure() {
  local s=$1 j i k v pids=() names=() uris=()
  : >"$RESULTS_DIR/$s.env"
  put "$s" version "\"$("${s}_version")\""
  put "$s" date "$(date -u +%Y-%m-%dT%H:%MZ)"
  put "$s" load_start "\"$(cut -d' ' -f1-3 /proc/loadavg)\""
  log "$s: starting a 3-node cluster"
  "${s}_start"
  for i in 1 2 3; do
    pids+=(--pid "$("${s}_pid" "$i")")
    names+=(--name "node$i")
    uris+=(--uri "$("${s}_uri" "$i")")
  done

  if [[ " $SCENARIOS " == *" throughput "* ]]; then
    for q in $QUEUE_COUNTS; do
      v=''
      for k in $(seq "$RUNS"); do
        log "$s: throughput, $q quorum queues, run $k/$RUNS"
        v="$v $(throughput "$s" "$q" "$k")"
      done
      put "$s" "tp_${q}_runs" "\"${v# }\""
      put "$s" "tp_$q" "$(median "$v")"
    done
  fi

  if [[ " $SCENARIOS " == *" latency "* ]]; then
    log "$s: latency at $LATENCY_RATE msg/s"
    j=$("$W" bench --uri "$("${s}_uri" 1)" --queues 1 -x 1 -y 1 --queue-pattern qperf-lat \
      --queue-args x-queue-type=quorum --auto-delete=false --persistent --confirm 1000 --prefetch 1000 \
      --multi-ack 10 --rate "$LATENCY_RATE" -s 16 --duration "${LATENCY_SECONDS}s" --json 2>>"$TMP/bench.log")
    [ "$(jf "$j" failures)" = 0 ] || log "$s: $(jf "$j" failures) failures (latency)"
    put "$s" lat_p50_ms "$(awk -v u="$(jf "$j" p50_us)" 'BEGIN { printf "%.2f", u / 1000 }')"
    put "$s" lat_p99_ms "$(awk -v u="$(jf "$j" p99_us)" 'BEGIN { printf "%.2f", u / 1000 }')"
    put "$s" lat_confirm_p99_ms "$(awk -v u="$(jf "$j" confirm_p99_us)" 'BEGIN { printf "%.2f", u / 1000 }')"
    put "$s" lat_rate "$(jf "$j" receive_rate)"
  fi

  if [[ " $SCENARIOS " == *" idle "* ]]; then
    log "$s: declaring $MANY_SMALL quorum queues through the 3 nodes, using each once"
    j=$("$W" bench queues "${uris[@]}" --count "$MANY_SMALL" --clients 12 --prefix qperf-idle \
      --queue-args x-queue-type=quorum --use --json 2>>"$TMP/bench.log")
    [ "$(jf "$j" failures)" = 0 ] || log "$s: $(jf "$j" failures) failures declaring"
    put "$s" small_declare_s "$(jf "$j" seconds)"
    put "$s" small_declared "$(jf "$j" done)"
    put "$s" small_used "$(jf "$j" used)"
    log "$s: idle with $MANY_SMALL quorum queues: ${IDLE_WARMUP}s, then measuring ${IDLE_SECONDS}s"
    sleep "$IDLE_WARMUP"
    j=$("$W" bench idle "${pids[@]}" "${names[@]}" --duration "${IDLE_SECONDS}s" --json 2>/dev/null)
    put "$s" small_idle_cpu "\"$(ja "$j" cpu_pct)\""
    put "$s" small_idle_cpu_max "$(maxof "$(ja "$j" cpu_pct)")"
    put "$s" small_idle_rss "\"$(ja "$j" rss_mib)\""
    put "$s" small_idle_rss_max "$(maxof "$(ja "$j" rss_mib)")"

    if [[ " $SCENARIOS " == *" many "* ]] && [ "$MANY" -gt "$MANY_SMALL" ]; then
      log "$s: declaring $((MANY - MANY_SMALL)) more quorum queues ($MANY in all), using each once"
      j=$("$W" bench queues "${uris[@]}" --count "$((MANY - MANY_SMALL))" --clients 12 --prefix qperf-many \
        --queue-args x-queue-type=quorum --use --json 2>>"$TMP/bench.log")
      [ "$(jf "$j" failures)" = 0 ] || log "$s: $(jf "$j" failures) failures declaring"
      put "$s" many_declare_s "$(awk -v a="$(get "$s" small_declare_s)" -v b="$(jf "$j" seconds)" 'BEGIN { printf "%.1f", a + b }')"
      put "$s" many_declared "$(($(get "$s" small_declared) + $(jf "$j" done)))"
      put "$s" many_used "$(($(get "$s" small_used) + $(jf "$j" used)))"
      put "$s" many_use_s "$(jf "$j" use_seconds)"
      log "$s: idle with $MANY quorum queues: ${IDLE_WARMUP}s, then measuring ${IDLE_SECONDS}s"
      sleep "$IDLE_WARMUP"
      j=$("$W" bench idle "${pids[@]}" "${names[@]}" --duration "${IDLE_SECONDS}s" --json 2>/dev/null)
      put "$s" many_idle_cpu "\"$(ja "$j" cpu_pct)\""
      put "$s" many_idle_cpu_max "$(maxof "$(ja "$j" cpu_pct)")"
      put "$s" many_idle_rss "\"$(ja "$j" rss_mib)\""
      put "$s" many_idle_rss_max "$(maxof "$(ja "$j" rss_mib)")"
    fi
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
echo "Ratio = Warren / RabbitMQ."
echo
echo "| scenario | RabbitMQ | Warren | ratio |"
echo "| --- | ---: | ---: | ---: |"
for q in $QUEUE_COUNTS; do
  row "confirmed publish, $q quorum queue(s) spread over the nodes: msg/s" "tp_$q"
  row "… each run" "tp_${q}_runs" noratio
done
row "1 queue at $LATENCY_RATE msg/s: end-to-end p50 ms" lat_p50_ms
row "… end-to-end p99 ms" lat_p99_ms
row "… publish-to-confirm p99 ms" lat_confirm_p99_ms
row "$MANY_SMALL quorum queues: seconds to declare" small_declare_s
row "… then idle: CPU % of a core, per node" small_idle_cpu noratio
row "… highest node" small_idle_cpu_max
row "… RSS MiB per node" small_idle_rss noratio
row "… highest node" small_idle_rss_max
row "$MANY quorum queues: seconds to declare (in two steps)" many_declare_s
row "… declared / used once" many_used noratio
row "… then idle: CPU % of a core, per node" many_idle_cpu noratio
row "… highest node" many_idle_cpu_max
row "… RSS MiB per node" many_idle_rss noratio
row "… highest node" many_idle_rss_max
