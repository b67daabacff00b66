#!/usr/bin/env bash
# Runs each cargo-fuzz target in fuzz/ briefly (FUZZ_SECONDS each, default 15) with libFuzzer
# on the nightly toolchain: decoders of untrusted bytes must not panic. Installs cargo-fuzz
# from crates.io if it is missing. A crash fails the step and leaves the input under
# fuzz/artifacts/<target>/ (reproduce: cd fuzz && cargo +nightly fuzz run <target> <file>).
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_EACH="${FUZZ_SECONDS:-15}"
if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "error: the nightly toolchain is required (rustup toolchain list)" >&2
  exit 1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi
cd fuzz
# Seeds: one well-formed input per target, so the fuzzer starts from the interesting shapes.
mkdir -p corpus/http_head corpus/grpc_frames corpus/requests
printf 'PUT /a/journal?offset=5&block=true HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n' \
  >corpus/http_head/seed-put
printf '1a;ext=1\r\n' >corpus/http_head/seed-chunk
printf '\x07\x00\x00\x00\x00\x03abc\x00\x00\x00\x00\x00' >corpus/grpc_frames/seed
printf '\x00\x0a\x09a/journal' >corpus/requests/seed-append
status=0
for target in http_head grpc_frames requests; do
  echo "== fuzz $target (${SECONDS_EACH}s)"
  if cargo +nightly fuzz run "$target" -- -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 \
    -print_final_stats=1 2>&1 | tee "/tmp/courant-fuzz-$target.log" | grep -E '^(stat::|==|INFO: Done|SUMMARY|.*panicked)'; then
    :
  fi
  if ! grep -q 'Done [0-9]* runs' "/tmp/courant-fuzz-$target.log"; then
    echo "fuzz target $target failed:"
    tail -n 40 "/tmp/courant-fuzz-$target.log"
    status=1
  fi
done
exit "$status"
