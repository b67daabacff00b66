//! Durability across `kill -9`: every acknowledged append survives byte-exact and in
//! order; bytes of unacknowledged appends appear only if that append was in flight at
//! the kill, and only after every acknowledged one (its ack was lost with the
//! connection); journal specs survive with the same revisions; revisions keep growing.

use bytes::Bytes;
use courant_tests::protocol::{AppendRequest, Status, list_response};
use courant_tests::*;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const MAIN: &str = "restart/main";
const AUX: &str = "restart/aux";

#[derive(Default)]
struct Ledger {
    /// (writer, seq) → (begin, record)
    acked: HashMap<(u32, u32), (i64, Vec<u8>)>,
    /// Appends started whose outcome was not an OK response.
    in_flight: HashSet<(u32, u32)>,
}

async fn appender(
    ch: courant_tests::protocol::grpc::Channel,
    w: u32,
    stop: Arc<AtomicBool>,
    ledger: Arc<Mutex<Ledger>>,
) {
    let mut seq = 0u32;
    while !stop.load(Ordering::Relaxed) {
        seq += 1;
        let len = 100 + ((w as usize * 7919 + seq as usize * 104_729) % 6000);
        let rec = make_record(w, seq, len);
        let parts: Vec<Bytes> = rec.chunks(1500).map(Bytes::copy_from_slice).collect();
        ledger.lock().unwrap().in_flight.insert((w, seq));
        let first = AppendRequest {
            journal: MAIN.into(),
            ..Default::default()
        };
        let res = tokio::time::timeout(
            Duration::from_secs(10),
            append_full(&ch, first, &parts, true),
        )
        .await;
        let resp = match res {
            Ok(out) => match out.result {
                Ok(r) if r.status == Status::Ok as i32 => r,
                _ => return, // The broker is gone (or refused): stop, leaving it in flight.
            },
            Err(_) => return,
        };
        let c = resp.commit.expect("OK AppendResponse has a commit");
        assert_eq!(c.end - c.begin, rec.len() as i64, "commit length");
        assert_eq!(c.sum, Some(sha1_sum(&rec)), "commit sum");
        let mut l = ledger.lock().unwrap();
        l.in_flight.remove(&(w, seq));
        l.acked.insert((w, seq), (c.begin, rec));
    }
}

/// Checks `content` against the ledger; returns the number of records present.
fn verify_content(content: &[u8], ledger: &Ledger) -> usize {
    let records = parse_records(content).unwrap_or_else(|(at, why)| {
        panic!(
            "journal content is not a clean sequence of records: {why} at offset {at} of {}",
            content.len()
        )
    });
    let max_acked_end = ledger
        .acked
        .values()
        .map(|(b, r)| b + r.len() as i64)
        .max()
        .unwrap_or(0);
    let mut seen = HashSet::new();
    for &(off, w, seq, len) in &records {
        assert!(seen.insert((w, seq)), "record w{w} s{seq} appears twice");
        match ledger.acked.get(&(w, seq)) {
            Some((begin, rec)) => {
                assert_eq!(
                    off as i64, *begin,
                    "acknowledged record w{w} s{seq} at its commit offset"
                );
                assert_eq!(len, rec.len());
            }
            None => {
                assert!(
                    ledger.in_flight.contains(&(w, seq)),
                    "record w{w} s{seq} at {off} was never acknowledged nor in flight at the kill"
                );
                assert!(
                    off as i64 >= max_acked_end,
                    "unacknowledged record w{w} s{seq} at {off} precedes acknowledged data \
                     (ends at {max_acked_end}): only the tail may hold lost-ack appends"
                );
            }
        }
    }
    for ((w, seq), (begin, _)) in &ledger.acked {
        assert!(
            seen.contains(&(*w, *seq)),
            "acknowledged record w{w} s{seq} (at {begin}) is missing after restart"
        );
    }
    records.len()
}

fn by_name(
    js: &[list_response::Journal],
) -> HashMap<String, (i64, i64, courant_tests::protocol::JournalSpec)> {
    js.iter()
        .map(|j| {
            let s = j.spec.clone().unwrap();
            (
                s.name.clone(),
                (j.create_revision, j.mod_revision, normalize_spec(s)),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_mid_append_loses_no_acknowledged_bytes() {
    within(150, async {
        let mut b = Broker::start(&[]).await;
        let ch = b.connect().await;
        apply_specs(
            &ch,
            &[
                spec(MAIN, &[]),
                spec(AUX, &[("env", "test"), ("team", "courant")]),
            ],
        )
        .await;
        apply_specs(&ch, &[spec("restart/deleted", &[])]).await;
        let r = apply(&ch, vec![delete("restart/deleted", -1)])
            .await
            .unwrap();
        assert_status(r.status, Status::Ok, "delete");
        append_ok(&ch, AUX, b"aux-1").await;
        append_ok(&ch, AUX, b"aux-2").await;
        let before = by_name(&list_journals(&ch, selector(&[], &[])).await);
        assert_eq!(before.len(), 2);
        let max_rev = before.values().map(|v| v.1).max().unwrap();

        // Four concurrent appenders on one HTTP/2 connection (so lost acks are a suffix
        // of the broker's response order), killed mid-stream.
        let stop = Arc::new(AtomicBool::new(false));
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let shared = b.connect().await;
        let tasks: Vec<_> = (0..4)
            .map(|w| tokio::spawn(appender(shared.clone(), w, stop.clone(), ledger.clone())))
            .collect();
        tokio::time::sleep(Duration::from_millis(2000)).await;
        b.kill9();
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            t.await.expect("appender task");
        }
        let ledger = Arc::try_unwrap(ledger).ok().unwrap().into_inner().unwrap();
        eprintln!(
            "kill -9 after {} acknowledged appends, {} in flight",
            ledger.acked.len(),
            ledger.in_flight.len()
        );
        assert!(
            ledger.acked.len() >= 8,
            "too few appends were acknowledged in 2 s ({}) for a meaningful test",
            ledger.acked.len()
        );

        b.restart().await;
        let ch = b.connect().await;
        let (content, head) = read_all(&ch, MAIN, 0).await;
        let present = verify_content(&content, &ledger);
        eprintln!("after restart: {present} records, {head} bytes");
        assert_eq!(read_content(&ch, AUX).await, b"aux-1aux-2");

        let after = by_name(&list_journals(&ch, selector(&[], &[])).await);
        assert_eq!(
            after, before,
            "journal specs and their create/mod revisions survive restart"
        );

        // Revisions keep growing after a restart.
        let rev = apply_specs(&ch, &[spec("restart/new", &[])]).await;
        assert!(
            rev > max_rev,
            "revision after restart ({rev}) must exceed {max_rev}"
        );

        // Appends continue at the recovered head (explicit offset, then offset 0).
        let first = AppendRequest {
            journal: MAIN.into(),
            offset: head,
            ..Default::default()
        };
        let resp = append_full(&ch, first, &[Bytes::from_static(b"after-restart|")], true)
            .await
            .result
            .expect("append at the recovered head");
        assert_status(
            resp.status,
            Status::Ok,
            "append with offset = recovered head",
        );
        assert_eq!(resp.commit.unwrap().begin, head);
        let resp = append_ok(&ch, MAIN, b"and-more").await;
        assert_eq!(resp.commit.unwrap().begin, head + 14);
        let mut expect = content.clone();
        expect.extend_from_slice(b"after-restart|and-more");
        assert!(
            read_content(&ch, MAIN).await == expect,
            "content after restart + appends"
        );

        // An idle kill -9 right after acknowledged appends loses nothing either.
        b.kill9();
        b.restart().await;
        let ch = b.connect().await;
        assert!(
            read_content(&ch, MAIN).await == expect,
            "content after the second kill -9"
        );
        assert_eq!(read_content(&ch, AUX).await, b"aux-1aux-2");
        let again = by_name(&list_journals(&ch, selector(&[], &[])).await);
        assert_eq!(again.len(), 3, "restart/new is listed too");
        for (name, v) in &before {
            assert_eq!(again.get(name), Some(v), "{name} after the second restart");
        }
        assert_serving(&b).await;
    })
    .await
}

/// Acknowledged appends from many sequential small appends survive a kill -9 with no
/// pause at all between the last ack and the kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_immediately_after_ack() {
    within(60, async {
        let mut b = Broker::start(&[]).await;
        let ch = b.connect().await;
        create_journals(&ch, &["quick/kill"]).await;
        let mut expect = Vec::new();
        for i in 0..50u32 {
            let rec = make_record(9, i, 64);
            append_ok(&ch, "quick/kill", &rec).await;
            expect.extend_from_slice(&rec);
        }
        b.kill9();
        b.restart().await;
        let ch = b.connect().await;
        let (content, head) = read_all(&ch, "quick/kill", 0).await;
        assert_eq!(head, expect.len() as i64);
        assert!(content == expect, "all 50 acknowledged appends survive");
    })
    .await
}

/// Bytes that were never committed — rolled back by the client, or still streaming when
/// the broker was killed — must not reappear after a restart (a spool recovered from its
/// file length rather than its committed length would resurrect them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_does_not_resurrect_uncommitted_bytes() {
    within(60, async {
        let mut b = Broker::start(&[]).await;
        let ch = b.connect().await;
        create_journals(
            &ch,
            &[
                "uncommitted/rolled-back",
                "uncommitted/in-flight",
                "uncommitted/overwritten",
            ],
        )
        .await;
        for j in [
            "uncommitted/rolled-back",
            "uncommitted/in-flight",
            "uncommitted/overwritten",
        ] {
            append_ok(&ch, j, b"committed").await;
        }
        let junk: Vec<Bytes> = (0..8).map(|_| Bytes::from(vec![b'X'; 16 * 1024])).collect();
        let open = |j: &str| AppendRequest {
            journal: j.into(),
            ..Default::default()
        };

        // Rolled back by EOF without the commit chunk.
        let res = append_full(&ch, open("uncommitted/rolled-back"), &junk, false)
            .await
            .result;
        assert!(res.is_err(), "EOF without commit must fail: {res:?}");

        // Rolled back, then overwritten by a committed append.
        let res = append_full(&ch, open("uncommitted/overwritten"), &junk, false)
            .await
            .result;
        assert!(res.is_err(), "EOF without commit must fail: {res:?}");
        append_ok(&ch, "uncommitted/overwritten", b"+after").await;

        // Still streaming (no commit chunk yet) when the broker dies.
        let mut s = RawStream::open(b.port(), APPEND, &[]).await;
        let _resp = s.spawn_response();
        s.send_msg(&open("uncommitted/in-flight")).await.unwrap();
        for c in &junk {
            s.send_msg(&AppendRequest {
                content: c.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        b.kill9();
        drop(s);

        b.restart().await;
        let ch = b.connect().await;
        for (j, expect) in [
            ("uncommitted/rolled-back", &b"committed"[..]),
            ("uncommitted/in-flight", &b"committed"[..]),
            ("uncommitted/overwritten", &b"committed+after"[..]),
        ] {
            let (content, head) = read_all(&ch, j, 0).await;
            assert_eq!(
                String::from_utf8_lossy(&content),
                String::from_utf8_lossy(expect),
                "{j}: only committed bytes survive"
            );
            assert_eq!(head, expect.len() as i64, "{j}: write head");
            let first = AppendRequest {
                journal: j.into(),
                offset: head,
                ..Default::default()
            };
            let resp = append_full(&ch, first, &[Bytes::from_static(b"!")], true)
                .await
                .result
                .unwrap_or_else(|e| panic!("{j}: append after restart: {e}"));
            assert_status(resp.status, Status::Ok, j);
            assert_eq!(
                resp.commit.unwrap().begin,
                head,
                "{j}: next append at the committed head"
            );
            let mut want = expect.to_vec();
            want.push(b'!');
            assert_eq!(read_content(&ch, j).await, want, "{j}");
        }
    })
    .await
}

/// The durability checker itself must reject the failures it is meant to catch.
#[test]
fn verify_content_rejects_loss_reordering_and_strays() {
    let r = |w, s| make_record(w, s, 10 + s as usize);
    let mut ledger = Ledger::default();
    let (a, b2, c) = (r(0, 1), r(1, 1), r(0, 2));
    ledger.acked.insert((0, 1), (0, a.clone()));
    ledger.acked.insert((1, 1), (a.len() as i64, b2.clone()));
    ledger.in_flight.insert((0, 2));
    let ok = [a.clone(), b2.clone()].concat();
    assert_eq!(verify_content(&ok, &ledger), 2);
    let with_tail = [a.clone(), b2.clone(), c.clone()].concat();
    assert_eq!(
        verify_content(&with_tail, &ledger),
        3,
        "in-flight tail allowed"
    );

    let fails = |data: Vec<u8>| {
        let l = &ledger;
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| verify_content(&data, l))).is_err()
    };
    assert!(fails(a.clone()), "missing acknowledged record");
    assert!(
        fails([b2.clone(), a.clone()].concat()),
        "acknowledged records out of place"
    );
    assert!(
        fails([a.clone(), c.clone(), b2.clone()].concat()),
        "in-flight record before acked data"
    );
    assert!(
        fails([a.clone(), b2.clone(), r(3, 3)].concat()),
        "record never sent"
    );
    assert!(
        fails([a.clone(), b2.clone(), b"junk".to_vec()].concat()),
        "trailing garbage"
    );
    assert!(
        fails([a.clone(), b2.clone(), c[..5].to_vec()].concat()),
        "torn record"
    );
}
