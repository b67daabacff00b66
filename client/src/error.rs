//! The client's one error type. Every variant that concerns a journal names it (and the
//! offset, where one is known), so a person can act on the message.
//!
//! Lives on: values only; no state.

use std::time::Duration;

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
    /// A call that concerns no single journal (List, Apply) failed with a gRPC error.
    #[error("{call}: {code:?}: {message}")]
    Call {
        call: String,
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
    /// The connection failed after the append's commit was sent and before the broker's
    /// answer arrived: the broker may or may not have committed it, so it is not retried
    /// (a retry could write the content twice).
    #[error(
        "journal {journal}: the outcome of an append of {bytes} bytes is unknown (the broker \
         may have committed it; it was not retried, to avoid a duplicate): {detail}"
    )]
    AppendUncertain {
        journal: String,
        bytes: usize,
        detail: String,
    },
    /// A persisted fragment could not be fetched or decoded from its store.
    #[error("journal {journal} at offset {offset}: fragment {location}: {detail}")]
    Fragment {
        journal: String,
        offset: i64,
        /// The fragment's URL without its query (signed URLs carry credentials there).
        location: String,
        detail: String,
    },
    /// A broker's answer breaks the protocol (e.g. a read response behind the requested offset).
    #[error("journal {journal} at offset {offset}: broker protocol violation: {detail}")]
    Protocol {
        journal: String,
        offset: i64,
        detail: String,
    },
    /// Retries of a transient failure ran past the client's retry timeout.
    #[error("{context}: still failing after retrying for {elapsed:?}: {last}")]
    RetriesExhausted {
        context: String,
        elapsed: Duration,
        last: Box<Error>,
    },
}

impl Error {
    /// A copy of the error, for handing one failure to several waiters (e.g. every writer
    /// whose content shared a failed append). `std::io::Error` is not `Clone`, so its copy
    /// keeps the kind and the text.
    pub fn duplicate(&self) -> Error {
        match self {
            Error::Rpc {
                journal,
                code,
                message,
            } => Error::Rpc {
                journal: journal.clone(),
                code: *code,
                message: message.clone(),
            },
            Error::Call {
                call,
                code,
                message,
            } => Error::Call {
                call: call.clone(),
                code: *code,
                message: message.clone(),
            },
            Error::Status { journal, status } => Error::Status {
                journal: journal.clone(),
                status: status.clone(),
            },
            Error::Framing {
                journal,
                offset,
                detail,
            } => Error::Framing {
                journal: journal.clone(),
                offset: *offset,
                detail: detail.clone(),
            },
            Error::Sequencer {
                journal,
                offset,
                detail,
            } => Error::Sequencer {
                journal: journal.clone(),
                offset: *offset,
                detail: detail.clone(),
            },
            Error::Invalid(s) => Error::Invalid(s.clone()),
            Error::Io { context, source } => Error::Io {
                context: context.clone(),
                source: std::io::Error::new(source.kind(), source.to_string()),
            },
            Error::AppendUncertain {
                journal,
                bytes,
                detail,
            } => Error::AppendUncertain {
                journal: journal.clone(),
                bytes: *bytes,
                detail: detail.clone(),
            },
            Error::Fragment {
                journal,
                offset,
                location,
                detail,
            } => Error::Fragment {
                journal: journal.clone(),
                offset: *offset,
                location: location.clone(),
                detail: detail.clone(),
            },
            Error::Protocol {
                journal,
                offset,
                detail,
            } => Error::Protocol {
                journal: journal.clone(),
                offset: *offset,
                detail: detail.clone(),
            },
            Error::RetriesExhausted {
                context,
                elapsed,
                last,
            } => Error::RetriesExhausted {
                context: context.clone(),
                elapsed: *elapsed,
                last: Box::new(last.duplicate()),
            },
        }
    }

    /// The broker status name, for [`Error::Status`] (also inside exhausted retries).
    pub fn status(&self) -> Option<&str> {
        match self {
            Error::Status { status, .. } => Some(status),
            Error::RetriesExhausted { last, .. } => last.status(),
            _ => None,
        }
    }

    /// The gRPC code, for [`Error::Rpc`] (also inside exhausted retries).
    pub fn code(&self) -> Option<protocol::grpc::Code> {
        match self {
            Error::Rpc { code, .. } | Error::Call { code, .. } => Some(*code),
            Error::RetriesExhausted { last, .. } => last.code(),
            _ => None,
        }
    }

    pub(crate) fn rpc(journal: &str, err: protocol::grpc::RpcError) -> Error {
        Error::Rpc {
            journal: journal.to_string(),
            code: err.code,
            message: err.message,
        }
    }

    pub(crate) fn call(call: &str, err: protocol::grpc::RpcError) -> Error {
        Error::Call {
            call: call.to_string(),
            code: err.code,
            message: err.message,
        }
    }
}

/// The name of a `protocol.Status` value (or its number, if unknown to this client).
pub fn status_name(status: i32) -> String {
    protocol::Status::try_from(status)
        .map(|s| s.as_str_name().to_string())
        .unwrap_or_else(|_| format!("STATUS_{status}"))
}
