//! Bad input: malformed gRPC frames, oversized and compressed frames, unknown methods,
//! invalid Apply requests, badly behaved Append clients (scenarios 4 and 5 of §10),
//! disconnects mid-append, and clients below the minimum append rate.
//!
//! Each test ends by checking the broker still serves other clients (a fresh journal is
//! created, appended to, and read back on a new connection).
//!
//! gRPC codes follow grpc-go (Gazette's server): a truncated frame or an undecodable
//! message is Internal, an oversized one ResourceExhausted ("grpc: received message
//! larger than max (N vs. M)"), a frame compressed with an encoding the server lacks is
//! Unimplemented, and Gazette's own validation errors are Unknown with its text.

use bytes::Bytes;
use courant_tests::protocol::grpc::Code;
use courant_tests::protocol::{
    AppendRequest, AppendResponse, ApplyRequest, ApplyResponse, JournalSpec, Status,
    apply_request::Change,
};
use courant_tests::*;
use prost::Message;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

const MIN_RATE_ERROR: &str =
    "append stream: client stream didn't sustain the minimum append data rate";

fn first(journal: &str) -> AppendRequest {
    AppendRequest {
        journal: journal.into(),
        ..Default::default()
    }
}

fn content(data: &[u8]) -> AppendRequest {
    AppendRequest {
        content: Bytes::copy_from_slice(data),
        ..Default::default()
    }
}

/// Creates journal `name` holding the committed bytes "committed".
async fn make_victim(b: &Broker, name: &str) {
    let ch = b.connect().await;
    create_journals(&ch, &[name]).await;
    append_ok(&ch, name, b"committed").await;
}

/// A broker with journal `victim/journal` holding the committed bytes "committed".
async fn broker_with_victim(extra: &[&str]) -> Broker {
    let b = Broker::start(extra).await;
    make_victim(&b, "victim/journal").await;
    b
}

/// The victim journal still holds exactly "committed", and the next append starts at 9.
async fn assert_victim_unchanged(b: &Broker, ctx: &str) {
    assert_unchanged(b, "victim/journal", ctx).await
}

async fn assert_unchanged(b: &Broker, name: &str, ctx: &str) {
    let ch = b.connect().await;
    let (data, head) = read_all(&ch, name, 0).await;
    assert_eq!(
        String::from_utf8_lossy(&data),
        "committed",
        "{ctx}: uncommitted bytes must never become visible"
    );
    assert_eq!(head, 9, "{ctx}: write head");
    let resp = append_ok(&ch, name, b"+next").await;
    assert_eq!(
        resp.commit.unwrap().begin,
        9,
        "{ctx}: the next append starts at the old offset"
    );
    assert_eq!(read_content(&ch, name).await, b"committed+next");
}

async fn open_append(b: &Broker) -> (RawStream, JoinHandle<RawOutcome>) {
    let mut s = RawStream::open(b.port(), APPEND, &[]).await;
    let resp = s.spawn_response();
    (s, resp)
}

async fn outcome_within(resp: JoinHandle<RawOutcome>, secs: u64, ctx: &str) -> RawOutcome {
    tokio::time::timeout(Duration::from_secs(secs), resp)
        .await
        .unwrap_or_else(|_| panic!("{ctx}: no response within {secs} s"))
        .expect("response task")
}

#[track_caller]
fn assert_error(out: &RawOutcome, code: Code, message: Option<&str>, ctx: &str) {
    match &out.status {
        Ok(()) => panic!(
            "{ctx}: expected gRPC error {code:?}, got status OK with {} message(s)",
            out.messages.len()
        ),
        Err(e) => {
            assert_eq!(e.code, code, "{ctx}: gRPC code (message: {:?})", e.message);
            if let Some(m) = message {
                assert_eq!(e.message, m, "{ctx}: gRPC message");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Frame-level errors.
// ---------------------------------------------------------------------------------------

/// A frame that declares 100 bytes but the stream ends after 10.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_frame_unary() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let out = raw_call(b.port(), APPLY, &[], raw_frame(0, 100, &[0u8; 10]), true).await;
        assert_error(&out, Code::Internal, None, "truncated Apply frame");
        // A stream that ends inside the 5-byte prefix is truncated too.
        let out = raw_call(b.port(), APPLY, &[], Bytes::from_static(&[0, 0, 0]), true).await;
        assert_error(&out, Code::Internal, None, "truncated frame prefix");
        assert_serving(&b).await;
    })
    .await
}

/// A truncated frame inside an Append stream fails the append and commits nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_frame_in_append() {
    within(30, async {
        let b = broker_with_victim(&[]).await;
        let (mut s, resp) = open_append(&b).await;
        s.send_msg(&first("victim/journal")).await.unwrap();
        s.send_msg(&content(b"uncommitted")).await.unwrap();
        let _ = s
            .send_data(raw_frame(0, 1000, b"partial content"), true)
            .await;
        let out = outcome_within(resp, 10, "truncated append").await;
        assert_error(&out, Code::Internal, None, "truncated frame in Append");
        assert_victim_unchanged(&b, "after a truncated Append frame").await;
        assert_serving(&b).await;
    })
    .await
}

/// A complete frame whose body is not a valid protobuf message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_protobuf() {
    within(30, async {
        let b = Broker::start(&[]).await;
        // Field 1 (changes) claims 5 bytes, but only 1 follows.
        let body = [0x0a, 0x05, b'a'];
        let out = raw_call(b.port(), APPLY, &[], raw_frame(0, 3, &body), true).await;
        assert_error(&out, Code::Internal, None, "undecodable ApplyRequest");
        let msg = out.status.unwrap_err().message;
        assert!(
            msg.starts_with("grpc: failed to unmarshal the received message"),
            "grpc-go's message, got {msg:?}"
        );
        assert_serving(&b).await;
    })
    .await
}

/// A message larger than the default 4 MiB receive limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_frame_default_limit() {
    within(60, async {
        let b = Broker::start(&[]).await;
        let len = 5 << 20;
        let body = vec![0u8; len];
        let out = raw_call(b.port(), APPLY, &[], raw_frame(0, len as u32, &body), true).await;
        assert_error(
            &out,
            Code::ResourceExhausted,
            Some("grpc: received message larger than max (5242880 vs. 4194304)"),
            "5 MiB Apply",
        );
        assert_serving(&b).await;
    })
    .await
}

/// `--broker.max-grpc-recv-size` bounds Append chunks: a larger chunk fails with
/// RESOURCE_EXHAUSTED and commits nothing; a chunk under the limit works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_append_chunk_custom_limit() {
    within(60, async {
        let b = broker_with_victim(&["--broker.max-grpc-recv-size", "65536"]).await;
        let big = content(&vec![b'x'; 100 * 1024]);
        let (mut s, resp) = open_append(&b).await;
        s.send_msg(&first("victim/journal")).await.unwrap();
        let _ = s.send_msg(&big).await;
        let _ = s.send_msg(&AppendRequest::default()).await;
        let _ = s.send_data(Bytes::new(), true).await;
        let out = outcome_within(resp, 10, "oversized chunk").await;
        let expect = format!(
            "grpc: received message larger than max ({} vs. 65536)",
            big.encoded_len()
        );
        assert_error(
            &out,
            Code::ResourceExhausted,
            Some(&expect),
            "100 KiB chunk, 64 KiB limit",
        );
        assert_victim_unchanged(&b, "after an oversized chunk").await;

        let ch = b.connect().await;
        let data = vec![b'y'; 60 * 1024];
        let resp = append_ok(&ch, "victim/journal", &data).await;
        assert_eq!(resp.commit.unwrap().begin, 14);
        assert_serving(&b).await;
    })
    .await
}

/// A compressed frame with an encoding the server doesn't have (grpc-go:
/// "grpc: Decompressor is not installed for grpc-encoding \"gzip\"").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_frame_is_unimplemented() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let msg = ApplyRequest::default().encode_to_vec();
        let out = raw_call(
            b.port(),
            APPLY,
            &[("grpc-encoding", "gzip")],
            raw_frame(1, msg.len() as u32, &msg),
            true,
        )
        .await;
        assert_error(&out, Code::Unimplemented, None, "gzip-compressed Apply");

        // The compressed flag without any grpc-encoding: grpc-go says Internal
        // ("compressed flag set with identity or empty encoding"); Unimplemented is an
        // acceptable refusal too. It must not be served.
        let body = b"\x1f\x8b\x08\x00garbage";
        let out = raw_call(
            b.port(),
            APPLY,
            &[],
            raw_frame(1, body.len() as u32, body),
            true,
        )
        .await;
        match &out.status {
            Err(e) if matches!(e.code, Code::Internal | Code::Unimplemented) => {}
            other => panic!("compressed flag without encoding must be refused, got {other:?}"),
        }
        assert_serving(&b).await;
    })
    .await
}

/// Unknown methods and services are UNIMPLEMENTED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_method_is_unimplemented() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        for path in [
            "/protocol.Journal/Nope",
            "/foo.Bar/Baz",
            "/protocol.Journal/",
        ] {
            let res: Result<ApplyResponse, _> = ch.unary(path, &ApplyRequest::default()).await;
            match res {
                Err(e) => assert_eq!(e.code, Code::Unimplemented, "{path}: {e}"),
                Ok(r) => panic!("{path}: expected UNIMPLEMENTED, got {r:?}"),
            }
        }
        // A streaming call to an unknown method too.
        let out = raw_call(
            b.port(),
            "/protocol.Journal/Appendx",
            &[],
            frame_of(&first("a/journal")),
            false,
        )
        .await;
        assert_error(&out, Code::Unimplemented, None, "unknown streaming method");
        assert_serving(&b).await;
    })
    .await
}

/// Bytes that are not HTTP/2 at all don't disturb the broker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_the_socket() {
    within(30, async {
        use tokio::io::AsyncWriteExt;
        let b = Broker::start(&[]).await;
        let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", b.port()))
            .await
            .unwrap();
        let garbage: Vec<u8> = (0..4096u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let _ = tcp.write_all(&garbage).await;
        // An HTTP/2 preface followed by a malformed frame.
        let mut tcp2 = tokio::net::TcpStream::connect(("127.0.0.1", b.port()))
            .await
            .unwrap();
        let _ = tcp2
            .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x04\x09\x00\xff\xff\xff\xff")
            .await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_serving(&b).await;
        drop((tcp, tcp2));
        assert_serving(&b).await;
    })
    .await
}

// ---------------------------------------------------------------------------------------
// Invalid Apply requests.
// ---------------------------------------------------------------------------------------

async fn expect_apply_errors(b: &Broker, cases: Vec<(Vec<Change>, &str)>) {
    let ch = b.connect().await;
    for (changes, msg) in cases {
        let ctx = format!("Apply {changes:?}");
        assert_rpc_error(apply(&ch, changes).await, Code::Unknown, msg, &ctx);
    }
    assert!(
        list_journals(&ch, selector(&[], &[])).await.is_empty(),
        "no invalid Apply may create anything"
    );
}

/// Invalid journal names in Apply: gRPC Unknown with Gazette's validation text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_invalid_journal_names() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let long = "x".repeat(513);
        let long_msg = "Changes[0].Upsert.Name: invalid length (513; expected 4 <= length <= 512)".to_string();
        let cases: Vec<(Vec<Change>, &str)> = vec![
            (vec![delete("invalid journal name", -1)], "Changes[0].Delete: not a valid token (invalid journal name)"),
            (vec![create(spec("/bad/name", &[]))], "Changes[0].Upsert.Name: cannot begin with '/' (/bad/name)"),
            (vec![create(spec("abc", &[]))], "Changes[0].Upsert.Name: invalid length (3; expected 4 <= length <= 512)"),
            (vec![create(spec(&long, &[]))], &long_msg),
            (vec![create(spec("a//b/c", &[]))], "Changes[0].Upsert.Name: must be a clean path (a//b/c)"),
            (vec![create(spec("a/./b", &[]))], "Changes[0].Upsert.Name: must be a clean path (a/./b)"),
            (vec![create(spec("has space", &[]))], "Changes[0].Upsert.Name: not a valid token (has space)"),
            (vec![create(spec("hash#name", &[]))], "Changes[0].Upsert.Name: not a valid token (hash#name)"),
            (
                vec![create(spec("valid/name;meta", &[]))],
                "Changes[0].Upsert: Name cannot have a metadata path segment (;meta; expected no segment)",
            ),
            (
                vec![create(spec("ok/first", &[])), create(spec("/bad/second", &[]))],
                "Changes[1].Upsert.Name: cannot begin with '/' (/bad/second)",
            ),
            (vec![delete("/abs/name", -1)], "Changes[0].Delete: cannot begin with '/' (/abs/name)"),
        ];
        expect_apply_errors(&b, cases).await;
        assert_serving(&b).await;
    })
    .await
}

/// Invalid specs and changes in Apply: gRPC Unknown with Gazette's validation text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_invalid_specs() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let with = |f: &dyn Fn(&mut JournalSpec)| {
            let mut s = spec("valid/name", &[]);
            f(&mut s);
            create(s)
        };
        let cases: Vec<(Vec<Change>, &str)> = vec![
            (vec![with(&|s| s.replication = 0)], "Changes[0].Upsert: invalid Replication (0; expected 1 <= Replication <= 5)"),
            (vec![with(&|s| s.replication = 6)], "Changes[0].Upsert: invalid Replication (6; expected 1 <= Replication <= 5)"),
            (
                vec![with(&|s| s.labels = Some(label_set(&[("name", "x")])))],
                "Changes[0].Upsert: Labels cannot include label \"name\"",
            ),
            (
                vec![with(&|s| s.labels = Some(label_set(&[("prefix", "x/")])))],
                "Changes[0].Upsert: Labels cannot include label \"prefix\"",
            ),
            (
                vec![with(&|s| s.labels = Some(label_set(&[("xxx xxx", "v")])))],
                "Changes[0].Upsert.Labels.Labels[0].Name: not a valid token (xxx xxx)",
            ),
            (
                vec![with(&|s| s.fragment.as_mut().unwrap().length = 100)],
                "Changes[0].Upsert.Fragment: invalid Length (100; expected 1024 <= length <= 17179869184)",
            ),
            (
                vec![with(&|s| s.fragment = None)],
                "Changes[0].Upsert.Fragment: invalid Length (0; expected 1024 <= length <= 17179869184)",
            ),
            (
                vec![with(&|s| s.fragment.as_mut().unwrap().compression_codec = 0)],
                "Changes[0].Upsert.Fragment.CompressionCodec: invalid value (INVALID)",
            ),
            (
                vec![with(&|s| s.fragment.as_mut().unwrap().refresh_interval = None)],
                "Changes[0].Upsert.Fragment: invalid RefreshInterval (0s; expected 1s <= interval <= 24h0m0s)",
            ),
            (
                vec![with(&|s| s.fragment.as_mut().unwrap().refresh_interval = Some(duration(25 * 3600)))],
                "Changes[0].Upsert.Fragment: invalid RefreshInterval (25h0m0s; expected 1s <= interval <= 24h0m0s)",
            ),
            (
                vec![with(&|s| s.fragment.as_mut().unwrap().flush_interval = Some(duration(30)))],
                "Changes[0].Upsert.Fragment: invalid FlushInterval (30s; expected >= 1m0s)",
            ),
            (vec![with(&|s| s.flags = 3)], "Changes[0].Upsert.Flags: invalid combination (3)"),
            (vec![with(&|s| s.max_append_rate = -1)], "Changes[0].Upsert: invalid MaxAppendRate (-1; expected >= 0)"),
            (
                vec![Change { expect_mod_revision: -2, upsert: Some(spec("valid/name", &[])), delete: String::new() }],
                "Changes[0]: invalid ExpectModRevision (-2; expected >= 0 or -1)",
            ),
            (vec![delete("valid/name", 0)], "Changes[0]: invalid ExpectModRevision (0; expected > 0 or -1)"),
            (
                vec![Change { expect_mod_revision: 0, upsert: Some(spec("valid/name", &[])), delete: "valid/name".into() }],
                "Changes[0]: both Upsert and Delete are set (expected exactly one)",
            ),
            (vec![Change::default()], "Changes[0]: neither Upsert nor Delete are set (expected exactly one)"),
        ];
        expect_apply_errors(&b, cases).await;

        // Boundary values are accepted.
        let ch = b.connect().await;
        let mut s = spec("edge/values", &[]);
        s.replication = 5;
        let f = s.fragment.as_mut().unwrap();
        f.length = 1024;
        f.refresh_interval = Some(duration(24 * 3600));
        f.flush_interval = Some(duration(60));
        apply_specs(&ch, &[s]).await;
        assert_serving(&b).await;
    })
    .await
}

// ---------------------------------------------------------------------------------------
// Badly behaved Append clients.
// ---------------------------------------------------------------------------------------

/// Content in the first Append message is a validation error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_content_in_first_message() {
    within(30, async {
        let b = broker_with_victim(&[]).await;
        let ch = b.connect().await;
        let req = AppendRequest {
            content: Bytes::from_static(b"sneaky"),
            ..first("victim/journal")
        };
        let res = append_full(&ch, req, &[Bytes::from_static(b"more")], true)
            .await
            .result;
        assert_rpc_error(
            res,
            Code::Unknown,
            "unexpected Content",
            "content in the first message",
        );
        assert_victim_unchanged(&b, "after content in the first message").await;
        assert_serving(&b).await;
    })
    .await
}

/// Scenario 4: EOF without the empty commit chunk rolls back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario04_append_eof_without_commit_chunk() {
    within(30, async {
        let b = broker_with_victim(&[]).await;
        let ch = b.connect().await;
        let res = append_full(
            &ch,
            first("victim/journal"),
            &[Bytes::from_static(b"foo"), Bytes::from_static(b"bar")],
            false,
        )
        .await
        .result;
        assert_rpc_error(
            res,
            Code::Unknown,
            "append stream: unexpected EOF",
            "EOF without commit",
        );
        assert_victim_unchanged(&b, "after EOF without commit").await;
        assert_serving(&b).await;
    })
    .await
}

/// Messages that break the chunk protocol after the first one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_bad_chunk_sequences() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let cases: Vec<(Vec<AppendRequest>, &str)> = vec![
            (
                vec![content(b"foo"), AppendRequest::default(), content(b"bar")],
                "append stream: expected EOF after empty Content chunk",
            ),
            (
                vec![content(b"foo"), first("victim/other")],
                "append stream: expected Content chunk",
            ),
            (
                vec![
                    content(b"foo"),
                    AppendRequest {
                        offset: 3,
                        ..content(b"x")
                    },
                ],
                "append stream: unexpected Offset",
            ),
        ];
        for (i, (msgs, expect)) in cases.into_iter().enumerate() {
            let ctx = format!("chunks {msgs:?}");
            let name = format!("victim/case-{i}");
            make_victim(&b, &name).await;
            let (mut s, resp) = open_append(&b).await;
            s.send_msg(&first(&name)).await.unwrap();
            for m in &msgs {
                let _ = s.send_msg(m).await;
            }
            let _ = s.send_data(Bytes::new(), true).await;
            let out = outcome_within(resp, 10, &ctx).await;
            assert_error(&out, Code::Unknown, Some(expect), &ctx);
            assert_unchanged(&b, &name, &ctx).await;
        }
        assert_serving(&b).await;
    })
    .await
}

/// A client that resets its stream mid-append (RST_STREAM CANCEL), before or after
/// sending the commit chunk: nothing is committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_rst_mid_append() {
    within(30, async {
        for with_commit_chunk in [false, true] {
            let ctx = format!("RST_STREAM (commit chunk sent: {with_commit_chunk})");
            let b = broker_with_victim(&[]).await;
            let (mut s, _resp) = open_append(&b).await;
            s.send_msg(&first("victim/journal")).await.unwrap();
            s.send_msg(&content(b"uncommitted-1")).await.unwrap();
            s.send_msg(&content(b"uncommitted-2")).await.unwrap();
            if with_commit_chunk {
                s.send_msg(&AppendRequest::default()).await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            // While the append is pending, its bytes are invisible to readers.
            let (data, head) = read_all(&b.connect().await, "victim/journal", 0).await;
            assert_eq!(
                (data.as_slice(), head),
                (&b"committed"[..], 9),
                "{ctx}: pending bytes visible"
            );
            s.reset(h2::Reason::CANCEL);
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_victim_unchanged(&b, &ctx).await;
            assert_serving(&b).await;
        }
    })
    .await
}

/// A client whose TCP connection drops mid-append: nothing is committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_tcp_mid_append() {
    within(30, async {
        for with_commit_chunk in [false, true] {
            let ctx = format!("TCP drop (commit chunk sent: {with_commit_chunk})");
            let b = broker_with_victim(&[]).await;
            let (mut s, _resp) = open_append(&b).await;
            s.send_msg(&first("victim/journal")).await.unwrap();
            s.send_msg(&content(&vec![b'u'; 20_000])).await.unwrap();
            if with_commit_chunk {
                s.send_msg(&AppendRequest::default()).await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            s.drop_connection();
            drop(s);
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_victim_unchanged(&b, &ctx).await;
            assert_serving(&b).await;
        }
    })
    .await
}

/// Scenario 5: a client that stalls after some content is cut off after about one
/// second at the default minimum rate (64 KiB/s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario05_stalled_append_below_min_rate() {
    within(30, async {
        let b = broker_with_victim(&[]).await;
        let (mut s, resp) = open_append(&b).await;
        s.send_msg(&first("victim/journal")).await.unwrap();
        s.send_msg(&content(b"foo")).await.unwrap();
        let start = Instant::now();
        let out = outcome_within(resp, 10, "stalled append").await;
        let took = out.at - start;
        assert_error(&out, Code::Unknown, Some(MIN_RATE_ERROR), "stalled append");
        assert!(
            took >= Duration::from_millis(500) && took <= Duration::from_millis(3500),
            "a stalled client is cut off after ~1 s (took {took:?})"
        );
        drop(s);
        assert_victim_unchanged(&b, "after a stalled append").await;
        assert_serving(&b).await;
    })
    .await
}

/// Sends `chunk_len` bytes every `every`, until the response arrives or `max` elapses.
/// Returns the outcome and when it arrived relative to the first content chunk.
async fn trickle(
    b: &Broker,
    chunk_len: usize,
    every: Duration,
    max: Duration,
) -> (RawOutcome, Duration, usize) {
    let (mut s, mut resp) = open_append(b).await;
    s.send_msg(&first("victim/journal")).await.unwrap();
    let start = Instant::now();
    let mut sent = 0;
    while start.elapsed() < max && !resp.is_finished() {
        if s.send_msg(&content(&vec![b't'; chunk_len])).await.is_err() {
            break;
        }
        sent += chunk_len;
        tokio::time::sleep(every).await;
    }
    if !resp.is_finished() {
        let _ = s.send_msg(&AppendRequest::default()).await;
        let _ = s.send_data(Bytes::new(), true).await;
    }
    let out = tokio::time::timeout(Duration::from_secs(10), &mut resp)
        .await
        .expect("response within 10 s")
        .expect("response task");
    let took = out.at - start;
    (out, took, sent)
}

/// A client trickling 10 KiB/s (below the 64 KiB/s minimum) is cut off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickling_append_below_min_rate() {
    within(40, async {
        let b = broker_with_victim(&[]).await;
        let (out, took, _) =
            trickle(&b, 1024, Duration::from_millis(100), Duration::from_secs(8)).await;
        assert_error(&out, Code::Unknown, Some(MIN_RATE_ERROR), "10 KiB/s client");
        assert!(
            took <= Duration::from_secs(5),
            "cut off within a few seconds (took {took:?})"
        );
        assert_victim_unchanged(&b, "after a trickling append").await;
        assert_serving(&b).await;
    })
    .await
}

/// A client sustaining ~160 KiB/s for 2.5 s is not cut off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_but_sufficient_append_succeeds() {
    within(40, async {
        let b = broker_with_victim(&[]).await;
        let (out, _, sent) = trickle(
            &b,
            8192,
            Duration::from_millis(50),
            Duration::from_millis(2500),
        )
        .await;
        out.status
            .clone()
            .unwrap_or_else(|e| panic!("a 160 KiB/s client must succeed: {e}"));
        let resp: Vec<AppendResponse> = out.decode();
        assert_eq!(resp.len(), 1);
        assert_status(resp[0].status, Status::Ok, "slow but sufficient append");
        let c = resp[0].commit.clone().unwrap();
        assert_eq!((c.begin, c.end), (9, 9 + sent as i64));
        assert_serving(&b).await;
    })
    .await
}

/// `--broker.min-append-rate` is honoured: at 4 KiB/s, a 10 KiB/s client succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_append_rate_flag_is_honoured() {
    within(40, async {
        let b = broker_with_victim(&["--broker.min-append-rate", "4096"]).await;
        let (out, _, sent) = trickle(
            &b,
            1024,
            Duration::from_millis(100),
            Duration::from_millis(2500),
        )
        .await;
        out.status
            .clone()
            .unwrap_or_else(|e| panic!("10 KiB/s is above a 4 KiB/s minimum: {e}"));
        let resp: Vec<AppendResponse> = out.decode();
        assert_status(
            resp[0].status,
            Status::Ok,
            "append above the configured minimum",
        );
        assert_eq!(resp[0].commit.clone().unwrap().end, 9 + sent as i64);
        assert_serving(&b).await;
    })
    .await
}
