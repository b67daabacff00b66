#!/usr/bin/env bash
# Cluster fault-injection suite (tests/go/cluster): three brokers on one etcd, started,
# killed, stopped and restarted by the Go tests themselves (replication, allocator,
# proxying, graceful exit, kill -9 chaos, SIGSTOP stalls, etcd restart, lease expiry).
#
# Installs Debian's etcd-server if `etcd` is missing, starts it on 127.0.0.1:23791
# (peer 23801) with its own data dir, and always stops it on exit. The tests restart it
# through ETCD_RESTART_CMD (a script written here, which owns the etcd process).
# Builds target/debug/courant if missing, then runs `go test ./cluster` in tests/go with
# CLUSTER_IMPL=courant. Full output: target/cluster/go-test.log; per-test scratch (broker
# logs, events.log, client.log, fragments): target/cluster/runs, kept only on failure.
#
# Knobs (environment): CLUSTER_IMPL/CLUSTER_BIN (e.g. gazette and its binary, which
# needs etcd >= 3.5: set ETCD_BIN), ETCD_BIN, ETCD_CLIENT_PORT/ETCD_PEER_PORT,
# CLUSTER_TESTS (a `go test -run` regex, default all), CLUSTER_CHAOS (chaos duration),
# CLUSTER_BROKER_ARGS (extra broker flags), COURANT_TPC_CORES (adds --tpc.cores N).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
CLIENT_PORT="${ETCD_CLIENT_PORT:-23791}"
PEER_PORT="${ETCD_PEER_PORT:-23801}"
URL="http://127.0.0.1:$CLIENT_PORT"
export CLUSTER_IMPL="${CLUSTER_IMPL:-courant}"

if ! command -v go >/dev/null 2>&1; then
  echo "error: 'go' is not on PATH; the cluster suite needs Go >= 1.25" >&2
  exit 1
fi

ETCD_BIN="${ETCD_BIN:-}"
if [ -z "$ETCD_BIN" ]; then
  if ! command -v etcd >/dev/null; then
    echo "installing etcd-server"
    export DEBIAN_FRONTEND=noninteractive
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO=sudo
    timeout 600 $SUDO apt-get update -qq
    timeout 600 $SUDO apt-get install -y -qq etcd-server >/dev/null
    # Keep the package's init from leaving a system etcd running on 2379.
    if command -v systemctl >/dev/null && systemctl is-active --quiet etcd 2>/dev/null; then
      $SUDO systemctl stop etcd || true
    elif command -v service >/dev/null; then
      $SUDO service etcd stop >/dev/null 2>&1 || true
    fi
  fi
  ETCD_BIN=$(command -v etcd)
fi

if [ "$CLUSTER_IMPL" = courant ]; then
  export CLUSTER_BIN="${CLUSTER_BIN:-$ROOT/target/debug/courant}"
  if [ ! -x "$CLUSTER_BIN" ]; then
    echo "building target/debug/courant"
    timeout 1800 cargo build --bin courant
  fi
  if [ -n "${COURANT_TPC_CORES:-}" ]; then
    export CLUSTER_BROKER_ARGS="${CLUSTER_BROKER_ARGS:-} --tpc.cores $COURANT_TPC_CORES"
  fi
fi
: "${CLUSTER_BIN:?set CLUSTER_BIN to the broker binary of CLUSTER_IMPL=$CLUSTER_IMPL}"
case "$CLUSTER_BIN" in */*) CLUSTER_BIN=$(realpath "$CLUSTER_BIN") ;; esac
export CLUSTER_BIN

OUT="$ROOT/target/cluster"
rm -rf "$OUT/runs"
mkdir -p "$OUT/runs"
ETCD_DIR=$(mktemp -d -t courant-cluster-etcd.XXXXXX)

# etcd control script: start | stop | restart. The tests call "restart" (ETCD_RESTART_CMD).
CTL="$ETCD_DIR/etcd-ctl.sh"
cat >"$CTL" <<EOF
#!/usr/bin/env bash
set -euo pipefail
D="$ETCD_DIR"
start() {
  setsid "$ETCD_BIN" --name courant-cluster --data-dir "\$D/data" \\
    --listen-client-urls "$URL" --advertise-client-urls "$URL" \\
    --listen-peer-urls "http://127.0.0.1:$PEER_PORT" \\
    --initial-advertise-peer-urls "http://127.0.0.1:$PEER_PORT" \\
    --initial-cluster "courant-cluster=http://127.0.0.1:$PEER_PORT" --initial-cluster-state new \\
    --logger zap --log-outputs "\$D/etcd.log" >>"\$D/stdout.log" 2>&1 </dev/null &
  echo \$! >"\$D/etcd.pid"
  for _ in \$(seq 1 300); do
    if curl -sf "$URL/health" >/dev/null 2>&1; then return 0; fi
    if ! kill -0 "\$(cat "\$D/etcd.pid")" 2>/dev/null; then break; fi
    sleep 0.05
  done
  echo "error: etcd is not healthy at $URL" >&2
  tail -n 30 "\$D/stdout.log" "\$D/etcd.log" >&2 || true
  return 1
}
stop() {
  [ -f "\$D/etcd.pid" ] || return 0
  local pid; pid=\$(cat "\$D/etcd.pid")
  kill "\$pid" 2>/dev/null || true
  for _ in \$(seq 1 100); do kill -0 "\$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "\$pid" 2>/dev/null || true
  rm -f "\$D/etcd.pid"
}
case "\${1:-}" in
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  *) echo "usage: \$0 start|stop|restart" >&2; exit 2 ;;
esac
EOF
chmod +x "$CTL"

cleanup() {
  "$CTL" stop || true
  rm -rf "$ETCD_DIR"
}
trap cleanup EXIT

"$CTL" start
echo "etcd $("$ETCD_BIN" --version | head -n 1) on $URL"
echo "go: $(go version); brokers: $CLUSTER_IMPL ($CLUSTER_BIN)"

export ETCD_ADDRESS="$URL"
export ETCD_RESTART_CMD="$CTL restart"
export CLUSTER_DIR="$OUT/runs"
RC=0
(cd tests/go && timeout 1680 go test ./cluster -count=1 -v -timeout 25m -run "${CLUSTER_TESTS:-.}") \
  >"$OUT/go-test.log" 2>&1 || RC=$?
# Readable console output: test verdicts, FAILOVER/STALL/RESULT lines and failures; the
# event log and broker log tails of a failed test are indented by 8 spaces (kept, capped).
grep -v -E '^=== (PAUSE|CONT)' "$OUT/go-test.log" | cut -c1-600 || true
if [ "$RC" = 0 ]; then
  rm -rf "$OUT/runs"
else
  echo "cluster suite failed (exit $RC): full output $OUT/go-test.log, scratch dirs $OUT/runs"
fi
exit "$RC"
