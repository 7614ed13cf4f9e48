#!/usr/bin/env bash
# Interleaved A/B of two warren builds through scripts/perf.sh (Warren only,
# no RabbitMQ), for regressions between builds on a shared machine.
#
#   A=/tmp/warren-old B=/tmp/warren-new bash scripts/ab.sh
#   A=/tmp/w B=/tmp/w A_ENV=GOGC=50 SCENARIOS=sc9 ROUNDS=1 bash scripts/ab.sh
#
# A and B are warren binaries, the servers compared; BENCH (default: B) is
# the binary whose `warren bench` loads both, so that a change in the client
# is not measured as one in the server (BENCH=own: each build loads itself);
# A_ENV and B_ENV are NAME=VALUE words for that build's server only (e.g.
# GOGC=50, to compare GC settings of one binary). Each of ROUNDS (3) rounds
# runs perf.sh once per build, RUNS=1, with fresh brokers on fresh random
# ports; the order alternates, A B then B A, so that drift of the machine's
# load over a round hits both builds alike. SCENARIOS ("sc1 sc8") and
# SECONDS_PER_RUN (5) go to perf.sh, as does the rest of its environment
# (CLIENT, QUEUED, ...). It prints a markdown table of each metric's median
# per build, B ÷ A, and each build's figures round by round, with the load
# average before and after. Only the medians of interleaved rounds say
# anything on a loaded machine; compare B ÷ A, not absolute rates.
set -euo pipefail
export LC_ALL=C # sort and join must agree on the order of the metric names
cd "$(dirname "$0")/.."
: "${A:?A=path of build A}" "${B:?B=path of build B}"
A=$(realpath "$A") B=$(realpath "$B")
BENCH=${BENCH:-$B}
if [ "$BENCH" != own ]; then BENCH=$(realpath "$BENCH"); fi
for w in "$A" "$B"; do [ -x "$w" ] || { echo "$w is not an executable" >&2; exit 1; }; done
ROUNDS=${ROUNDS:-3}
export SCENARIOS=${SCENARIOS:-sc1 sc8}
export SECONDS_PER_RUN=${SECONDS_PER_RUN:-5}

TMP=$(mktemp -d /tmp/warren-ab.XXXXXX)
# KEEP=1 keeps the per-run output (perf.sh's tables, logs and figures) in $TMP.
if [ "${KEEP:-0}" = 1 ]; then trap 'echo "kept $TMP" >&2' EXIT; else trap 'rm -rf "$TMP"' EXIT; fi
log() { printf '[ab %4ds] %s\n' "$SECONDS" "$*" >&2; }
# shellcheck source=scripts/ports.sh
. scripts/ports.sh # the repository root is the working directory

# one LABEL BIN ENV ROUND: one perf.sh run; its figures go to $TMP/raw.LABEL.ROUND.
one() {
  local tries
  for tries in 1 2 3; do
    local bench=$BENCH
    [ "$bench" != own ] || bench=$2
    if RABBIT=0 RUNS=1 WARREN_BIN="$2" BENCH_BIN="$bench" WARREN_ENV="$3" WARREN_PORT="$(free_port)" \
      PERF_RAW="$TMP/raw.$1.$4" bash scripts/perf.sh >"$TMP/$1.$4.out" 2>"$TMP/$1.$4.err"; then
      return 0
    fi
    # A port taken between the check and the listen: try others.
    grep -q 'in use\|never opened\|exited during startup' "$TMP/$1.$4.err" || break
  done
  echo "perf.sh failed for $1 ($2) in round $4:" >&2
  tail -n 20 "$TMP/$1.$4.err" >&2
  exit 1
}

load0=$(cut -d' ' -f1-3 /proc/loadavg)
log "A=$A ${A_ENV:-} B=$B ${B_ENV:-} bench=$BENCH; $ROUNDS rounds of $SCENARIOS, ${SECONDS_PER_RUN}s; load $load0"
for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) -eq 1 ]; then order="A B"; else order="B A"; fi
  for x in $order; do
    log "round $r/$ROUNDS: $x (load $(cut -d' ' -f1 /proc/loadavg))"
    if [ "$x" = A ]; then one A "$A" "${A_ENV:-}" "$r"; else one B "$B" "${B_ENV:-}" "$r"; fi
  done
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)

# Per build and metric, the values of all rounds: "metric v1 v2 ...".
for x in A B; do
  cat "$TMP/raw.$x".* 2>/dev/null | grep '/warren ' | sed 's|/warren||' |
    awk '{k = $1; $1 = ""; v[k] = v[k] $0} END {for (k in v) print k v[k]}' | sort -k1,1 >"$TMP/all.$x"
done

echo
echo "Interleaved A/B, $ROUNDS rounds (A B, B A, …), perf.sh scenarios \"$SCENARIOS\", ${SECONDS_PER_RUN}s runs, $(nproc) CPUs, $(date -u '+%Y-%m-%d %H:%M UTC')."
echo "A: $A ${A_ENV:-}"
echo "B: $B ${B_ENV:-}"
echo "Load client: $BENCH bench."
echo "Load average (1, 5, 15 min) before: $load0; after: $load1."
echo "Metric keys are perf.sh's (s1: scenario 1 msg/s; s8x1/4/16: scenario 8 confirmed msg/s; s9rss: MiB; …)."
echo
echo "| metric | A median | B median | B ÷ A | A by round | B by round |"
echo "| --- | ---: | ---: | ---: | --- | --- |"
# "metric<TAB>v1|v2|…", joined on the metric (a metric only one build has
# keeps an empty side).
tab() { sed 's/ /|/2g; s/ /\t/' "$1"; }
join -t $'\t' -a 1 -a 2 -e '' -o 0,1.2,2.2 <(tab "$TMP/all.A") <(tab "$TMP/all.B") |
  while IFS=$'\t' read -r k a b; do
    a=${a//|/ } b=${b//|/ }
    awk -v k="$k" -v a="$a" -v b="$b" '
      function med(s,   n, x, i, j, t) {
        n = split(s, x, " ")
        if (n == 0) return ""
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (x[j] + 0 < x[i] + 0) { t = x[i]; x[i] = x[j]; x[j] = t }
        return x[int((n + 1) / 2)]
      }
      BEGIN {
        ma = med(a); mb = med(b)
        r = (ma == "" || mb == "" || ma + 0 == 0) ? "—" : sprintf("%.2f", mb / ma)
        printf "| %s | %s | %s | %s | %s | %s |\n", k, ma, mb, r, a, b
      }'
  done
