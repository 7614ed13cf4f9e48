# A 3-node Warren cluster on 127.0.0.1 for the cluster scripts
# (cluster-perf.sh, quorum-perf.sh, quorum-depth.sh), which source this file.
#
# The sourcing script sets: W (the warren binary), WDIR (the cluster's state
# dir), the port bases W_AMQP, W_HTTP, W_CLUSTER and W_METRICS (node i
# listens on base + i; an empty W_METRICS turns the metrics listener off),
# and defines log and port_open. WARREN_FLAGS adds flags to every node;
# WARREN_NODE_FLAGS, an array, adds flags to the node being booted when the
# script defines warren_node_flags I (it fills WARREN_NODE_FLAGS).

declare -A WPID=()

warren_uri() { echo "amqp://guest:guest@127.0.0.1:$((W_AMQP + $1))"; }
warren_http() { echo "127.0.0.1:$((W_HTTP + $1))"; }
warren_pid() { echo "${WPID[$1]}"; }

# warren_boot I: node I on its data dir, in the background; returns once its
# AMQP port is open.
warren_boot() {
  local i=$1 join=() metrics=-
  # Nodes 2 and 3 join through node 1 (a node that is already a member
  # ignores --join on restart).
  [ "$i" = 1 ] || join=(--join "127.0.0.1:$((W_CLUSTER + 1))")
  [ -z "${W_METRICS:-}" ] || metrics="127.0.0.1:$((W_METRICS + i))"
  WARREN_NODE_FLAGS=()
  if declare -F warren_node_flags >/dev/null; then warren_node_flags "$i"; fi
  "$W" --amqp-addr "127.0.0.1:$((W_AMQP + i))" --http-addr "127.0.0.1:$((W_HTTP + i))" \
    --metrics-addr "$metrics" --data-dir "$WDIR/node$i" --log-level warn \
    --node-name "warren$i@localhost" --cluster-addr "127.0.0.1:$((W_CLUSTER + i))" \
    --cluster-advertise "127.0.0.1:$((W_CLUSTER + i))" --cluster-secret-file "$WDIR/secret" \
    "${join[@]}" "${WARREN_NODE_FLAGS[@]}" ${WARREN_FLAGS:-} >>"$WDIR/node$i.log" 2>&1 &
  WPID[$i]=$!
  for _ in $(seq 600); do
    port_open $((W_AMQP + i)) && return 0
    kill -0 "${WPID[$i]}" 2>/dev/null || { log "warren node $i exited:"; tail -n 20 "$WDIR/node$i.log" >&2; return 1; }
    sleep 0.1
  done
  log "warren node $i: AMQP port never opened"; return 1
}

# warren_boot_all: checks that the three nodes' ports are free, writes the
# cluster secret and boots the nodes.
warren_boot_all() {
  local i p
  for i in 1 2 3; do
    for p in $((W_AMQP + i)) $((W_HTTP + i)) ${W_METRICS:+$((W_METRICS + i))} $((W_CLUSTER + i)); do
      if port_open "$p"; then log "port $p on 127.0.0.1 is in use"; return 1; fi
    done
  done
  mkdir -p "$WDIR"
  head -c 32 /dev/urandom | od -An -tx1 | tr -dc 'a-f0-9' >"$WDIR/secret"
  chmod 400 "$WDIR/secret"
  for i in 1 2 3; do warren_boot "$i" || return 1; done
}

# warren_stop: SIGTERM to every node started, and wait for them.
warren_stop() {
  local i
  for i in "${!WPID[@]}"; do kill -TERM "${WPID[$i]}" 2>/dev/null || true; done
  for i in "${!WPID[@]}"; do wait "${WPID[$i]}" 2>/dev/null || true; done
  WPID=()
}

# warren_pick_binary: W is WARREN_BIN when set, else a build of this
# checkout in TMP.
warren_pick_binary() {
  if [ -n "${WARREN_BIN:-}" ]; then
    [ -x "$WARREN_BIN" ] || { echo "WARREN_BIN=$WARREN_BIN is not an executable" >&2; return 1; }
    W=$WARREN_BIN
  else
    log "building warren"
    CGO_ENABLED=0 go build -trimpath -o "$TMP/warren-bin" ./cmd/warren
    W="$TMP/warren-bin"
  fi
}
