#!/usr/bin/env bash
# A 3-node RabbitMQ cluster on this machine, for measuring Warren's cluster
# against (scripts/cluster-perf.sh). Debian's rabbitmq-server (3.10.8 here),
# with its system service left alone: every node, the CLI and a private epmd
# run from a state directory of their own and listen on 127.0.0.1 only.
#
#   bash scripts/rabbitmq-cluster.sh start    # three nodes, clustered, management on
#   bash scripts/rabbitmq-cluster.sh status   # rabbitmqctl cluster_status, pids, ports
#   bash scripts/rabbitmq-cluster.sh stop     # stops everything start started
#
# Node i (1..NODES) is rabbit<i>@localhost with
#   AMQP        127.0.0.1:$((AMQP_BASE + i))    (5810 + i)
#   management  127.0.0.1:$((MGMT_BASE + i))    (15810 + i)
#   distribution          $((DIST_BASE + i))    (25810 + i)
# one shared Erlang cookie, one epmd on EPMD_PORT (4394), mnesia and logs under
# STATE (/tmp/warren-rabbitmq-cluster), which `stop` removes.
#
# Verbs for the failover measurement: `kill I` SIGKILLs node I's Erlang VM,
# `restart I` starts node I again on its data (it rejoins the cluster by
# itself) and waits until all nodes run, `pid I` prints node I's VM pid, `uri
# I` its AMQP URI. Sourcing the script (with RMQC_SOURCE=1) defines the same
# as shell functions (rmqc_start, rmqc_stop, rmqc_kill, rmqc_restart, rmqc_pid,
# rmqc_uri, rmqc_status).
set -euo pipefail

RMQ=${RMQ:-/usr/lib/rabbitmq/bin}
NODES=${NODES:-3}
AMQP_BASE=${AMQP_BASE:-5810}
MGMT_BASE=${MGMT_BASE:-15810}
DIST_BASE=${DIST_BASE:-25810}
RMQC_EPMD_PORT=${RMQC_EPMD_PORT:-4394}
STATE=${STATE:-/tmp/warren-rabbitmq-cluster}

rmqc_log() { printf '[rabbitmq-cluster %4ds] %s\n' "$SECONDS" "$*" >&2; }
rmqc_port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
rmqc_name() { echo "rabbit$1@localhost"; }
rmqc_uri() { echo "amqp://guest:guest@127.0.0.1:$((AMQP_BASE + $1))"; }

# rmqc_env I CMD...: CMD in node I's environment. I=0 is the CLI's (any node
# is addressed with -n); all share HOME, hence the cookie, and epmd.
rmqc_env() {
  local i=$1; shift
  local d="$STATE/node$i"
  env HOME="$STATE/home" \
    RABBITMQ_NODENAME="$(rmqc_name "$((i == 0 ? 1 : i))")" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
    RABBITMQ_NODE_PORT=$((AMQP_BASE + i)) RABBITMQ_DIST_PORT=$((DIST_BASE + i)) \
    RABBITMQ_MNESIA_BASE="$d/mnesia" RABBITMQ_LOG_BASE="$d/log" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$STATE/enabled_plugins" RABBITMQ_CONF_ENV_FILE="$STATE/rabbitmq-env.conf" \
    RABBITMQ_CONFIG_FILE="$d/rabbitmq" \
    RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
    RABBITMQ_CTL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
    ERL_EPMD_ADDRESS=127.0.0.1 ERL_EPMD_PORT="$RMQC_EPMD_PORT" "$@"
}

# rmqc_ctl SECONDS I ARGS...: rabbitmqctl against node I with a time limit;
# never a bare rabbitmqctl, which would address the system node.
rmqc_ctl() {
  local t=$1 i=$2; shift 2
  rmqc_env 0 timeout "$t" "$RMQ/rabbitmqctl" -n "$(rmqc_name "$i")" "$@"
}

rmqc_pid() { cat "$STATE/node$1/pid" 2>/dev/null; }
rmqc_alive() { local p; p=$(rmqc_pid "$1") && [ -n "$p" ] && [ -d "/proc/$p" ]; }

# rmqc_boot I: starts node I's server in the background on its data and
# waits for it to boot; records the VM's pid.
rmqc_boot() {
  local i=$1 d="$STATE/node$1"
  rmqc_env "$i" "$RMQ/rabbitmq-server" >>"$d/server.out" 2>&1 &
  echo $! >"$d/sh.pid"
  local waited=0
  until rmqc_port_open $((AMQP_BASE + i)); do
    kill -0 "$(cat "$d/sh.pid")" 2>/dev/null || { rmqc_log "node $i exited while starting:"; tail -n 20 "$d/server.out" >&2; return 1; }
    sleep 0.2
    waited=$((waited + 1))
    [ "$waited" -lt 900 ] || { rmqc_log "node $i: AMQP port never opened"; return 1; }
  done
  rmqc_ctl 120 "$i" await_startup >/dev/null
  local pid
  pid=$(rmqc_ctl 30 "$i" eval 'os:getpid().' | tr -dc '0-9')
  [ -n "$pid" ] && [ -d "/proc/$pid" ] || { rmqc_log "node $i: no VM pid"; return 1; }
  echo "$pid" >"$d/pid"
}

# rmqc_wait_running: until every node reports every node running.
rmqc_wait_running() {
  local i n
  for _ in $(seq 300); do
    n=0
    for i in $(seq "$NODES"); do
      if rmqc_ctl 20 "$i" eval "length(rabbit_nodes:all_running())." 2>/dev/null | grep -qx "$NODES"; then
        n=$((n + 1))
      fi
    done
    [ "$n" -lt "$NODES" ] || return 0
    sleep 0.5
  done
  rmqc_log "the cluster never had all $NODES nodes running"
  return 1
}

rmqc_start() {
  [ -x "$RMQ/rabbitmq-server" ] || { rmqc_log "no RabbitMQ in $RMQ (apt-get install rabbitmq-server)"; return 1; }
  if [ -e "$STATE" ]; then rmqc_log "$STATE exists: stop the running cluster first"; return 1; fi
  local i p
  for i in $(seq "$NODES"); do
    for p in $((AMQP_BASE + i)) $((MGMT_BASE + i)) $((DIST_BASE + i)); do
      if rmqc_port_open "$p"; then rmqc_log "port $p on 127.0.0.1 is in use"; return 1; fi
    done
  done
  if rmqc_port_open "$RMQC_EPMD_PORT"; then rmqc_log "epmd port $RMQC_EPMD_PORT is in use"; return 1; fi
  mkdir -p "$STATE/home"
  chmod 700 "$STATE/home"
  # One cookie for all nodes and the CLI, as in any RabbitMQ cluster.
  head -c 24 /dev/urandom | od -An -tx1 | tr -dc 'a-f0-9' | tr 'a-f' 'A-F' >"$STATE/home/.erlang.cookie"
  chmod 400 "$STATE/home/.erlang.cookie"
  echo '[rabbitmq_management].' >"$STATE/enabled_plugins"
  : >"$STATE/rabbitmq-env.conf"
  for i in $(seq "$NODES"); do
    mkdir -p "$STATE/node$i/mnesia" "$STATE/node$i/log"
    printf 'management.tcp.port = %d\nmanagement.tcp.ip = 127.0.0.1\n' \
      $((MGMT_BASE + i)) >"$STATE/node$i/rabbitmq.conf"
  done
  rmqc_log "starting rabbit1"
  rmqc_boot 1
  for i in $(seq 2 "$NODES"); do
    rmqc_log "starting rabbit$i and joining it to rabbit1"
    rmqc_boot "$i"
    rmqc_ctl 60 "$i" stop_app >/dev/null
    rmqc_ctl 60 "$i" join_cluster "$(rmqc_name 1)" >/dev/null
    rmqc_ctl 60 "$i" start_app >/dev/null
    rmqc_ctl 120 "$i" await_startup >/dev/null
  done
  rmqc_wait_running
  rmqc_log "cluster of $NODES running: AMQP 127.0.0.1:$((AMQP_BASE + 1))-$((AMQP_BASE + NODES)), management $((MGMT_BASE + 1))-$((MGMT_BASE + NODES)), state in $STATE"
}

# rmqc_kill I: SIGKILL node I's VM (the Erlang heart is off in these nodes,
# nothing restarts it).
rmqc_kill() {
  local pid; pid=$(rmqc_pid "$1")
  [ -n "$pid" ] || return 1
  kill -KILL "$pid" 2>/dev/null || true
  wait_gone "$pid"
  local sh; sh=$(cat "$STATE/node$1/sh.pid" 2>/dev/null || true)
  if [ -n "$sh" ]; then kill -TERM "$sh" 2>/dev/null || true; fi
}

wait_gone() { for _ in $(seq 300); do [ -d "/proc/$1" ] || return 0; sleep 0.05; done; }

# rmqc_restart I: node I back on its data; returns once all nodes run.
rmqc_restart() {
  rmqc_boot "$1"
  rmqc_wait_running
}

rmqc_stop() {
  [ -d "$STATE" ] || { rmqc_log "nothing to stop ($STATE does not exist)"; return 0; }
  local i pid sh
  # Last joined first; a clean stop, then SIGKILL whatever is left.
  for i in $(seq "$NODES" -1 1); do
    pid=$(rmqc_pid "$i" || true)
    sh=$(cat "$STATE/node$i/sh.pid" 2>/dev/null || true)
    if [ -n "$pid" ] && [ -d "/proc/$pid" ]; then
      rmqc_ctl 60 "$i" stop >/dev/null 2>&1 || true
      for _ in $(seq 200); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
      [ -d "/proc/$pid" ] && kill -KILL "$pid" 2>/dev/null || true
    fi
    if [ -n "$sh" ] && kill -0 "$sh" 2>/dev/null; then
      kill -TERM "$sh" 2>/dev/null || true
    fi
  done
  # epmd outlives the nodes; ours listens on a port of its own and stops
  # once no node (server or CLI) is registered.
  for _ in $(seq 100); do
    rmqc_env 0 epmd -port "$RMQC_EPMD_PORT" -kill >/dev/null 2>&1 || true
    rmqc_port_open "$RMQC_EPMD_PORT" || break
    sleep 0.1
  done
  if rmqc_port_open "$RMQC_EPMD_PORT"; then rmqc_log "epmd on $RMQC_EPMD_PORT did not stop"; fi
  rm -rf "$STATE"
  rmqc_log "stopped"
}

rmqc_status() {
  [ -d "$STATE" ] || { echo "not running ($STATE does not exist)"; return 1; }
  local i
  for i in $(seq "$NODES"); do
    if rmqc_alive "$i"; then
      echo "rabbit$i@localhost pid $(rmqc_pid "$i") amqp 127.0.0.1:$((AMQP_BASE + i)) management 127.0.0.1:$((MGMT_BASE + i))"
    else
      echo "rabbit$i@localhost down"
    fi
  done
  for i in $(seq "$NODES"); do
    if rmqc_alive "$i"; then rmqc_ctl 30 "$i" cluster_status; return; fi
  done
  return 1
}

if [ "${RMQC_SOURCE:-}" = 1 ]; then return 0 2>/dev/null || true; fi

case "${1:-}" in
  start) rmqc_start || { rmqc_log "start failed; stopping what was started"; rmqc_stop; exit 1; } ;;
  stop) rmqc_stop ;;
  status) rmqc_status ;;
  kill) rmqc_kill "${2:?node number}" ;;
  restart) rmqc_restart "${2:?node number}" ;;
  pid) rmqc_pid "${2:?node number}" ;;
  uri) rmqc_uri "${2:?node number}" ;;
  *) echo "usage: $0 start|stop|status|kill I|restart I|pid I|uri I" >&2; exit 2 ;;
esac
