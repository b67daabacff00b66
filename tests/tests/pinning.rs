//! Thread-per-core pinning (`--tpc.cores 2`): a connection accepted by one core can
//! append to and read journals owned by the other core. Responses carry
//! `x-courant-core` (the core that accepted the connection) and
//! `x-courant-owner-core` (the core owning the journal, on journal-scoped RPCs).
//! A journal is placed on the core of the connection that first calls it
//! (`broker/src/journal/owners.rs`).

use bytes::Bytes;
use courant_tests::protocol::grpc::Channel;
use courant_tests::protocol::{AppendRequest, ReadRequest, ReadResponse, Status};
use courant_tests::*;
use std::collections::HashMap;

/// The `x-courant-owner-core` of `journal`, from a non-blocking Read; also checks the
/// Read's `x-courant-core` equals `conn_core` if given.
async fn owner_core(ch: &Channel, journal: &str) -> (u32, Option<String>) {
    let mut call = read_stream(
        ch,
        &ReadRequest {
            journal: journal.into(),
            ..Default::default()
        },
    )
    .await
    .expect("Read");
    let (msgs, end) = collect::<ReadResponse>(&mut call).await;
    end.unwrap_or_else(|e| panic!("Read {journal}: {e}"));
    assert!(
        msgs[0].header.is_some(),
        "Read {journal}: first message has a header"
    );
    let h = call.response_headers();
    let owner = header_value(h, "x-courant-owner-core")
        .unwrap_or_else(|| panic!("Read {journal}: no x-courant-owner-core header in {h:?}"));
    let owner: u32 = owner.parse().expect("numeric owner core");
    (owner, header_value(h, "x-courant-core"))
}

/// The core that accepted `ch`'s connection, from a List response's `x-courant-core`.
async fn accepting_core(ch: &Channel) -> u32 {
    let mut call = ch
        .server_streaming(
            LIST,
            &courant_tests::protocol::ListRequest {
                selector: Some(selector(&[("name", "none/such")], &[])),
                ..Default::default()
            },
        )
        .await
        .expect("List");
    let (_, end) = collect::<courant_tests::protocol::ListResponse>(&mut call).await;
    end.expect("List");
    header_value(call.response_headers(), "x-courant-core")
        .unwrap_or_else(|| panic!("no x-courant-core header in {:?}", call.response_headers()))
        .parse()
        .expect("numeric core")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_core_append_and_read() {
    within(90, async {
        let b = Broker::start(&["--tpc.cores", "2"]).await;
        let ch = b.connect().await;
        let names: Vec<String> = (0..32).map(|i| format!("pin/journal-{i:02}")).collect();
        let refs: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
        create_journals(&ch, &refs).await;

        // Which core owns which journal? Each is first called over a connection of core
        // `i % 2`, which places it there; ownership must be stable across calls and
        // connections.
        let conns = conns_by_core(&b).await;
        let mut owners: HashMap<u32, String> = HashMap::new();
        for (i, n) in names.iter().enumerate() {
            let (o, _) = owner_core(&conns[&(i as u32 % 2)], n).await;
            assert_eq!(o, i as u32 % 2, "{n}: placed on its first caller's core");
            let (again, _) = owner_core(&ch, n).await;
            assert_eq!(o, again, "{n}: owner core is stable");
            let (again, _) = owner_core(&b.connect().await, n).await;
            assert_eq!(o, again, "{n}: owner core is stable");
            owners.entry(o).or_insert_with(|| n.clone());
        }
        let j0 = owners
            .get(&0)
            .cloned()
            .expect("some journal owned by core 0 (of 32)");
        let j1 = owners
            .get(&1)
            .cloned()
            .expect("some journal owned by core 1 (of 32)");

        // Append + Read each journal on the connection of the OTHER core.
        for (conn_core, journal, owner) in [(1u32, &j0, 0u32), (0u32, &j1, 1u32)] {
            let c = &conns[&conn_core];
            let ctx = format!("{journal} (owner core {owner}) via core {conn_core}");
            let data = format!("hello from core {conn_core} to {journal}");
            let out = append_full(
                c,
                AppendRequest {
                    journal: journal.clone(),
                    ..Default::default()
                },
                &[Bytes::from(data.clone())],
                true,
            )
            .await;
            let resp = out.result.unwrap_or_else(|e| panic!("{ctx}: Append: {e}"));
            check_append_response(&resp, &ctx);
            assert_status(resp.status, Status::Ok, &ctx);
            check_routed_header(resp.header.as_ref().unwrap(), &b, &ctx);
            let h = out.headers.as_ref();
            assert_eq!(
                header_value(h, "x-courant-core"),
                Some(conn_core.to_string()),
                "{ctx}: Append x-courant-core"
            );
            assert_eq!(
                header_value(h, "x-courant-owner-core"),
                Some(owner.to_string()),
                "{ctx}: Append x-courant-owner-core"
            );

            let (content, head) = read_all(c, journal, 0).await;
            assert_eq!(String::from_utf8_lossy(&content), data, "{ctx}: Read");
            assert_eq!(head, data.len() as i64);
            let (o, core) = owner_core(c, journal).await;
            assert_eq!(o, owner, "{ctx}: Read x-courant-owner-core");
            assert_eq!(
                core,
                Some(conn_core.to_string()),
                "{ctx}: Read x-courant-core"
            );
        }

        // Concurrent cross-core traffic: both connections append to both journals.
        let mut tasks = vec![];
        for (core, c) in &conns {
            for (k, j) in [&j0, &j1].into_iter().enumerate() {
                let c = c.clone();
                let j = j.clone();
                let w = core * 2 + k as u32;
                tasks.push(tokio::spawn(async move {
                    let mut out = vec![];
                    for seq in 0..15 {
                        let rec = make_record(w, seq, 200 + (seq as usize * 97) % 900);
                        let resp = append_ok(&c, &j, &rec).await;
                        out.push((j.clone(), resp.commit.unwrap().begin, rec));
                    }
                    out
                }));
            }
        }
        let mut by_journal: HashMap<String, Vec<(i64, Vec<u8>)>> = HashMap::new();
        for t in tasks {
            for (j, begin, rec) in t.await.expect("task") {
                by_journal.entry(j).or_default().push((begin, rec));
            }
        }
        for (j, mut spans) in by_journal {
            spans.sort_by_key(|s| s.0);
            for c in conns.values() {
                let content = read_content(c, &j).await;
                for (begin, rec) in &spans {
                    let at = *begin as usize;
                    assert!(content.len() >= at + rec.len(), "{j}: content too short");
                    assert!(
                        content[at..at + rec.len()] == rec[..],
                        "{j}: record at {begin}"
                    );
                }
                let records = parse_records(
                    &content[content.len() - spans.iter().map(|s| s.1.len()).sum::<usize>()..],
                )
                .unwrap_or_else(|e| panic!("{j}: {e:?}"));
                assert_eq!(records.len(), spans.len(), "{j}: record count");
            }
        }
    })
    .await
}

/// Connections accepted by core 0 and core 1 (from `x-courant-core` on List). Keeps
/// opening connections (for up to 10 s: right after start-up not every core's listener
/// may be bound yet) until both cores have accepted one.
async fn conns_by_core(b: &Broker) -> HashMap<u32, Channel> {
    let mut conns: HashMap<u32, Channel> = HashMap::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut tries = 0;
    while std::time::Instant::now() < deadline {
        tries += 1;
        let c = b.connect().await;
        let core = accepting_core(&c).await;
        assert!(
            core < 2,
            "accepting core {core} out of range for --tpc.cores 2"
        );
        conns.entry(core).or_insert(c);
        if conns.len() == 2 {
            return conns;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!(
        "{tries} connections over 10 s were all accepted by core(s) {:?}",
        conns.keys()
    );
}

/// A journal applied through one core is immediately usable through the other (Apply
/// responds only once the keyspace change is visible, as Gazette's Apply waits to read
/// its own write); a blocking Read on one core wakes on commits made through the other;
/// a List watch on one core sees Applies made through the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyspace_and_commits_propagate_across_cores() {
    within(90, async {
        let b = Broker::start(&["--tpc.cores", "2"]).await;
        let conns = conns_by_core(&b).await;

        // Apply on one core, use at once on the other.
        for i in 0..20u32 {
            let (via, other) = if i % 2 == 0 { (0, 1) } else { (1, 0) };
            let name = format!("prop/journal-{i:02}");
            create_journals(&conns[&via], &[&name]).await;
            let resp = append(&conns[&other], &name, &[b"x"])
                .await
                .unwrap_or_else(|e| panic!("{name}: append right after Apply: {e}"));
            assert_status(
                resp.status,
                Status::Ok,
                &format!("{name}: applied via core {via}, appended via core {other} at once"),
            );
            let listed = list_journals(&conns[&other], selector(&[("name", &name)], &[])).await;
            assert_eq!(
                listed.len(),
                1,
                "{name}: listed via core {other} right after Apply"
            );
        }

        // Blocking reads on both cores of journals, woken by appends via the other core.
        let mut readers = vec![];
        for i in 0..8u32 {
            let name = format!("prop/journal-{i:02}");
            for core in [0u32, 1] {
                let req = ReadRequest {
                    journal: name.clone(),
                    offset: 1,
                    block: true,
                    ..Default::default()
                };
                readers.push((name.clone(), core, read_streamed(&conns[&core], &req).await));
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        for i in 0..8u32 {
            let name = format!("prop/journal-{i:02}");
            append_ok(&conns[&(i % 2)], &name, b"wake").await;
        }
        for (name, core, mut r) in readers {
            let ctx = format!("blocking read of {name} on core {core}");
            let mut got = Vec::new();
            while got.len() < 4 {
                let m = r
                    .next_within(std::time::Duration::from_secs(10))
                    .await
                    .unwrap_or_else(|| panic!("{ctx}: not woken within 10 s"))
                    .unwrap_or_else(|e| panic!("{ctx}: {e}"))
                    .unwrap_or_else(|| panic!("{ctx}: ended"));
                check_read_response(&m, &ctx);
                got.extend_from_slice(&m.content);
            }
            assert_eq!(got, b"wake", "{ctx}");
        }

        // A watch on each core sees an Apply made through the other.
        for (watch_core, apply_core) in [(0u32, 1u32), (1, 0)] {
            let prefix = format!("watched/{watch_core}/");
            let mut w = watch_list(
                &conns[&watch_core],
                courant_tests::protocol::ListRequest {
                    selector: Some(selector(&[("name:prefix", &prefix)], &[])),
                    watch: true,
                    watch_resume: None,
                },
            )
            .await;
            let (_, js) = next_watch_snapshot(&mut w, "initial watch snapshot").await;
            assert!(js.is_empty());
            let name = format!("{prefix}journal");
            create_journals(&conns[&apply_core], &[&name]).await;
            let (_, js) = next_watch_snapshot(&mut w, "watch after a cross-core Apply").await;
            assert_eq!(
                js.len(),
                1,
                "watch on core {watch_core} sees Apply via core {apply_core}"
            );
        }
    })
    .await
}

/// A journal lives on the core of the connection that first calls it, so a writer's
/// appends cross no core; a placement holds for every later call, on any connection; a
/// name outside the keyspace is answered (JOURNAL_NOT_FOUND).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journals_live_near_their_first_writer() {
    within(60, async {
        let b = Broker::start(&["--tpc.cores", "2"]).await;
        let conns = conns_by_core(&b).await;
        let names: Vec<String> = (0..8).map(|i| format!("near/j{i}")).collect();
        let mut all: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
        all.extend(["near/on-core-0", "near/on-core-1"]);
        create_journals(&conns[&0], &all).await;

        // A name no journal has yet: answered by its hash core, not placed.
        let missing = append_full(
            &conns[&1],
            AppendRequest {
                journal: "near/missing".into(),
                ..Default::default()
            },
            &[Bytes::from_static(b"x")],
            true,
        )
        .await;
        let resp = missing.result.expect("Append to a missing journal answers");
        assert_status(resp.status, Status::JournalNotFound, "near/missing");

        // One writer per core, each on a journal of its own: both local.
        for core in [0u32, 1] {
            let journal = format!("near/on-core-{core}");
            let out = append_full(
                &conns[&core],
                AppendRequest {
                    journal: journal.clone(),
                    ..Default::default()
                },
                &[Bytes::from_static(b"hi\n")],
                true,
            )
            .await;
            let resp = out.result.unwrap_or_else(|e| panic!("{journal}: {e}"));
            assert_status(resp.status, Status::Ok, &journal);
            assert_eq!(
                header_value(out.headers.as_ref(), "x-courant-owner-core"),
                Some(core.to_string()),
                "{journal}: the first writer's core owns it"
            );
        }

        // Journals first called over core 1's connection all live on core 1.
        let mut placed = Vec::new();
        for n in &names {
            let (o, via) = owner_core(&conns[&1], n).await;
            assert_eq!(via, Some("1".to_string()));
            placed.push(o);
        }
        assert_eq!(placed, [1; 8], "placements of {names:?}");

        // Placements hold over the other core's connection and over new ones.
        for (n, &o) in names.iter().zip(&placed) {
            assert_eq!(owner_core(&conns[&0], n).await.0, o, "{n} via core 0");
            assert_eq!(owner_core(&b.connect().await, n).await.0, o, "{n} again");
        }
    })
    .await
}

/// Every response names the core that accepted its connection, including errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_names_its_core() {
    within(60, async {
        let b = Broker::start(&["--tpc.cores", "2"]).await;
        let conns = conns_by_core(&b).await;
        for (core, c) in &conns {
            let want = Some(core.to_string());
            let name = format!("names/core-{core}");
            // Apply (unary).
            let mut call = c.call(APPLY).await.expect("call");
            call.sender
                .send_frame(
                    frame_of(&courant_tests::protocol::ApplyRequest {
                        changes: vec![upsert(spec(&name, &[]))],
                    }),
                    true,
                )
                .await
                .unwrap();
            finish_unary_response::<courant_tests::protocol::ApplyResponse>(&mut call)
                .await
                .expect("Apply");
            assert_eq!(
                header_value(call.response_headers(), "x-courant-core"),
                want,
                "Apply"
            );
            // Append.
            let out = append_full(
                c,
                AppendRequest {
                    journal: name.clone(),
                    ..Default::default()
                },
                &[Bytes::from_static(b"hi")],
                true,
            )
            .await;
            out.result.expect("Append");
            assert_eq!(
                header_value(out.headers.as_ref(), "x-courant-core"),
                want,
                "Append"
            );
            assert!(
                header_value(out.headers.as_ref(), "x-courant-owner-core").is_some(),
                "Append carries x-courant-owner-core"
            );
            // Read and List.
            let (_, core_of_read) = owner_core(c, &name).await;
            assert_eq!(core_of_read, want, "Read");
            assert_eq!(Some(accepting_core(c).await.to_string()), want, "List");
            // An error response (Trailers-Only).
            let mut call = read_stream(
                c,
                &ReadRequest {
                    journal: "/invalid/journal".into(),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
            let (_, end) = collect::<ReadResponse>(&mut call).await;
            assert!(end.is_err());
            assert_eq!(
                header_value(call.response_headers(), "x-courant-core"),
                want,
                "error response"
            );
        }
    })
    .await
}
