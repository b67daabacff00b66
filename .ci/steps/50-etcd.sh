#!/usr/bin/env bash
# Cluster mode against a real etcd: Debian's etcd-server (3.4.x, installed if `etcd` is
# missing) on free loopback ports with its own data dir, and tests/tests/etcd.rs with
# COURANT_TEST_ETCD set (without it those tests skip). The test starts `courant serve
# --etcd.address ... --broker.bind 127.0.0.1 ...` (target/debug/courant) itself, each run
# under a fresh --etcd.prefix. etcd is always stopped on exit. Ports: ETCD_CLIENT_PORT /
# ETCD_PEER_PORT (default: free ones). One test compacts etcd (keys outside every test
# prefix) while a broker's watch is cut off through a proxy, and checks the broker reloads
# in place. Arguments go to the test binary: `bash .ci/steps/50-etcd.sh etcd_member_apply`.
set -euo pipefail
cd "$(dirname "$0")/../.."
. .ci/lib.sh
CLIENT_PORT="${ETCD_CLIENT_PORT:-$(free_port)}"
PEER_PORT="${ETCD_PEER_PORT:-$(free_port)}"
URL="http://127.0.0.1:$CLIENT_PORT"
ETCD_BIN=$(etcd_bin)

DATA=$(mktemp -d -t courant-etcd.XXXXXX)
cleanup() {
  etcd_stop "$DATA"
  rm -rf "$DATA"
}
trap cleanup EXIT
etcd_start_plain "$DATA" "$ETCD_BIN" courant-test "$CLIENT_PORT" "$PEER_PORT"
echo "etcd $("$ETCD_BIN" --version | head -n 1) on $URL"

export COURANT_TEST_ETCD="$URL"
status=0
run_cargo_test tests etcd --test-threads=1 --nocapture "$@" || status=1
# The Rust client (client/tests/cluster.rs): routes followed from one broker to the other.
if [ "$#" = 0 ]; then
  run_cargo_test client cluster --nocapture || status=1
fi
# Replication to a down peer answers UNAVAILABLE; watched changes wait --broker.watch-delay.
if [ "$#" = 0 ]; then
  run_cargo_test tests security_peer_down --nocapture || status=1
  run_cargo_test tests security_watch --nocapture || status=1
fi
exit "$status"
