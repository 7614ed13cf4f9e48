# Port helpers for the measuring scripts (ab.sh, delayed-perf.sh), which
# source this file: port_open PORT succeeds when something listens on
# 127.0.0.1:PORT; free_port prints a random port in 20000–59999 that nothing
# listens on.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 40000))
    port_open "$p" || { echo "$p"; return; }
  done
}
