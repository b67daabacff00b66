#!/usr/bin/env bash
# Gazette's gazctl against Courant's fragments in a real S3 bucket (SeaweedFS), and a
# fragment written by tools that are not Courant (the gzip CLI and a SigV4-signed PUT from
# Python) served by Courant. Run by .ci/steps/30-stores.sh once its S3 server is up:
#
#   GAZCTL=target/go-bin/gazctl COURANT_BIN=target/debug/courant \
#   COURANT_TEST_S3_ENDPOINT=http://127.0.0.1:18333 COURANT_TEST_S3_BUCKET=fragments \
#   AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... bash tests/go/stores_gazctl.sh
#
# Starts its own `courant serve` on 127.0.0.1 (a free port, a fresh data dir), uses a
# unique key prefix in the bucket, prints PASS/FAIL lines and "N passed, M failed", and
# exits non-zero if any check failed.
set -uo pipefail

for v in GAZCTL COURANT_BIN COURANT_TEST_S3_ENDPOINT AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY; do
  if [ -z "${!v:-}" ]; then
    echo "usage: $v must be set (see the head of $0)" >&2
    exit 2
  fi
done
BUCKET="${COURANT_TEST_S3_BUCKET:-fragments}"
ENDPOINT="${COURANT_TEST_S3_ENDPOINT%/}"
export AWS_REGION="${AWS_REGION:-us-east-1}"

PASSED=0
FAILED=0
WORK=$(mktemp -d -t courant-stores-gazctl.XXXXXX)
BROKER_PID=""
cleanup() {
  if [ -n "$BROKER_PID" ] && kill -0 "$BROKER_PID" 2>/dev/null; then
    kill -TERM "$BROKER_PID" 2>/dev/null || true
    for _ in $(seq 1 100); do
      kill -0 "$BROKER_PID" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$BROKER_PID" 2>/dev/null || true
    wait "$BROKER_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

pass() {
  echo "PASS: $1"
  PASSED=$((PASSED + 1))
}
fail() { # fail NAME [FILE...]
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
finish() {
  if [ "$FAILED" -gt 0 ] && [ -s "$WORK/broker.log" ]; then
    echo "--- broker log, last 40 lines"
    tail -n 40 "$WORK/broker.log"
  fi
  echo "$PASSED passed, $FAILED failed"
  [ "$FAILED" -eq 0 ]
  exit $?
}

# --- Broker -----------------------------------------------------------------------------------
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
ADDRESS="http://127.0.0.1:$PORT"
"$COURANT_BIN" serve --broker.port "$PORT" --broker.host 127.0.0.1 --broker.bind 127.0.0.1 --data-dir "$WORK/data" \
  >"$WORK/broker.log" 2>&1 </dev/null &
BROKER_PID=$!
up=""
for _ in $(seq 1 300); do
  kill -0 "$BROKER_PID" 2>/dev/null || break
  if timeout 5 "$GAZCTL" journals list --broker.address "$ADDRESS" >/dev/null 2>&1; then
    up=1
    break
  fi
  sleep 0.2
done
if [ -z "$up" ]; then
  fail "courant serve starts on $ADDRESS" "$WORK/broker.log"
  finish
fi
if ss -ltnp 2>/dev/null | grep "pid=$BROKER_PID," | awk '{print $4}' | grep -qvE '^127\.0\.0\.1:'; then
  fail "courant serve listens on 127.0.0.1 only"
fi

gz() { # gazctl bounded to 60 s, against the broker
  timeout 60 "$GAZCTL" "$@" --broker.address "$ADDRESS"
}

# s3 put KEY FILE | s3 get URL OUT: a SigV4-signed PUT (as AWS clients sign it), and a
# plain GET of a (presigned) URL.
s3() {
  python3 - "$@" <<'PY'
import datetime, hashlib, hmac, os, sys, urllib.parse, urllib.request
op = sys.argv[1]
if op == "get":
    with urllib.request.urlopen(sys.argv[2], timeout=30) as r, open(sys.argv[3], "wb") as f:
        f.write(r.read())
    sys.exit(0)
key_name, path = sys.argv[2], sys.argv[3]
endpoint, bucket = os.environ["ENDPOINT"], os.environ["BUCKET"]
access, secret = os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"]
region = os.environ["AWS_REGION"]
host = urllib.parse.urlparse(endpoint).netloc
body = open(path, "rb").read()
now = datetime.datetime.now(datetime.timezone.utc)
amz, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
payload = hashlib.sha256(body).hexdigest()
uri = "/" + bucket + "/" + urllib.parse.quote(key_name, safe="/-_.~")
canonical = f"PUT\n{uri}\n\nhost:{host}\nx-amz-content-sha256:{payload}\nx-amz-date:{amz}\n\nhost;x-amz-content-sha256;x-amz-date\n{payload}"
scope = f"{day}/{region}/s3/aws4_request"
to_sign = f"AWS4-HMAC-SHA256\n{amz}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
k = ("AWS4" + secret).encode()
for part in (day, region, "s3", "aws4_request"):
    k = hmac.new(k, part.encode(), hashlib.sha256).digest()
sig = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
req = urllib.request.Request(endpoint + uri, data=body, method="PUT", headers={
    "x-amz-date": amz, "x-amz-content-sha256": payload,
    "Authorization": f"AWS4-HMAC-SHA256 Credential={access}/{scope}, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature={sig}"})
urllib.request.urlopen(req, timeout=30).read()
PY
}
export ENDPOINT BUCKET

# frags FILE: summarises `journals fragments -o json` output as lines
# "begin end mod_time backing_store signed_url" (sorted by begin).
frags() {
  python3 - "$1" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
objs = []
dec = json.JSONDecoder()
i = 0
while i < len(text):
    if text[i].isspace():
        i += 1
        continue
    obj, i = dec.raw_decode(text, i)
    objs.append(obj)
rows = []
def walk(o):
    if isinstance(o, dict):
        if isinstance(o.get("spec"), dict):
            s = o["spec"]
            rows.append((int(s.get("begin", 0)), int(s.get("end", 0)), int(s.get("mod_time", 0)),
                         s.get("backing_store", "") or "-", o.get("signed_url", "") or "-"))
        else:
            for v in o.values():
                walk(v)
    elif isinstance(o, list):
        for v in o:
            walk(v)
for o in objs:
    walk(o)
for r in sorted(rows):
    print(*r)
PY
}

RUN="s$(date +%s%N)"
PREFIX="courant-gazctl/$RUN/"
STORE="s3://$BUCKET/$PREFIX?endpoint=$ENDPOINT&region=$AWS_REGION"
J1="courant-stores/$RUN/courant"
J2="courant-stores/$RUN/foreign"
echo "gazctl: $GAZCTL; broker: $ADDRESS (pid $BROKER_PID); store: $STORE"

cat >"$WORK/specs.yaml" <<EOF
name: courant-stores/$RUN/
replication: 1
labels:
  - name: courant-stores-run
    value: "$RUN"
fragment:
  length: 4096
  compression_codec: SNAPPY
  stores:
    - "$STORE"
  refresh_interval: 1s
children:
  - name: $J1
  - name: $J2
    fragment:
      length: 4096
      compression_codec: GZIP
      stores:
        - "$STORE"
      refresh_interval: 1s
EOF
if gz journals apply --specs "$WORK/specs.yaml" >"$WORK/apply.out" 2>&1; then
  pass "journals apply: two journals on the S3 store"
else
  fail "journals apply: two journals on the S3 store" "$WORK/apply.out"
  finish
fi

# --- Courant's fragments, read back by gazctl through signed URLs -----------------------------
# 10 appends of 5,000 bytes over 4 KiB fragments (each append rolls the fragment before
# it), then one byte that rolls the last one: every byte but the last is in a completed
# fragment, which Courant persists.
: >"$WORK/expect"
ok=1
for i in $(seq 1 10); do
  python3 -c "import random,sys; r=random.Random($i); sys.stdout.write(''.join(r.choice('abcdefgh\n') for _ in range(5000)))" \
    >"$WORK/piece"
  cat "$WORK/piece" >>"$WORK/expect"
  gz journals append -l "name=$J1" -i "$WORK/piece" >>"$WORK/append.out" 2>&1 || ok=""
done
printf '#' >>"$WORK/expect"
printf '#' | gz journals append -l "name=$J1" >>"$WORK/append.out" 2>&1 || ok=""
TOTAL=$(stat -c %s "$WORK/expect")
if [ -n "$ok" ]; then
  pass "journals append: 11 appends, $TOTAL bytes"
else
  fail "journals append: 11 appends, $TOTAL bytes" "$WORK/append.out"
fi

# Wait until the persisted fragments cover [0, TOTAL-1).
covered=0
for _ in $(seq 1 150); do
  gz journals fragments -l "name=$J1" -o json >"$WORK/frag1.json" 2>"$WORK/frag1.err" || true
  frags "$WORK/frag1.json" >"$WORK/frag1.txt" 2>>"$WORK/frag1.err" || true
  covered=$(awk 'BEGIN { at = 0 } $3 != 0 && $1 <= at && $2 > at { at = $2 } END { print at }' "$WORK/frag1.txt")
  [ "$covered" -ge $((TOTAL - 1)) ] && break
  sleep 0.2
done
NPERSISTED=$(awk '$3 != 0' "$WORK/frag1.txt" | wc -l)
if [ "$covered" -ge $((TOTAL - 1)) ] && [ "$NPERSISTED" -ge 3 ]; then
  pass "fragments persist to S3: $NPERSISTED fragments cover [0, $covered)"
else
  fail "fragments persist to S3 (covered [0, $covered) of $((TOTAL - 1)), $NPERSISTED persisted)" \
    "$WORK/frag1.txt" "$WORK/frag1.json" "$WORK/frag1.err"
fi

if gz journals fragments -l "name=$J1" --url-ttl 1m -o json >"$WORK/frag1s.json" 2>"$WORK/frag1s.err" &&
  frags "$WORK/frag1s.json" >"$WORK/frag1s.txt" 2>>"$WORK/frag1s.err" &&
  [ "$(awk '$3 != 0' "$WORK/frag1s.txt" | wc -l)" -ge 3 ] &&
  awk -v store="$STORE" -v ep="$ENDPOINT/$BUCKET/$PREFIX$J1/" '
    $3 != 0 && ($4 != store || index($5, ep) != 1 || index($5, "X-Amz-Signature=") == 0) { bad = 1 }
    $3 == 0 && $5 != "-" { bad = 1 }
    END { exit bad }' "$WORK/frag1s.txt"; then
  pass "journals fragments --url-ttl 1m -o json: persisted fragments carry presigned S3 URLs"
else
  fail "journals fragments --url-ttl 1m -o json: persisted fragments carry presigned S3 URLs" \
    "$WORK/frag1s.txt" "$WORK/frag1s.json" "$WORK/frag1s.err"
fi

# A signed URL is a plain GET of the SNAPPY-framed object (stream identifier first).
url=$(awk '$3 != 0 { print $5; exit }' "$WORK/frag1s.txt")
if [ -n "$url" ] && s3 get "$url" "$WORK/object.sz" 2>"$WORK/get.err" &&
  [ "$(head -c 10 "$WORK/object.sz" | od -An -tx1 | tr -d ' \n')" = "ff060000734e61507059" ]; then
  pass "a signed URL fetches the fragment's SNAPPY object without credentials"
else
  fail "a signed URL fetches the fragment's SNAPPY object without credentials ($url)" "$WORK/get.err"
fi

# With a route cache gazctl sends do_not_proxy and fetches each fragment_url itself.
if gz journals read -l "name=$J1" --broker.cache.size 10 -o "$WORK/read1" >"$WORK/read1.err" 2>&1 &&
  cmp -s "$WORK/read1" "$WORK/expect"; then
  pass "journals read --broker.cache.size 10 (client fetches fragment_url): $TOTAL bytes exact"
else
  fail "journals read --broker.cache.size 10: $TOTAL bytes exact (got $(stat -c %s "$WORK/read1" 2>/dev/null || echo 0))" \
    "$WORK/read1.err"
fi
if gz journals read -l "name=$J1" -o "$WORK/read1p" >"$WORK/read1p.err" 2>&1 &&
  cmp -s "$WORK/read1p" "$WORK/expect"; then
  pass "journals read (broker streams from S3): $TOTAL bytes exact"
else
  fail "journals read (broker streams from S3): $TOTAL bytes exact" "$WORK/read1p.err"
fi

# --- A fragment written without Courant: gzip CLI + a SigV4 PUT -------------------------------
python3 -c "import sys; sys.stdout.write(''.join(f'foreign line {i}\n' for i in range(500)))" >"$WORK/foreign"
N=$(stat -c %s "$WORK/foreign")
SUM=$(sha1sum "$WORK/foreign" | cut -d' ' -f1)
NAME=$(printf '%016x-%016x-%s.gz' 0 "$N" "$SUM")
gzip -c "$WORK/foreign" >"$WORK/foreign.gz"
if s3 put "$PREFIX$J2/$NAME" "$WORK/foreign.gz" 2>"$WORK/put.err"; then
  pass "uploaded $NAME (gzip CLI) with a signed PUT"
else
  fail "uploaded $NAME (gzip CLI) with a signed PUT" "$WORK/put.err"
fi
listed=""
for _ in $(seq 1 50); do
  gz journals fragments -l "name=$J2" --url-ttl 1m -o json >"$WORK/frag2.json" 2>"$WORK/frag2.err" || true
  frags "$WORK/frag2.json" >"$WORK/frag2.txt" 2>>"$WORK/frag2.err" || true
  if awk -v n="$N" -v store="$STORE" '$1 == 0 && $2 == n && $3 != 0 && $4 == store && $5 ~ /X-Amz-Signature=/ { ok = 1 } END { exit !ok }' "$WORK/frag2.txt"; then
    listed=1
    break
  fi
  sleep 0.2
done
if [ -n "$listed" ]; then
  pass "journals fragments lists the foreign fragment [0, $N) with a signed URL"
else
  fail "journals fragments lists the foreign fragment [0, $N) with a signed URL" \
    "$WORK/frag2.txt" "$WORK/frag2.json" "$WORK/frag2.err"
fi
if gz journals read -l "name=$J2" -o "$WORK/read2p" >"$WORK/read2p.err" 2>&1 &&
  cmp -s "$WORK/read2p" "$WORK/foreign"; then
  pass "journals read: Courant serves the foreign gzip fragment ($N bytes exact)"
else
  fail "journals read: Courant serves the foreign gzip fragment ($N bytes exact)" "$WORK/read2p.err"
fi
if gz journals read -l "name=$J2" --broker.cache.size 10 -o "$WORK/read2" >"$WORK/read2.err" 2>&1 &&
  cmp -s "$WORK/read2" "$WORK/foreign"; then
  pass "journals read --broker.cache.size 10: the foreign fragment through its fragment_url"
else
  fail "journals read --broker.cache.size 10: the foreign fragment through its fragment_url" "$WORK/read2.err"
fi
# Courant never wrote this journal: as with Gazette, appends need `journals reset-head`
# first, and then land at the foreign fragment's end.
if gz journals reset-head -l "name=$J2" >"$WORK/append2.out" 2>&1 &&
  printf 'after' | gz journals append -l "name=$J2" >"$WORK/append2.out" 2>&1 &&
  gz journals read -l "name=$J2" -o "$WORK/read2b" >"$WORK/read2b.err" 2>&1 &&
  cmp -s "$WORK/read2b" <(cat "$WORK/foreign"; printf 'after'); then
  pass "journals reset-head, then an append to the foreign journal lands at $N"
else
  fail "journals reset-head, then an append to the foreign journal lands at $N" "$WORK/append2.out" "$WORK/read2b.err"
fi

finish
