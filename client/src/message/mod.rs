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
/// carried it, once the broker committed it.
pub struct AppendTicket(pub tokio::sync::oneshot::Receiver<Result<(i64, i64), Error>>);

impl AppendTicket {
    /// Waits for the acknowledgement.
    pub async fn wait(self) -> Result<(i64, i64), Error> {
        match self.0.await {
            Ok(result) => result,
            Err(_) => Err(Error::Invalid(
                "the append service stopped before acknowledging the append".to_string(),
            )),
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
