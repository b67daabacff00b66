//! [`ReadCommitted`]: a journal's committed messages, in Gazette's order (Go's
//! `ReadCommittedIter`). It frames a [`ByteSource`]'s bytes into messages, tracking each
//! message's offsets, feeds them to a [`Sequencer`], and yields what it releases. ACK_TXN
//! messages are consumed, not yielded (Gazette's consumers skip them too).
//!
//! Replays: past its budget, the sequencer evicts the oldest pending messages; when their
//! transaction commits they are read again from the journal through a second source that
//! [`ReadCommitted::with_replay`] opens (the journal layer's reader at an offset). Without
//! one, such a commit is an error that names the journal and offset.
//!
//! Resuming: [`ReadCommitted::resume`] takes a [`Checkpoint`]; the source must read from
//! [`Checkpoint::start_offset`], which is before the read-through offset when a transaction
//! was pending, so that its messages are read again. Messages delivered before the
//! checkpoint are skipped by the producers' acknowledged clocks.
//!
//! Lives on: the task that reads; not shared.

use super::ByteSource;
use super::checkpoint::Checkpoint;
use super::framing::{Framing, Limits, Unframer};
use super::sequencer::{Envelope, Sequencer};
use super::uuid::Flags;
use crate::Error;
use bytes::Bytes;

/// Opens a source of the same journal at an offset, for replays.
pub type OpenReplay<S> = Box<dyn FnMut(i64) -> S + Send>;

/// Committed messages of one journal.
pub struct ReadCommitted<S: ByteSource> {
    journal: String,
    source: S,
    unframer: Unframer,
    sequencer: Sequencer,
    /// True until the first chunk: the source may start past the expected offset.
    first_chunk: bool,
    include_acks: bool,
    open_replay: Option<OpenReplay<S>>,
    /// The replay under way: its source, its unframer, and where it ends.
    replaying: Option<(S, Unframer, i64)>,
}

impl<S: ByteSource> ReadCommitted<S> {
    /// Reads `journal` from wherever `source` starts (a fresh reader, nothing delivered yet).
    pub fn new(journal: &str, framing: Framing, source: S) -> ReadCommitted<S> {
        ReadCommitted {
            journal: journal.to_string(),
            source,
            unframer: Unframer::new(journal, framing, Limits::default(), 0),
            sequencer: Sequencer::default(),
            first_chunk: true,
            include_acks: false,
            open_replay: None,
            replaying: None,
        }
    }

    /// Resumes from a checkpoint: `source` must read `journal` from
    /// `checkpoint.start_offset(journal)`. Only this journal's part of the checkpoint is used.
    pub fn resume(
        journal: &str,
        framing: Framing,
        source: S,
        checkpoint: &Checkpoint,
    ) -> ReadCommitted<S> {
        let mut own = Checkpoint::default();
        if let Some(source) = checkpoint.sources.get(journal) {
            own.sources.insert(journal.to_string(), source.clone());
        }
        let start = checkpoint.start_offset(journal);
        ReadCommitted {
            journal: journal.to_string(),
            source,
            unframer: Unframer::new(journal, framing, Limits::default(), start),
            sequencer: own.sequencer(),
            first_chunk: false,
            include_acks: false,
            open_replay: None,
            replaying: None,
        }
    }

    /// Bounds the size of one message (default 64 MiB).
    pub fn with_limits(mut self, limits: Limits) -> Self {
        let (journal, offset) = (self.journal.clone(), self.unframer.offset());
        let framing = self.unframer_framing();
        self.unframer = Unframer::new(&journal, framing, limits, offset);
        self
    }

    /// Gives the reader a way to read the journal again from an offset, for replays of
    /// transactions that outgrew the budget.
    pub fn with_replay(mut self, open: impl FnMut(i64) -> S + Send + 'static) -> Self {
        self.open_replay = Some(Box::new(open));
        self
    }

    /// Bounds the bytes of pending transactions held (default 256 MiB); past it the oldest
    /// are evicted and replayed when they commit.
    pub fn with_budget(mut self, bytes: usize) -> Self {
        self.sequencer = std::mem::take(&mut self.sequencer).with_budget(bytes);
        self
    }

    /// Also yields ACK_TXN messages (as Go's iterator does).
    pub fn with_acks(mut self, include: bool) -> Self {
        self.include_acks = include;
        self
    }

    fn unframer_framing(&self) -> Framing {
        self.unframer.framing().clone()
    }

    pub fn journal(&self) -> &str {
        &self.journal
    }

    /// The next committed message, or `None` at the end of the source's bytes.
    pub async fn next(&mut self) -> Result<Option<Envelope>, Error> {
        loop {
            if let Some((_, begin, end)) = self.sequencer.replay_range() {
                match self.replay_step(begin, end).await? {
                    Some(env) if self.include_acks || env.uuid.flags() != Flags::ACK_TXN => {
                        return Ok(Some(env));
                    }
                    _ => continue,
                }
            }
            if let Some(env) = self.sequencer.dequeue() {
                if self.include_acks || env.uuid.flags() != Flags::ACK_TXN {
                    self.skip_acks();
                    return Ok(Some(env));
                }
                continue;
            }
            if let Some(frame) = self.unframer.next_frame()? {
                let env = Envelope {
                    journal: self.journal.clone(),
                    begin: frame.begin,
                    end: frame.end,
                    uuid: frame.uuid,
                    message: frame.message,
                };
                self.sequencer.queue_uncommitted(env)?;
                continue;
            }
            match self.source.next_chunk().await? {
                Some((offset, chunk)) => self.accept(offset, chunk)?,
                None => {
                    self.unframer.finish()?;
                    return Ok(None);
                }
            }
        }
    }

    /// Takes now an ACK_TXN that would be dequeued next and skipped: the sequence it ends
    /// then closes with the message just returned, and a checkpoint shows it closed.
    fn skip_acks(&mut self) {
        while !self.include_acks
            && self
                .sequencer
                .peek()
                .is_some_and(|e| e.uuid.flags() == Flags::ACK_TXN)
        {
            self.sequencer.dequeue();
        }
    }

    /// Reads the replay range one message at a time: returns a message to deliver, or `None`
    /// for one to skip or once the replay ended.
    async fn replay_step(&mut self, begin: i64, end: i64) -> Result<Option<Envelope>, Error> {
        if self.replaying.is_none() {
            let Some(open) = self.open_replay.as_mut() else {
                return Err(Error::Sequencer {
                    journal: self.journal.clone(),
                    offset: begin,
                    detail: format!(
                        "a committed transaction outgrew the sequencer's budget and must be \
                         re-read from [{begin}, {end}): raise the budget, or give the reader \
                         a way to re-read (ReadCommitted::with_replay)"
                    ),
                });
            };
            let framing = self.unframer.framing().clone();
            let unframer = Unframer::new(&self.journal, framing, self.unframer.limits(), begin);
            self.replaying = Some((open(begin), unframer, end));
        }
        let (source, unframer, end) = self.replaying.as_mut().expect("opened above");
        let frame = loop {
            if let Some(frame) = unframer.next_frame()? {
                break Some(frame);
            }
            if unframer.next_offset() >= *end {
                break None;
            }
            match source.next_chunk().await? {
                Some((offset, chunk)) if offset >= unframer.next_offset() => {
                    if offset != unframer.next_offset() {
                        unframer.reset(offset);
                    }
                    unframer.push(&chunk);
                }
                Some((offset, _)) => {
                    return Err(Error::Framing {
                        journal: self.journal.clone(),
                        offset,
                        detail: "the replay source went back".to_string(),
                    });
                }
                None => break None,
            }
        };
        match frame {
            Some(frame) if frame.end <= *end => {
                let env = Envelope {
                    journal: self.journal.clone(),
                    begin: frame.begin,
                    end: frame.end,
                    uuid: frame.uuid,
                    message: frame.message,
                };
                self.sequencer.replay(env)
            }
            _ => {
                self.replaying = None;
                self.sequencer.finish_replay();
                Ok(None)
            }
        }
    }

    /// Takes a chunk, following a forward jump of offsets (content removed from the journal:
    /// any partial message before the jump is dropped, as it can never complete).
    fn accept(&mut self, offset: i64, chunk: Bytes) -> Result<(), Error> {
        let expect = self.unframer.next_offset();
        if offset < expect && !self.first_chunk {
            return Err(Error::Framing {
                journal: self.journal.clone(),
                offset,
                detail: format!("the source went back from offset {expect} to {offset}"),
            });
        }
        if offset != expect {
            self.unframer.reset(offset);
        }
        self.first_chunk = false;
        self.unframer.push(&chunk);
        Ok(())
    }

    /// The checkpoint of this journal: store it with what was done with the messages
    /// delivered so far; [`ReadCommitted::resume`] then delivers each later message once.
    pub fn checkpoint(&mut self) -> Checkpoint {
        self.checkpoint_pruned(0)
    }

    /// As [`ReadCommitted::checkpoint`], forgetting producers idle for longer than
    /// `horizon_nanos` relative to the journal's most recent one (Go's `pruneHorizon`).
    pub fn checkpoint_pruned(&mut self, horizon_nanos: u64) -> Checkpoint {
        let (offsets, states) = self.sequencer.checkpoint(horizon_nanos);
        Checkpoint::from_states(&offsets, &states)
    }

    /// Whether a transaction was started in this journal since the last checkpoint.
    pub fn has_pending(&self) -> bool {
        self.sequencer.has_pending()
    }
}
