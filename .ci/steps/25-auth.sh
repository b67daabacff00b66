#!/usr/bin/env bash
# Operations against Gazette's own tools: gazctl with --broker.auth-keys / --broker.auth-token
# against a Courant broker with authorization on (spec §7, scenario 13), curl against the
# HTTP gateway and /debug/metrics on the same port (spec §8), and gazctl and curl over
# mutual TLS (spec §8, §11 item 14).
#
# Starts target/debug/courant on a free loopback port and stops it (SIGTERM, expecting exit
# 0) at the end. Uses target/go-bin/gazctl (built once, `go_tool` in .ci/lib.sh).
# Prints PASS/FAIL lines and ends with "N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
. .ci/lib.sh
need python3 curl openssl
BROKER=$(courant_bin)
GAZCTL=$(go_tool gazctl)

WORK=$(mktemp -d -t courant-auth.XXXXXX)
PORT=$(free_port)
ADDRESS="http://127.0.0.1:$PORT"
KEY_B64=$(printf 'courant-ci-auth-key' | base64)
BROKER_PID=""
cleanup() {
  [ -z "$BROKER_PID" ] || kill -KILL "$BROKER_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

"$BROKER" serve --broker.port "$PORT" --broker.host 127.0.0.1 --broker.bind 127.0.0.1 \
  --data-dir "$WORK/data" --broker.auth-keys "$KEY_B64" >"$WORK/broker.log" 2>&1 </dev/null &
BROKER_PID=$!
wait_port "$PORT" 30 "$BROKER_PID" || true # The checks below say what failed.

# token CAP JOURNAL|"" EXP_IN_S: an HS256 token with Go's claims JSON, signed with the key.
token() {
  python3 - "$KEY_B64" "$1" "$2" "$3" <<'PY'
import base64, hashlib, hmac, json, sys, time
key = base64.b64decode(sys.argv[1])
cap, journal, exp_in = int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
labels = [{"name": "name", "value": journal}] if journal else None
claims = {"cap": cap, "sel": {"include": {"labels": labels}, "exclude": {"labels": None}},
          "exp": int(time.time()) + exp_in, "iat": int(time.time())}
enc = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
msg = enc(b'{"alg":"HS256","typ":"JWT"}') + "." + enc(json.dumps(claims).encode())
print(msg + "." + enc(hmac.new(key, msg.encode(), hashlib.sha256).digest()))
PY
}
gz() { timeout 30 "$GAZCTL" "$@" --broker.address "$ADDRESS"; }

cat >"$WORK/specs.yaml" <<EOF
name: auth/
replication: 1
labels:
  - name: content-type
    value: application/octet-stream
fragment:
  length: 4096
  compression_codec: NONE
  refresh_interval: 1m0s
children:
  - name: auth/one
  - name: auth/two
EOF

# 1. gazctl signs its own narrow tokens with the shared key.
if gz journals apply --specs "$WORK/specs.yaml" --broker.auth-keys "$KEY_B64" >"$WORK/apply.out" 2>&1; then
  pass "gazctl apply with --broker.auth-keys"
else
  fail "gazctl apply with --broker.auth-keys" "$WORK/apply.out"
fi
if printf 'hello auth\n' | gz journals append -l name=auth/one --broker.auth-keys "$KEY_B64" >"$WORK/append.out" 2>&1 &&
  gz journals read -l name=auth/one --broker.auth-keys "$KEY_B64" >"$WORK/read.out" 2>"$WORK/read.err" &&
  grep -qx 'hello auth' "$WORK/read.out"; then
  pass "gazctl append + read with --broker.auth-keys"
else
  fail "gazctl append + read with --broker.auth-keys" "$WORK/append.out" "$WORK/read.out" "$WORK/read.err"
fi

# 2. Fixed tokens (--broker.auth-token): scope, capability and expiry.
if gz journals list --broker.auth-token "$(token 2 auth/one 60)" >"$WORK/scoped.out" 2>&1 &&
  grep -q 'auth/one' "$WORK/scoped.out" && ! grep -q 'auth/two' "$WORK/scoped.out"; then
  pass "token scoped to one journal lists only that journal"
else
  fail "token scoped to one journal lists only that journal" "$WORK/scoped.out"
fi
if ! gz journals list --broker.auth-token "$(token 8 "" 60)" >"$WORK/nolist.out" 2>&1 &&
  grep -q 'Unauthenticated' "$WORK/nolist.out" &&
  grep -q 'authorization is missing required LIST capability' "$WORK/nolist.out"; then
  pass "token without LIST gets Unauthenticated"
else
  fail "token without LIST gets Unauthenticated" "$WORK/nolist.out"
fi
if ! gz journals list --broker.auth-token "$(token 2 "" -60)" >"$WORK/expired.out" 2>&1 &&
  grep -q 'token is expired' "$WORK/expired.out"; then
  pass "expired token is refused"
else
  fail "expired token is refused" "$WORK/expired.out"
fi
if ! gz journals list >"$WORK/none.out" 2>&1 &&
  grep -q 'missing or empty Authorization token' "$WORK/none.out"; then
  pass "no token is refused"
else
  fail "no token is refused" "$WORK/none.out"
fi

# 3. curl: the gateway needs a token with the capability (unlike Gazette's, see
#    SECURITY.md), by header or ?token=; metrics share the port.
RW_TOKEN=$(token 24 "" 60)
R_TOKEN=$(token 8 "" 60)
noauth=$(curl -s -o /dev/null -w '%{http_code}' -X PUT --data-binary 'no token' "$ADDRESS/auth/two")
readonly_put=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $R_TOKEN" -X PUT --data-binary 'ro' "$ADDRESS/auth/two")
noauth_get=$(curl -s -o /dev/null -w '%{http_code}' "$ADDRESS/auth/two?offset=0")
if [ "$noauth" = 401 ] && [ "$readonly_put" = 403 ] && [ "$noauth_get" = 401 ]; then
  pass "curl without a token → 401, READ-only token PUT → 403"
else
  fail "curl without a token → 401, READ-only token PUT → 403 (got $noauth $readonly_put $noauth_get)"
fi
code=$(curl -s -o "$WORK/put.out" -w '%{http_code}' -D "$WORK/put.headers" -H "Authorization: Bearer $RW_TOKEN" -X PUT --data-binary 'via curl' "$ADDRESS/auth/two")
if [ "$code" = 204 ] && grep -qi '^X-Commit-End: 8' "$WORK/put.headers"; then
  pass "curl PUT with a token → 204 with X-Commit-* headers"
else
  fail "curl PUT with a token → 204 with X-Commit-* headers (got $code)" "$WORK/put.headers" "$WORK/put.out"
fi
if [ "$(curl -s "$ADDRESS/auth/two?offset=0&token=$R_TOKEN")" = 'via curl' ] &&
  [ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $R_TOKEN" "$ADDRESS/auth/two?extra=1")" = 400 ]; then
  pass "curl GET ?token= returns the bytes; unknown parameter → 400"
else
  fail "curl GET ?token= returns the bytes; unknown parameter → 400"
fi
if curl -s "$ADDRESS/debug/metrics" >"$WORK/metrics.out" &&
  grep -q '^gazette_append_bytes_total{journal="auth/two"} 8$' "$WORK/metrics.out" &&
  grep -q '^gazette_append_bytes_total{journal="auth/one"} 11$' "$WORK/metrics.out"; then
  pass "curl /debug/metrics counts exactly the bytes appended"
else
  fail "curl /debug/metrics counts exactly the bytes appended" "$WORK/metrics.out"
fi

# 4. SIGTERM: a clean exit.
rc=0
stop_pid "$BROKER_PID" 20 broker || rc=$?
if [ "$rc" = 0 ]; then
  pass "SIGTERM → exit 0"
else
  fail "SIGTERM → exit 0 (got '$rc')" "$WORK/broker.log"
fi
BROKER_PID=""

# 5. Mutual TLS: gazctl (Go's gRPC client, ALPN h2) and curl (HTTP/1.1) on one port.
(
  cd "$WORK" || exit 1
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem \
    -days 2 -subj "/CN=courant ci CA"
  for name in server client; do
    if [ "$name" = server ]; then
      printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$name.ext"
    else
      printf 'extendedKeyUsage=clientAuth\n' >"$name.ext"
    fi
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$name.key" \
      -out "$name.csr" -subj "/CN=$name"
    openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
      -out "$name.pem" -extfile "$name.ext"
  done
) >"$WORK/openssl.log" 2>&1 || fail "making test certificates" "$WORK/openssl.log"
TPORT=$(free_port)
TADDRESS="https://127.0.0.1:$TPORT"
"$BROKER" serve --broker.port "$TPORT" --broker.host 127.0.0.1 --broker.bind 127.0.0.1 \
  --data-dir "$WORK/tls-data" --broker.server-cert-file "$WORK/server.pem" \
  --broker.server-key-file "$WORK/server.key" --broker.server-ca-file "$WORK/ca.pem" \
  >"$WORK/tls-broker.log" 2>&1 </dev/null &
BROKER_PID=$!
wait_port "$TPORT" 30 "$BROKER_PID" || true
gzt() {
  timeout 30 "$GAZCTL" "$@" --broker.address "$TADDRESS" --broker.trusted-ca-file "$WORK/ca.pem" \
    --broker.cert-file "$WORK/client.pem" --broker.cert-key-file "$WORK/client.key"
}
if gzt journals apply --specs "$WORK/specs.yaml" >"$WORK/tls-apply.out" 2>&1 &&
  printf 'over tls\n' | gzt journals append -l name=auth/one >"$WORK/tls-append.out" 2>&1 &&
  gzt journals read -l name=auth/one >"$WORK/tls-read.out" 2>&1 &&
  grep -qx 'over tls' "$WORK/tls-read.out" &&
  gzt journals list >"$WORK/tls-list.out" 2>&1 &&
  grep -q 'auth/two' "$WORK/tls-list.out"; then
  pass "gazctl over mutual TLS (apply, append, read, list)"
else
  fail "gazctl over mutual TLS" "$WORK/tls-apply.out" "$WORK/tls-append.out" "$WORK/tls-read.out" \
    "$WORK/tls-list.out" "$WORK/tls-broker.log"
fi
code=$(curl -s -o /dev/null -w '%{http_code} %{http_version}' --cacert "$WORK/ca.pem" \
  --cert "$WORK/client.pem" --key "$WORK/client.key" "$TADDRESS/auth/one?offset=0")
nocert=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$WORK/ca.pem" "$TADDRESS/debug/ready")
if [ "$code" = "206 1.1" ] && [ "$nocert" != 200 ]; then
  pass "curl over mutual TLS gets HTTP/1.1; without a client certificate it is refused"
else
  fail "curl over mutual TLS (got '$code', without a certificate '$nocert')"
fi
stop_pid "$BROKER_PID" 20 broker || true
BROKER_PID=""
summary
