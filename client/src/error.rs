//! The client's one error type. Every variant that concerns a journal names it (and the
//! offset, where one is known), so a person can act on the message.

/// A client failure.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The broker answered with a gRPC error.
    #[error("journal {journal}: {code:?}: {message}")]
    Rpc {
        journal: String,
        code: protocol::grpc::Code,
        message: String,
    },
    /// The broker answered with a non-OK `protocol.Status` that is not retried.
    #[error("journal {journal}: broker status {status}")]
    Status { journal: String, status: String },
    /// Bytes of a journal could not be framed or decoded as messages, or the journal's
    /// content type has no framing (then `offset` is -1).
    #[error("journal {journal} at offset {offset}: {detail}")]
    Framing {
        journal: String,
        offset: i64,
        detail: String,
    },
    /// The read-committed sequencer cannot go on (names the message that stopped it).
    #[error("journal {journal} at offset {offset}: {detail}")]
    Sequencer {
        journal: String,
        offset: i64,
        detail: String,
    },
    /// A caller's argument is unusable (names the argument and why).
    #[error("{0}")]
    Invalid(String),
    /// A connection or local I/O failure.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}
