//! End-to-end tests of the message layer over in-memory journals: a Publisher writes, a
//! ReadCommitted reads, transactions commit and roll back across two journals, and readers
//! resume from checkpoints taken at every point, delivering each committed message once.

use super::framing::{CONTENT_TYPE_CSV, CONTENT_TYPE_JSON_LINES, CONTENT_TYPE_PROTO_FIXED};
use super::memory::{ChunkSource, MemoryJournals};
use super::*;
use serde_json::json;
use std::sync::Arc;

const PRODUCER: ProducerId = ProducerId([0x01, 0x02, 0x03, 0x04, 0x05, 0x06]);

fn json_framing() -> Framing {
    Framing::for_content_type("j", CONTENT_TYPE_JSON_LINES, &FramingOptions::default()).unwrap()
}

fn msg(n: u64) -> Message {
    Message::Json(json!({ "n": n }))
}

/// The `n` of every message read from `journal`, reading everything.
async fn read_all(journals: &MemoryJournals, journal: &str) -> Vec<u64> {
    let mut reader = ReadCommitted::new(journal, json_framing(), journals.source(journal, 0, 7));
    let mut out = Vec::new();
    while let Some(env) = reader.next().await.unwrap() {
        out.push(n_of(&env));
    }
    out
}

fn n_of(env: &Envelope) -> u64 {
    match &env.message {
        Message::Json(value) => value["n"].as_u64().unwrap(),
        other => panic!("unexpected message {other:?}"),
    }
}

async fn publish(publisher: &mut Publisher<MemoryJournals>, journal: &str, n: u64, txn: bool) {
    let mut message = msg(n);
    let framing = json_framing();
    if txn {
        publisher
            .publish_uncommitted(journal, &framing, &mut message)
            .await
            .unwrap();
    } else {
        publisher
            .publish_committed(journal, &framing, &mut message)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn transactions_commit_and_roll_back_across_two_journals() {
    let journals = MemoryJournals::default();
    let mut p = Publisher::with_clock(journals.clone(), PRODUCER, Clock::from_unix_nanos(1 << 60));
    let mut q = Publisher::new(journals.clone());
    publish(&mut p, "a", 1, true).await;
    publish(&mut p, "b", 2, true).await;
    publish(&mut q, "a", 100, false).await; // Another producer, committed on its own.
    publish(&mut p, "a", 3, true).await;
    p.commit().await.unwrap();
    publish(&mut p, "a", 4, true).await; // Rolled back.
    publish(&mut p, "b", 5, true).await; // Rolled back.
    p.rollback().await.unwrap();
    publish(&mut p, "b", 6, true).await;
    publish(&mut p, "a", 7, false).await; // Committed on its own, after the rollback.
    p.commit().await.unwrap();
    publish(&mut p, "a", 8, true).await; // Never acknowledged.
    p.flush().await.unwrap();
    q.flush().await.unwrap();

    // Messages of a transaction are released at its ACK, after q's message.
    assert_eq!(read_all(&journals, "a").await, [100, 1, 3, 7]);
    assert_eq!(read_all(&journals, "b").await, [2, 6]);
}

/// Writes three transactions of two producers over journals "a" and "b", interleaved, with
/// a rollback and committed messages between; returns what readers of "a" must deliver.
async fn fixture(journals: &MemoryJournals) -> Vec<u64> {
    let mut p = Publisher::with_clock(journals.clone(), PRODUCER, Clock::from_unix_nanos(1 << 60));
    let mut q = Publisher::with_clock(
        journals.clone(),
        ProducerId([9; 6]),
        Clock::from_unix_nanos(1 << 60),
    );
    for n in [1, 2] {
        publish(&mut p, "a", n, true).await;
        publish(&mut q, "a", 10 + n, true).await;
    }
    publish(&mut p, "b", 3, true).await;
    p.commit().await.unwrap();
    publish(&mut q, "a", 13, true).await;
    publish(&mut p, "a", 4, false).await;
    q.rollback().await.unwrap();
    for n in [15, 16, 17] {
        publish(&mut q, "a", n, true).await;
    }
    publish(&mut p, "a", 5, true).await;
    q.commit().await.unwrap();
    p.commit().await.unwrap();
    vec![1, 2, 4, 15, 16, 17, 5]
}

#[tokio::test]
async fn resuming_from_a_checkpoint_at_every_point_delivers_each_message_once() {
    let journals = MemoryJournals::default();
    let expect = fixture(&journals).await;
    assert_eq!(read_all(&journals, "a").await, expect);

    for crash_after in 0..=expect.len() {
        let mut reader = ReadCommitted::new("a", json_framing(), journals.source("a", 0, 5));
        let mut delivered = Vec::new();
        while delivered.len() < crash_after {
            delivered.push(n_of(&reader.next().await.unwrap().unwrap()));
        }
        // The consumer stores the checkpoint with its state, then crashes.
        let stored = reader.checkpoint().to_json();
        drop(reader);

        let checkpoint = Checkpoint::from_json(&stored).unwrap();
        let start = checkpoint.start_offset("a");
        let source = journals.source("a", start, 3);
        let mut resumed = ReadCommitted::resume("a", json_framing(), source, &checkpoint);
        while let Some(env) = resumed.next().await.unwrap() {
            delivered.push(n_of(&env));
        }
        assert_eq!(delivered, expect, "crash after {crash_after} messages");
    }
}

#[tokio::test]
async fn a_checkpoint_between_reads_resumes_a_pending_transaction() {
    // The reader reaches the end of the journal while a transaction is open, checkpoints,
    // and resumes once the transaction's ACK was written.
    let journals = MemoryJournals::default();
    let mut p = Publisher::with_clock(journals.clone(), PRODUCER, Clock::from_unix_nanos(1 << 60));
    publish(&mut p, "a", 1, false).await;
    publish(&mut p, "a", 2, true).await;
    publish(&mut p, "a", 3, true).await;
    let mut reader = ReadCommitted::new("a", json_framing(), journals.source("a", 0, 1 << 20));
    assert_eq!(n_of(&reader.next().await.unwrap().unwrap()), 1);
    assert!(reader.next().await.unwrap().is_none());
    assert!(reader.has_pending());
    let checkpoint = reader.checkpoint();
    assert!(checkpoint.start_offset("a") < checkpoint.sources["a"].read_through);
    p.commit().await.unwrap();
    let source = journals.source("a", checkpoint.start_offset("a"), 1 << 20);
    let mut resumed = ReadCommitted::resume("a", json_framing(), source, &checkpoint);
    let mut delivered = Vec::new();
    while let Some(env) = resumed.next().await.unwrap() {
        delivered.push(n_of(&env));
    }
    assert_eq!(delivered, [2, 3]);
}

#[tokio::test]
async fn a_recovering_consumer_rewrites_its_ack_intents_and_republishes_once() {
    // Gazette's consumer recovery: the transaction in flight at a crash is rolled back by
    // re-writing the ACK intents of the last checkpoint, then redone with the same producer,
    // from the clock the checkpoint stored, so its clocks repeat.
    let journals = MemoryJournals::default();
    let start = Clock::from_unix_nanos(1 << 60);
    let mut p = Publisher::with_clock(journals.clone(), PRODUCER, start);
    publish(&mut p, "a", 1, true).await;
    publish(&mut p, "b", 2, true).await;
    let intents = p.build_ack_intents().unwrap();
    let mut checkpoint = Checkpoint::default();
    checkpoint.set_ack_intents(&intents);
    let stored = checkpoint.to_proto();
    let stored_clock = p.clock();
    p.write_intents(&intents).await.unwrap();
    publish(&mut p, "a", 3, true).await; // In flight at the crash.
    publish(&mut p, "b", 4, true).await;
    drop(p);

    let mut p = Publisher::with_clock(journals.clone(), PRODUCER, stored_clock);
    let restored = Checkpoint::from_proto(&stored).unwrap();
    p.write_intents(&restored.intents()).await.unwrap();
    publish(&mut p, "a", 3, true).await;
    publish(&mut p, "b", 4, true).await;
    p.commit().await.unwrap();
    assert_eq!(read_all(&journals, "a").await, [1, 3]);
    assert_eq!(read_all(&journals, "b").await, [2, 4]);
}

#[tokio::test]
async fn proto_and_csv_journals_round_trip_through_publisher_and_reader() {
    let journals = MemoryJournals::default();
    let field = ProtoUuidField {
        field: 1,
        encoding: UuidEncoding::Bytes,
    };
    let options = FramingOptions {
        proto_uuid: Some(Arc::new(field)),
        ..Default::default()
    };
    let proto = Framing::for_content_type("p", CONTENT_TYPE_PROTO_FIXED, &options).unwrap();
    let csv = Framing::for_content_type("c", CONTENT_TYPE_CSV, &options).unwrap();
    let mut p = Publisher::with_clock(journals.clone(), PRODUCER, Clock::from_unix_nanos(1 << 60));
    let mut pm = Message::Proto(bytes::Bytes::from_static(&[0x12, 0x02, b'h', b'i']));
    let mut cm = Message::Csv(vec![String::new(), "x,y".into()]);
    let pu = p.publish_uncommitted("p", &proto, &mut pm).await.unwrap();
    let cu = p.publish_uncommitted("c", &csv, &mut cm).await.unwrap();
    p.commit().await.unwrap();
    for (journal, framing, uuid, message) in [("p", proto, pu, pm), ("c", csv, cu, cm)] {
        let mut reader = ReadCommitted::new(journal, framing, journals.source(journal, 0, 4));
        let env = reader.next().await.unwrap().unwrap();
        assert_eq!((env.uuid, env.message, env.begin), (uuid, message, 0));
        assert!(reader.next().await.unwrap().is_none());
    }
}

/// One chunk a source yields, or its error.
type Chunk = Result<(i64, bytes::Bytes), Error>;

fn chunks(list: Vec<Chunk>) -> ChunkSource {
    ChunkSource {
        chunks: list.into(),
    }
}

fn line(n: u64, uuid: Uuid) -> bytes::Bytes {
    bytes::Bytes::from(format!("{{\"UUID\":\"{uuid}\",\"n\":{n}}}\n"))
}

#[tokio::test]
async fn offset_jumps_reset_the_framer_and_backwards_sources_are_errors() {
    let uuid = |c: u64| Uuid::build(PRODUCER, Clock(c << 4), Flags::OUTSIDE_TXN).unwrap();
    let first = line(1, uuid(1));
    let len = first.len() as i64;
    // A partial message, then a jump past removed content to a whole message.
    let partial = first.slice(..10);
    let source = chunks(vec![
        Ok((0, first.clone())),
        Ok((len, partial)),
        Ok((1000, line(2, uuid(2)))),
    ]);
    let mut reader = ReadCommitted::new("j", json_framing(), source);
    let a = reader.next().await.unwrap().unwrap();
    let b = reader.next().await.unwrap().unwrap();
    assert_eq!((n_of(&a), a.begin, a.end), (1, 0, len));
    assert_eq!((n_of(&b), b.begin), (2, 1000));
    assert!(reader.next().await.unwrap().is_none());
    assert_eq!(
        reader.checkpoint().sources["j"].read_through,
        1000 + b.end - b.begin
    );

    let source = chunks(vec![Ok((0, first.clone())), Ok((5, first.clone()))]);
    let mut reader = ReadCommitted::new("j", json_framing(), source);
    reader.next().await.unwrap();
    let err = reader.next().await.unwrap_err();
    assert!(err.to_string().contains("went back"), "{err}");
}

#[tokio::test]
async fn framing_and_source_errors_name_journal_and_offset() {
    let uuid = Uuid::build(PRODUCER, Clock(16), Flags::OUTSIDE_TXN).unwrap();
    let first = line(1, uuid);
    let len = first.len() as i64;
    let cases: Vec<(Vec<Chunk>, &str, i64)> = vec![
        (
            vec![
                Ok((0, first.clone())),
                Ok((len, bytes::Bytes::from_static(b"{oops}\n"))),
            ],
            "invalid JSON",
            len,
        ),
        (
            vec![
                Ok((0, first.clone())),
                Ok((len, bytes::Bytes::from_static(b"{\"n\":"))),
            ],
            "incomplete",
            len,
        ),
        (
            vec![Ok((0, bytes::Bytes::from(vec![b'x'; 100])))],
            "exceeds the limit",
            0,
        ),
    ];
    for (list, expect, offset) in cases {
        let limits = Limits {
            max_message_size: 80,
        };
        let mut reader =
            ReadCommitted::new("j/x", json_framing(), chunks(list)).with_limits(limits);
        let mut result = Ok(None);
        for _ in 0..3 {
            result = reader.next().await;
            if result.is_err() {
                break;
            }
        }
        match result {
            Err(Error::Framing {
                journal,
                offset: at,
                detail,
            }) => {
                assert_eq!((journal.as_str(), at), ("j/x", offset), "{detail}");
                assert!(detail.contains(expect), "{detail:?} lacks {expect:?}");
            }
            other => panic!("expected a framing error for {expect:?}, got {other:?}"),
        }
    }
    // A source's own error passes through.
    let source = chunks(vec![Err(Error::Invalid("broker went away".into()))]);
    let err = ReadCommitted::new("j", json_framing(), source)
        .next()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("broker went away"));
}

#[tokio::test]
async fn acks_are_yielded_only_when_asked() {
    let journals = MemoryJournals::default();
    let mut p = Publisher::with_clock(journals.clone(), PRODUCER, Clock::from_unix_nanos(1 << 60));
    publish(&mut p, "a", 1, true).await;
    p.commit().await.unwrap();
    let source = journals.source("a", 0, 64);
    let mut reader = ReadCommitted::new("a", json_framing(), source).with_acks(true);
    let flags: Vec<Flags> = [reader.next().await.unwrap(), reader.next().await.unwrap()]
        .into_iter()
        .map(|env| env.unwrap().uuid.flags())
        .collect();
    assert_eq!(flags, [Flags::CONTINUE_TXN, Flags::ACK_TXN]);
}

/// A small deterministic generator (xorshift), so that failures reproduce.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Random transactions of three producers over journals "a" and "b": committed messages,
/// commits and rollbacks. Returns what a reader of "a" must deliver, by a model: a
/// producer's pending messages in "a" are delivered at its commit, dropped at its rollback.
async fn random_history(journals: &MemoryJournals, rng: &mut Rng) -> Vec<u64> {
    let start = Clock::from_unix_nanos(1 << 60);
    let mut publishers: Vec<_> = (1..=3u8)
        .map(|i| Publisher::with_clock(journals.clone(), ProducerId([i * 2 + 1; 6]), start))
        .collect();
    let mut pending: Vec<Vec<u64>> = vec![Vec::new(); 3];
    let mut expect = Vec::new();
    for n in 0..60 {
        let i = rng.below(3) as usize;
        let p = &mut publishers[i];
        match rng.below(10) {
            0..=5 => {
                let journal = if rng.below(3) == 0 { "b" } else { "a" };
                publish(p, journal, n, true).await;
                if journal == "a" {
                    pending[i].push(n);
                }
            }
            6 if pending[i].is_empty() && p.touched().is_empty() => {
                // Committed on its own, only outside of a transaction (see the pitfalls).
                publish(p, "a", n, false).await;
                expect.push(n);
            }
            7 => {
                p.rollback().await.unwrap();
                pending[i].clear();
            }
            _ => {
                p.commit().await.unwrap();
                expect.append(&mut pending[i]);
            }
        }
    }
    expect
}

/// A reader of "a" with the given budget, re-reading through `journals` for replays.
fn reader_of(
    journals: &MemoryJournals,
    budget: usize,
    chunk: usize,
    checkpoint: Option<&Checkpoint>,
) -> ReadCommitted<memory::MemorySource> {
    let start = checkpoint.map_or(0, |c| c.start_offset("a"));
    let source = journals.source("a", start, chunk);
    let reader = match checkpoint {
        Some(checkpoint) => ReadCommitted::resume("a", json_framing(), source, checkpoint),
        None => ReadCommitted::new("a", json_framing(), source),
    };
    let replays = journals.clone();
    reader
        .with_budget(budget)
        .with_replay(move |offset| replays.source("a", offset, chunk))
}

#[tokio::test]
async fn random_histories_resume_exactly_once_from_any_checkpoint() {
    // Each history is read with room for every pending message, and with room for about
    // three, so that long transactions are evicted and replayed.
    for (seed, budget) in (1..=12u64).flat_map(|seed| [(seed, 1 << 20), (seed, 120)]) {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ seed);
        let journals = MemoryJournals::default();
        let expect = random_history(&journals, &mut rng).await;
        for crash_after in 0..=expect.len() {
            let chunk = 1 + rng.below(200) as usize;
            let mut reader = reader_of(&journals, budget, chunk, None);
            let mut delivered = Vec::new();
            while delivered.len() < crash_after {
                delivered.push(n_of(&reader.next().await.unwrap().unwrap()));
            }
            let checkpoint = Checkpoint::from_proto(&reader.checkpoint().to_proto()).unwrap();
            let mut resumed = reader_of(&journals, budget, chunk, Some(&checkpoint));
            while let Some(env) = resumed.next().await.unwrap() {
                delivered.push(n_of(&env));
            }
            assert_eq!(
                delivered, expect,
                "seed {seed}, budget {budget}, crash after {crash_after}"
            );
        }
    }
}

#[tokio::test]
async fn a_replay_without_a_way_to_re_read_is_an_error() {
    let journals = MemoryJournals::default();
    let mut p = Publisher::with_clock(journals.clone(), PRODUCER, Clock::from_unix_nanos(1 << 60));
    for n in 0..5 {
        publish(&mut p, "a", n, true).await;
    }
    p.commit().await.unwrap();
    let source = journals.source("a", 0, 1 << 20);
    let mut reader = ReadCommitted::new("a", json_framing(), source).with_budget(100);
    match reader.next().await {
        Err(Error::Sequencer {
            journal,
            offset,
            detail,
        }) => {
            assert_eq!((journal.as_str(), offset), ("a", 0));
            assert!(detail.contains("with_replay"), "{detail}");
        }
        other => panic!("expected a replay error, got {other:?}"),
    }
}

/// Publishing and reading run on any tokio runtime: their futures and types must be `Send`.
#[test]
fn futures_and_types_are_send() {
    fn send<T: Send>(_: &T) {}
    let journals = MemoryJournals::default();
    let mut publisher = Publisher::new(journals.clone());
    let mut message = msg(1);
    let framing = json_framing();
    send(&publisher.publish_uncommitted("a", &framing, &mut message));
    send(&publisher.flush());
    let mut reader = ReadCommitted::new("a", json_framing(), journals.source("a", 0, 1));
    send(&reader.next());
    send(&Sequencer::default());
    send(&Checkpoint::default());
}

#[tokio::test]
async fn a_restarted_publisher_rolls_back_without_a_record_of_the_journal() {
    let journals = MemoryJournals::default();
    let mut p = Publisher::with_clock(journals.clone(), PRODUCER, Clock::from_unix_nanos(1 << 60));
    publish(&mut p, "a", 1, true).await;
    p.commit().await.unwrap();
    let clock = p.clock();
    drop(p);
    let mut p = Publisher::with_clock(journals.clone(), PRODUCER, clock);
    publish(&mut p, "a", 2, true).await;
    p.rollback().await.unwrap();
    publish(&mut p, "a", 3, true).await;
    p.commit().await.unwrap();
    assert_eq!(read_all(&journals, "a").await, [1, 3]);
}

#[tokio::test]
async fn a_checkpoint_after_a_transactions_last_message_shows_it_closed() {
    let journals = MemoryJournals::default();
    let mut p = Publisher::with_clock(journals.clone(), PRODUCER, Clock::from_unix_nanos(1 << 60));
    publish(&mut p, "a", 1, true).await;
    publish(&mut p, "a", 2, true).await;
    p.commit().await.unwrap();
    publish(&mut p, "a", 3, false).await;
    let mut reader = ReadCommitted::new("a", json_framing(), journals.source("a", 0, 1 << 20));
    for (n, through) in [(1, false), (2, true), (3, true)] {
        assert_eq!(n_of(&reader.next().await.unwrap().unwrap()), n);
        let checkpoint = reader.checkpoint();
        let source = &checkpoint.sources["a"];
        let closed = source.producers.iter().all(|p| p.begin == -1);
        assert_eq!(closed, through, "after {n}");
        // Once closed, the read-through offset is past the sequence's last message.
        assert_eq!(
            source.read_through == journals.head("a"),
            n == 3,
            "after {n}"
        );
        assert_eq!(checkpoint.start_offset("a") == source.read_through, through);
    }
}

#[tokio::test]
async fn tickets_of_one_append_share_its_outcome_and_an_unresolved_one_fails() {
    use super::{AppendOutcome, AppendTicket};
    let outcome = AppendOutcome::new("a/j");
    let (first, second) = (outcome.ticket(), outcome.ticket());
    assert!(first.same_append(&second));
    assert!(first.try_result().is_none());
    let waiter = tokio::spawn(first.wait());
    tokio::task::yield_now().await;
    outcome.resolve(Ok((3, 9)));
    assert_eq!(waiter.await.unwrap().unwrap(), (3, 9));
    assert_eq!(second.wait().await.unwrap(), (3, 9));
    assert!(!AppendTicket::ready(Ok((0, 1))).same_append(&AppendTicket::ready(Ok((0, 1)))));

    // The appender stopped before resolving: its tickets fail rather than wait forever.
    let outcome = AppendOutcome::new("a/j");
    let ticket = outcome.ticket();
    drop(outcome);
    let text = ticket.wait().await.unwrap_err().to_string();
    assert!(
        text.contains("journal a/j") && text.contains("stopped"),
        "{text}"
    );
}
