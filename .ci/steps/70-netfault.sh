#!/usr/bin/env bash
# Network faults: three brokers (replication 3), each in its own network namespace, under
# load (tests/go/cluster TestNetFault): a primary cut from its peers, a broker cut from
# etcd, a slow replica, a flapping link. Acknowledged appends: none lost, no offset with
# two contents; recovery times are reported (RESULT netfault lines).
#
# Topology: a bridge in the root namespace holding the test client's address (.1) and
# etcd's (.2); one namespace per broker (.11, .12, .13) joined to the bridge by a veth
# pair (ns side eth0). Faults use what this kernel offers without modprobe: blackhole
# routes (cuts), a tbf qdisc (slowness by rate limit; there is no netem here), and link
# down/up (flaps). etcd listens on 127.0.0.1 and on the bridge address, which is private
# to this machine. Needs root (ip netns) and iproute2 (ip, tc). Everything (namespaces,
# links, etcd, brokers) is removed on exit; the whole step is bounded to 5 minutes.
#
# Knobs (environment): ETCD_BIN, ETCD_CLIENT_PORT/ETCD_PEER_PORT (default: free ones),
# NETFAULT_SUBNET (a /24 prefix such as 10.213.7, default derived from the client port),
# CLUSTER_IMPL/CLUSTER_BIN (default courant and target/debug/courant, built if missing; e.g.
# gazette and its binary, with ETCD_BIN an etcd >= 3.5, to validate the test itself).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
. .ci/lib.sh
need ip tc go curl
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null; then exec sudo -E "$0" "$@"; fi
  die "network namespaces need root (or sudo)"
fi
export ETCD_CLIENT_PORT="${ETCD_CLIENT_PORT:-$(free_port)}"
export ETCD_PEER_PORT="${ETCD_PEER_PORT:-$(free_port)}"
CLIENT_PORT=$ETCD_CLIENT_PORT
PEER_PORT=$ETCD_PEER_PORT
NET="${NETFAULT_SUBNET:-10.213.$((CLIENT_PORT % 250))}"
TAG="cnf$((CLIENT_PORT % 100000))" # Unique per port: names of links and namespaces.
BR="${TAG}br"

ETCD_BIN="${ETCD_BIN:-$(etcd_bin)}"
export CLUSTER_IMPL="${CLUSTER_IMPL:-courant}"
if [ "$CLUSTER_IMPL" = courant ]; then
  CLUSTER_BIN="${CLUSTER_BIN:-$(courant_bin)}"
fi
: "${CLUSTER_BIN:?set CLUSTER_BIN to the broker binary of CLUSTER_IMPL=$CLUSTER_IMPL}"
CLUSTER_BIN=$(realpath "$CLUSTER_BIN")
export CLUSTER_BIN

OUT="$ROOT/target/netfault"
rm -rf "$OUT/runs"
mkdir -p "$OUT/runs"
ETCD_DIR=""

cleanup() {
  set +e
  [ -z "$ETCD_DIR" ] || etcd_stop "$ETCD_DIR"
  for i in 1 2 3; do
    # Brokers die with the test process (Pdeathsig); kill any stragglers of ours by pid.
    for pid in $(ip netns pids "${TAG}n$i" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
    ip netns del "${TAG}n$i" 2>/dev/null
    ip link del "${TAG}v$i" 2>/dev/null
  done
  ip link del "$BR" 2>/dev/null
  [ -z "$ETCD_DIR" ] || rm -rf "$ETCD_DIR"
}
cleanup # Leftovers of an interrupted run on the same ports.
trap cleanup EXIT
ETCD_DIR=$(mktemp -d -t courant-netfault-etcd.XXXXXX)

# The bridge: the client (.1) and etcd (.2).
ip link add "$BR" type bridge
ip addr add "$NET.1/24" dev "$BR"
ip addr add "$NET.2/24" dev "$BR"
ip link set "$BR" up
NETNS=""
for i in 1 2 3; do
  ns="${TAG}n$i"
  ip netns add "$ns"
  ip link add "${TAG}v$i" type veth peer name "${TAG}p$i"
  ip link set "${TAG}p$i" netns "$ns"
  ip netns exec "$ns" ip link set "${TAG}p$i" name eth0
  ip netns exec "$ns" ip addr add "$NET.1$i/24" dev eth0
  ip netns exec "$ns" ip link set eth0 up
  ip netns exec "$ns" ip link set lo up
  ip link set "${TAG}v$i" master "$BR"
  ip link set "${TAG}v$i" up
  NETNS="${NETNS:+$NETNS,}$ns=$NET.1$i=${TAG}v$i"
done

URL="http://$NET.2:$CLIENT_PORT"
etcd_start_plain "$ETCD_DIR" "$ETCD_BIN" courant-netfault "$CLIENT_PORT" "$PEER_PORT" "$URL"
if ! ip netns exec "${TAG}n1" curl -sf "$URL/health" >/dev/null; then
  echo "error: etcd at $URL is not reachable from namespace ${TAG}n1" >&2
  exit 1
fi
echo "etcd $("$ETCD_BIN" --version | head -n 1) on $URL; brokers in $NETNS"

export ETCD_ADDRESS="$URL"
export NETFAULT_NETNS="$NETNS"
export NETFAULT_ETCD_IP="$NET.2"
export CLUSTER_DIR="$OUT/runs"
RC=0
(cd tests/go && timeout 300 go test ./cluster -count=1 -v -timeout 290s -run '^TestNetFault$') \
  >"$OUT/go-test.log" 2>&1 || RC=$?
grep -v -E '^=== (PAUSE|CONT)' "$OUT/go-test.log" | cut -c1-600 || true
if [ "$RC" = 0 ]; then
  rm -rf "$OUT/runs"
else
  echo "netfault step failed (exit $RC): full output $OUT/go-test.log, scratch dirs $OUT/runs"
fi
exit "$RC"
