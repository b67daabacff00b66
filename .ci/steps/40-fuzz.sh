#!/usr/bin/env bash
# Runs each cargo-fuzz target in fuzz/ briefly (FUZZ_SECONDS each, default 15) with libFuzzer
# on the nightly toolchain: decoders of untrusted bytes must not panic. Installs cargo-fuzz
# from crates.io if it is missing. A crash fails the step and leaves the input under
# fuzz/artifacts/<target>/ (reproduce: cd fuzz && cargo +nightly fuzz run <target> <file>).
# All targets are built first in one `cargo fuzz build` (fuzz/target, kept in the checkout);
# `--build-only` stops there (what .ci/run's build phase calls).
set -euo pipefail
cd "$(dirname "$0")/../.."
. .ci/lib.sh
SECONDS_EACH="${FUZZ_SECONDS:-15}"
cargo +nightly --version >/dev/null 2>&1 || die "the nightly toolchain is required (rustup toolchain list)"
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi
cd fuzz
cargo +nightly fuzz build
[ "${1:-}" = --build-only ] && exit 0
LOGS=$(mktemp -d -t courant-fuzz.XXXXXX)
trap 'rm -rf "$LOGS"' EXIT
# Seeds: one well-formed input per target, so the fuzzer starts from the interesting shapes.
TARGETS="http_head grpc_frames requests fragment_names spool_commits jwt_claims"
for target in $TARGETS; do mkdir -p "corpus/$target"; done
printf 'PUT /a/journal?offset=5&block=true HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n' \
  >corpus/http_head/seed-put
printf '1a;ext=1\r\n' >corpus/http_head/seed-chunk
printf '\x07\x00\x00\x00\x00\x03abc\x00\x00\x00\x00\x00' >corpus/grpc_frames/seed
printf '\x00\x0a\x09a/journal' >corpus/requests/seed-append
# A store listing entry (first byte: length of the journal name before the relative path),
# and a path_postfix_template.
printf '\x09a/journalpfx/00000000000003e8-00000000000007d0-0123456789abcdef0123456789abcdef01234567.zst' \
  >corpus/fragment_names/seed-listing
printf '\x00date={{ .Spool.FirstAppendTime.Format "2006-01-02" }}/{{- .JournalSpec.Name -}}' \
  >corpus/fragment_names/seed-template
# A commit log (begin 0, 25 content bytes): header, a record with registers, one without.
printf '\x00\x00\x00\x00\x19\x00\x00\x00\x02\x43\x52\x4e\x54\x43\x4d\x54\x31\x01\x00\x00\x00\x96\xde\x84\x9d\x08\x00\x00\x00\x0a\x00\x00\x00\x00\x00\x00\x00\x00\x68\xe5\xcf\x8b\x01\x00\x00\x0a\x06\x0a\x01\x61\x12\x01\x62\x7a\x07\xa4\xf7\xff\xff\xff\xff\x19\x00\x00\x00\x00\x00\x00\x00\xf4\x69\xe5\xcf\x8b\x01\x00\x00\xb4\xbe\xc0\xe8' \
  >corpus/spool_commits/seed-log
# The same in format 2 (magic CRNTCMT2): each record also carries a 20-byte SHA-1.
printf '\x00\x00\x00\x00\x19\x00\x00\x00\x02\x43\x52\x4e\x54\x43\x4d\x54\x32\x01\x00\x00\x00\x62\x6e\xb7\xd5\x08\x00\x00\x00\x0a\x00\x00\x00\x00\x00\x00\x00\x00\x68\xe5\xcf\x8b\x01\x00\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11\x12\x13\x14\x0a\x06\x0a\x01\x61\x12\x01\x62\xc2\xdd\x1c\x55\xff\xff\xff\xff\x19\x00\x00\x00\x00\x00\x00\x00\x01\x68\xe5\xcf\x8b\x01\x00\x00\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f\x20\x21\x22\x23\x24\x25\x26\x27\x28\xe1\xc3\x12\x89' \
  >corpus/spool_commits/seed-log-sums
# Claims of a signed token (first byte: header variant), as Gazette's pb.Claims marshals.
printf '\x00{"cap":10,"sel":{"include":{"labels":[{"name":"app","value":"x","prefix":true}]},"exclude":{"labels":null}},"exp":4102444800,"iat":1700000000}' \
  >corpus/jwt_claims/seed-claims
status=0
for target in $TARGETS; do
  echo "== fuzz $target (${SECONDS_EACH}s)"
  if cargo +nightly fuzz run "$target" -- -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 \
    -print_final_stats=1 2>&1 | tee "$LOGS/$target.log" | grep -E '^(stat::|==|INFO: Done|SUMMARY|.*panicked)'; then
    :
  fi
  if ! grep -q 'Done [0-9]* runs' "$LOGS/$target.log"; then
    echo "fuzz target $target failed:"
    tail -n 40 "$LOGS/$target.log"
    status=1
  fi
done
exit "$status"
