#!/usr/bin/env bash
# A 3-node Warren cluster against a 3-node RabbitMQ cluster on this machine,
# with `warren bench declare|failover|forward|idle`.
#
# For each system in SYSTEMS ("rabbit warren"), one after the other: start
# the cluster (RabbitMQ with scripts/rabbitmq-cluster.sh; Warren from
# WARREN_BIN, or a build of this checkout, three processes on 127.0.0.1 with
# data dirs in a temp dir), then
#   idle      CPU (% of a core) and RSS of each node over IDLE_SECONDS (60),
#             IDLE_WARMUP (20) s after the cluster formed;
#   declare   queue declarations per second through a follower, DECLARE_CLIENTS
#             (8) clients, DECLARE_SECONDS (10) per run, RUNS (3) runs of
#             declare+delete pairs and RUNS of declare-only (deleted after);
#   forward   confirmed publishes/s to a queue on node A through node B, as a
#             share of through A (FORWARD_SECONDS (10) per run, RUNS of each,
#             16 B transient, 1 producer, window 1000);
#   failover  clients declaring on every node; KILLS (5) times: SIGKILL the
#             metadata leader (RabbitMQ has none: node 1, 2, 3 in turn), note
#             the time to the next declare-ok on a survivor, restart the node
#             and wait for all three to serve again.
# Each system's figures go to RESULTS_DIR/<system>.env (default: a temp dir),
# and a table of both, with Warren / RabbitMQ ratios, is printed from
# whatever RESULTS_DIR holds, so the halves may run at different times:
#
#   SYSTEMS=rabbit RESULTS_DIR=/tmp/cperf bash scripts/cluster-perf.sh
#   SYSTEMS=warren RESULTS_DIR=/tmp/cperf WARREN_BIN=/tmp/warren bash scripts/cluster-perf.sh
#
# WARREN_FLAGS adds flags to every Warren node (e.g. "--quorum-groups 0").
# The bench client is the Warren binary (WARREN_BIN, or the build). Nothing
# but 127.0.0.1 is contacted; everything started is stopped on exit.
set -euo pipefail
if [ -n "${WARREN_BIN:-}" ]; then WARREN_BIN=$(realpath "$WARREN_BIN"); fi
if [ -n "${RESULTS_DIR:-}" ]; then mkdir -p "$RESULTS_DIR"; RESULTS_DIR=$(realpath "$RESULTS_DIR"); fi
cd "$(dirname "$0")/.."

SYSTEMS=${SYSTEMS:-rabbit warren}
RUNS=${RUNS:-3}
KILLS=${KILLS:-5}
IDLE_SECONDS=${IDLE_SECONDS:-60}
IDLE_WARMUP=${IDLE_WARMUP:-20}
DECLARE_SECONDS=${DECLARE_SECONDS:-10}
DECLARE_CLIENTS=${DECLARE_CLIENTS:-8}
FORWARD_SECONDS=${FORWARD_SECONDS:-10}
KILL_GAP=${KILL_GAP:-3} # s of steady declares before each kill
W_AMQP=${W_AMQP:-5820} W_HTTP=${W_HTTP:-15820} W_METRICS=${W_METRICS:-15920} W_CLUSTER=${W_CLUSTER:-25820}

log() { printf '[cluster-perf %4ds] %s\n' "$SECONDS" "$*" >&2; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# jf JSON FIELD: a number field of a --json line; ja JSON FIELD: an array's
# values, space separated.
jf() { grep -o "\"$2\":[^,}]*" <<<"$1" | head -n 1 | cut -d: -f2; }
ja() { grep -o "\"$2\":\[[^]]*\]" <<<"$1" | head -n 1 | cut -d: -f2 | tr -d '[]"' | tr ',' ' '; }
median() { tr ' ' '\n' <<<"$*" | grep -v '^$' | sort -g | awk '{a[NR] = $1} END {if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

TMP=$(mktemp -d /tmp/warren-cluster-perf.XXXXXX)
RESULTS_DIR=${RESULTS_DIR:-$TMP/results}
mkdir -p "$RESULTS_DIR"
BENCH_PID='' FAIL_PID='' CURRENT=''

# RabbitMQ ------------------------------------------------------------------

export STATE="$TMP/rabbit"
RMQC_SOURCE=1 source scripts/rabbitmq-cluster.sh

rabbit_start() { rmqc_start; }
rabbit_stop() { rmqc_stop >/dev/null 2>&1 || true; }
rabbit_pid() { rmqc_pid "$1"; }
rabbit_uri() { rmqc_uri "$1"; }
rabbit_kill() { rmqc_kill "$1"; }
rabbit_restart() { rmqc_restart "$1" >/dev/null; }
# No leader: kill k goes to node (k-1) mod 3 + 1.
rabbit_victim() { echo $((($1 - 1) % 3 + 1)); }
rabbit_follower() { echo 2; }
rabbit_version() { echo "RabbitMQ $(dpkg-query -W -f '${Version}' rabbitmq-server 2>/dev/null || echo '?')"; }

# Warren --------------------------------------------------------------------

WDIR="$TMP/warren"
source scripts/warren-cluster.sh

# warren_serving: until a queue can be declared through every node (the
# cluster has a leader and every node reaches it).
warren_serving() {
  local i j
  for i in 1 2 3; do
    for _ in $(seq 120); do
      j=$("$W" bench declare --uri "$(warren_uri "$i")" --clients 1 --duration 300ms --json 2>/dev/null || true)
      [ -n "$j" ] && [ "$(jf "$j" declared)" != 0 ] && continue 2
      sleep 0.5
    done
    log "warren node $i never served a declare"; return 1
  done
}

warren_start() { warren_boot_all && warren_serving; }

warren_kill() { kill -KILL "${WPID[$1]}" 2>/dev/null || true; wait "${WPID[$1]}" 2>/dev/null || true; }
warren_restart() { warren_boot "$1" && warren_serving; }

# warren_leader: the node (1..3) leading the metadata group, from the
# management API's /api/cluster/status (the node marked metadata_leader).
warren_leader() {
  local i j name
  for i in 1 2 3; do
    kill -0 "${WPID[$i]}" 2>/dev/null || continue
    j=$(curl -fsS -u guest:guest "http://127.0.0.1:$((W_HTTP + i))/api/cluster/status" 2>/dev/null) || continue
    name=$(grep -o '{[^{}]*"metadata_leader":true[^{}]*}' <<<"$j" | grep -o '"name":"[^"]*"' | head -n 1 | cut -d'"' -f4)
    case "$name" in warren[123]@*) echo "${name:6:1}"; return 0 ;; esac
  done
  return 1
}
warren_victim() { warren_leader || { log "no metadata leader found; killing node 1"; echo 1; }; }
# A follower: any node but the leader.
warren_follower() {
  local l; l=$(warren_leader || echo 1)
  echo $((l % 3 + 1))
}
warren_version() { echo "Warren $("$W" --version | awk '{print $NF}')"; }

# ---------------------------------------------------------------------------

cleanup() {
  set +e
  [ -z "$BENCH_PID" ] || kill -TERM "$BENCH_PID" 2>/dev/null
  [ -z "$FAIL_PID" ] || kill -TERM "$FAIL_PID" 2>/dev/null
  warren_stop
  rabbit_stop
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

warren_pick_binary

# put SYSTEM KEY VALUE: one figure into the system's results.
put() { echo "$2=$3" >>"$RESULTS_DIR/$1.env"; }

measure() {
  local s=$1 j i k v pids=() names=() f
  : >"$RESULTS_DIR/$s.env"
  put "$s" version "\"$("${s}_version")\""
  put "$s" date "$(date -u +%Y-%m-%dT%H:%MZ)"
  log "$s: starting a 3-node cluster"
  local t0=$SECONDS
  "${s}_start"
  put "$s" start_s $((SECONDS - t0))

  log "$s: idle for ${IDLE_WARMUP}s, then measuring ${IDLE_SECONDS}s"
  sleep "$IDLE_WARMUP"
  for i in 1 2 3; do pids+=(--pid "$("${s}_pid" "$i")"); names+=(--name "node$i"); done
  j=$("$W" bench idle "${pids[@]}" "${names[@]}" --duration "${IDLE_SECONDS}s" --json 2>/dev/null)
  put "$s" idle_cpu "\"$(ja "$j" cpu_pct)\""
  put "$s" idle_rss "\"$(ja "$j" rss_mib)\""
  put "$s" idle_cpu_max "$(ja "$j" cpu_pct | tr ' ' '\n' | sort -g | tail -n 1)"
  put "$s" idle_rss_max "$(ja "$j" rss_mib | tr ' ' '\n' | sort -g | tail -n 1)"

  f=$("${s}_follower")
  put "$s" declare_node "$f"
  for mode in pairs keep; do
    v=''
    for k in $(seq "$RUNS"); do
      log "$s: declare ($mode) through node $f, run $k/$RUNS"
      local extra=()
      [ "$mode" = pairs ] || extra=(--keep)
      j=$("$W" bench declare --uri "$("${s}_uri" "$f")" --clients "$DECLARE_CLIENTS" --duration "${DECLARE_SECONDS}s" "${extra[@]}" --json 2>>"$TMP/bench.log")
      [ "$(jf "$j" failures)" = 0 ] || log "$s: $(jf "$j" failures) failures declaring"
      v="$v $(jf "$j" declare_rate)"
      put "$s" "declare_${mode}_p50_ms_run$k" "$(jf "$j" p50_ms)"
    done
    put "$s" "declare_${mode}_runs" "\"${v# }\""
    put "$s" "declare_${mode}" "$(median "$v")"
  done

  log "$s: forwarded publish, node 1 (the queue's) through node 2"
  j=$("$W" bench forward --home "$("${s}_uri" 1)" --via "$("${s}_uri" 2)" --duration "${FORWARD_SECONDS}s" --rounds "$RUNS" --json 2>>"$TMP/bench.log")
  put "$s" forward_local "$(jf "$j" local_rate)"
  put "$s" forward_via "$(jf "$j" forwarded_rate)"
  put "$s" forward_share "$(jf "$j" share)"
  # Below 1: confirmed publishes through node 2 did not reach the queue on
  # node 1 (not forwarded), and the figures above are not of forwarding.
  put "$s" forward_reached "$(jf "$j" reached)"
  [ "$(jf "$j" failures)" = 0 ] || log "$s: $(jf "$j" failures) failures in forward"

  log "$s: failover, $KILLS kills"
  local uris=()
  for i in 1 2 3; do uris+=(--uri "$("${s}_uri" "$i")"); done
  # The events go to a file the run follows; nothing holds it open, so a
  # restarted node cannot keep its end from being seen.
  : >"$TMP/events"
  "$W" bench failover "${uris[@]}" --clients 2 --settle 2s --events "$TMP/events" --json \
    </dev/null >"$TMP/failover.json" 2>>"$TMP/bench.log" &
  FAIL_PID=$!
  for k in $(seq "$KILLS"); do
    sleep "$KILL_GAP"
    local victim t
    victim=$("${s}_victim" "$k")
    log "$s: kill $k/$KILLS: node $victim"
    t=$(date +%s%N)
    "${s}_kill" "$victim"
    echo "kill $victim $t" >>"$TMP/events"
    sleep 5
    log "$s: restarting node $victim"
    "${s}_restart" "$victim"
  done
  echo end >>"$TMP/events"
  wait "$FAIL_PID" || true
  FAIL_PID=''
  j=$(tail -n 1 "$TMP/failover.json")
  [ -n "$j" ] || { log "$s: the failover run printed nothing"; tail -n 20 "$TMP/bench.log" >&2; exit 1; }
  put "$s" failover_median_ms "$(jf "$j" median_ms)"
  put "$s" failover_recovered "$(jf "$j" recovered_count)/$(jf "$j" kill_count)"
  put "$s" failover_ms "\"$(ja "$j" recovery_ms)\""
  put "$s" failover_nodes "\"$(ja "$j" kill_node)\""

  log "$s: stopping"
  "${s}_stop"
}

for s in $SYSTEMS; do
  case "$s" in rabbit | warren) measure "$s" ;; *) echo "unknown system $s (rabbit, warren)" >&2; exit 2 ;; esac
done

# The table, from whatever RESULTS_DIR holds. ---------------------------------

get() { [ -f "$RESULTS_DIR/$1.env" ] && (set +u; source "$RESULTS_DIR/$1.env"; eval "echo \"\${$2:-}\"") || true; }
ratio() { awk -v r="$1" -v w="$2" 'BEGIN { if (r == "" || w == "" || r + 0 == 0) print "—"; else printf "%.2f", w / r }'; }
row() { # row LABEL KEY [noratio]
  local r w
  r=$(get rabbit "$2") w=$(get warren "$2")
  if [ "${3:-}" = noratio ]; then printf '| %s | %s | %s | — |\n' "$1" "${r:-—}" "${w:-—}"
  else printf '| %s | %s | %s | %s |\n' "$1" "${r:-—}" "${w:-—}" "$(ratio "$r" "$w")"; fi
}

echo
for s in rabbit warren; do
  [ -f "$RESULTS_DIR/$s.env" ] && printf '%s (%s). ' "$(get "$s" version)" "$(get "$s" date)"
done
echo "$(nproc) CPUs, 127.0.0.1."
echo "Ratio = Warren / RabbitMQ. Medians of $RUNS runs (declare, forward), of the kills (failover)."
echo
echo "| scenario | RabbitMQ | Warren | ratio |"
echo "| --- | ---: | ---: | ---: |"
row "declare + delete through a follower, $DECLARE_CLIENTS clients: declarations/s" declare_pairs
row "… each run" declare_pairs_runs noratio
row "declare only (deleted after), $DECLARE_CLIENTS clients: declarations/s" declare_keep
row "… each run" declare_keep_runs noratio
row "node SIGKILLed (Warren: the metadata leader) → next declare-ok on a survivor: median ms" failover_median_ms
row "… each kill, ms" failover_ms noratio
row "… killed nodes" failover_nodes noratio
row "… kills recovered" failover_recovered noratio
row "confirmed publish, queue on node 1, through node 1: msg/s" forward_local
row "… through node 2: msg/s" forward_via
row "… forwarded / local" forward_share
row "… share of the confirmed publishes through node 2 that reached the queue on node 1" forward_reached noratio
row "idle cluster: CPU % of a core, per node" idle_cpu noratio
row "… highest node" idle_cpu_max
row "idle cluster: RSS MiB, per node" idle_rss noratio
row "… highest node" idle_rss_max
row "cluster start to serving, s" start_s
