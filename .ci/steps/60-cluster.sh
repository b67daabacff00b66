#!/usr/bin/env bash
# Cluster fault-injection suite (tests/go/cluster): three brokers on one etcd, started,
# killed, stopped and restarted by the Go tests themselves (replication, allocator,
# proxying, graceful exit, kill -9 chaos, SIGSTOP stalls, etcd restart, lease expiry).
#
# Starts Debian's etcd-server (installed if `etcd` is missing) on free loopback ports with
# its own data dir, and always stops it on exit. The tests restart it through
# ETCD_RESTART_CMD (`bash .ci/lib.sh etcd-restart DIR`). Builds target/debug/courant if
# missing, then runs `go test ./cluster` in tests/go with CLUSTER_IMPL=courant. Full output:
# target/cluster/go-test.log; per-test scratch (broker logs, events.log, client.log,
# fragments): target/cluster/runs, kept only on failure.
#
# Knobs (environment): CLUSTER_IMPL/CLUSTER_BIN (e.g. gazette and its binary, which
# needs etcd >= 3.5: set ETCD_BIN), ETCD_BIN, ETCD_CLIENT_PORT/ETCD_PEER_PORT,
# CLUSTER_TESTS (a `go test -run` regex, default all), CLUSTER_CHAOS (chaos duration),
# CLUSTER_BROKER_ARGS (extra broker flags), COURANT_TPC_CORES (adds --tpc.cores N).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
. .ci/lib.sh
need go curl
CLIENT_PORT="${ETCD_CLIENT_PORT:-$(free_port)}"
PEER_PORT="${ETCD_PEER_PORT:-$(free_port)}"
URL="http://127.0.0.1:$CLIENT_PORT"
export CLUSTER_IMPL="${CLUSTER_IMPL:-courant}"
ETCD_BIN="${ETCD_BIN:-$(etcd_bin)}"

if [ "$CLUSTER_IMPL" = courant ]; then
  CLUSTER_BIN="${CLUSTER_BIN:-$(courant_bin)}"
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
cleanup() {
  etcd_stop "$ETCD_DIR"
  rm -rf "$ETCD_DIR"
}
trap cleanup EXIT

etcd_start_plain "$ETCD_DIR" "$ETCD_BIN" courant-cluster "$CLIENT_PORT" "$PEER_PORT"
echo "etcd $("$ETCD_BIN" --version | head -n 1) on $URL"
echo "go: $(go version); brokers: $CLUSTER_IMPL ($CLUSTER_BIN)"

export ETCD_ADDRESS="$URL"
export ETCD_RESTART_CMD="bash $ROOT/.ci/lib.sh etcd-restart $ETCD_DIR"
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
