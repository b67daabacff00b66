//! Gazette's read-committed [`Sequencer`] (Go `message/sequencer.go`): it takes
//! read-uncommitted messages in journal order and releases the committed ones, in the order
//! Gazette releases them.
//!
//! Per journal and producer it keeps a partial sequence: the last acknowledged clock
//! (`min_clock`, exclusive), the largest clock queued (`max_clock`, inclusive), the offset
//! where the pending span began (`begin`, or -1), and the span's messages. Where Go keeps a
//! fixed ring of recent messages, this sequencer keeps pending spans within a byte budget
//! ([`Sequencer::with_budget`]), evicting the oldest held messages past it. As in Go, a
//! committed span whose first messages were evicted must be re-read from the journal
//! ("replay": [`Sequencer::replay_range`], [`Sequencer::replay`]). It releases the same
//! messages in the same order as Go.
//!
//! A sequencer restored from a [`Checkpoint`](super::checkpoint::Checkpoint) expects the
//! journal again from the checkpoint's start offset, which may lie before the read-through
//! offset when a span was pending. Messages before the read-through offset were sequenced
//! already: only the pending spans' messages among them are taken back ("catch-up"), which
//! does what Go's replay after a restore does, without a second read.
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
    /// An ACK_TXN committing its span through its clock, all of it held: dequeue now (Go's
    /// `QueueAckCommitRing`).
    AckCommit,
    /// An ACK_TXN committing its span, whose first messages were evicted: replay
    /// [`Sequencer::replay_range`], then dequeue.
    AckCommitReplay,
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
            QueueOutcome::OutsideCommit
                | QueueOutcome::AckEmpty
                | QueueOutcome::AckCommit
                | QueueOutcome::AckCommitReplay
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
    /// Whether the span's first messages were evicted (they must be replayed at commit).
    evicted: bool,
}

impl Partial {
    fn settled(clock: Clock) -> Partial {
        Partial {
            min_clock: clock,
            max_clock: clock,
            begin: -1,
            span: VecDeque::new(),
            evicted: false,
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
    /// `[begin, end)` of the journal to replay before `queue`: the span's evicted messages.
    replay: Option<(i64, i64)>,
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
    /// Held messages (journal, producer, begin) in the order they arrived, oldest first: the
    /// eviction order. Entries of messages no longer held are skipped, and compacted away.
    arrivals: VecDeque<(JournalProducer, i64)>,
    /// Messages held in spans.
    held: usize,
}

/// Default bytes of pending spans a sequencer holds before evicting the oldest.
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
            arrivals: VecDeque::new(),
            held: 0,
        }
    }

    /// Sets the bytes of pending spans held before the oldest are evicted (they are then
    /// replayed from the journal when their span commits).
    pub fn with_budget(mut self, bytes: usize) -> Sequencer {
        self.budget = bytes;
        self
    }

    /// Applies the next read-uncommitted message. Fails if committed messages still wait to
    /// be dequeued.
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
        self.apply(jp, env, clock, outcome);
        match &self.emit {
            Some(emit) if emit.replay.is_some() => Ok(QueueOutcome::AckCommitReplay),
            _ => Ok(outcome),
        }
    }

    fn apply(&mut self, jp: JournalProducer, env: Envelope, clock: Clock, outcome: QueueOutcome) {
        use QueueOutcome as Q;
        let end = env.end;
        match outcome {
            Q::OutsideAlreadyAcked | Q::ContinueAlreadyAcked | Q::ContinueTxnClockLarger => {}
            Q::ContinueBeginSpan | Q::ContinueExtendSpan => {
                self.reserve(&jp, &env);
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
                    partial.evicted = false;
                }
                partial.max_clock = clock;
                self.start_emit(jp, true, partial, env);
                return;
            }
            Q::AckCommitReplay | Q::CatchUpContinue | Q::AlreadySequenced => {
                unreachable!("not decided by decide()")
            }
        }
        self.offsets.insert(jp.journal, end);
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
        // The span's first messages were evicted if the first held is not where it began.
        let first = queue
            .front()
            .expect("the committing message is queued")
            .begin;
        let replay = (partial.evicted && first != partial.begin).then_some((partial.begin, first));
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
            replay,
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
        self.reserve(&jp, &env);
        let partial = self.partials.get_mut(&jp).expect("checked above");
        partial.span.push_back(env);
        partial.max_clock = clock;
        Ok(QueueOutcome::CatchUpContinue)
    }

    /// Makes room for `env` in the budget by evicting the oldest held messages, and records
    /// its arrival. A message larger than the whole budget is still held.
    fn reserve(&mut self, jp: &JournalProducer, env: &Envelope) {
        let size = env_size(env);
        while self.buffered + size > self.budget {
            let Some((old_jp, begin)) = self.arrivals.pop_front() else {
                break;
            };
            let Some(partial) = self.partials.get_mut(&old_jp) else {
                continue;
            };
            if partial.span.front().is_some_and(|e| e.begin == begin) {
                let evicted = partial.span.pop_front().expect("checked above");
                partial.evicted = true;
                self.buffered = self.buffered.saturating_sub(env_size(&evicted));
                self.held -= 1;
            }
        }
        self.buffered += size;
        self.held += 1;
        self.arrivals.push_back((jp.clone(), env.begin));
        if self.arrivals.len() > 1024 && self.arrivals.len() > 4 * self.held {
            self.compact_arrivals();
        }
    }

    /// Rebuilds the arrival order from the messages still held. Offsets give the order within
    /// a journal; across journals the order only decides which span is replayed first.
    fn compact_arrivals(&mut self) {
        let mut live: Vec<(JournalProducer, i64)> = self
            .partials
            .iter()
            .flat_map(|(jp, p)| p.span.iter().map(move |e| (jp.clone(), e.begin)))
            .collect();
        live.sort_by_key(|(_, begin)| *begin);
        self.arrivals = live.into();
    }

    fn release<'a>(&mut self, envs: impl Iterator<Item = &'a Envelope>) {
        for env in envs {
            self.buffered = self.buffered.saturating_sub(env_size(env));
            self.held = self.held.saturating_sub(1);
        }
    }

    /// The journal and `[begin, end)` offsets to replay before the committed sequence can be
    /// dequeued (Go `ReplayRange`), or `None` if no replay is due.
    pub fn replay_range(&self) -> Option<(String, i64, i64)> {
        let emit = self.emit.as_ref()?;
        let (begin, end) = emit.replay?;
        Some((emit.jp.journal.clone(), begin, end))
    }

    /// Takes the next message read from the replay range (every producer's, in order):
    /// returns it if it is to be delivered now, as [`Sequencer::dequeue`] would.
    pub fn replay(&mut self, env: Envelope) -> Result<Option<Envelope>, Error> {
        let Some(emit) = self.emit.as_mut() else {
            return Err(sequencer_error(&env, "no replay is due".into()));
        };
        let Some((begin, end)) = emit.replay else {
            return Err(sequencer_error(&env, "no replay is due".into()));
        };
        let partial = self
            .partials
            .get_mut(&emit.jp)
            .expect("emitting partial is indexed");
        let detail = if env.journal != emit.jp.journal {
            format!("replay of wrong journal (expected {})", emit.jp.journal)
        } else if env.begin < begin.max(partial.begin) || env.end > end {
            format!("replay outside of its range [{begin}, {end})")
        } else {
            String::new()
        };
        if !detail.is_empty() {
            return Err(sequencer_error(&env, detail));
        }
        if env.uuid.producer() != emit.jp.producer {
            return Ok(None); // Other producers' messages are interleaved in the range.
        }
        Ok(take_if_committed(partial, env))
    }

    /// Ends the replay; [`Sequencer::dequeue`] then goes on with the messages held.
    pub fn finish_replay(&mut self) {
        if let Some(emit) = self.emit.as_mut() {
            emit.replay = None;
        }
    }

    /// The next committed message, or `None` once the committed sequence is done (Go
    /// `Step`). A returned message counts as processed: a checkpoint taken after it does not
    /// deliver it again. Go's Step counts it only at the next Step; both checkpoints resume
    /// to the same deliveries.
    ///
    /// While a replay is due ([`Sequencer::replay_range`]), it returns `None` and the
    /// sequence stays open.
    pub fn dequeue(&mut self) -> Option<Envelope> {
        let emit = self.emit.as_mut()?;
        if emit.replay.is_some() {
            return None;
        }
        let partial = match emit.tracked {
            true => self
                .partials
                .get_mut(&emit.jp)
                .expect("emitting partial is indexed"),
            false => &mut emit.untracked,
        };
        let mut taken = None;
        while let Some(env) = emit.queue.pop_front() {
            taken = take_if_committed(partial, env);
            if taken.is_some() {
                break;
            }
        }
        // Drop what follows that will never be delivered, so that the sequence closes as
        // soon as its last message is taken, and a checkpoint then shows it closed.
        while emit.queue.front().is_some_and(|e| !deliverable(partial, e)) {
            emit.queue.pop_front();
        }
        if emit.queue.is_empty() {
            // Only now does the read-through offset pass the committing message, so that a
            // checkpoint taken mid-sequence makes a restored reader see that message again.
            *partial = Partial::settled(partial.min_clock);
            let emit = self.emit.take().expect("emit is set");
            self.offsets.insert(emit.jp.journal.clone(), emit.end);
            self.pending.remove(&emit.jp);
        }
        taken
    }

    /// The message [`Sequencer::dequeue`] would return next, if it is already known.
    pub fn peek(&self) -> Option<&Envelope> {
        let emit = self.emit.as_ref().filter(|e| e.replay.is_none())?;
        let partial = match emit.tracked {
            true => self
                .partials
                .get(&emit.jp)
                .expect("emitting partial is indexed"),
            false => &emit.untracked,
        };
        emit.queue.iter().find(|e| deliverable(partial, e))
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

/// Go's `Step` checks: the message is delivered unless it duplicates one delivered (its
/// clock at or below `min_clock`) or was rolled back (above `max_clock`). Delivering tightens
/// the partial to it.
fn take_if_committed(partial: &mut Partial, env: Envelope) -> Option<Envelope> {
    if !deliverable(partial, &env) {
        return None;
    }
    partial.min_clock = env.uuid.clock();
    partial.begin = env.begin;
    Some(env)
}

fn deliverable(partial: &Partial, env: &Envelope) -> bool {
    let clock = env.uuid.clock();
    clock == Clock(0) || (clock > partial.min_clock && clock <= partial.max_clock)
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
        txn_sequence_cases_first_half(&mut g, &mut seq, a, b);
        txn_sequence_cases_second_half(&mut g, &mut seq, a, b);
    }

    /// Go's TestSequencerTxnSequenceCases, through "Interleaved producer ACKs".
    fn txn_sequence_cases_first_half(
        g: &mut Gen,
        seq: &mut Sequencer,
        a: ProducerId,
        b: ProducerId,
    ) {
        // Sequence with internal duplicates.
        let (a1, a2) = (g.env(a, 1, CONT), g.env(a, 2, CONT));
        let (a1d, a2d, a3ack) = (g.env(a, 1, CONT), g.env(a, 2, CONT), g.env(a, 3, ACK));
        let outcomes = queue(seq, &[&a1, &a2, &a1d, &a2d, &a3ack]);
        let expect = [
            ContinueBeginSpan,
            ContinueExtendSpan,
            ContinueTxnClockLarger,
        ];
        assert_eq!(
            outcomes,
            [&expect[..], &[ContinueTxnClockLarger, AckCommit]].concat()
        );
        expect_deque(seq, &[&a1, &a2, &a3ack]);
        assert!(!seq.has_pending());

        // ACK without a preceding CONTINUE.
        let a4ack = g.env(a, 4, ACK);
        assert_eq!(queue(seq, &[&a4ack]), [AckEmpty]);
        expect_deque(seq, &[&a4ack]);

        // Partial ACK of preceding messages.
        let (a5, a7no, a6ack) = (g.env(a, 5, CONT), g.env(a, 7, CONT), g.env(a, 6, ACK));
        let outcomes = queue(seq, &[&a5, &a7no, &a6ack]);
        assert_eq!(outcomes, [ContinueBeginSpan, ContinueExtendSpan, AckCommit]);
        expect_deque(seq, &[&a5, &a6ack]);

        // Rollback with interleaved producer B.
        let (b1, a7r, a8r) = (g.env(b, 1, CONT), g.env(a, 7, CONT), g.env(a, 8, CONT));
        let (b2, a6abort) = (g.env(b, 2, CONT), g.env(a, 6, ACK));
        let outcomes = queue(seq, &[&a7r, &b1, &a7r, &a8r, &b2, &a6abort]);
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
        assert_eq!(queue(seq, &[&b3ack]), [AckCommit]);
        expect_deque(seq, &[&b1, &b2, &b3ack]);
        assert!(!seq.has_pending());
    }

    /// Go's TestSequencerTxnSequenceCases, from "Duplicates within the sequence".
    fn txn_sequence_cases_second_half(
        g: &mut Gen,
        seq: &mut Sequencer,
        a: ProducerId,
        b: ProducerId,
    ) {
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
        let outcomes = queue(seq, &[&b4, &b1d, &b4d, &b5, &b6, &b2d, &b7, &b8ack]);
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
        expect_deque(seq, &[&b4, &b5, &b6, &b7, &b8ack]);

        // Partial rollback where later entries are skipped.
        let (b9, b11no, b12no) = (g.env(b, 9, CONT), g.env(b, 11, CONT), g.env(b, 12, CONT));
        let (b13no, b10ack) = (g.env(b, 13, CONT), g.env(b, 10, ACK));
        let outcomes = queue(seq, &[&b9, &b11no, &b12no, &b13no, &b10ack]);
        assert_eq!(outcomes[4], AckCommit);
        expect_deque(seq, &[&b9, &b10ack]);

        // Interleaved ACK'd sequences.
        let (b11, a7, a8, b12) = (
            g.env(b, 11, CONT),
            g.env(a, 7, CONT),
            g.env(a, 8, CONT),
            g.env(b, 12, CONT),
        );
        let (a9ack, b13ack) = (g.env(a, 9, ACK), g.env(b, 13, ACK));
        let outcomes = queue(seq, &[&b11, &a7, &a8, &b12, &a9ack]);
        let expect = [
            ContinueBeginSpan,
            ContinueBeginSpan,
            ContinueExtendSpan,
            ContinueExtendSpan,
            AckCommit,
        ];
        assert_eq!(outcomes, expect);
        expect_deque(seq, &[&a7, &a8, &a9ack]);
        assert!(seq.has_pending());
        assert_eq!(queue(seq, &[&b13ack]), [AckCommit]);
        expect_deque(seq, &[&b11, &b12, &b13ack]);
        assert!(!seq.has_pending());

        // Reset to an earlier ACK, followed by re-use of clocks.
        let (b8reset, b9reuse, b10reuse) = (g.env(b, 8, ACK), g.env(b, 9, CONT), g.env(b, 10, ACK));
        let outcomes = queue(seq, &[&b8reset, &b9reuse, &b10reuse]);
        assert_eq!(outcomes, [AckRollback, ContinueBeginSpan, AckCommit]);
        expect_deque(seq, &[&b9reuse, &b10reuse]);
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

    /// Feeds the replay of `range` from `journal` and checks what it delivers.
    fn expect_replay(
        seq: &mut Sequencer,
        range: (i64, i64),
        journal: &[&Envelope],
        expect: &[&Envelope],
    ) {
        assert_eq!(seq.replay_range(), Some((J.to_string(), range.0, range.1)));
        assert_eq!(seq.dequeue(), None, "no dequeue before the replay");
        let mut got = Vec::new();
        for env in journal
            .iter()
            .filter(|e| e.begin >= range.0 && e.end <= range.1)
        {
            got.extend(seq.replay((*env).clone()).unwrap());
        }
        seq.finish_replay();
        assert_eq!(got.iter().collect::<Vec<_>>(), expect);
    }

    #[test]
    fn eviction_past_the_budget_replays_as_go() {
        let (mut g, mut seq) = (Gen::default(), Sequencer::default().with_budget(250));
        let a = producer(0xa0);
        let (a1, a2, a3, a4ack) = (
            g.env(a, 1, CONT),
            g.env(a, 2, CONT),
            g.env(a, 3, CONT),
            g.env(a, 4, ACK),
        );
        let outcomes = queue(&mut seq, &[&a1, &a2, &a3, &a4ack]);
        assert_eq!(outcomes[3], AckCommitReplay);
        assert_eq!(seq.buffered_bytes(), 0);
        expect_replay(&mut seq, (a1.begin, a2.begin), &[&a1, &a2], &[&a1]);
        expect_deque(&mut seq, &[&a2, &a3, &a4ack]);
        let err = seq.queue_uncommitted(a4ack.clone());
        assert!(
            err.is_ok(),
            "queueing resumes once the sequence is dequeued"
        );
    }

    #[test]
    fn txn_without_buffer() {
        // Go's TestSequencerTxnWithoutBuffer: every span is evicted but its last message.
        let (mut g, mut seq) = (Gen::default(), Sequencer::default().with_budget(0));
        let (a, b) = (producer(0xa0), producer(0xb0));
        let (a1, a2, b1) = (g.env(a, 1, CONT), g.env(a, 2, CONT), g.env(b, 1, CONT));
        let (a1d, a2d, a3ack) = (g.env(a, 1, CONT), g.env(a, 2, CONT), g.env(a, 3, ACK));
        let (b2, b3ack) = (g.env(b, 2, CONT), g.env(b, 3, ACK));
        let journal = [&a1, &a2, &b1, &a1d, &a2d, &a3ack, &b2, &b3ack];
        let outcomes = queue(&mut seq, &[&a1, &a2, &b1, &a1d, &a2d, &a3ack]);
        assert_eq!(
            outcomes[3..],
            [
                ContinueTxnClockLarger,
                ContinueTxnClockLarger,
                AckCommitReplay
            ]
        );
        expect_replay(&mut seq, (a1.begin, a3ack.begin), &journal, &[&a1, &a2]);
        expect_deque(&mut seq, &[&a3ack]);
        assert!(seq.has_pending());
        assert_eq!(
            queue(&mut seq, &[&b2, &b3ack]),
            [ContinueExtendSpan, AckCommitReplay]
        );
        expect_replay(&mut seq, (b1.begin, b2.begin), &journal, &[&b1]);
        expect_deque(&mut seq, &[&b2, &b3ack]);
        assert!(!seq.has_pending());
    }

    #[test]
    fn replay_errors() {
        // Go's TestSequencerReplayReaderErrors: wrong journal, before or past the range.
        let (mut g, mut seq) = (Gen::default(), Sequencer::default().with_budget(0));
        let (a, b) = (producer(0xa0), producer(0xb0));
        let (b1, a2, a3) = (g.env(b, 1, CONT), g.env(a, 2, CONT), g.env(a, 3, CONT));
        let a4ack = g.env(a, 4, ACK);
        assert_eq!(
            queue(&mut seq, &[&b1, &a2, &a3, &a4ack])[3],
            AckCommitReplay
        );
        let mut wrong = a2.clone();
        wrong.journal = "wrong/journal".into();
        let mut early = a2.clone();
        early.begin -= 1;
        let mut late = a2.clone();
        late.end += 100;
        for (env, expect) in [
            (wrong, "wrong journal"),
            (early, "outside"),
            (late, "outside"),
        ] {
            let err = seq.replay(env).unwrap_err();
            assert!(err.to_string().contains(expect), "{err}");
        }
        assert_eq!(seq.replay(a2.clone()).unwrap(), Some(a2.clone()));
        seq.finish_replay();
        expect_deque(&mut seq, &[&a3, &a4ack]);
        assert!(seq.replay(a2).is_err(), "no replay is due");
        let (a5, a6ack) = (g.env(a, 5, CONT), g.env(a, 6, ACK));
        assert_eq!(
            queue(&mut seq, &[&a5, &a6ack]),
            [ContinueBeginSpan, AckCommit]
        );
        let err = seq.queue_uncommitted(g.env(a, 7, OUT)).unwrap_err();
        assert!(err.to_string().contains("remain to dequeue"), "{err}");
    }
}
