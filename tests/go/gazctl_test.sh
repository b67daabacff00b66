#!/usr/bin/env bash
# gazctl (Gazette's CLI, pinned in tests/go/go.mod) against a running Courant broker.
#
#   COURANT_ADDRESS=http://127.0.0.1:18080 GAZCTL=target/go-bin/gazctl bash tests/go/gazctl_test.sh
#
# Every check prints a PASS or FAIL line; the last line is "N passed, M failed".
# Exits non-zero if any check failed. Journals are named uniquely per run.
set -uo pipefail

if [ -z "${COURANT_ADDRESS:-}" ] || [ -z "${GAZCTL:-}" ]; then
  echo "usage: COURANT_ADDRESS=http://127.0.0.1:PORT GAZCTL=/path/to/gazctl $0" >&2
  exit 2
fi
if [ ! -x "$GAZCTL" ]; then
  echo "GAZCTL=$GAZCTL is not an executable file" >&2
  exit 2
fi

PASSED=0
FAILED=0
WORK=$(mktemp -d -t courant-gazctl.XXXXXX)
BG_PIDS=()

cleanup() {
  local pid
  for pid in "${BG_PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

pass() {
  echo "PASS: $1"
  PASSED=$((PASSED + 1))
}
# fail NAME [FILE...]: prints the FAIL line, then each file's content indented.
fail() {
  echo "FAIL: $1"
  shift
  local f
  for f in "$@"; do
    if [ -s "$f" ]; then
      echo "  --- $(basename "$f"):"
      head -c 4000 "$f" | sed 's/^/  | /'
    fi
  done
  FAILED=$((FAILED + 1))
}

# gz ARGS...: gazctl bounded to 30 s, against the broker under test.
gz() {
  timeout 30 "$GAZCTL" "$@" --broker.address "$COURANT_ADDRESS"
}

RUN="g$(date +%s%N)"
PREFIX="courant-gazctl/$RUN/"
J1="${PREFIX}part-000"
J2="${PREFIX}part-001"
J3="${PREFIX}part-002"
SEL="courant-gazctl-run=$RUN"

echo "gazctl: $GAZCTL"
echo "broker: $COURANT_ADDRESS, journals under $PREFIX"

# --- journals apply (YAML hierarchy) ---------------------------------------------------------
cat >"$WORK/specs.yaml" <<EOF
name: $PREFIX
replication: 1
labels: # In sorted order, as Gazette requires.
  - name: content-type
    value: application/octet-stream
  - name: courant-gazctl-run
    value: "$RUN"
fragment:
  length: 4096
  compression_codec: SNAPPY
  refresh_interval: 1m0s
children:
  - name: $J1
  - name: $J2
  - name: $J3
EOF
if gz journals apply --specs "$WORK/specs.yaml" --log.level info >"$WORK/apply.out" 2>&1 &&
  grep -q "successfully applied" "$WORK/apply.out"; then
  pass "journals apply --specs (YAML hierarchy, 3 journals)"
else
  fail "journals apply --specs (YAML hierarchy, 3 journals)" "$WORK/specs.yaml" "$WORK/apply.out"
fi

# --- journals list ---------------------------------------------------------------------------
if gz journals list -l "$SEL" >"$WORK/list.out" 2>"$WORK/list.err" &&
  grep -qF "$J1" "$WORK/list.out" && grep -qF "$J2" "$WORK/list.out" && grep -qF "$J3" "$WORK/list.out"; then
  pass "journals list -l $SEL shows the 3 journals"
else
  fail "journals list -l $SEL shows the 3 journals" "$WORK/list.out" "$WORK/list.err"
fi

if gz journals list -l "name=$J2" >"$WORK/list-name.out" 2>"$WORK/list-name.err" &&
  grep -qF "$J2" "$WORK/list-name.out" && ! grep -qF "$J1" "$WORK/list-name.out"; then
  pass "journals list -l name=<j> shows exactly that journal"
else
  fail "journals list -l name=<j> shows exactly that journal" "$WORK/list-name.out" "$WORK/list-name.err"
fi

# Every journal gets a primary (polled: Gazette assigns asynchronously). gazctl append
# does not retry NO_JOURNAL_PRIMARY_BROKER, so the checks below need this.
assigned=0
for _ in $(seq 1 50); do
  if gz journals list -l "$SEL" --primary >"$WORK/primary.out" 2>"$WORK/primary.err" &&
    [ "$(grep -cF "$PREFIX" "$WORK/primary.out")" -eq 3 ] &&
    ! grep -F "$PREFIX" "$WORK/primary.out" | grep -q "<none>"; then
    assigned=1
    break
  fi
  sleep 0.2
done
if [ "$assigned" = 1 ]; then
  pass "journals list --primary shows a primary for each journal"
else
  fail "journals list --primary shows a primary for each journal (waited 10 s)" "$WORK/primary.out" "$WORK/primary.err"
fi

# list -o yaml round-trips through apply: current revisions apply, stale ones are refused.
if gz journals list -l "name=$J3" -o yaml >"$WORK/j3.yaml" 2>"$WORK/j3.err" &&
  grep -q "revision:" "$WORK/j3.yaml" && gz journals apply --specs "$WORK/j3.yaml" >"$WORK/reapply.out" 2>&1; then
  pass "journals list -o yaml, then apply of it (current revision) succeeds"
else
  fail "journals list -o yaml, then apply of it (current revision) succeeds" "$WORK/j3.yaml" "$WORK/j3.err" "$WORK/reapply.out"
fi
if gz journals apply --specs "$WORK/j3.yaml" >"$WORK/stale.out" 2>&1; then
  fail "apply of the same YAML again (stale revision) is refused" "$WORK/j3.yaml" "$WORK/stale.out"
elif grep -q "ETCD_TRANSACTION_FAILED" "$WORK/stale.out"; then
  pass "apply of the same YAML again (stale revision) is refused with ETCD_TRANSACTION_FAILED"
else
  fail "apply of the same YAML again (stale revision) fails, but not with ETCD_TRANSACTION_FAILED" "$WORK/stale.out"
fi

# --- journals append / read ------------------------------------------------------------------
REC1="hello from gazctl"
if printf '%s\n' "$REC1" | gz journals append -l "name=$J1" >"$WORK/append1.out" 2>&1; then
  pass "journals append -l name=<j> (stdin)"
else
  fail "journals append -l name=<j> (stdin)" "$WORK/append1.out"
fi

if gz journals read -l "name=$J1" --offsets-out "$WORK/offsets.json" >"$WORK/read1.out" 2>"$WORK/read1.err" &&
  [ "$(cat "$WORK/read1.out")" = "$REC1" ]; then
  pass "journals read -l name=<j> (non-blocking) returns the appended bytes"
else
  fail "journals read -l name=<j> (non-blocking) returns the appended bytes" "$WORK/read1.out" "$WORK/read1.err"
fi
LEN1=$((${#REC1} + 1))
if grep -qF "\"$J1\":$LEN1" "$WORK/offsets.json" 2>/dev/null; then
  pass "journals read --offsets-out records the write head ($LEN1)"
else
  fail "journals read --offsets-out records the write head ($LEN1)" "$WORK/offsets.json"
fi

# Line framing: each line is its own atomic append.
if printf 'line-a\nline-b\nline-c\n' | gz journals append -l "name=$J1" --framing lines >"$WORK/append2.out" 2>&1; then
  pass "journals append --framing lines"
else
  fail "journals append --framing lines" "$WORK/append2.out"
fi
if gz journals read -l "name=$J1" >"$WORK/read2.out" 2>"$WORK/read2.err" &&
  [ "$(cat "$WORK/read2.out")" = "$(printf '%s\nline-a\nline-b\nline-c' "$REC1")" ]; then
  pass "journals read returns all content in order"
else
  fail "journals read returns all content in order" "$WORK/read2.out" "$WORK/read2.err"
fi
# Resume from the saved offsets: only the content appended since.
if gz journals read -l "name=$J1" --offsets "$WORK/offsets.json" >"$WORK/read3.out" 2>"$WORK/read3.err" &&
  [ "$(cat "$WORK/read3.out")" = "$(printf 'line-a\nline-b\nline-c')" ]; then
  pass "journals read --offsets resumes from the saved offset"
else
  fail "journals read --offsets resumes from the saved offset" "$WORK/read3.out" "$WORK/read3.err"
fi

# --- journals read --block while a concurrent append happens ---------------------------------
# wait_for FILE PATTERN SECONDS: polls until FILE contains PATTERN.
wait_for() {
  local i
  for i in $(seq 1 $(($3 * 10))); do
    grep -qF "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# stop_bg PID: SIGTERM (gazctl exits cleanly on it), then SIGKILL.
stop_bg() {
  kill -TERM "$1" 2>/dev/null || return 0
  local i
  for i in $(seq 1 30); do
    kill -0 "$1" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

# From offset 0: the reader first sees existing content (none in J2), then the new append.
timeout 45 "$GAZCTL" journals read -l "name=$J2" --block --broker.address "$COURANT_ADDRESS" \
  >"$WORK/block.out" 2>"$WORK/block.err" &
BLOCK_PID=$!
BG_PIDS+=("$BLOCK_PID")
sleep 1 # Let the reader reach the write head and block.
TAIL_REC="appended while gazctl blocks"
if printf '%s\n' "$TAIL_REC" | gz journals append -l "name=$J2" >"$WORK/append3.out" 2>&1; then
  if wait_for "$WORK/block.out" "$TAIL_REC" 15; then
    pass "journals read --block receives a concurrent append"
  else
    fail "journals read --block receives a concurrent append (waited 15 s)" "$WORK/block.out" "$WORK/block.err"
  fi
else
  fail "journals append (concurrent with read --block)" "$WORK/append3.out"
fi
if ! kill -0 "$BLOCK_PID" 2>/dev/null; then
  fail "journals read --block keeps running at the write head (it exited early)" "$WORK/block.err"
else
  pass "journals read --block keeps running at the write head"
fi
stop_bg "$BLOCK_PID"

# --tail (offset -1): existing content of J1 is skipped; only new appends are seen. The
# appends repeat in case the first races the reader's RPC reaching the broker.
timeout 45 "$GAZCTL" journals read -l "name=$J1" --block --tail --broker.address "$COURANT_ADDRESS" \
  >"$WORK/tail.out" 2>"$WORK/tail.err" &
TAIL_PID=$!
BG_PIDS+=("$TAIL_PID")
sleep 0.5
tail_ok=0
for i in $(seq 1 10); do
  printf 'tail-%02d\n' "$i" | gz journals append -l "name=$J1" >>"$WORK/append4.out" 2>&1
  if wait_for "$WORK/tail.out" "tail-" 1; then
    tail_ok=1
    break
  fi
done
sleep 0.3
if [ "$tail_ok" = 1 ] && ! grep -qF "$REC1" "$WORK/tail.out" && ! grep -q "^line-" "$WORK/tail.out" &&
  ! grep -v '^tail-[0-9][0-9]$' "$WORK/tail.out" | grep -q .; then
  pass "journals read --block --tail sees only content appended after it started"
else
  fail "journals read --block --tail sees only content appended after it started" \
    "$WORK/tail.out" "$WORK/tail.err" "$WORK/append4.out"
fi
stop_bg "$TAIL_PID"

# --- journals fragments ----------------------------------------------------------------------
# J2 holds exactly one append; its fragments must cover [0, len).
LEN2=$((${#TAIL_REC} + 1))
if gz journals fragments -l "name=$J2" >"$WORK/frag.out" 2>"$WORK/frag.err" && grep -qF "$J2" "$WORK/frag.out"; then
  pass "journals fragments -l name=<j> (table) lists the journal's fragments"
else
  fail "journals fragments -l name=<j> (table) lists the journal's fragments" "$WORK/frag.out" "$WORK/frag.err"
fi
if gz journals fragments -l "name=$J2" -o json >"$WORK/frag.json" 2>"$WORK/frag-json.err"; then
  max_end=$(grep -o '"end":[0-9]*' "$WORK/frag.json" | cut -d: -f2 | sort -n | tail -1)
  if grep -qF "\"journal\":\"$J2\"" "$WORK/frag.json" && [ "${max_end:-0}" = "$LEN2" ] &&
    grep -q '"compression_codec":4' "$WORK/frag.json"; then
    pass "journals fragments -o json: fragments end at the write head ($LEN2), codec SNAPPY"
  else
    fail "journals fragments -o json: fragments end at the write head ($LEN2, got ${max_end:-none}), codec SNAPPY" \
      "$WORK/frag.json" "$WORK/frag-json.err"
  fi
else
  fail "journals fragments -o json" "$WORK/frag.json" "$WORK/frag-json.err"
fi

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
