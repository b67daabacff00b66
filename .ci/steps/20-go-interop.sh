#!/usr/bin/env bash
# Interop with Gazette's own Go client and gazctl (go.gazette.dev/core v0.103.0, pinned in
# tests/go/go.mod): starts target/debug/courant on a free loopback port with a fresh data
# dir, runs `go test` in tests/go and tests/go/gazctl_test.sh against it, and always stops it.
# Run by .ci/run from the repo root after `cargo build --workspace --bins`.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD

BROKER="${COURANT_BIN:-$ROOT/target/debug/courant}" # COURANT_BIN: override, for testing this script
if ! command -v go >/dev/null 2>&1; then
  echo "error: 'go' is not on PATH; the Go interop suite needs Go >= 1.25 (this machine kind ships it at /usr/local/go/bin)" >&2
  exit 1
fi
if [ ! -x "$BROKER" ]; then
  echo "error: $BROKER not found: run 'cargo build --workspace --bins' first" >&2
  exit 1
fi
echo "go: $(go version)"

# gazctl, at the version tests/go/go.mod pins (its `tool` directive), into a repo-local GOBIN.
# (`go install ...@v0.103.0` outside a module is not usable here: it also asks the module
# proxy for the version list, which the registry mirror refuses.)
export GOBIN="$ROOT/target/go-bin"
mkdir -p "$GOBIN"
(cd tests/go && go install go.gazette.dev/core/cmd/gazctl)
GAZCTL="$GOBIN/gazctl"

free_port() {
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
    return
  fi
  local p
  while :; do
    p=$((20000 + RANDOM % 20000))
    ss -ltn "sport = :$p" | grep -q LISTEN || { echo "$p"; return; }
  done
}

PORT=$(free_port)
ADDRESS="http://127.0.0.1:$PORT"
DATA=$(mktemp -d -t courant-go-interop-data.XXXXXX)
LOGDIR="$ROOT/target/go-interop"
mkdir -p "$LOGDIR"
LOG="$LOGDIR/broker.log"
BROKER_PID=""

stop_broker() {
  if [ -n "$BROKER_PID" ] && kill -0 "$BROKER_PID" 2>/dev/null; then
    kill -TERM "$BROKER_PID" 2>/dev/null || true
    local i
    for i in $(seq 1 100); do
      kill -0 "$BROKER_PID" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$BROKER_PID" 2>/dev/null; then
      echo "broker did not exit 10 s after SIGTERM; sending SIGKILL"
      kill -KILL "$BROKER_PID" 2>/dev/null || true
    fi
    wait "$BROKER_PID" 2>/dev/null || true
  fi
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
ready=0
for _ in $(seq 1 600); do
  if ! kill -0 "$BROKER_PID" 2>/dev/null; then
    echo "error: broker exited during startup"
    print_log
    exit 1
  fi
  if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
    ready=1
    break
  fi
  sleep 0.1
done
if [ "$ready" != 1 ]; then
  echo "error: broker did not accept connections on 127.0.0.1:$PORT within 60 s"
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
