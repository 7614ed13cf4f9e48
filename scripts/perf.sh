#!/usr/bin/env bash
# Warren against RabbitMQ, side by side, with `warren bench`.
#
# Builds warren, starts it on 127.0.0.1:5682 and a private RabbitMQ node
# (Debian's rabbitmq-server, installed if missing; no plugins) on
# 127.0.0.1:5692, runs each scenario RUNS times alternating which broker goes
# first, and prints the medians as a markdown table. Both brokers are started
# fresh for every round and stopped, with all temp dirs removed, on exit.
# Nothing but 127.0.0.1 is contacted.
#
# CLIENT picks the bench's producer/consumer client: raw (the default, Warren's
# codec; cheap enough that the broker is the bottleneck) or amqp091.
#
# SCENARIOS (e.g. "sc8 sc9") runs only those scenarios, in every round.
#
# WARREN_BIN, when set, is a prebuilt warren binary to use (as the broker and as
# the bench client) instead of building one from this checkout, so that two
# builds can be compared in one sitting.
#
#   SECONDS_PER_RUN=10 RUNS=3 CONNECTIONS=1000 CLIENT=raw bash scripts/perf.sh
#   WARREN_BIN=/tmp/warren-old SCENARIOS="sc2 sc8" bash scripts/perf.sh
#
# The soak (sc11) is not in the default run, being long: SOAK_SECONDS (600) of
# 4 KiB persistent messages with confirms, consumed at once (queue depth ~0),
# once per broker, sampling the broker's VmRSS, RssAnon and RssFile (from
# /proc/PID/status) and its data dir's size every SOAK_EVERY (10) seconds; it
# prints them over time after the main table. Resident memory under steady
# traffic with no backlog should stay flat.
#
#   SCENARIOS=sc11 RUNS=1 SOAK_SECONDS=600 bash scripts/perf.sh
#
# RABBIT=0 runs Warren alone (no RabbitMQ is installed, started or measured;
# its column shows —). WARREN_ENV (e.g. "GOGC=50") is put in the environment
# of the warren server only, not of the bench client. PERF_RAW, when set, is
# a file the per-round figures are written to, one "metric/broker v1 v2 …"
# line each, for scripts (scripts/ab.sh).
#
#   RABBIT=0 WARREN_ENV=GOGC=50 SCENARIOS=sc9 RUNS=1 bash scripts/perf.sh
#
# BENCH_BIN, when set, is the warren binary whose `warren bench` is the load
# client (by default the broker's own binary), so that two broker builds can
# be measured with one client.
set -euo pipefail
if [ -n "${WARREN_BIN:-}" ]; then WARREN_BIN=$(realpath "$WARREN_BIN"); fi
if [ -n "${BENCH_BIN:-}" ]; then BENCH_BIN=$(realpath "$BENCH_BIN"); fi
cd "$(dirname "$0")/.."

S=${SECONDS_PER_RUN:-10}
RUNS=${RUNS:-3}
NCONN=${CONNECTIONS:-1000}
CLIENT=${CLIENT:-raw}
WARREN_PORT=${WARREN_PORT:-5682}
RABBIT_PORT=${RABBIT_PORT:-5692}
RABBIT=${RABBIT:-1}
WARREN_ENV=${WARREN_ENV:-}
RABBIT_DIST_PORT=${RABBIT_DIST_PORT:-25692}
EPMD_PORT=${EPMD_PORT:-4392} # a private epmd, so the one we start is ours to stop
NODE=warrenperf@localhost
RMQ=/usr/lib/rabbitmq/bin

log() { printf '[perf %4ds] %s\n' "$SECONDS" "$*" >&2; }
now_ns() { date +%s%N; }
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
# mem_kb PID: "VmRSS RssAnon RssFile" in KiB.
mem_kb() { awk '/^(VmRSS|RssAnon|RssFile):/ {v[$1] = $2} END {print v["VmRSS:"], v["RssAnon:"], v["RssFile:"]}' "/proc/$1/status"; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "need root to install: $*" >&2; return 1; fi
}

if [ "$RABBIT" != 0 ] && [ ! -x "$RMQ/rabbitmq-server" ]; then
  log "installing rabbitmq-server"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server >/dev/null
  # The package starts the system node; this script runs its own.
  as_root systemctl disable --now rabbitmq-server >/dev/null 2>&1 || true
fi
ports="$WARREN_PORT"
[ "$RABBIT" = 0 ] || ports="$ports $RABBIT_PORT $RABBIT_DIST_PORT $EPMD_PORT"
for p in $ports; do
  if port_open "$p"; then echo "port $p on 127.0.0.1 is in use" >&2; exit 1; fi
done

TMP=$(mktemp -d /tmp/warren-perf.XXXXXX)
WARREN_PID='' RABBIT_SH_PID='' RABBIT_PID=''

rabbit_env() {
  env HOME="$TMP/rabbit/home" \
    RABBITMQ_NODENAME=$NODE RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT="$RABBIT_PORT" \
    RABBITMQ_DIST_PORT="$RABBIT_DIST_PORT" RABBITMQ_MNESIA_BASE="$TMP/rabbit/mnesia" \
    RABBITMQ_LOG_BASE="$TMP/rabbit/log" RABBITMQ_ENABLED_PLUGINS_FILE="$TMP/rabbit/enabled_plugins" \
    RABBITMQ_CONF_ENV_FILE="$TMP/rabbit/rabbitmq-env.conf" RABBITMQ_CONFIG_FILE="$TMP/rabbit/rabbitmq" \
    RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
    RABBITMQ_CTL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
    ERL_EPMD_ADDRESS=127.0.0.1 ERL_EPMD_PORT="$EPMD_PORT" "$@"
}
# ctl SECONDS ARGS...: the node's rabbitmqctl, with a time limit. Always this,
# never a bare rabbitmqctl: the system one would address the system node.
ctl() { local t=$1; shift; rabbit_env timeout "$t" "$RMQ/rabbitmqctl" -n $NODE "$@"; }

stop_warren() {
  [ -n "$WARREN_PID" ] || return 0
  kill -TERM "$WARREN_PID" 2>/dev/null || true
  wait "$WARREN_PID" 2>/dev/null || true
  WARREN_PID=''
}

stop_rabbit() {
  [ -n "$RABBIT_SH_PID" ] || return 0
  ctl 60 stop >/dev/null 2>&1 || kill -TERM "$RABBIT_SH_PID" 2>/dev/null || true
  for _ in $(seq 300); do
    { [ -n "$RABBIT_PID" ] && [ -d "/proc/$RABBIT_PID" ]; } || kill -0 "$RABBIT_SH_PID" 2>/dev/null || break
    sleep 0.1
  done
  [ -z "$RABBIT_PID" ] || [ ! -d "/proc/$RABBIT_PID" ] || kill -KILL "$RABBIT_PID" 2>/dev/null || true
  kill -TERM "$RABBIT_SH_PID" 2>/dev/null || true
  wait "$RABBIT_SH_PID" 2>/dev/null || true
  RABBIT_SH_PID='' RABBIT_PID=''
  # epmd outlives the node; ours listens on a port of its own, and refuses
  # to stop while a node (the server or a CLI) is still registered.
  for _ in $(seq 50); do
    epmd -port "$EPMD_PORT" -kill >/dev/null 2>&1 || true
    port_open "$EPMD_PORT" || break
    sleep 0.1
  done
}

cleanup() {
  set +e
  [ -z "${BENCH_PID:-}" ] || kill -TERM "$BENCH_PID" 2>/dev/null
  stop_warren
  stop_rabbit
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ -n "${WARREN_BIN:-}" ]; then
  [ -x "$WARREN_BIN" ] || { echo "WARREN_BIN=$WARREN_BIN is not an executable" >&2; exit 1; }
  log "using $WARREN_BIN"
  W=$WARREN_BIN
else
  log "building warren"
  CGO_ENABLED=0 go build -trimpath -o "$TMP/warren" ./cmd/warren
  W="$TMP/warren"
fi
BENCH=${BENCH_BIN:-$W}
[ -x "$BENCH" ] || { echo "BENCH_BIN=$BENCH is not an executable" >&2; exit 1; }

# wait_port PORT PID: poll until PORT accepts a connection; prints the ms since
# START_NS.
wait_port() {
  for _ in $(seq 60000); do
    if port_open "$1"; then echo $((($(now_ns) - START_NS) / 1000000)); return 0; fi
    kill -0 "$2" 2>/dev/null || { echo "broker exited during startup" >&2; return 1; }
    sleep 0.001
  done
  echo "port $1 never opened" >&2; return 1
}

start_warren() {
  rm -rf "$TMP/warren-data"
  START_NS=$(now_ns)
  # shellcheck disable=SC2086 # WARREN_ENV is a list of NAME=VALUE words
  env $WARREN_ENV "$W" --amqp-addr "127.0.0.1:$WARREN_PORT" --data-dir "$TMP/warren-data" --log-level warn >>"$TMP/warren.log" 2>&1 &
  WARREN_PID=$!
  WARREN_START_MS=$(wait_port "$WARREN_PORT" "$WARREN_PID")
}

start_rabbit() {
  rm -rf "$TMP/rabbit"
  mkdir -p "$TMP/rabbit/home" "$TMP/rabbit/mnesia" "$TMP/rabbit/log"
  echo '[].' >"$TMP/rabbit/enabled_plugins"
  : >"$TMP/rabbit/rabbitmq-env.conf"
  : >"$TMP/rabbit/rabbitmq.conf"
  START_NS=$(now_ns)
  rabbit_env "$RMQ/rabbitmq-server" >>"$TMP/rabbit.out" 2>&1 &
  RABBIT_SH_PID=$!
  RABBIT_START_MS=$(wait_port "$RABBIT_PORT" "$RABBIT_SH_PID")
  ctl 120 await_startup >/dev/null
  RABBIT_PID=$(ctl 30 eval 'os:getpid().' | tr -dc '0-9')
  [ -n "$RABBIT_PID" ] && [ -d "/proc/$RABBIT_PID" ] || { echo "rabbitmq did not start" >&2; cat "$TMP/rabbit.out" >&2; exit 1; }
}

uri() { if [ "$1" = rabbit ]; then echo "amqp://guest:guest@127.0.0.1:$RABBIT_PORT"; else echo "amqp://guest:guest@127.0.0.1:$WARREN_PORT"; fi; }
pid_of() { if [ "$1" = rabbit ]; then echo "$RABBIT_PID"; else echo "$WARREN_PID"; fi; }

# jf JSON FIELD: one numeric field of a bench --json line (flat, numbers only).
jf() { grep -o "\"$2\":[^,}]*" <<<"$1" | head -n 1 | cut -d: -f2; }

declare -A R # R[metric/broker] = space-separated values, one per round
add() { R["$1/$2"]="${R["$1/$2"]:-} $3"; }

# bench BROKER ARGS...: one run; prints the --json line.
bench() {
  local b=$1; shift
  local out
  out=$(timeout $((S + 120)) "$BENCH" bench --uri "$(uri "$b")" --client "$CLIENT" --json "$@" 2>>"$TMP/bench-$b.log" | tail -n 1)
  if [ -z "$out" ]; then echo "bench failed against $b: $*" >&2; tail -n 5 "$TMP/bench-$b.log" >&2; exit 1; fi
  local f; f=$(jf "$out" failures)
  [ "$f" = 0 ] || log "$b: $f failures in: $*"
  echo "$out"
}

sc1() {
  local j
  j=$(bench "$1" -x 1 -y 1 -s 16 --autoack --duration "${S}s")
  add s1 "$1" "$(jf "$j" receive_rate)"
  add s1backlog "$1" "$(($(jf "$j" sent) - $(jf "$j" received)))"
  add s1depth "$1" "$(jf "$j" queue_depth)"
}

sc2() {
  local j
  j=$(bench "$1" -x 1 -y 1 -s 4096 --autoack --duration "${S}s")
  add s2 "$1" "$(jf "$j" receive_rate)"
  add s2backlog "$1" "$(($(jf "$j" sent) - $(jf "$j" received)))"
}

sc3() {
  local j
  j=$(bench "$1" -x 1 -y 10 --queues 10 --exchange-type fanout --autoack --duration "${S}s")
  add s3 "$1" "$(jf "$j" receive_rate)"
}

sc4() { # one real binding plus 999 decoys that no publish matches
  local j
  j=$(bench "$1" -x 1 -y 1 --exchange-type topic --topic-bindings 999 --autoack --duration "${S}s")
  add s4 "$1" "$(jf "$j" send_rate)"
  add s4rx "$1" "$(jf "$j" receive_rate)"
}

sc5() {
  local j
  j=$(bench "$1" -x 1 -y 1 --rate 1000 --prefetch 100 --duration "${S}s")
  add s5p50 "$1" "$(jf "$j" p50_us)"
  add s5 "$1" "$(jf "$j" p99_us)"
}

sc6() { # open NCONN connections, sample the broker's RSS while they are held
  local b=$1 j pid before during hold=$((S > 3 ? S : 3))
  pid=$(pid_of "$b")
  before=$(rss_kb "$pid")
  : >"$TMP/conn.err"
  timeout $((hold + 300)) "$BENCH" bench --uri "$(uri "$b")" --json --connect-only "$NCONN" --duration "${hold}s" \
    >"$TMP/conn.json" 2>"$TMP/conn.err" &
  BENCH_PID=$!
  until grep -q 'connections open' "$TMP/conn.err"; do
    kill -0 "$BENCH_PID" 2>/dev/null || break
    sleep 0.05
  done
  sleep 1 # let the broker settle before sampling
  during=$(rss_kb "$pid")
  wait "$BENCH_PID" || true
  BENCH_PID=''
  j=$(tail -n 1 "$TMP/conn.json")
  [ -n "$j" ] || { echo "connect-only run failed against $b" >&2; cat "$TMP/conn.err" >&2; exit 1; }
  add s6open "$b" "$(jf "$j" connect_ms)"
  add s6rss "$b" "$(awk -v a="$before" -v b="$during" -v n="$NCONN" 'BEGIN {printf "%.1f", (b - a) / n}')"
  add s6fail "$b" "$(jf "$j" failures)"
}

# Durable scenarios (DURABLE=0 skips them): persistent 16 B messages to a
# durable queue with confirms (window 1000), fsync before confirm, and
# manual-ack consumers, with 1, 4 and 16 publishers; then QUEUED persistent
# messages published into a durable queue nobody consumes, with the
# broker's peak RSS sampled meanwhile. The queued run goes once per broker.
DURABLE=${DURABLE:-1}
QUEUED=${QUEUED:-1000000}

sc8() {
  local j x
  for x in 1 4 16; do
    j=$(bench "$1" -x "$x" -y 2 -s 16 --persistent --confirm 1000 --prefetch 1000 --multi-ack 100 --duration "${S}s")
    add "s8x$x" "$1" "$(jf "$j" send_rate)"
  done
}

sc9() { # publish QUEUED messages with no consumer; peak RSS while they are queued
  local b=$1 j pid peak=0 r
  pid=$(pid_of "$b")
  ( while :; do rss_kb "$pid"; sleep 0.5; done ) >"$TMP/rss-$b" 2>/dev/null &
  local sampler=$!
  j=$(bench "$b" -x 1 -y 0 -s 16 --persistent --confirm 1000 --pmessages "$QUEUED")
  sleep 1
  kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null || true
  peak=$(sort -n "$TMP/rss-$b" | tail -n 1)
  add s9 "$b" "$(jf "$j" send_rate)"
  add s9rss "$b" "$(awk -v k="$peak" 'BEGIN {printf "%.1f", k / 1024}')"
}

# Streams (STREAMS=0 skips them): one stream queue, 100 B persistent messages,
# 1 publisher with confirms (window 1000) and 1 consumer reading at the tail
# (prefetch 1000, multiple ack every 100), then 4 and 4.
STREAMS=${STREAMS:-1}
sc10() {
  local j x
  for x in 1 4; do
    j=$(bench "$1" -x "$x" -y "$x" -s 100 --persistent --confirm 1000 --prefetch 1000 --multi-ack 100 \
      --auto-delete=false --queue-args x-queue-type=stream --duration "${S}s")
    add "s10p$x" "$1" "$(jf "$j" send_rate)"
    add "s10c$x" "$1" "$(jf "$j" receive_rate)"
  done
}

# Soak (sc11, only when SCENARIOS names it; once per broker, in round 1).
SOAK=${SOAK_SECONDS:-600}
SOAK_EVERY=${SOAK_EVERY:-10}
data_dir() { if [ "$1" = rabbit ]; then echo "$TMP/rabbit/mnesia"; else echo "$TMP/warren-data"; fi; }
sc11() {
  local b=$1 pid j t0 t next=0
  [ "$round" = 1 ] || return 0
  pid=$(pid_of "$b")
  : >"$TMP/soak-$b"
  timeout $((SOAK + 120)) "$BENCH" bench --uri "$(uri "$b")" --client "$CLIENT" --json \
    -x 1 -y 1 -s 4096 --persistent --confirm 1000 --prefetch 1000 --multi-ack 100 --duration "${SOAK}s" \
    >"$TMP/soak-$b.json" 2>>"$TMP/bench-$b.log" &
  BENCH_PID=$!
  t0=$SECONDS
  while kill -0 "$BENCH_PID" 2>/dev/null; do
    t=$((SECONDS - t0))
    if [ "$t" -ge "$next" ]; then
      # t VmRSS RssAnon RssFile (KiB) data-dir (MiB)
      echo "$t $(mem_kb "$pid") $(du -sm "$(data_dir "$b")" 2>/dev/null | cut -f1)" >>"$TMP/soak-$b"
      next=$((next + SOAK_EVERY))
    fi
    sleep 1
  done
  wait "$BENCH_PID" || true
  BENCH_PID=''
  echo "end $(mem_kb "$pid") $(du -sm "$(data_dir "$b")" 2>/dev/null | cut -f1)" >>"$TMP/soak-$b"
  j=$(tail -n 1 "$TMP/soak-$b.json")
  [ -n "$j" ] || { echo "soak failed against $b" >&2; tail -n 5 "$TMP/bench-$b.log" >&2; exit 1; }
  [ "$(jf "$j" failures)" = 0 ] || log "$b: $(jf "$j" failures) failures in the soak"
  add s11 "$b" "$(jf "$j" send_rate)"
  read -r _ r a f d < <(tail -n 1 "$TMP/soak-$b")
  add s11rss "$b" "$(awk -v k="$r" 'BEGIN {printf "%.1f", k / 1024}')"
  add s11anon "$b" "$(awk -v k="$a" 'BEGIN {printf "%.1f", k / 1024}')"
  add s11file "$b" "$(awk -v k="$f" 'BEGIN {printf "%.1f", k / 1024}')"
  add s11disk "$b" "${d:-0}"
  cp "$TMP/soak-$b" "$TMP/soak-$b.done"
}

for round in $(seq "$RUNS"); do
  log "round $round/$RUNS: starting brokers"
  [ "$RABBIT" = 0 ] || start_rabbit
  start_warren
  sleep 1
  [ "$RABBIT" = 0 ] || add s7rss rabbit "$(awk -v k="$(rss_kb "$RABBIT_PID")" 'BEGIN {printf "%.1f", k / 1024}')"
  add s7rss warren "$(awk -v k="$(rss_kb "$WARREN_PID")" 'BEGIN {printf "%.1f", k / 1024}')"
  [ "$RABBIT" = 0 ] || add s7start rabbit "$RABBIT_START_MS"
  add s7start warren "$WARREN_START_MS"
  # Alternate: each scenario runs on both brokers back to back, and which
  # goes first flips every round. Connections go first, on fresh brokers, so
  # heap kept from earlier scenarios does not hide the RSS growth.
  if [ $((round % 2)) -eq 1 ]; then order="rabbit warren"; else order="warren rabbit"; fi
  [ "$RABBIT" != 0 ] || order=warren
  scs="sc6 sc1 sc2 sc3 sc4 sc5"
  [ "$DURABLE" = 0 ] || scs="$scs sc8"
  [ "$DURABLE" = 0 ] || [ "$round" != 1 ] || scs="$scs sc9"
  [ "$STREAMS" = 0 ] || scs="$scs sc10"
  if [ -n "${SCENARIOS:-}" ]; then scs=$SCENARIOS; fi
  for sc in $scs; do
    for b in $order; do
      log "round $round/$RUNS: $sc on $b"
      "$sc" "$b"
    done
  done
  stop_warren
  stop_rabbit
done

if [ -n "${PERF_RAW:-}" ]; then
  : >"$PERF_RAW"
  for k in "${!R[@]}"; do echo "$k${R[$k]}" >>"$PERF_RAW"; done
fi

median() { tr ' ' '\n' <<<"$1" | { grep -v '^$' || true; } | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
fmt() { awk -v v="$1" 'BEGIN { if (v == "") printf "—"; else if (v == int(v)) printf "%d", v; else if (v >= 1000) printf "%.0f", v; else printf "%.1f", v }'; }
ratio() { awk -v r="$1" -v w="$2" 'BEGIN { if (r == "" || r == 0) print "—"; else if (w / r < 0.1) printf "%.2g", w / r; else printf "%.2f", w / r }'; }

row() { # row KEY LABEL [noratio]
  local r w
  [ -n "${R["$1/rabbit"]:-}${R["$1/warren"]:-}" ] || return 0 # not run (SCENARIOS)
  r=$(median "${R["$1/rabbit"]:-}")
  w=$(median "${R["$1/warren"]:-}")
  if [ "${3:-}" = noratio ]; then
    printf '| %s | %s | %s | — |\n' "$2" "$(fmt "$r")" "$(fmt "$w")"
  else
    printf '| %s | %s | %s | %s |\n' "$2" "$(fmt "$r")" "$(fmt "$w")" "$(ratio "$r" "$w")"
  fi
}

echo
echo "Medians of $RUNS runs, ${S}s each, bench client $CLIENT, $(nproc) CPUs, $(date -u +%Y-%m-%d). RabbitMQ $(dpkg-query -W -f '${Version}' rabbitmq-server 2>/dev/null || echo '?'), Warren $("$W" --version | awk '{print $NF}')."
echo "Ratio = Warren / RabbitMQ (above 1 is better for rates, worse for latency, time and memory)."
echo
echo "| scenario | RabbitMQ | Warren | ratio |"
echo "| --- | ---: | ---: | ---: |"
row s1 "1. 1 producer → 1 consumer, 16 B, transient, autoack: received msg/s"
row s1backlog "1. … sent − received at stop (in flight or queued)" noratio
row s1depth "1. … queue depth at stop (passive declare)" noratio
row s2 "2. same, 4 KiB bodies: received msg/s"
row s2backlog "2. … sent − received at stop" noratio
row s3 "3. fanout to 10 queues, 10 consumers: deliveries/s (sum)"
row s4 "4. topic exchange, 1,000 bindings: routed publishes/s"
row s4rx "4. … received msg/s"
row s5 "5. 1,000 msg/s, manual ack, prefetch 100: p99 latency µs"
row s5p50 "5. … p50 latency µs"
row s6open "6. $NCONN connections + channel each: time to open, ms"
row s6rss "6. … broker RSS per connection, KiB"
row s6fail "6. … failures" noratio
row s7rss "7. idle broker RSS after start, MiB"
row s7start "7. start to first accepted TCP connection, ms"
if [ "$DURABLE" != 0 ]; then
  row s8x1 "8. persistent 16 B, durable queue, confirms (window 1000), 1 publisher: confirmed msg/s"
  row s8x4 "8. … 4 publishers"
  row s8x16 "8. … 16 publishers"
  row s9 "9. $QUEUED persistent 16 B queued (no consumer), confirms: publish msg/s"
  row s9rss "9. … broker peak RSS while queued (and deleted), MiB"
fi
if [ -n "${R["s11/rabbit"]:-}${R["s11/warren"]:-}" ]; then
  row s11 "11. soak ${SOAK}s, 4 KiB persistent, confirms (window 1000), consumed at once: confirmed msg/s"
  row s11rss "11. … broker RSS at the end, MiB"
  row s11anon "11. … RssAnon at the end, MiB"
  row s11file "11. … RssFile at the end, MiB"
  row s11disk "11. … data dir at the end, MiB"
fi
if [ "$STREAMS" != 0 ]; then
  row s10p1 "10. stream, 100 B, 1 publisher (confirms, window 1000) + 1 consumer at the tail: confirmed msg/s"
  row s10c1 "10. … consumed msg/s"
  row s10p4 "10. … 4 publishers + 4 consumers (each reads all): confirmed msg/s"
  row s10c4 "10. … consumed msg/s (sum)"
fi

if [ -n "${R["s11/rabbit"]:-}${R["s11/warren"]:-}" ]; then
  echo
  echo "Soak: broker memory (MiB, from /proc/PID/status) and data dir (MiB) over time."
  echo
  echo "| t (s) | Warren RSS | RssAnon | RssFile | disk | RabbitMQ RSS | RssAnon | RssFile | disk |"
  echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  touch "$TMP/soak-warren.done" "$TMP/soak-rabbit.done"
  # Row i is each broker's i-th sample, taken SOAK_EVERY s apart into its own run.
  awk 'function m(k) { return k == "" ? "—" : sprintf("%.1f", k / 1024) }
    function d(k) { return k == "" ? "—" : k }
    FILENAME == ARGV[1] { w[FNR] = $0; if (FNR > n) n = FNR; next }
    { r[FNR] = $0; if (FNR > n) n = FNR }
    END {
      for (i = 1; i <= n; i++) {
        split(w[i], a, " "); split(r[i], b, " ")
        printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", a[1] != "" ? a[1] : b[1],
          m(a[2]), m(a[3]), m(a[4]), d(a[5]), m(b[2]), m(b[3]), m(b[4]), d(b[5])
        delete a; delete b
      }
    }' "$TMP/soak-warren.done" "$TMP/soak-rabbit.done"
fi
