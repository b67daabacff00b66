#!/usr/bin/env bash
# Cluster mode against a real etcd: installs Debian's etcd-server (3.4.x) if `etcd` is
# missing, starts it on 127.0.0.1:23790 (peer 23800) with its own data dir, and runs
# tests/tests/etcd.rs with COURANT_TEST_ETCD set (without it those tests skip). The test
# starts `courant serve --etcd.address http://127.0.0.1:23790 --broker.bind 127.0.0.1 ...`
# (target/debug/courant) itself, each run under a fresh --etcd.prefix. The Debian package's
# init may start a system etcd on 2379: it is stopped if this step started it, and our own
# etcd is always stopped on exit. Override ports with ETCD_CLIENT_PORT / ETCD_PEER_PORT.
# One test compacts etcd (keys outside every test prefix) while a broker's watch is cut
# off through a proxy, and checks the broker reloads in place.
# Arguments go to the test binary: `bash .ci/steps/50-etcd.sh etcd_member_apply`.
set -euo pipefail
cd "$(dirname "$0")/../.."
CLIENT_PORT="${ETCD_CLIENT_PORT:-23790}"
PEER_PORT="${ETCD_PEER_PORT:-23800}"
URL="http://127.0.0.1:$CLIENT_PORT"

if ! command -v etcd >/dev/null; then
  echo "installing etcd-server"
  export DEBIAN_FRONTEND=noninteractive
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  # Keep the package's init from starting a system etcd, where policy-rc.d allows that.
  $SUDO apt-get install -y -qq etcd-server >/dev/null
  if command -v systemctl >/dev/null && systemctl is-active --quiet etcd 2>/dev/null; then
    $SUDO systemctl stop etcd || true
  elif command -v service >/dev/null; then
    $SUDO service etcd stop >/dev/null 2>&1 || true
  fi
fi

DATA=$(mktemp -d -t courant-etcd.XXXXXX)
ETCD_PID=""
cleanup() {
  if [ -n "$ETCD_PID" ]; then
    kill "$ETCD_PID" 2>/dev/null || true
    wait "$ETCD_PID" 2>/dev/null || true
  fi
  rm -rf "$DATA"
}
trap cleanup EXIT

etcd --name courant-test --data-dir "$DATA/data" \
  --listen-client-urls "$URL" --advertise-client-urls "$URL" \
  --listen-peer-urls "http://127.0.0.1:$PEER_PORT" \
  --initial-advertise-peer-urls "http://127.0.0.1:$PEER_PORT" \
  --initial-cluster "courant-test=http://127.0.0.1:$PEER_PORT" --initial-cluster-state new \
  --logger zap --log-outputs "$DATA/etcd.log" >"$DATA/stdout.log" 2>&1 &
ETCD_PID=$!
for _ in $(seq 1 200); do
  if curl -sf "$URL/health" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$ETCD_PID" 2>/dev/null; then
    echo "error: etcd exited during startup" >&2
    cat "$DATA/stdout.log" "$DATA/etcd.log" >&2 || true
    exit 1
  fi
  sleep 0.05
done
curl -sf "$URL/health" >/dev/null || { echo "error: etcd is not healthy at $URL" >&2; exit 1; }
echo "etcd $(etcd --version | head -n 1) on $URL"

export COURANT_TEST_ETCD="$URL"
status=0
cargo test -p courant-tests --test etcd -- --test-threads=1 --nocapture "$@" || status=1
# Replication to a down peer answers UNAVAILABLE.
if [ "$#" = 0 ]; then
  cargo test -p courant-tests --test security_peer_down --test security_watch -- --nocapture || status=1
fi
exit "$status"
