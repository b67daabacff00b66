//! What crosses cores: a journal call's decoded first request ([`FirstRequest`]) with the
//! ends of its frame channels, as one [`CoreMsg`] on the owner core's bounded inbox.
//!
//! Lives on: built on the accepting core, owned and run by the journal's owner core.

use crate::core::call::{CallIn, CallOut};
use protocol::{AppendRequest, FragmentsRequest, ReadRequest, ReplicateRequest};
use std::time::Duration;

/// Depth of each core's inbox of forwarded calls.
pub const INBOX_DEPTH: usize = 1024;

/// The journal-scoped first request of a call, decoded once on the accepting core.
pub enum FirstRequest {
    Append(AppendRequest),
    Read(ReadRequest),
    Fragments(FragmentsRequest),
    Replicate(ReplicateRequest),
}

impl FirstRequest {
    /// The RPC's name, as metrics label it.
    pub fn operation(&self) -> &'static str {
        match self {
            FirstRequest::Append(_) => "Append",
            FirstRequest::Read(_) => "Read",
            FirstRequest::Fragments(_) => "ListFragments",
            FirstRequest::Replicate(_) => "Replicate",
        }
    }

    pub fn journal(&self) -> &str {
        let name = match self {
            FirstRequest::Append(r) => &r.journal,
            FirstRequest::Read(r) => &r.journal,
            FirstRequest::Fragments(r) => &r.journal,
            FirstRequest::Replicate(r) => match &r.proposal {
                Some(p) => &p.journal,
                None => &r.deprecated_journal,
            },
        };
        protocol::validate::strip_meta(name)
    }
}

/// Everything that crosses cores. Dropping a `Call` before it runs fails that one RPC
/// (its client sees `Internal: the journal's owner core dropped the call`).
pub enum CoreMsg {
    Call {
        first: FirstRequest,
        input: CallIn,
        output: CallOut,
        timeout: Option<Duration>,
    },
}
