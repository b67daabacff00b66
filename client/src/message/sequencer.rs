//! Gazette's read-committed [`Sequencer`] (Go `message/sequencer.go`): it takes
//! read-uncommitted messages in journal order and releases the committed ones, in the order
//! Gazette releases them.
//!
//! Per journal and producer it keeps a partial sequence: the last acknowledged clock
//! (`min_clock`, exclusive), the largest clock queued (`max_clock`, inclusive), the offset
//! where the pending span began (`begin`, or -1), and the span's messages. Where Go keeps a
//! fixed ring of recent messages and re-reads the journal ("replay") when a span outgrew it,
//! this sequencer keeps each pending span whole, within a byte budget
//! ([`Sequencer::with_budget`]); it releases the same messages in the same order.
//!
//! A sequencer restored from a [`Checkpoint`](super::checkpoint::Checkpoint) expects the
//! journal again from the checkpoint's start offset, which may lie before the read-through
//! offset when a span was pending. Messages before the read-through offset were sequenced
//! already: only the pending spans' messages among them are taken back ("catch-up"), which
//! does what Go's replay does.
//!
//! Lives on: the task that reads; not shared.

use super::framing::Message;
use super::uuid::{Clock, Flags, ProducerId, Uuid};
use crate::Error;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

/// A message read from a journal, with its `[begin, end)` offsets.
#[derive(Clone, Debug, PartialEq)]
pub struct Envelope {
    pub journal: String,
    pub begin: i64,
    pub end: i64,
    pub uuid: Uuid,
    pub message: Message,
}

/// A producer of one journal.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JournalProducer {
    pub journal: String,
    pub producer: ProducerId,
}

/// What a checkpoint keeps of a producer (Go `ProducerState`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProducerState {
    pub jp: JournalProducer,
    /// Clock of the producer's last acknowledged (and processed) message.
    pub last_ack: Clock,
    /// Offset where its pending span began, or -1.
    pub begin: i64,
}

/// The decision taken for one queued message (Go `QueueOutcome`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueOutcome {
    /// An OUTSIDE_TXN message at or below the last acknowledged clock: a replay, ignored.
    OutsideAlreadyAcked,
    /// An OUTSIDE_TXN message, committed: dequeue now.
    OutsideCommit,
    /// A CONTINUE_TXN message at or below the last acknowledged clock: ignored.
    ContinueAlreadyAcked,
    /// A CONTINUE_TXN message at or below a clock already queued in its span: ignored.
    ContinueTxnClockLarger,
    /// A CONTINUE_TXN message starting a span.
    ContinueBeginSpan,
    /// A CONTINUE_TXN message extending a span.
    ContinueExtendSpan,
    /// An ACK_TXN at or below the last acknowledged clock: the span is rolled back.
    AckRollback,
    /// An ACK_TXN with no span before it: dequeue now (only the ACK itself).
    AckEmpty,
    /// An ACK_TXN committing its span through its clock: dequeue now. (Go tells
    /// `AckCommitRing` from `AckCommitReplay`; spans here are always whole.)
    AckCommit,
    /// A message before the read-through offset, re-read after a restore, that belongs to a
    /// span still pending in the checkpoint: taken back into that span.
    CatchUpContinue,
    /// A message before the read-through offset that was sequenced already: ignored.
    AlreadySequenced,
}

impl QueueOutcome {
    /// Whether committed messages now wait to be dequeued.
    pub fn commits(self) -> bool {
        matches!(
            self,
            QueueOutcome::OutsideCommit | QueueOutcome::AckEmpty | QueueOutcome::AckCommit
        )
    }
}

/// A partial, not yet acknowledged, sequence of one producer (Go `partialSeq`).
#[derive(Debug, Default)]
struct Partial {
    min_clock: Clock,
    max_clock: Clock,
    begin: i64,
    span: VecDeque<Envelope>,
}

impl Partial {
    fn settled(clock: Clock) -> Partial {
        Partial {
            min_clock: clock,
            max_clock: clock,
            begin: -1,
            span: VecDeque::new(),
        }
    }
}

/// A committed sequence being dequeued.
#[derive(Debug)]
struct Emit {
    jp: JournalProducer,
    /// False for a zero-clock message, whose producer is not tracked.
    tracked: bool,
    untracked: Partial,
    queue: VecDeque<Envelope>,
    /// End offset of the message that committed the sequence.
    end: i64,
}

/// Sequences read-uncommitted messages into read-committed ones.
#[derive(Debug)]
pub struct Sequencer {
    offsets: BTreeMap<String, i64>,
    /// Per journal, the read-through offset of the checkpoint restored: messages before it
    /// were sequenced already and are only caught up (see the module doc).
    catch_up: BTreeMap<String, i64>,
    partials: HashMap<JournalProducer, Partial>,
    pending: HashSet<JournalProducer>,
    emit: Option<Emit>,
    budget: usize,
    buffered: usize,
}

/// Default bytes of pending spans a sequencer holds before refusing more.
pub const DEFAULT_BUDGET: usize = 256 << 20;

impl Default for Sequencer {
    fn default() -> Self {
        Sequencer::new(BTreeMap::new(), Vec::new())
    }
}

impl Sequencer {
    /// A sequencer resuming from read-through offsets and producer states (Go
    /// `NewSequencer`).
    pub fn new(offsets: BTreeMap<String, i64>, states: Vec<ProducerState>) -> Sequencer {
        let partials = states
            .into_iter()
            .map(|s| {
                let partial = Partial {
                    begin: s.begin,
                    ..Partial::settled(s.last_ack)
                };
                (s.jp, partial)
            })
            .collect();
        Sequencer {
            catch_up: offsets.clone(),
            offsets,
            partials,
            pending: HashSet::new(),
            emit: None,
            budget: DEFAULT_BUDGET,
            buffered: 0,
        }
    }

    /// Sets the bytes of pending spans held before [`Sequencer::queue_uncommitted`] fails.
    pub fn with_budget(mut self, bytes: usize) -> Sequencer {
        self.budget = bytes;
        self
    }

    /// Applies the next read-uncommitted message. Fails if committed messages still wait to
    /// be dequeued, or if a pending span outgrows the budget.
    pub fn queue_uncommitted(&mut self, env: Envelope) -> Result<QueueOutcome, Error> {
        if self.emit.is_some() {
            return Err(sequencer_error(
                &env,
                "committed messages remain to dequeue".into(),
            ));
        }
        let jp = JournalProducer {
            journal: env.journal.clone(),
            producer: env.uuid.producer(),
        };
        match self.catch_up.get(&env.journal) {
            Some(&through) if env.begin < through => return self.catch_up(jp, env),
            Some(_) => {
                self.catch_up.remove(&env.journal);
            }
            None => {}
        }
        let clock = env.uuid.clock();
        if clock == Clock(0) {
            // Zero clocks (the nil UUID among them) commit at once and are not tracked.
            self.start_emit(jp, false, Partial::settled(Clock(0)), env);
            return Ok(QueueOutcome::OutsideCommit);
        }
        let partial = self
            .partials
            .entry(jp.clone())
            .or_insert_with(|| Partial::settled(Clock(clock.0 - 1)));
        let outcome = decide(partial, env.uuid.flags(), clock);
        self.apply(jp, env, clock, outcome)?;
        Ok(outcome)
    }

    fn apply(
        &mut self,
        jp: JournalProducer,
        env: Envelope,
        clock: Clock,
        outcome: QueueOutcome,
    ) -> Result<(), Error> {
        use QueueOutcome as Q;
        let end = env.end;
        match outcome {
            Q::OutsideAlreadyAcked | Q::ContinueAlreadyAcked | Q::ContinueTxnClockLarger => {}
            Q::ContinueBeginSpan | Q::ContinueExtendSpan => {
                self.reserve(&env)?;
                let partial = self
                    .partials
                    .get_mut(&jp)
                    .expect("partial was just indexed");
                if outcome == Q::ContinueBeginSpan {
                    partial.begin = env.begin;
                    self.pending.insert(jp.clone());
                }
                partial.span.push_back(env);
                partial.max_clock = clock;
            }
            Q::AckRollback => {
                let partial = self
                    .partials
                    .get_mut(&jp)
                    .expect("partial was just indexed");
                let dropped = std::mem::replace(partial, Partial::settled(clock));
                self.release(dropped.span.iter());
                self.pending.remove(&jp);
            }
            Q::OutsideCommit | Q::AckEmpty | Q::AckCommit => {
                let mut partial = self.partials.remove(&jp).expect("partial was just indexed");
                if outcome != Q::AckCommit {
                    // An OUTSIDE_TXN clobbers any pending span: an effective rollback.
                    self.release(partial.span.iter());
                    partial.span.clear();
                    partial.begin = env.begin;
                }
                partial.max_clock = clock;
                self.start_emit(jp, true, partial, env);
                return Ok(());
            }
            Q::CatchUpContinue | Q::AlreadySequenced => unreachable!("decided by catch_up"),
        }
        self.offsets.insert(jp.journal, end);
        Ok(())
    }

    /// Moves a committed span out for dequeue; its state returns to `partials` when done.
    fn start_emit(
        &mut self,
        jp: JournalProducer,
        tracked: bool,
        mut partial: Partial,
        env: Envelope,
    ) {
        let end = env.end;
        let mut queue = std::mem::take(&mut partial.span);
        self.release(queue.iter());
        queue.push_back(env);
        if tracked {
            self.partials.insert(jp.clone(), partial);
            partial = Partial::default();
        }
        self.emit = Some(Emit {
            jp,
            tracked,
            untracked: partial,
            queue,
            end,
        });
    }

    /// A message re-read from before the read-through offset, after a restore.
    fn catch_up(&mut self, jp: JournalProducer, env: Envelope) -> Result<QueueOutcome, Error> {
        let clock = env.uuid.clock();
        let takes = self.partials.get(&jp).is_some_and(|p| {
            env.uuid.flags() == Flags::CONTINUE_TXN
                && p.begin != -1
                && env.begin >= p.begin
                && clock > p.max_clock
        });
        if !takes {
            return Ok(QueueOutcome::AlreadySequenced);
        }
        self.reserve(&env)?;
        let partial = self.partials.get_mut(&jp).expect("checked above");
        partial.span.push_back(env);
        partial.max_clock = clock;
        Ok(QueueOutcome::CatchUpContinue)
    }

    fn reserve(&mut self, env: &Envelope) -> Result<(), Error> {
        let size = env_size(env);
        if self.buffered + size > self.budget {
            return Err(sequencer_error(
                env,
                format!(
                    "pending transactions hold {} bytes, over the sequencer's budget of {} bytes \
                     (a producer left a very long transaction open; raise the budget)",
                    self.buffered + size,
                    self.budget
                ),
            ));
        }
        self.buffered += size;
        Ok(())
    }

    fn release<'a>(&mut self, envs: impl Iterator<Item = &'a Envelope>) {
        for env in envs {
            self.buffered = self.buffered.saturating_sub(env_size(env));
        }
    }

    /// The next committed message, or `None` once the committed sequence is done (Go
    /// `Step`). A returned message counts as processed: a checkpoint taken after it does not
    /// deliver it again. Go's Step counts it only at the next Step; both checkpoints resume
    /// to the same deliveries.
    pub fn dequeue(&mut self) -> Option<Envelope> {
        let emit = self.emit.as_mut()?;
        let partial = match emit.tracked {
            true => self
                .partials
                .get_mut(&emit.jp)
                .expect("emitting partial is indexed"),
            false => &mut emit.untracked,
        };
        while let Some(env) = emit.queue.pop_front() {
            let clock = env.uuid.clock();
            if clock != Clock(0) && clock <= partial.min_clock {
                continue; // A duplicate within the span.
            }
            if clock > partial.max_clock && clock != Clock(0) {
                continue; // Above the acknowledged clock: rolled back.
            }
            partial.min_clock = clock;
            partial.begin = env.begin;
            return Some(env);
        }
        // Only now does the read-through offset pass the committing message, so that a
        // checkpoint taken mid-sequence makes a restored reader see that message again.
        *partial = Partial::settled(partial.min_clock);
        let emit = self.emit.take().expect("emit is set");
        self.offsets.insert(emit.jp.journal.clone(), emit.end);
        self.pending.remove(&emit.jp);
        None
    }

    /// Whether committed messages wait to be dequeued.
    pub fn is_emitting(&self) -> bool {
        self.emit.is_some()
    }

    /// Whether a span was started since the last checkpoint (Go `HasPending`).
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Bytes of pending spans held.
    pub fn buffered_bytes(&self) -> usize {
        self.buffered
    }

    /// Read-through offsets and producer states (Go `Checkpoint`). Producers whose largest
    /// clock lags the journal's most recent acknowledged clock by more than `prune_horizon`
    /// nanoseconds are forgotten; zero prunes nothing.
    pub fn checkpoint(
        &mut self,
        prune_horizon_nanos: u64,
    ) -> (BTreeMap<String, i64>, Vec<ProducerState>) {
        let mut prune: HashMap<&str, Clock> = HashMap::new();
        for (jp, partial) in &self.partials {
            let entry = prune.entry(jp.journal.as_str()).or_default();
            *entry = (*entry).max(partial.min_clock);
        }
        let horizon = (prune_horizon_nanos / 100) << 4;
        let floor: HashMap<String, Clock> = prune
            .into_iter()
            .map(|(j, c)| {
                (
                    j.to_string(),
                    Clock(if prune_horizon_nanos > 0 {
                        c.0.saturating_sub(horizon)
                    } else {
                        0
                    }),
                )
            })
            .collect();
        let emitting = self
            .emit
            .as_ref()
            .filter(|e| e.tracked)
            .map(|e| e.jp.clone());
        self.partials.retain(|jp, partial| {
            partial.max_clock >= floor[&jp.journal] || emitting.as_ref() == Some(jp)
        });
        let mut states: Vec<ProducerState> = self
            .partials
            .iter()
            .map(|(jp, p)| ProducerState {
                jp: jp.clone(),
                last_ack: p.min_clock,
                begin: p.begin,
            })
            .collect();
        states.sort_by(|a, b| a.jp.cmp(&b.jp));
        self.pending.clear();
        (self.offsets.clone(), states)
    }
}

/// Go's decision table, on the producer's partial sequence before the message.
fn decide(partial: &Partial, flags: Flags, clock: Clock) -> QueueOutcome {
    use QueueOutcome as Q;
    match flags {
        Flags::CONTINUE_TXN if clock <= partial.min_clock => Q::ContinueAlreadyAcked,
        Flags::CONTINUE_TXN if clock <= partial.max_clock => Q::ContinueTxnClockLarger,
        Flags::CONTINUE_TXN if partial.begin == -1 => Q::ContinueBeginSpan,
        Flags::CONTINUE_TXN => Q::ContinueExtendSpan,
        // An ACK below the last one means the producer restored an older checkpoint: Go
        // accepts it, falling back to at-least-once for the messages it re-sends.
        Flags::ACK_TXN if clock <= partial.min_clock => Q::AckRollback,
        Flags::ACK_TXN if partial.begin == -1 => Q::AckEmpty,
        Flags::ACK_TXN => Q::AckCommit,
        // OUTSIDE_TXN, and unknown flags treated as OUTSIDE_TXN (as Go does).
        _ if clock <= partial.min_clock => Q::OutsideAlreadyAcked,
        _ => Q::OutsideCommit,
    }
}

fn env_size(env: &Envelope) -> usize {
    usize::try_from(env.end.saturating_sub(env.begin))
        .unwrap_or(0)
        .max(1)
}

fn sequencer_error(env: &Envelope, detail: String) -> Error {
    Error::Sequencer {
        journal: env.journal.clone(),
        offset: env.begin,
        detail,
    }
}

#[cfg(test)]
mod tests {
    //! Cases of Go's `sequencer_test.go`, with the same messages and the same deliveries.
    //! Where Go answers `QueueAckCommitReplay`, this sequencer answers `AckCommit`; where Go
    //! replays after a restore, the test re-reads the journal from the checkpoint's start
    //! offset instead, as `ReadCommitted` does.
    use super::*;
    use serde_json::Value;

    const J: &str = "test/journal";
    const OUT: u16 = 0;
    const CONT: u16 = 1;
    const ACK: u16 = 2;

    fn producer(n: u8) -> ProducerId {
        ProducerId([n | 1, n, n, n, n, n])
    }

    /// Go's `newTestMsgGenerator`: 100-byte messages with 2 bytes of dead space between.
    #[derive(Default)]
    struct Gen {
        offset: i64,
    }

    impl Gen {
        fn env(&mut self, p: ProducerId, clock: u64, flags: u16) -> Envelope {
            let uuid = if clock == 0 && flags == 0 {
                Uuid::NIL
            } else {
                Uuid::build(p, Clock(clock), Flags(flags)).unwrap()
            };
            let env = Envelope {
                journal: J.to_string(),
                begin: self.offset,
                end: self.offset + 100,
                uuid,
                message: Message::Json(Value::from(clock)),
            };
            self.offset += 102;
            env
        }
    }

    fn queue(seq: &mut Sequencer, envs: &[&Envelope]) -> Vec<QueueOutcome> {
        envs.iter()
            .map(|e| seq.queue_uncommitted((*e).clone()).unwrap())
            .collect()
    }

    /// Go's `expectDeque`: the messages in order, then the partial settled at the last clock
    /// and the read-through offset past the last message.
    fn expect_deque(seq: &mut Sequencer, expect: &[&Envelope]) {
        for env in expect {
            assert_eq!(seq.dequeue().as_ref(), Some(*env));
        }
        assert_eq!(seq.dequeue(), None);
        assert!(!seq.is_emitting());
        let last = expect.last().unwrap();
        let clock = last.uuid.clock();
        if clock != Clock(0) {
            let jp = JournalProducer {
                journal: J.into(),
                producer: last.uuid.producer(),
            };
            let partial = &seq.partials[&jp];
            assert_eq!(
                (partial.min_clock, partial.max_clock, partial.begin),
                (clock, clock, -1)
            );
            assert!(partial.span.is_empty());
        }
        assert_eq!(seq.offsets[J], last.end);
    }

    use QueueOutcome::*;

    #[test]
    fn txn_sequence_cases() {
        let (mut g, mut seq) = (Gen::default(), Sequencer::default());
        let (a, b) = (producer(0xa0), producer(0xb0));

        // Sequence with internal duplicates.
        let (a1, a2) = (g.env(a, 1, CONT), g.env(a, 2, CONT));
        let (a1d, a2d, a3ack) = (g.env(a, 1, CONT), g.env(a, 2, CONT), g.env(a, 3, ACK));
        let outcomes = queue(&mut seq, &[&a1, &a2, &a1d, &a2d, &a3ack]);
        let expect = [
            ContinueBeginSpan,
            ContinueExtendSpan,
            ContinueTxnClockLarger,
        ];
        assert_eq!(
            outcomes,
            [&expect[..], &[ContinueTxnClockLarger, AckCommit]].concat()
        );
        expect_deque(&mut seq, &[&a1, &a2, &a3ack]);
        assert!(!seq.has_pending());

        // ACK without a preceding CONTINUE.
        let a4ack = g.env(a, 4, ACK);
        assert_eq!(queue(&mut seq, &[&a4ack]), [AckEmpty]);
        expect_deque(&mut seq, &[&a4ack]);

        // Partial ACK of preceding messages.
        let (a5, a7no, a6ack) = (g.env(a, 5, CONT), g.env(a, 7, CONT), g.env(a, 6, ACK));
        let outcomes = queue(&mut seq, &[&a5, &a7no, &a6ack]);
        assert_eq!(outcomes, [ContinueBeginSpan, ContinueExtendSpan, AckCommit]);
        expect_deque(&mut seq, &[&a5, &a6ack]);

        // Rollback with interleaved producer B.
        let (b1, a7r, a8r) = (g.env(b, 1, CONT), g.env(a, 7, CONT), g.env(a, 8, CONT));
        let (b2, a6abort) = (g.env(b, 2, CONT), g.env(a, 6, ACK));
        let outcomes = queue(&mut seq, &[&a7r, &b1, &a7r, &a8r, &b2, &a6abort]);
        let expect = [ContinueBeginSpan, ContinueBeginSpan, ContinueTxnClockLarger];
        let rest = [ContinueExtendSpan, ContinueExtendSpan, AckRollback];
        assert_eq!(outcomes, [expect, rest].concat());
        assert!(!seq.is_emitting());
        assert!(seq.has_pending());
        let jpa = JournalProducer {
            journal: J.into(),
            producer: a,
        };
        let pa = &seq.partials[&jpa];
        assert_eq!(
            (pa.min_clock, pa.max_clock, pa.begin),
            (Clock(6), Clock(6), -1)
        );

        // Interleaved producer ACKs.
        let b3ack = g.env(b, 3, ACK);
        assert_eq!(queue(&mut seq, &[&b3ack]), [AckCommit]);
        expect_deque(&mut seq, &[&b1, &b2, &b3ack]);
        assert!(!seq.has_pending());

        // Duplicates within the sequence and from before it.
        let (b4, b1d, b4d, b5) = (
            g.env(b, 4, CONT),
            g.env(b, 1, CONT),
            g.env(b, 4, CONT),
            g.env(b, 5, CONT),
        );
        let (b6, b2d, b7, b8ack) = (
            g.env(b, 6, CONT),
            g.env(b, 2, CONT),
            g.env(b, 7, CONT),
            g.env(b, 8, ACK),
        );
        let outcomes = queue(&mut seq, &[&b4, &b1d, &b4d, &b5, &b6, &b2d, &b7, &b8ack]);
        let expect = [
            ContinueBeginSpan,
            ContinueAlreadyAcked,
            ContinueTxnClockLarger,
            ContinueExtendSpan,
        ];
        let rest = [
            ContinueExtendSpan,
            ContinueAlreadyAcked,
            ContinueExtendSpan,
            AckCommit,
        ];
        assert_eq!(outcomes, [expect, rest].concat());
        expect_deque(&mut seq, &[&b4, &b5, &b6, &b7, &b8ack]);

        // Partial rollback where later entries are skipped.
        let (b9, b11no, b12no) = (g.env(b, 9, CONT), g.env(b, 11, CONT), g.env(b, 12, CONT));
        let (b13no, b10ack) = (g.env(b, 13, CONT), g.env(b, 10, ACK));
        let outcomes = queue(&mut seq, &[&b9, &b11no, &b12no, &b13no, &b10ack]);
        assert_eq!(outcomes[4], AckCommit);
        expect_deque(&mut seq, &[&b9, &b10ack]);

        // Interleaved ACK'd sequences.
        let (b11, a7, a8, b12) = (
            g.env(b, 11, CONT),
            g.env(a, 7, CONT),
            g.env(a, 8, CONT),
            g.env(b, 12, CONT),
        );
        let (a9ack, b13ack) = (g.env(a, 9, ACK), g.env(b, 13, ACK));
        let outcomes = queue(&mut seq, &[&b11, &a7, &a8, &b12, &a9ack]);
        let expect = [
            ContinueBeginSpan,
            ContinueBeginSpan,
            ContinueExtendSpan,
            ContinueExtendSpan,
            AckCommit,
        ];
        assert_eq!(outcomes, expect);
        expect_deque(&mut seq, &[&a7, &a8, &a9ack]);
        assert!(seq.has_pending());
        assert_eq!(queue(&mut seq, &[&b13ack]), [AckCommit]);
        expect_deque(&mut seq, &[&b11, &b12, &b13ack]);
        assert!(!seq.has_pending());

        // Reset to an earlier ACK, followed by re-use of clocks.
        let (b8reset, b9reuse, b10reuse) = (g.env(b, 8, ACK), g.env(b, 9, CONT), g.env(b, 10, ACK));
        let outcomes = queue(&mut seq, &[&b8reset, &b9reuse, &b10reuse]);
        assert_eq!(outcomes, [AckRollback, ContinueBeginSpan, AckCommit]);
        expect_deque(&mut seq, &[&b9reuse, &b10reuse]);
        assert_eq!(seq.buffered_bytes(), 0);
    }

    #[test]
    fn doc_worked_trace() {
        // The worked trace of docs/message-protocol.md, section 4.
        let mut seq = Sequencer::default();
        let (a, b) = (producer(0xa0), producer(0xb0));
        let steps = [
            (a, 11, CONT, ContinueBeginSpan, vec![]),
            (b, 21, CONT, ContinueBeginSpan, vec![]),
            (a, 12, CONT, ContinueExtendSpan, vec![]),
            (a, 13, ACK, AckCommit, vec![(a, 11), (a, 12), (a, 13)]),
            (b, 20, ACK, AckRollback, vec![]),
            (a, 12, CONT, ContinueAlreadyAcked, vec![]),
            (b, 25, OUT, OutsideCommit, vec![(b, 25)]),
        ];
        for (i, (p, clock, flags, outcome, delivered)) in steps.into_iter().enumerate() {
            let begin = 100 * i as i64;
            let uuid = Uuid::build(p, Clock(clock), Flags(flags)).unwrap();
            let message = Message::Json(Value::Null);
            let env = Envelope {
                journal: J.into(),
                begin,
                end: begin + 100,
                uuid,
                message,
            };
            assert_eq!(
                seq.queue_uncommitted(env).unwrap(),
                outcome,
                "step {}",
                i + 1
            );
            let got: Vec<_> = std::iter::from_fn(|| seq.dequeue())
                .map(|e| (e.uuid.producer(), e.uuid.clock().0))
                .collect();
            assert_eq!(got, delivered, "step {}", i + 1);
            assert_eq!(seq.offsets[J], begin + 100);
        }
        let (_, states) = seq.checkpoint(0);
        let got: Vec<_> = states.iter().map(|s| (s.last_ack.0, s.begin)).collect();
        assert_eq!(got, [(13, -1), (25, -1)]);
    }

    #[test]
    fn outside_txn_cases() {
        let (mut g, mut seq) = (Gen::default(), Sequencer::default());
        let a = producer(0xa0);
        let (a1, a2) = (g.env(a, 1, OUT), g.env(a, 2, OUT));
        assert_eq!(queue(&mut seq, &[&a1]), [OutsideCommit]);
        expect_deque(&mut seq, &[&a1]);
        assert_eq!(queue(&mut seq, &[&a2]), [OutsideCommit]);
        expect_deque(&mut seq, &[&a2]);

        // Duplicates are ignored, but move the read-through offset.
        let (a1d, a2d) = (g.env(a, 1, OUT), g.env(a, 2, OUT));
        assert_eq!(
            queue(&mut seq, &[&a1d, &a2d]),
            [OutsideAlreadyAcked, OutsideAlreadyAcked]
        );
        assert!(!seq.is_emitting());
        assert_eq!(seq.offsets[J], a2d.end);

        // Preceding CONTINUE_TXN messages are aborted.
        let (a3, a4, a5) = (g.env(a, 3, CONT), g.env(a, 4, CONT), g.env(a, 5, OUT));
        let outcomes = queue(&mut seq, &[&a3, &a4, &a5]);
        assert_eq!(
            outcomes,
            [ContinueBeginSpan, ContinueExtendSpan, OutsideCommit]
        );
        expect_deque(&mut seq, &[&a5]);
        assert!(!seq.has_pending());

        // Unknown flags are treated as OUTSIDE_TXN.
        let (a6, a7bad, a7badd) = (g.env(a, 6, CONT), g.env(a, 7, 0x100), g.env(a, 7, 0x100));
        assert_eq!(
            queue(&mut seq, &[&a6, &a7bad]),
            [ContinueBeginSpan, OutsideCommit]
        );
        expect_deque(&mut seq, &[&a7bad]);
        assert_eq!(queue(&mut seq, &[&a7badd]), [OutsideAlreadyAcked]);

        // Zero UUIDs always dequeue, untracked, and move the read-through offset.
        let (z1, z2) = (
            g.env(ProducerId::default(), 0, 0),
            g.env(ProducerId::default(), 0, 0),
        );
        assert_eq!(queue(&mut seq, &[&z1]), [OutsideCommit]);
        expect_deque(&mut seq, &[&z1]);
        assert_eq!(queue(&mut seq, &[&z2]), [OutsideCommit]);
        expect_deque(&mut seq, &[&z2]);
        assert_eq!(seq.partials.len(), 1);
        assert_eq!(seq.buffered_bytes(), 0);
    }

    /// Restores a sequencer from `seq`'s checkpoint, and re-reads `journal` from the
    /// checkpoint's start offset up to the read-through offset, as `ReadCommitted` does.
    fn restore(seq: &mut Sequencer, journal: &[&Envelope]) -> Sequencer {
        let (offsets, states) = seq.checkpoint(0);
        let start = states
            .iter()
            .filter(|s| s.begin != -1)
            .map(|s| s.begin)
            .fold(offsets[J], i64::min);
        let mut restored = Sequencer::new(offsets.clone(), states);
        for env in journal
            .iter()
            .filter(|e| e.begin >= start && e.begin < offsets[J])
        {
            let outcome = restored.queue_uncommitted((*env).clone()).unwrap();
            assert!(
                matches!(outcome, CatchUpContinue | AlreadySequenced),
                "{outcome:?}"
            );
        }
        restored
    }

    #[test]
    fn producer_states_round_trip() {
        let (mut g, mut seq1) = (Gen::default(), Sequencer::default());
        let (a, b, c) = (producer(0xa0), producer(0xb0), producer(0xc0));
        let (a1, a2, b1, b2) = (
            g.env(a, 1, CONT),
            g.env(a, 2, CONT),
            g.env(b, 1, CONT),
            g.env(b, 2, CONT),
        );
        // Unlike Go's test, z1 is generated before b3ACK, so that offsets grow in the order
        // messages are queued, as in a journal.
        let (c1ack, z1) = (g.env(c, 1, ACK), g.env(ProducerId::default(), 0, 0));
        let (b3ack, c2) = (g.env(b, 3, ACK), g.env(c, 2, CONT));
        let (c1rollback, a3ack) = (g.env(c, 1, ACK), g.env(a, 3, ACK));
        let outcomes = queue(&mut seq1, &[&a1, &a2, &b1, &b2, &c1ack]);
        assert_eq!(
            outcomes,
            [
                ContinueBeginSpan,
                ContinueExtendSpan,
                ContinueBeginSpan,
                ContinueExtendSpan,
                AckEmpty
            ]
        );
        expect_deque(&mut seq1, &[&c1ack]);
        assert_eq!(queue(&mut seq1, &[&z1]), [OutsideCommit]);
        expect_deque(&mut seq1, &[&z1]);
        assert!(seq1.has_pending());

        let journal = [&a1, &a2, &b1, &b2, &c1ack, &z1];
        let mut seq2 = restore(&mut seq1, &journal);
        assert!(!seq1.has_pending());
        let (offsets, states) = seq2.checkpoint(0);
        assert_eq!(offsets[J], z1.end);
        let state = |p: ProducerId, last_ack: u64, begin: i64| ProducerState {
            jp: JournalProducer {
                journal: J.into(),
                producer: p,
            },
            last_ack: Clock(last_ack),
            begin,
        };
        let mut expect = vec![
            state(a, 0, a1.begin),
            state(b, 0, b1.begin),
            state(c, 1, -1),
        ];
        expect.sort_by(|x, y| x.jp.cmp(&y.jp));
        assert_eq!(states, expect);

        // Both sequencers now deliver the same messages.
        for seq in [&mut seq1, &mut seq2] {
            assert_eq!(queue(seq, &[&b3ack]), [AckCommit]);
            expect_deque(seq, &[&b1, &b2, &b3ack]);
            assert_eq!(
                queue(seq, &[&c2, &c1rollback]),
                [ContinueBeginSpan, AckRollback]
            );
            assert!(!seq.is_emitting());
            assert_eq!(queue(seq, &[&a3ack]), [AckCommit]);
            expect_deque(seq, &[&a1, &a2, &a3ack]);
        }
    }

    #[test]
    fn producer_states_round_trip_during_dequeue() {
        let (mut g, mut seq1) = (Gen::default(), Sequencer::default());
        let a = producer(0xa0);
        let (a1, a2, a3ack) = (g.env(a, 1, CONT), g.env(a, 2, CONT), g.env(a, 3, ACK));
        let (a4, a5, a6ack) = (g.env(a, 4, CONT), g.env(a, 5, CONT), g.env(a, 6, ACK));
        let journal = [&a1, &a2, &a3ack, &a4, &a5, &a6ack];
        assert_eq!(queue(&mut seq1, &[&a1, &a2, &a3ack])[2], AckCommit);
        assert_eq!(seq1.dequeue().as_ref(), Some(&a1));

        // A crash after a1 was processed: the checkpoint reads through a2 and restarts at
        // a1, with a1 acknowledged, so a restored reader delivers a2 and a3ACK only.
        let mut seq2 = restore(&mut seq1, &journal);
        let (offsets, states) = seq2.checkpoint(0);
        assert_eq!(offsets[J], a2.end);
        assert_eq!((states[0].last_ack, states[0].begin), (Clock(1), a1.begin));
        assert_eq!(queue(&mut seq2, &[&a3ack]), [AckCommit]);
        expect_deque(&mut seq2, &[&a2, &a3ack]);
        expect_deque(&mut seq1, &[&a2, &a3ack]);

        // A checkpoint part way through the next sequence, after a4 and a5.
        assert_eq!(queue(&mut seq1, &[&a4, &a5, &a6ack])[2], AckCommit);
        assert_eq!(seq1.dequeue().as_ref(), Some(&a4));
        assert_eq!(seq1.dequeue().as_ref(), Some(&a5));
        let mut seq2 = restore(&mut seq1, &journal);
        let (offsets, states) = seq2.checkpoint(0);
        assert_eq!(offsets[J], a5.end);
        assert_eq!((states[0].last_ack, states[0].begin), (Clock(5), a5.begin));
        assert_eq!(queue(&mut seq2, &[&a6ack]), [AckCommit]);
        expect_deque(&mut seq2, &[&a6ack]);
        expect_deque(&mut seq1, &[&a6ack]);
    }

    #[test]
    fn producer_states_straddle_duplicate() {
        let (mut g, mut seq1) = (Gen::default(), Sequencer::default());
        let a = producer(0xa0);
        let (a1, a2, a3) = (g.env(a, 1, CONT), g.env(a, 2, CONT), g.env(a, 3, CONT));
        let (a1d, a2d, a3d, a4ack) = (
            g.env(a, 1, CONT),
            g.env(a, 2, CONT),
            g.env(a, 3, CONT),
            g.env(a, 4, ACK),
        );
        assert_eq!(
            queue(&mut seq1, &[&a1, &a2, &a3]),
            [ContinueBeginSpan, ContinueExtendSpan, ContinueExtendSpan]
        );
        let mut seq2 = restore(&mut seq1, &[&a1, &a2, &a3]);
        for seq in [&mut seq1, &mut seq2] {
            let outcomes = queue(seq, &[&a1d, &a2d, &a3d, &a4ack]);
            assert_eq!(
                outcomes,
                [
                    ContinueTxnClockLarger,
                    ContinueTxnClockLarger,
                    ContinueTxnClockLarger,
                    AckCommit
                ]
            );
            expect_deque(seq, &[&a1, &a2, &a3, &a4ack]);
        }
    }

    #[test]
    fn producer_pruning() {
        let (mut g, mut seq) = (Gen::default(), Sequencer::default());
        let (a, b, c) = (producer(0xa0), producer(0xb0), producer(0xc0));
        let (a_cont, b_cont) = (g.env(a, 10 << 4, CONT), g.env(b, 19 << 4, CONT));
        let (b_ack, c_cont) = (g.env(b, 20 << 4, ACK), g.env(c, 30 << 4, CONT));
        queue(&mut seq, &[&a_cont, &b_cont, &b_ack]);
        expect_deque(&mut seq, &[&b_cont, &b_ack]);
        queue(&mut seq, &[&c_cont]);
        let producers = |states: Vec<ProducerState>| -> Vec<ProducerId> {
            let mut ids: Vec<_> = states.into_iter().map(|s| s.jp.producer).collect();
            ids.sort();
            ids
        };
        assert_eq!(producers(seq.checkpoint(20 * 100).1), [a, b, c]);
        assert_eq!(producers(seq.checkpoint(19 * 100).1), [b, c]);
        assert_eq!(producers(seq.checkpoint(1).1), [c]);
    }

    #[test]
    fn budget_and_dequeue_order_errors() {
        let (mut g, mut seq) = (Gen::default(), Sequencer::default().with_budget(250));
        let a = producer(0xa0);
        let (a1, a2, a3) = (g.env(a, 1, CONT), g.env(a, 2, CONT), g.env(a, 3, CONT));
        queue(&mut seq, &[&a1, &a2]);
        match seq.queue_uncommitted(a3.clone()) {
            Err(Error::Sequencer {
                journal,
                offset,
                detail,
            }) => {
                assert_eq!((journal.as_str(), offset), (J, a3.begin));
                assert!(detail.contains("budget of 250"), "{detail}");
            }
            other => panic!("expected a budget error, got {other:?}"),
        }
        let a4ack = g.env(a, 4, ACK);
        assert_eq!(queue(&mut seq, &[&a4ack]), [AckCommit]);
        let err = seq.queue_uncommitted(g.env(a, 5, OUT)).unwrap_err();
        assert!(err.to_string().contains("remain to dequeue"), "{err}");
        expect_deque(&mut seq, &[&a1, &a2, &a4ack]);
    }
}
