//! Read RPC: conformance scenarios 16–20 and 23 of the protocol fact sheet (§10),
//! produced through real appends, plus request validation and chunking.
//!
//! Scenario 24 (offset jumps over persisted fragments) and 22/25 need fragment stores
//! and are not covered here.

use bytes::Bytes;
use courant_tests::protocol::grpc::Code;
use courant_tests::protocol::{ReadRequest, ReadResponse, Status, journal_spec};
use courant_tests::*;
use std::time::Duration;

fn read_req(journal: &str, offset: i64) -> ReadRequest {
    ReadRequest {
        journal: journal.into(),
        offset,
        ..Default::default()
    }
}

/// The next message, failing on errors, EOF, or if none arrives within 10 s.
type Call = Streamed<ReadResponse>;

async fn next_msg(call: &mut Call, ctx: &str) -> ReadResponse {
    let m = call
        .next_within(Duration::from_secs(10))
        .await
        .unwrap_or_else(|| panic!("{ctx}: no Read message within 10 s"))
        .unwrap_or_else(|e| panic!("{ctx}: Read failed: {e}"))
        .unwrap_or_else(|| panic!("{ctx}: Read stream ended"));
    check_read_response(&m, ctx);
    m
}

/// Asserts nothing arrives on the stream for `ms`.
async fn assert_quiet(call: &mut Call, ms: u64, ctx: &str) {
    if let Some(r) = call.next_within(Duration::from_millis(ms)).await {
        panic!("{ctx}: expected the Read to block, got {r:?}");
    }
}

/// Asserts the stream ends cleanly next (EOF with status OK) within 10 s.
async fn assert_eof(call: &mut Call, ctx: &str) {
    let r = call
        .next_within(Duration::from_secs(10))
        .await
        .unwrap_or_else(|| panic!("{ctx}: stream did not end within 10 s"));
    match r {
        Ok(None) => {}
        other => panic!("{ctx}: expected EOF, got {other:?}"),
    }
}

/// Reads content chunks until `want` bytes have arrived starting at `offset`.
async fn expect_content(call: &mut Call, offset: i64, want: &[u8], ctx: &str) {
    let mut got = Vec::new();
    while got.len() < want.len() {
        let m = next_msg(call, ctx).await;
        assert!(!m.content.is_empty(), "{ctx}: expected content, got {m:?}");
        assert_eq!(m.offset, offset + got.len() as i64, "{ctx}: content offset");
        got.extend_from_slice(&m.content);
    }
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(want),
        "{ctx}: content"
    );
}

/// A metadata message: status OK, the given offset and write head, a fragment of the
/// journal covering the offset and ending at the write head, whose sum matches the
/// journal's bytes `all[begin..end]`.
#[track_caller]
fn check_metadata(m: &ReadResponse, journal: &str, offset: i64, head: i64, all: &[u8], ctx: &str) {
    check_metadata_in(m, journal, offset, head, all, ctx);
    assert_eq!(
        m.fragment.as_ref().unwrap().end,
        head,
        "{ctx}: fragment end = write head"
    );
}

/// Like [`check_metadata`], for a fragment that may end before the write head.
#[track_caller]
fn check_metadata_in(
    m: &ReadResponse,
    journal: &str,
    offset: i64,
    head: i64,
    all: &[u8],
    ctx: &str,
) {
    assert_status(m.status, Status::Ok, ctx);
    assert!(
        m.content.is_empty(),
        "{ctx}: expected metadata, got content {m:?}"
    );
    assert_eq!(
        (m.offset, m.write_head),
        (offset, head),
        "{ctx}: (offset, write_head)"
    );
    let f = m
        .fragment
        .as_ref()
        .unwrap_or_else(|| panic!("{ctx}: metadata without fragment"));
    assert_eq!(f.journal, journal, "{ctx}: fragment journal");
    assert!(
        f.begin <= offset && offset < f.end,
        "{ctx}: fragment must cover the offset"
    );
    assert!(f.end <= head, "{ctx}: fragment ends beyond the write head");
    assert_eq!(
        f.sum,
        Some(sha1_sum(&all[f.begin as usize..f.end as usize])),
        "{ctx}: fragment sum = SHA1 of the fragment's bytes"
    );
    assert_eq!(
        f.compression_codec,
        courant_tests::protocol::CompressionCodec::None as i32,
        "{ctx}: codec of the spec (NONE)"
    );
    // A completed fragment may already be persisted to the broker's default `file:///`
    // store; then (and only then) it carries a mod time and a signed URL.
    if f.backing_store.is_empty() {
        assert_eq!(f.mod_time, 0, "{ctx}: local fragment");
        assert_eq!(m.fragment_url, "", "{ctx}: no URL for a local fragment");
    } else {
        assert_eq!(f.backing_store, "file:///", "{ctx}: default store");
        assert!(f.mod_time > 0, "{ctx}: persisted fragment has a mod time");
        assert!(m.fragment_url.starts_with("file:///"), "{ctx}: signed URL");
    }
}

/// Scenario 16 [TestReadStreamingCases]: a blocking read from 0 sees each commit as
/// metadata then content; only the first message carries a header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario16_blocking_read_streams_commits() {
    within(40, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        create_journals(&ch, &["a/journal"]).await;
        let req = ReadRequest {
            block: true,
            do_not_proxy: true,
            ..read_req("a/journal;with/meta", 0)
        };
        let mut call = read_streamed(&ch, &req).await;
        assert_quiet(&mut call, 300, "blocking read of an empty journal").await;

        append_ok(&ch, "a/journal", b"foobarbaz").await;
        let m = next_msg(&mut call, "first metadata").await;
        check_metadata(&m, "a/journal", 0, 9, b"foobarbaz", "first metadata");
        assert_eq!(m.fragment.as_ref().unwrap().begin, 0);
        check_routed_header(
            m.header.as_ref().expect("first message has a header"),
            &b,
            "Read header",
        );
        expect_content(&mut call, 0, b"foobarbaz", "first content").await;

        append_ok(&ch, "a/journal", b"bing").await;
        let m = next_msg(&mut call, "second metadata").await;
        check_metadata(&m, "a/journal", 9, 13, b"foobarbazbing", "second metadata");
        assert_eq!(m.header, None, "only the first message carries a header");
        expect_content(&mut call, 9, b"bing", "second content").await;
        assert_quiet(&mut call, 300, "read at the head blocks again").await;
        drop(call);
        assert_serving(&b).await;
    })
    .await
}

/// Scenario 17: end_offset bounds a read (non-blocking and blocking).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario17_end_offset() {
    within(40, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        create_journals(&ch, &["a/journal"]).await;
        append_ok(&ch, "a/journal", b"foobarbaz").await;
        append_ok(&ch, "a/journal", b"bing").await;
        let all = b"foobarbazbing.!!!";

        // Non-blocking, end_offset 7 of 13: content through offset 7 only, then EOF.
        let mut call = read_streamed(
            &ch,
            &ReadRequest {
                end_offset: 7,
                ..read_req("a/journal", 0)
            },
        )
        .await;
        let m = next_msg(&mut call, "end_offset 7 metadata").await;
        assert!(m.header.is_some(), "first message carries the header");
        assert_eq!((m.status, m.offset, m.write_head), (0, 0, 13));
        let f = m.fragment.clone().unwrap();
        assert_eq!(
            f.sum,
            Some(sha1_sum(&all[f.begin as usize..f.end as usize]))
        );
        expect_content(&mut call, 0, b"foobarb", "end_offset 7 content").await;
        assert_eof(&mut call, "end_offset 7").await;

        // Blocking, end_offset 14 with 13 available: content to 13, waits, then exactly
        // one more byte after the next commit, then EOF.
        let mut call = read_streamed(
            &ch,
            &ReadRequest {
                end_offset: 14,
                block: true,
                ..read_req("a/journal", 0)
            },
        )
        .await;
        let mut got = Vec::new();
        let mut first = true;
        while got.len() < 13 {
            let m = next_msg(&mut call, "end_offset 14").await;
            if first {
                assert!(m.header.is_some(), "first message carries the header");
                first = false;
            } else {
                assert_eq!(m.header, None);
            }
            if m.content.is_empty() {
                check_metadata_in(
                    &m,
                    "a/journal",
                    got.len() as i64,
                    13,
                    all,
                    "end_offset 14 metadata",
                );
            } else {
                assert_eq!(m.offset, got.len() as i64);
                got.extend_from_slice(&m.content);
            }
        }
        assert_eq!(got, &all[..13]);
        assert_quiet(&mut call, 300, "end_offset 14 waits for byte 13").await;
        append_ok(&ch, "a/journal", b".!!!").await;
        let m = next_msg(&mut call, "end_offset 14 after commit").await;
        check_metadata(&m, "a/journal", 13, 17, all, "end_offset 14 after commit");
        expect_content(&mut call, 13, b".", "exactly one byte").await;
        assert_eof(&mut call, "end_offset 14").await;
    })
    .await
}

/// Scenario 18 [TestReadMetadataAndNonBlocking]: non-blocking read at offset 3 of 8.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario18_non_blocking_read() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        create_journals(&ch, &["a/journal"]).await;
        append_ok(&ch, "a/journal", b"feedbeef").await;

        let mut call = read_streamed(&ch, &read_req("a/journal;with/meta", 3)).await;
        let m = next_msg(&mut call, "metadata").await;
        check_metadata(&m, "a/journal", 3, 8, b"feedbeef", "metadata");
        check_routed_header(m.header.as_ref().expect("header"), &b, "Read header");
        assert_eq!(m.fragment.as_ref().unwrap().begin, 0);
        let c = next_msg(&mut call, "content").await;
        assert_eq!(
            c,
            ReadResponse {
                offset: 3,
                content: Bytes::from_static(b"dbeef"),
                ..Default::default()
            }
        );
        let last = next_msg(&mut call, "not yet available").await;
        assert_eq!(
            last,
            ReadResponse {
                status: Status::OffsetNotYetAvailable as i32,
                offset: 8,
                write_head: 8,
                ..Default::default()
            },
            "final message: {{OFFSET_NOT_YET_AVAILABLE, offset 8, write_head 8}}, no header"
        );
        assert_eof(&mut call, "non-blocking read").await;
    })
    .await
}

/// Scenario 19: blocking metadata-only read at the head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario19_blocking_metadata_only() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        create_journals(&ch, &["a/journal"]).await;
        append_ok(&ch, "a/journal", b"feedbeef").await;

        let req = ReadRequest {
            block: true,
            metadata_only: true,
            ..read_req("a/journal", 8)
        };
        let mut call = read_streamed(&ch, &req).await;
        assert_quiet(&mut call, 300, "metadata-only read at the head").await;
        append_ok(&ch, "a/journal", b"bing").await;
        let m = next_msg(&mut call, "metadata").await;
        check_metadata(&m, "a/journal", 8, 12, b"feedbeefbing", "metadata-only");
        check_routed_header(
            m.header.as_ref().expect("header on the first message"),
            &b,
            "header",
        );
        assert_eof(&mut call, "metadata-only read sends no content").await;

        // Non-blocking metadata-only read at 0: one metadata message, then EOF.
        let req = ReadRequest {
            metadata_only: true,
            ..read_req("a/journal", 0)
        };
        let mut call = read_streamed(&ch, &req).await;
        let m = next_msg(&mut call, "metadata at 0").await;
        assert_status(m.status, Status::Ok, "metadata at 0");
        assert_eq!((m.offset, m.write_head), (0, 12));
        assert!(m.header.is_some());
        assert_eof(&mut call, "metadata-only at 0").await;
    })
    .await
}

/// Scenario 20 [TestQueryAtHead]: offset −1 is the write head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario20_read_at_head() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        create_journals(&ch, &["a/journal"]).await;
        let mut all = vec![7u8; 200];
        append_ok(&ch, "a/journal", &all).await;

        let mut call = read_streamed(&ch, &read_req("a/journal", -1)).await;
        let m = next_msg(&mut call, "read at -1").await;
        assert_status(
            m.status,
            Status::OffsetNotYetAvailable,
            "non-blocking read at -1",
        );
        assert_eq!((m.offset, m.write_head), (200, 200));
        check_routed_header(m.header.as_ref().expect("header"), &b, "header");
        assert_eq!(m.fragment, None);
        assert_eof(&mut call, "read at -1").await;

        // Beyond the head, non-blocking: the requested offset is echoed.
        let mut call = read_streamed(&ch, &read_req("a/journal", 500)).await;
        let m = next_msg(&mut call, "read at 500").await;
        assert_status(
            m.status,
            Status::OffsetNotYetAvailable,
            "read beyond the head",
        );
        assert_eq!((m.offset, m.write_head), (500, 200));
        assert_eof(&mut call, "read at 500").await;

        // Blocking reads at 200 and at -1 both wait, then see [200,250).
        let mut at200 = read_streamed(
            &ch,
            &ReadRequest {
                block: true,
                ..read_req("a/journal", 200)
            },
        )
        .await;
        let mut at_head = read_streamed(
            &ch,
            &ReadRequest {
                block: true,
                ..read_req("a/journal", -1)
            },
        )
        .await;
        assert_quiet(&mut at200, 300, "blocking read at 200").await;
        assert_quiet(&mut at_head, 100, "blocking read at -1").await;
        let more = vec![9u8; 50];
        append_ok(&ch, "a/journal", &more).await;
        all.extend_from_slice(&more);
        for (call, ctx) in [(&mut at200, "read at 200"), (&mut at_head, "read at -1")] {
            let m = next_msg(call, ctx).await;
            check_metadata(&m, "a/journal", 200, 250, &all, ctx);
            assert!(m.header.is_some(), "{ctx}: header on first message");
            expect_content(call, 200, &more, ctx).await;
        }
    })
    .await
}

/// Scenario 23 [TestReadRequestErrorCases]: O_WRONLY ⇒ NOT_ALLOWED; invalid names and
/// offsets ⇒ gRPC Unknown with Gazette's validation text; missing journal ⇒
/// JOURNAL_NOT_FOUND.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario23_read_errors() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        let mut s = spec("write/only", &[]);
        s.flags = journal_spec::Flag::OWronly as u32;
        apply_specs(&ch, &[s]).await;
        create_journals(&ch, &["a/journal"]).await;

        let mut call = read_streamed(&ch, &read_req("write/only", 0)).await;
        let m = next_msg(&mut call, "O_WRONLY").await;
        assert_status(m.status, Status::NotAllowed, "read of O_WRONLY");
        check_routed_header(m.header.as_ref().expect("header"), &b, "NOT_ALLOWED header");
        assert_eq!((m.offset, m.write_head, m.fragment.is_none()), (0, 0, true));
        assert_eof(&mut call, "NOT_ALLOWED").await;

        let mut call = read_streamed(&ch, &read_req("does/not/exist", 0)).await;
        let m = next_msg(&mut call, "missing journal").await;
        assert_status(
            m.status,
            Status::JournalNotFound,
            "read of a missing journal",
        );
        check_unrouted_header(
            m.header.as_ref().expect("header"),
            "JOURNAL_NOT_FOUND header",
        );
        assert_eof(&mut call, "JOURNAL_NOT_FOUND").await;

        let cases = [
            (
                read_req("/invalid/journal", 0),
                "Journal: cannot begin with '/' (/invalid/journal)",
            ),
            (
                read_req("a/journal", -2),
                "invalid Offset (-2; expected -1 <= Offset <= MaxInt64)",
            ),
            (
                ReadRequest {
                    end_offset: 3,
                    ..read_req("a/journal", 5)
                },
                "invalid EndOffset (3; expected 0 or Offset <= EndOffset)",
            ),
            (
                ReadRequest {
                    end_offset: -1,
                    ..read_req("a/journal", 0)
                },
                "invalid EndOffset (-1; expected 0 or Offset <= EndOffset)",
            ),
        ];
        for (req, msg) in cases {
            let mut call = read_stream(&ch, &req).await.expect("Read");
            let (msgs, end) = collect::<ReadResponse>(&mut call).await;
            assert!(
                msgs.is_empty(),
                "{req:?}: no messages before the error, got {msgs:?}"
            );
            assert_rpc_error(end, Code::Unknown, msg, &format!("{req:?}"));
        }
        assert_serving(&b).await;
    })
    .await
}

/// Large reads are chunked (≤ 32,736 bytes per content message) and byte-exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_read_is_chunked_and_exact() {
    within(60, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        create_journals(&ch, &["big/journal"]).await;
        let mut all = Vec::new();
        for i in 0..6u32 {
            let rec = make_record(0, i, 150_000);
            append_ok(&ch, "big/journal", &rec).await;
            all.extend_from_slice(&rec);
        }
        let (content, head) = read_all(&ch, "big/journal", 0).await;
        assert_eq!(head, all.len() as i64);
        assert!(content == all, "content differs from what was appended");
        let (tail, _) = read_all(&ch, "big/journal", 123_457).await;
        assert!(tail == all[123_457..], "read from a middle offset");
    })
    .await
}

/// Fragments roll at the spec's length (Gazette rolls before an append once the spool
/// exceeds `fragment.length`), and reads from any offset cross fragment boundaries
/// byte-exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fragments_roll_at_spec_length() {
    within(90, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        let mut s = spec("roll/journal", &[]);
        s.fragment.as_mut().unwrap().length = 64 * 1024;
        apply_specs(&ch, &[s]).await;
        let mut all = Vec::new();
        for i in 0..40u32 {
            let rec = make_record(1, i, 10_000 + (i as usize * 733) % 9000);
            append_ok(&ch, "roll/journal", &rec).await;
            all.extend_from_slice(&rec);
        }
        let max_append = 10_000 + 9000 + 24;
        let mut call = read_stream(&ch, &read_req("roll/journal", 0))
            .await
            .unwrap();
        let (msgs, end) = collect::<ReadResponse>(&mut call).await;
        end.expect("Read");
        let mut frags: Vec<(i64, i64)> = msgs
            .iter()
            .filter_map(|m| m.fragment.as_ref().map(|f| (f.begin, f.end)))
            .collect();
        frags.dedup();
        assert!(
            frags.len() >= 6,
            "~{} KB in 64 KiB fragments: {frags:?}",
            all.len() / 1000
        );
        for w in frags.windows(2) {
            assert_eq!(w[0].1, w[1].0, "fragments tile the journal: {frags:?}");
        }
        for &(b0, e0) in &frags[1..frags.len() - 1] {
            assert!(
                e0 - b0 <= 64 * 1024 + max_append as i64,
                "fragment [{b0}, {e0}) exceeds length + one append: {frags:?}"
            );
        }
        for off in [0usize, 65_535, 65_536, 65_537, 200_001, all.len() - 1] {
            let (tail, head) = read_all(&ch, "roll/journal", off as i64).await;
            assert_eq!(head, all.len() as i64);
            assert!(tail == all[off..], "read from {off}");
        }
    })
    .await
}

/// Deleting a journal ends its blocking reads with a clean EOF (not an error), as when
/// a Gazette replica is re-assigned away (scenario 39).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_journal_ends_blocking_reads_with_eof() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        create_journals(&ch, &["doomed/journal"]).await;
        append_ok(&ch, "doomed/journal", b"data").await;
        let req = ReadRequest {
            block: true,
            ..read_req("doomed/journal", 0)
        };
        let mut call = read_streamed(&ch, &req).await;
        let m = next_msg(&mut call, "metadata").await;
        check_metadata(&m, "doomed/journal", 0, 4, b"data", "metadata");
        expect_content(&mut call, 0, b"data", "content").await;
        assert_quiet(&mut call, 200, "blocked at the head").await;
        let r = apply(&ch, vec![delete("doomed/journal", -1)])
            .await
            .unwrap();
        assert_status(r.status, Status::Ok, "delete");
        assert_eof(&mut call, "blocking read of a deleted journal").await;

        let mut call = read_stream(&ch, &read_req("doomed/journal", 0))
            .await
            .unwrap();
        let (msgs, end) = collect::<ReadResponse>(&mut call).await;
        end.expect("Read of a deleted journal");
        assert_status(msgs[0].status, Status::JournalNotFound, "read after delete");
        assert_serving(&b).await;
    })
    .await
}

/// A client cancelling a blocking read (RST_STREAM) doesn't disturb the broker, and
/// many concurrent blocking reads all see a commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_blocking_readers_and_cancellation() {
    within(40, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        create_journals(&ch, &["fan/out"]).await;
        let mut calls = vec![];
        for i in 0..20 {
            let c = if i % 4 == 0 {
                b.connect().await
            } else {
                ch.clone()
            };
            let req = ReadRequest {
                block: true,
                ..read_req("fan/out", 0)
            };
            calls.push(read_streamed(&c, &req).await);
        }
        // Cancel half of them.
        let keep: Vec<Call> = calls
            .into_iter()
            .enumerate()
            .filter(|(i, _)| i % 2 == 0)
            .map(|(_, c)| c)
            .collect();
        tokio::time::sleep(Duration::from_millis(200)).await;
        append_ok(&ch, "fan/out", b"hello readers").await;
        for (i, mut c) in keep.into_iter().enumerate() {
            let ctx = format!("reader {i}");
            let m = next_msg(&mut c, &ctx).await;
            check_metadata(&m, "fan/out", 0, 13, b"hello readers", &ctx);
            expect_content(&mut c, 0, b"hello readers", &ctx).await;
        }
        assert_serving(&b).await;
    })
    .await
}
