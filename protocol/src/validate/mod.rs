//! Validation of protocol messages, with Gazette's rules and error texts.
//!
//! Go clients and tests compare error strings, so every message produced here has the
//! exact shape Gazette produces: an optional dotted context path naming the offending
//! field (`Changes[0].Upsert.Fragment`), then `": "`, then the message. Context is
//! accumulated from the innermost field outwards while an error travels up through
//! nested validators; only the final string is exposed as [`ValidationError`].
//!
//! Validators never panic, whatever the input: all slicing is bounds-checked or done
//! at positions found by searching the same string.

use crate::{
    AppendRequest, AppendResponse, ApplyRequest, ApplyResponse, BrokerSpec, CompressionCodec,
    Fragment, FragmentStoreHealthRequest, FragmentStoreHealthResponse, FragmentsRequest,
    FragmentsResponse, Header, JournalSpec, Label, LabelSelector, LabelSet, ListRequest,
    ListResponse, ProcessSpec, ReadRequest, ReadResponse, ReplicateRequest, ReplicateResponse,
    Route, Status, append_request, apply_request, fragments_response, header, journal_spec,
    list_response, process_spec,
};
use regex::Regex;
use std::fmt;
use std::sync::OnceLock;

mod gofmt;
mod labels;
mod messages;
mod names;
mod specs;
mod stores;
#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests_messages;
#[cfg(test)]
mod tests_names;
#[cfg(test)]
mod tests_specs;
mod url;

pub use gofmt::*;
pub use labels::*;
pub use names::*;
pub use specs::*;
pub use stores::*;
pub use url::*;

// ---------------------------------------------------------------------------------------
// Errors.

/// A validation failure, holding the complete message (context path included), exactly
/// as Gazette would render it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationError(pub String);

impl ValidationError {
    /// An error with the given message and no context.
    pub fn new(msg: impl Into<String>) -> Self {
        ValidationError(msg.into())
    }

    /// The complete message.
    pub fn message(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ValidationError {}

/// An error under construction: the message plus the context path gathered so far
/// (outermost first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Verr {
    context: Vec<String>,
    msg: String,
}

impl Verr {
    pub(crate) fn new(msg: impl Into<String>) -> Self {
        Verr {
            context: Vec::new(),
            msg: msg.into(),
        }
    }

    /// Prefixes the context path with one more (outer) field name.
    pub(crate) fn ctx(mut self, c: impl Into<String>) -> Self {
        self.context.insert(0, c.into());
        self
    }
}

impl From<Verr> for ValidationError {
    fn from(e: Verr) -> Self {
        if e.context.is_empty() {
            ValidationError(e.msg)
        } else {
            ValidationError(format!("{}: {}", e.context.join("."), e.msg))
        }
    }
}

pub(crate) type VResult = Result<(), Verr>;

pub(crate) fn fail(msg: impl Into<String>) -> VResult {
    Err(Verr::new(msg))
}

/// Types which can check themselves for well-formedness.
pub trait Validate {
    /// Returns the first problem found, if any, as Gazette would describe it.
    fn validate(&self) -> Result<(), ValidationError>;
}

/// Context-preserving validation, used internally so that nested failures can be
/// prefixed with the names of the fields that contain them.
pub(crate) trait Check {
    fn check(&self) -> VResult;
}

macro_rules! validate_via_check {
    ($($t:ty),* $(,)?) => {
        $(
            impl Validate for $t {
                fn validate(&self) -> Result<(), ValidationError> {
                    Check::check(self).map_err(ValidationError::from)
                }
            }
        )*
    };
}

validate_via_check!(
    Label,
    LabelSet,
    LabelSelector,
    JournalSpec,
    journal_spec::Fragment,
    journal_spec::Suspend,
    process_spec::Id,
    ProcessSpec,
    BrokerSpec,
    Fragment,
    Route,
    Header,
    header::Etcd,
    ReadRequest,
    ReadResponse,
    AppendRequest,
    AppendResponse,
    ReplicateRequest,
    ReplicateResponse,
    ListRequest,
    ListResponse,
    list_response::Journal,
    ApplyRequest,
    apply_request::Change,
    ApplyResponse,
    FragmentsRequest,
    FragmentsResponse,
    fragments_response::Fragment,
    FragmentStoreHealthRequest,
    FragmentStoreHealthResponse,
);
