//! Gazette's `message` package (go.gazette.dev/core/message), bit for bit.
//! `docs/message-protocol.md` describes the protocol itself, for other languages.
//!
//! - [`uuid`]: v1 UUIDs made of a [`ProducerId`], a [`Clock`] and [`Flags`].
//! - [`framing`]: a journal's `content-type` picks its [`Framing`] (JSON lines, fixed
//!   protobuf frames with [`proto`]'s UUID locator, [`csv`] records); an [`Unframer`] cuts
//!   bytes into messages, bounded by [`Limits`].
//! - [`publisher`]: the [`Publisher`], with transactions and their ACK intents.
//! - [`sequencer`]: the read-committed [`Sequencer`].
//! - [`checkpoint`]: a consumer's [`Checkpoint`], in Gazette's protobuf or JSON.
//! - [`reader`]: [`ReadCommitted`], a journal's committed messages, resumable.
//! - [`memory`]: in-memory journals for tests.
//!
//! This layer reaches journals only through [`Appender`] and [`ByteSource`], which the journal
//! layer implements (and [`memory`] implements in memory).
//!
//! Lives on: the tasks that publish and read; nothing here is shared between them.

pub mod checkpoint;
pub mod csv;
pub mod framing;
pub mod memory;
pub mod proto;
pub mod publisher;
pub mod reader;
pub mod sequencer;
pub mod uuid;

pub use checkpoint::{Checkpoint, ProducerEntry, Source};
pub use framing::{Frame, Framing, FramingOptions, Limits, Message, Unframer};
pub use proto::{ProtoUuid, ProtoUuidField, UuidEncoding};
pub use publisher::{AckIntent, Publisher};
pub use reader::ReadCommitted;
pub use sequencer::{Envelope, JournalProducer, ProducerState, QueueOutcome, Sequencer};
pub use uuid::{Clock, Flags, ProducerId, Uuid};

use crate::Error;
use bytes::Bytes;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use tokio::sync::Notify;

/// Where a publisher's framed messages go. Appends to one journal keep the order in which
/// they were enqueued.
pub trait Appender: Send + Sync {
    /// Enqueues `content` (whole framed messages) for `journal`, waiting only for
    /// back-pressure. The returned [`AppendTicket`] resolves once the broker acknowledged
    /// the append that carried it.
    fn enqueue(
        &self,
        journal: &str,
        content: Bytes,
    ) -> impl Future<Output = Result<AppendTicket, Error>> + Send;
}

/// The acknowledgement of enqueued content: `[begin, end)` offsets of the append that
/// carried it, once the broker committed it. Every ticket of one append shares that
/// append's outcome, so a ticket costs a reference count, not a channel.
pub struct AppendTicket(Arc<Outcome>);

/// One append's outcome, set once and read by all of its tickets.
struct Outcome {
    result: OnceLock<Result<(i64, i64), Error>>,
    resolved: Notify,
}

impl AppendTicket {
    /// A ticket already resolved with `result` (for appenders that append at once).
    pub fn ready(result: Result<(i64, i64), Error>) -> AppendTicket {
        let outcome = AppendOutcome::new("");
        let ticket = outcome.ticket();
        outcome.resolve(result);
        ticket
    }

    /// The outcome if the append is over, without waiting.
    pub fn try_result(&self) -> Option<Result<(i64, i64), Error>> {
        self.0.result.get().map(copy_result)
    }

    /// Whether both tickets belong to the same append (their outcomes are one).
    pub fn same_append(&self, other: &AppendTicket) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Waits for the acknowledgement.
    pub async fn wait(self) -> Result<(i64, i64), Error> {
        loop {
            // Registered before the check, so that a resolve in between still wakes us.
            let resolved = self.0.resolved.notified();
            let mut resolved = std::pin::pin!(resolved);
            resolved.as_mut().enable();
            if let Some(result) = self.0.result.get() {
                return copy_result(result);
            }
            resolved.await;
        }
    }
}

fn copy_result(result: &Result<(i64, i64), Error>) -> Result<(i64, i64), Error> {
    match result {
        Ok(span) => Ok(*span),
        Err(err) => Err(err.duplicate()),
    }
}

/// The resolving side of one append's tickets, held by the appender. Dropped unresolved
/// (the appender stopped first), its tickets get an error rather than waiting forever.
pub struct AppendOutcome {
    outcome: Arc<Outcome>,
    journal: String,
}

impl AppendOutcome {
    /// The outcome of an append to `journal` (named in the error if it is never resolved).
    pub fn new(journal: &str) -> AppendOutcome {
        AppendOutcome {
            outcome: Arc::new(Outcome {
                result: OnceLock::new(),
                resolved: Notify::new(),
            }),
            journal: journal.to_string(),
        }
    }

    /// A ticket for content this append carries.
    pub fn ticket(&self) -> AppendTicket {
        AppendTicket(self.outcome.clone())
    }

    /// Resolves every ticket of this append with `result`.
    pub fn resolve(self, result: Result<(i64, i64), Error>) {
        self.set(result);
    }

    fn set(&self, result: Result<(i64, i64), Error>) {
        if self.outcome.result.set(result).is_ok() {
            self.outcome.resolved.notify_waiters();
        }
    }
}

impl Drop for AppendOutcome {
    fn drop(&mut self) {
        if self.outcome.result.get().is_none() {
            self.set(Err(Error::Invalid(format!(
                "journal {}: the append service stopped before acknowledging the append",
                self.journal
            ))));
        }
    }
}

/// A journal's bytes, in order, from a starting offset: what the read side frames into
/// messages. Offsets may jump forward (a fragment was removed); a chunk says where it starts.
pub trait ByteSource: Send {
    /// The next chunk and the journal offset of its first byte, or `None` at the end of a
    /// non-blocking read.
    fn next_chunk(&mut self) -> impl Future<Output = Result<Option<(i64, Bytes)>, Error>> + Send;
}

#[cfg(test)]
mod tests;
