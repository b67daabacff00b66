#!/usr/bin/env bash
# Interop with Gazette's own Go client and gazctl (go.gazette.dev/core v0.103.0, pinned in
# tests/go/go.mod): starts target/debug/courant on a free loopback port with a fresh data
# dir, runs `go test` in tests/go and tests/go/gazctl_test.sh against it, and always stops it.
# Run by .ci/run from the repo root after its build (target/debug/courant).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
. .ci/lib.sh
need go
BROKER=$(courant_bin) # COURANT_BIN: override, for testing this script
echo "go: $(go version)"
GAZCTL=$(go_tool gazctl)

PORT=$(free_port)
ADDRESS="http://127.0.0.1:$PORT"
DATA=$(mktemp -d -t courant-go-interop-data.XXXXXX)
LOGDIR="$ROOT/target/go-interop"
mkdir -p "$LOGDIR"
LOG="$LOGDIR/broker.log"
BROKER_PID=""

stop_broker() {
  stop_pid "$BROKER_PID" 10 broker || true
  BROKER_PID=""
  rm -rf "$DATA"
}
trap stop_broker EXIT

print_log() {
  echo "---- broker log ($LOG), last 200 lines ----"
  tail -n 200 "$LOG" || true
  echo "---- end of broker log ----"
}

EXTRA_ARGS=()
# Test servers listen on loopback only: Courant's --broker.bind defaults to 0.0.0.0 (as Gazette).
if "$BROKER" serve --help 2>/dev/null | grep -q -- '--broker.bind'; then
  EXTRA_ARGS+=(--broker.bind 127.0.0.1)
fi
if [ -n "${COURANT_TPC_CORES:-}" ]; then
  EXTRA_ARGS+=(--tpc.cores "$COURANT_TPC_CORES")
fi
echo "starting $BROKER ${EXTRA_ARGS[*]} on $ADDRESS (data dir $DATA, log $LOG)"
"$BROKER" serve --broker.port "$PORT" --broker.host 127.0.0.1 --data-dir "$DATA" "${EXTRA_ARGS[@]}" \
  >"$LOG" 2>&1 </dev/null &
BROKER_PID=$!

# Wait (at most 60 s) until the port accepts TCP connections.
if ! wait_port "$PORT" 60 "$BROKER_PID"; then
  echo "error: broker exited or did not accept connections on 127.0.0.1:$PORT within 60 s"
  print_log
  exit 1
fi
# Then (at most 10 s) until a List RPC answers; the suites report failures themselves.
for _ in $(seq 1 50); do
  if timeout 5 "$GAZCTL" journals list --broker.address "$ADDRESS" >/dev/null 2>&1; then
    break
  fi
  sleep 0.2
done
echo "broker is up (pid $BROKER_PID)"

status=0

echo "== go test (tests/go) against $ADDRESS"
set +e
# COURANT_FILE_ROOT: the broker's default file store root, which tests that read fragments
# directly (do_not_proxy) install as the Go client's file:// transport.
(cd tests/go && COURANT_ADDRESS="$ADDRESS" COURANT_FILE_ROOT="$DATA/fragments" go test -count=1 -v -timeout 10m ./...) 2>&1 | tee "$LOGDIR/go-test.log"
go_rc=${PIPESTATUS[0]}
set -e
if [ "$go_rc" != 0 ]; then
  echo "go test failed (exit $go_rc)"
  status=1
fi

echo "== tests/go/gazctl_test.sh against $ADDRESS"
set +e
COURANT_ADDRESS="$ADDRESS" GAZCTL="$GAZCTL" bash tests/go/gazctl_test.sh 2>&1 | tee "$LOGDIR/gazctl-test.log"
sh_rc=${PIPESTATUS[0]}
set -e
if [ "$sh_rc" != 0 ]; then
  echo "gazctl_test.sh failed (exit $sh_rc)"
  status=1
fi

if ! kill -0 "$BROKER_PID" 2>/dev/null; then
  echo "error: the broker died during the tests"
  status=1
fi
if [ "$status" != 0 ]; then
  print_log
  echo "Go interop: FAILED (logs in $LOGDIR)"
else
  echo "Go interop: passed"
fi
exit "$status"
