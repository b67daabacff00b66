//! Append RPC: conformance scenarios 1, 2, 3, 6, 7, 8 and 11 of the protocol fact sheet
//! (§10), plus explicit offsets and Gazette's first-fragment roll. Scenarios 4 and 5
//! (badly behaved clients) live in `bad_input.rs`.

use bytes::Bytes;
use courant_tests::protocol::grpc::Code;
use courant_tests::protocol::{
    AppendRequest, AppendResponse, Fragment, JournalSpec, LabelSet, ReadResponse, Status,
    journal_spec,
};
use courant_tests::*;
use std::time::Duration;

fn req(journal: &str) -> AppendRequest {
    AppendRequest {
        journal: journal.into(),
        ..Default::default()
    }
}

fn chunks(parts: &[&str]) -> Vec<Bytes> {
    parts
        .iter()
        .map(|p| Bytes::copy_from_slice(p.as_bytes()))
        .collect()
}

/// Scenario 1 [TestAppendSingle]: `{journal;meta}`, "foo", "bar", `{}`, EOF.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario01_append_single() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        let rev = create_journals(&ch, &["a/journal"]).await;

        let out = append_full(
            &ch,
            req("a/journal;with/meta"),
            &chunks(&["foo", "bar"]),
            true,
        )
        .await;
        let resp = out.result.expect("Append");
        check_append_response(&resp, "scenario 1");
        assert_status(resp.status, Status::Ok, "scenario 1");
        let h = resp.header.clone().unwrap();
        check_routed_header(&h, &b, "scenario 1 AppendResponse");
        assert!(
            h.etcd.unwrap().revision >= rev,
            "header revision must have observed the Apply"
        );
        assert_eq!(
            resp.commit,
            Some(Fragment {
                journal: "a/journal".into(),
                begin: 0,
                end: 6,
                sum: Some(sha1_sum(b"foobar")),
                compression_codec: courant_tests::protocol::CompressionCodec::None as i32,
                ..Default::default()
            }),
            "commit is the client's span, with the ;meta suffix stripped"
        );
        assert_eq!(
            resp.registers,
            Some(LabelSet::default()),
            "registers must be present and empty"
        );
        assert_eq!((resp.total_chunks, resp.delayed_chunks), (3, 0));
        assert_eq!(resp.store_health_error, "");

        assert_eq!(read_content(&ch, "a/journal").await, b"foobar");
    })
    .await
}

/// Scenario 2 [TestAppendRegisterCheckAndUpdateSequence].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario02_register_check_and_update_sequence() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        create_journals(&ch, &["a/journal"]).await;

        let cases: Vec<(AppendRequest, Status, LabelSet)> = vec![
            (
                AppendRequest {
                    union_registers: Some(label_set(&[("AA", "11"), ("BB", "22")])),
                    ..req("a/journal")
                },
                Status::Ok,
                label_set(&[("AA", "11"), ("BB", "22")]),
            ),
            (
                AppendRequest {
                    // `AA in (11), BB`
                    check_registers: Some(selector(&[("AA", "11"), ("BB", "")], &[])),
                    subtract_registers: Some(label_set(&[("AA", "11"), ("BB", "XYZ")])),
                    union_registers: Some(label_set(&[("CC", "33")])),
                    ..req("a/journal")
                },
                Status::Ok,
                label_set(&[("BB", "22"), ("CC", "33")]),
            ),
            (
                AppendRequest {
                    // `!AA, CC`
                    check_registers: Some(selector(&[("CC", "")], &[("AA", "")])),
                    subtract_registers: Some(label_set(&[("CC", "33")])),
                    union_registers: Some(label_set(&[("AA", "44")])),
                    ..req("a/journal")
                },
                Status::Ok,
                label_set(&[("AA", "44"), ("BB", "22")]),
            ),
            (
                AppendRequest {
                    // `AA = 55`
                    check_registers: Some(selector(&[("AA", "55")], &[])),
                    union_registers: Some(label_set(&[("ZZZ", "")])),
                    ..req("a/journal")
                },
                Status::RegisterMismatch,
                label_set(&[("AA", "44"), ("BB", "22")]),
            ),
        ];
        for (i, (first, status, expect)) in cases.into_iter().enumerate() {
            let ctx = format!("register case {i}");
            let resp = append_full(&ch, first, &chunks(&["bb"]), true)
                .await
                .result
                .unwrap_or_else(|e| panic!("{ctx}: {e}"));
            check_append_response(&resp, &ctx);
            assert_status(resp.status, status, &ctx);
            check_routed_header(resp.header.as_ref().unwrap(), &b, &ctx);
            assert_eq!(resp.registers, Some(expect), "{ctx}: registers");
            if status != Status::Ok {
                assert_eq!(resp.commit, None, "{ctx}: no commit on REGISTER_MISMATCH");
            }
        }
        // The mismatched append wrote nothing.
        assert_eq!(read_content(&ch, "a/journal").await, b"bbbbbb");
    })
    .await
}

/// Scenario 3 [TestFSMValidatePreconditions]: a non-matching check_registers passes
/// while the journal's registers are empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario03_check_registers_passes_on_empty_registers() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        create_journals(&ch, &["a/journal"]).await;
        let first = AppendRequest {
            check_registers: Some(selector(&[("missing", "value")], &[])),
            ..req("a/journal")
        };
        let resp = append_full(&ch, first, &chunks(&["x"]), true)
            .await
            .result
            .expect("Append");
        check_append_response(&resp, "scenario 3");
        assert_status(
            resp.status,
            Status::Ok,
            "empty registers match any selector",
        );
        assert_eq!(resp.registers, Some(LabelSet::default()));

        // Once registers are non-empty, the same selector mismatches.
        let first = AppendRequest {
            union_registers: Some(label_set(&[("kk", "v")])),
            ..req("a/journal")
        };
        append_full(&ch, first, &chunks(&["y"]), true)
            .await
            .result
            .expect("Append");
        let first = AppendRequest {
            check_registers: Some(selector(&[("missing", "value")], &[])),
            ..req("a/journal")
        };
        let resp = append_full(&ch, first, &chunks(&["z"]), true)
            .await
            .result
            .expect("Append");
        assert_status(
            resp.status,
            Status::RegisterMismatch,
            "non-empty registers are checked",
        );
        assert_eq!(resp.registers, Some(label_set(&[("kk", "v")])));
        assert_eq!(read_content(&ch, "a/journal").await, b"xy");
    })
    .await
}

/// Scenario 6: a register modification with no content is an error, and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario06_register_update_requires_content() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        create_journals(&ch, &["a/journal"]).await;
        append_ok(&ch, "a/journal", b"abc").await;

        let first = AppendRequest {
            union_registers: Some(label_set(&[("foo", "")])),
            ..req("a/journal")
        };
        let res = append_full(&ch, first, &[], true).await.result;
        assert_rpc_error(
            res,
            Code::Unknown,
            "append stream: register modification requires non-empty Append",
            "union_registers without content",
        );
        let first = AppendRequest {
            subtract_registers: Some(label_set(&[("foo", "")])),
            ..req("a/journal")
        };
        let res = append_full(&ch, first, &[], true).await.result;
        assert_rpc_error(
            res,
            Code::Unknown,
            "append stream: register modification requires non-empty Append",
            "subtract_registers without content",
        );

        let resp = append_ok(&ch, "a/journal", b"def").await;
        assert_eq!(
            resp.registers,
            Some(LabelSet::default()),
            "registers unchanged"
        );
        assert_eq!(
            resp.commit.unwrap().begin,
            3,
            "nothing was committed by the failed appends"
        );
        assert_serving(&b).await;
    })
    .await
}

/// Scenario 7 [TestAppendRequestErrorCases] and other first-message validation errors:
/// gRPC Unknown with Gazette's exact validation text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario07_invalid_append_requests() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        create_journals(&ch, &["a/journal"]).await;

        let cases: Vec<(AppendRequest, &str)> = vec![
            (
                req("/invalid/name"),
                "Journal: cannot begin with '/' (/invalid/name)",
            ),
            (
                req("abc"),
                "Journal: invalid length (3; expected 4 <= length <= 512)",
            ),
            (req("a bad name"), "Journal: not a valid token (a bad name)"),
            (
                req("a//journal"),
                "Journal: must be a clean path (a//journal)",
            ),
            (
                req("a/journal/"),
                "Journal: must be a clean path (a/journal/)",
            ),
            (
                req("a/journal;"),
                "Journal.metadata path segment: invalid length (0; expected 1 <= length <= 512)",
            ),
            (
                AppendRequest {
                    offset: -1,
                    ..req("a/journal")
                },
                "invalid Offset (-1; expected >= 0)",
            ),
            (
                AppendRequest {
                    content: Bytes::from_static(b"foo"),
                    ..req("a/journal")
                },
                "unexpected Content",
            ),
        ];
        for (first, msg) in cases {
            let ctx = format!("first message {first:?}");
            // Send only the first message and half-close, as Go's test does.
            let res = append_full(&ch, first, &[], false).await.result;
            assert_rpc_error(res, Code::Unknown, msg, &ctx);
        }
        assert_eq!(
            read_content(&ch, "a/journal").await,
            b"",
            "nothing was appended"
        );
        assert_serving(&b).await;
    })
    .await
}

/// Scenario 8: Append to a journal that doesn't exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario08_append_journal_not_found() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        let id = broker_id(&ch).await;
        for commit in [false, true] {
            let data = if commit { chunks(&["foo"]) } else { vec![] };
            let resp = append_full(&ch, req("does/not/exist"), &data, commit)
                .await
                .result
                .expect("Append to a missing journal is a status, not an error");
            check_append_response(&resp, "scenario 8");
            assert_status(resp.status, Status::JournalNotFound, "scenario 8");
            let h = resp.header.clone().unwrap();
            check_unrouted_header(&h, "JOURNAL_NOT_FOUND header");
            assert_eq!(h.process_id, Some(id.clone()), "process_id = self");
            assert_eq!(resp.commit, None);
            assert_eq!(resp.registers, None);
            assert_eq!((resp.total_chunks, resp.delayed_chunks), (0, 0));
        }
    })
    .await
}

/// Scenario 11: O_RDONLY journal. Content ⇒ NOT_ALLOWED, sent without waiting for the
/// client's EOF; an empty append still succeeds (a transaction barrier).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario11_read_only_journal() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        let mut s = spec("read/only", &[]);
        s.flags = journal_spec::Flag::ORdonly as u32;
        apply_specs(&ch, &[s]).await;

        let mut call = ch.call(APPEND).await.expect("call");
        call.sender.send(&req("read/only")).await.expect("send");
        call.sender
            .send(&AppendRequest {
                content: Bytes::from_static(b"foo"),
                ..Default::default()
            })
            .await
            .expect("send");
        // No commit chunk, no EOF: the broker must answer anyway.
        let resp = tokio::time::timeout(
            Duration::from_secs(5),
            finish_unary_response::<courant_tests::protocol::AppendResponse>(&mut call),
        )
        .await
        .expect("NOT_ALLOWED must be sent without waiting for the client's EOF")
        .expect("NOT_ALLOWED is a status, not an error");
        check_append_response(&resp, "scenario 11");
        assert_status(resp.status, Status::NotAllowed, "content to O_RDONLY");
        check_routed_header(resp.header.as_ref().unwrap(), &b, "NOT_ALLOWED header");
        assert_eq!(resp.commit, None);
        drop(call);

        let resp = append_full(&ch, req("read/only"), &[], true)
            .await
            .result
            .expect("empty append");
        check_append_response(&resp, "empty append to O_RDONLY");
        assert_status(
            resp.status,
            Status::Ok,
            "an empty append is allowed on O_RDONLY",
        );
        let c = resp.commit.unwrap();
        assert_eq!((c.begin, c.end), (0, 0));
        // Go sums the (empty) client content: SHA1("") (append_fsm.go clientSummer).
        assert_eq!(c.sum, Some(sha1_sum(b"")), "commit sum of an empty append");
        assert_eq!(
            resp.total_chunks, 1,
            "total_chunks counts the final empty chunk"
        );
        assert_eq!(read_content(&ch, "read/only").await, b"");
    })
    .await
}

/// Explicit offsets (the parts of scenario 12 that need no fragment store): the current
/// write head is accepted, any other non-zero offset is WRONG_APPEND_OFFSET.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_explicit_offsets() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        create_journals(&ch, &["a/journal"]).await;
        append_ok(&ch, "a/journal", b"0123456789").await;

        for wrong in [5, 11, 512] {
            let first = AppendRequest {
                offset: wrong,
                ..req("a/journal")
            };
            let resp = append_full(&ch, first, &chunks(&["nope"]), true)
                .await
                .result
                .expect("Append");
            check_append_response(&resp, "wrong offset");
            assert_status(
                resp.status,
                Status::WrongAppendOffset,
                &format!("offset {wrong}"),
            );
            check_routed_header(resp.header.as_ref().unwrap(), &b, "WRONG_APPEND_OFFSET");
            assert_eq!(resp.commit, None);
        }
        let first = AppendRequest {
            offset: 10,
            ..req("a/journal")
        };
        let resp = append_full(&ch, first, &chunks(&["ok"]), true)
            .await
            .result
            .expect("Append");
        assert_status(resp.status, Status::Ok, "offset = write head");
        let c = resp.commit.unwrap();
        assert_eq!((c.begin, c.end), (10, 12));
        assert_eq!(read_content(&ch, "a/journal").await, b"0123456789ok");
    })
    .await
}

/// Many chunks, total_chunks, and sums across a multi-chunk append; appends are
/// contiguous and ordered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_many_chunks_and_sequence() {
    within(60, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        create_journals(&ch, &["multi/chunk"]).await;
        let parts: Vec<Bytes> = (0..50)
            .map(|i| Bytes::from(vec![b'a' + (i % 26) as u8; 1000 + i]))
            .collect();
        let all: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
        let resp = append_full(&ch, req("multi/chunk"), &parts, true)
            .await
            .result
            .expect("Append");
        check_append_response(&resp, "multi-chunk");
        assert_status(resp.status, Status::Ok, "multi-chunk");
        assert_eq!(resp.total_chunks, 51);
        let c = resp.commit.unwrap();
        assert_eq!((c.begin, c.end), (0, all.len() as i64));
        assert_eq!(c.sum, Some(sha1_sum(&all)));

        let mut expect = all.clone();
        for i in 0..20u8 {
            let data = vec![i; 100 + i as usize];
            let r = append_ok(&ch, "multi/chunk", &data).await;
            assert_eq!(
                r.commit.unwrap().begin,
                expect.len() as i64,
                "append {i} begins at the head"
            );
            expect.extend_from_slice(&data);
        }
        assert_eq!(read_content(&ch, "multi/chunk").await, expect);
    })
    .await
}

/// Concurrent appends to one journal (many streams on one connection and on several
/// connections) never interleave: each commit is a contiguous span holding exactly its
/// client's bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_do_not_interleave() {
    within(60, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        create_journals(&ch, &["concurrent/journal"]).await;
        let mut tasks = vec![];
        for w in 0..8u32 {
            let ch = if w % 2 == 0 {
                ch.clone()
            } else {
                b.connect().await
            };
            tasks.push(tokio::spawn(async move {
                let mut spans = vec![];
                for seq in 0..10u32 {
                    let rec = make_record(w, seq, 500 + (w * 37 + seq * 11) as usize % 3000);
                    let parts: Vec<Bytes> = rec.chunks(700).map(Bytes::copy_from_slice).collect();
                    let resp = append_full(&ch, req("concurrent/journal"), &parts, true)
                        .await
                        .result
                        .expect("Append");
                    assert_status(resp.status, Status::Ok, "concurrent append");
                    let c = resp.commit.unwrap();
                    assert_eq!(c.end - c.begin, rec.len() as i64);
                    assert_eq!(c.sum, Some(sha1_sum(&rec)));
                    spans.push((c.begin, rec));
                }
                spans
            }));
        }
        let mut spans = vec![];
        for t in tasks {
            spans.extend(t.await.expect("appender"));
        }
        spans.sort_by_key(|s| s.0);
        let content = read_content(&ch, "concurrent/journal").await;
        let mut at = 0i64;
        for (begin, rec) in &spans {
            assert_eq!(
                *begin, at,
                "commits must tile the journal without gaps/overlaps"
            );
            assert_eq!(
                &content[*begin as usize..*begin as usize + rec.len()],
                &rec[..]
            );
            at += rec.len() as i64;
        }
        assert_eq!(at as usize, content.len());
    })
    .await
}

/// Gazette rolls the journal's very first fragment after its first append
/// (append_fsm.go: "The spool holds the journal's first known write and should be
/// rolled"), so the first append is [0,9) and the next one starts a new fragment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_fragment_is_rolled_after_first_append() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        create_journals(&ch, &["first/roll"]).await;
        append_ok(&ch, "first/roll", b"foobarbaz").await;
        append_ok(&ch, "first/roll", b"bing").await;
        append_ok(&ch, "first/roll", b"xyz").await;

        let mut call = read_stream(
            &ch,
            &courant_tests::protocol::ReadRequest {
                journal: "first/roll".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        let (msgs, end) = collect::<ReadResponse>(&mut call).await;
        end.expect("Read");
        let frags: Vec<(i64, i64, i64, Option<courant_tests::protocol::Sha1Sum>)> = msgs
            .iter()
            .filter_map(|m| {
                m.fragment
                    .as_ref()
                    .map(|f| (m.offset, f.begin, f.end, f.sum))
            })
            .collect();
        assert_eq!(
            frags,
            vec![
                (0, 0, 9, Some(sha1_sum(b"foobarbaz"))),
                (9, 9, 16, Some(sha1_sum(b"bingxyz"))),
            ],
            "fragments seen by a reader: [0,9) then [9,16)"
        );
    })
    .await
}

/// The broker validates specs it is given: a journal with an unusual but valid spec
/// (labels, max_append_rate, O_RDWR) works end to end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_with_labels_and_rdwr_flag() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        let s = JournalSpec {
            flags: journal_spec::Flag::ORdwr as u32,
            max_append_rate: 1 << 30,
            ..spec(
                "labelled/journal",
                &[
                    ("app.gazette.dev/message-type", "Foo"),
                    ("content-type", "application/x-ndjson"),
                ],
            )
        };
        apply_specs(&ch, &[s]).await;
        append_ok(&ch, "labelled/journal", b"{\"a\":1}\n").await;
        assert_eq!(read_content(&ch, "labelled/journal").await, b"{\"a\":1}\n");
    })
    .await
}

/// Appends 4 × 128 KiB chunks to a journal limited to 128 KiB/s: the first chunk uses the
/// initial one-second burst, the other three wait about a second each
/// (append_flow_control.go).
async fn rate_limited_append(b: &Broker, journal: &str) -> (AppendResponse, Duration) {
    let ch = b.connect().await;
    let parts: Vec<Bytes> = (0..4u8).map(|i| Bytes::from(vec![i; 128 * 1024])).collect();
    let start = std::time::Instant::now();
    let resp = append_full(&ch, req(journal), &parts, true)
        .await
        .result
        .unwrap_or_else(|e| panic!("rate-limited append to {journal}: {e}"));
    let took = start.elapsed();
    check_append_response(&resp, journal);
    assert_status(resp.status, Status::Ok, journal);
    assert_eq!(resp.total_chunks, 5);
    let c = resp.commit.clone().unwrap();
    assert_eq!(c.end - c.begin, 512 * 1024);
    (resp, took)
}

/// A journal's max_append_rate throttles appends and counts delayed chunks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journal_max_append_rate_throttles() {
    within(40, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        let limited = JournalSpec {
            max_append_rate: 128 * 1024,
            ..spec("rate/limited", &[])
        };
        apply_specs(&ch, &[limited, spec("rate/unlimited", &[])]).await;

        let (resp, took) = rate_limited_append(&b, "rate/limited").await;
        assert_eq!(
            resp.delayed_chunks, 3,
            "three chunks waited on the max rate"
        );
        assert!(
            took >= Duration::from_millis(2400) && took <= Duration::from_secs(8),
            "512 KiB at 128 KiB/s with a 128 KiB burst takes ~3 s (took {took:?})"
        );

        let (resp, took) = rate_limited_append(&b, "rate/unlimited").await;
        assert_eq!(
            resp.delayed_chunks, 0,
            "an unlimited journal delays nothing"
        );
        assert!(
            took < Duration::from_secs(2),
            "unlimited append took {took:?}"
        );
    })
    .await
}

/// `--broker.max-append-rate` caps a journal's non-zero rate; a journal rate of 0 stays
/// unlimited (Gazette: the global flag only lowers a non-zero journal rate).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_max_append_rate_caps_journal_rate() {
    within(40, async {
        let b = Broker::start(&["--broker.max-append-rate", "131072"]).await;
        let ch = b.connect().await;
        let fast = JournalSpec {
            max_append_rate: 1 << 30,
            ..spec("rate/capped", &[])
        };
        apply_specs(&ch, &[fast, spec("rate/zero", &[])]).await;

        let (resp, took) = rate_limited_append(&b, "rate/capped").await;
        assert_eq!(
            resp.delayed_chunks, 3,
            "the global cap applies to a 1 GiB/s journal"
        );
        assert!(
            took >= Duration::from_millis(2400),
            "capped to 128 KiB/s (took {took:?})"
        );

        let (resp, took) = rate_limited_append(&b, "rate/zero").await;
        assert_eq!(
            resp.delayed_chunks, 0,
            "a journal rate of 0 stays unlimited"
        );
        assert!(took < Duration::from_secs(2), "rate 0 append took {took:?}");
    })
    .await
}

/// `min_etcd_revision` (Gazette HEAD): an Append waits until the broker's keyspace has
/// reached the revision, then proceeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_waits_for_min_etcd_revision() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        let rev = create_journals(&ch, &["rev/journal"]).await;
        let at = AppendRequest {
            min_etcd_revision: rev,
            ..req("rev/journal")
        };
        let resp = append_full(&ch, at, &chunks(&["now"]), true)
            .await
            .result
            .expect("Append at the current revision");
        assert_status(resp.status, Status::Ok, "min_etcd_revision = current");

        let ahead = AppendRequest {
            min_etcd_revision: rev + 1,
            ..req("rev/journal")
        };
        let ch2 = ch.clone();
        let waiting = tokio::spawn(async move {
            append_full(&ch2, ahead, &chunks(&["later"]), true)
                .await
                .result
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            !waiting.is_finished(),
            "an Append at a future revision must wait for it"
        );
        create_journals(&ch, &["rev/other"]).await;
        let resp = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("Append proceeds once the revision is reached")
            .unwrap()
            .expect("Append");
        assert_status(resp.status, Status::Ok, "after the revision was reached");
        assert!(resp.header.unwrap().etcd.unwrap().revision > rev);
        assert_eq!(read_content(&ch, "rev/journal").await, b"nowlater");
    })
    .await
}

/// Many connections at once, each appending: all succeed and nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_connections() {
    within(60, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        create_journals(&ch, &["many/conns"]).await;
        let mut tasks = vec![];
        for w in 0..100u32 {
            let c = b.connect().await;
            tasks.push(tokio::spawn(async move {
                let rec = make_record(w, 0, 100);
                let r = append_ok(&c, "many/conns", &rec).await;
                (r.commit.unwrap().begin, rec)
            }));
        }
        let mut spans = vec![];
        for t in tasks {
            spans.push(t.await.unwrap());
        }
        spans.sort_by_key(|s| s.0);
        let content = read_content(&ch, "many/conns").await;
        let expect: Vec<u8> = spans.iter().flat_map(|s| s.1.iter().copied()).collect();
        assert!(content == expect, "100 appends tile the journal");
    })
    .await
}

/// The commit carries the spec's compression codec, and so do the fragments a reader
/// sees; a local spool is read back uncompressed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_uses_spec_codec() {
    within(30, async {
        let b = Broker::start(&[]).await;
        let ch = b.connect().await;
        for (name, codec) in [
            (
                "codec/snappy",
                courant_tests::protocol::CompressionCodec::Snappy,
            ),
            (
                "codec/gzip",
                courant_tests::protocol::CompressionCodec::Gzip,
            ),
            (
                "codec/zstd",
                courant_tests::protocol::CompressionCodec::Zstandard,
            ),
        ] {
            let mut s = spec(name, &[]);
            s.fragment.as_mut().unwrap().compression_codec = codec as i32;
            apply_specs(&ch, &[s]).await;
            let resp = append_ok(&ch, name, b"compress me").await;
            assert_eq!(
                resp.commit.unwrap().compression_codec,
                codec as i32,
                "{name}: commit codec"
            );
            let mut call = read_stream(
                &ch,
                &courant_tests::protocol::ReadRequest {
                    journal: name.into(),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
            let (msgs, end) = collect::<ReadResponse>(&mut call).await;
            end.expect("Read");
            assert_eq!(
                msgs[0].fragment.as_ref().map(|f| f.compression_codec),
                Some(codec as i32),
                "{name}: fragment codec"
            );
            assert_eq!(
                read_content(&ch, name).await,
                b"compress me",
                "{name}: content"
            );
        }
    })
    .await
}
