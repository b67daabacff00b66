//! Courant's client for Gazette's `protocol.Journal` service, usable against Courant and
//! Gazette brokers alike, and the base of the Python package (`client/python/`).
//!
//! Two layers, as in Gazette's Go packages:
//! - the journal layer (Go's `broker/client`): [`Client`] (a connection pool with a
//!   route cache, List, Apply, Append, Read, ListFragments, with Gazette's retries),
//!   [`AppendService`] (many writers' records batched per journal, pipelined) and
//!   [`RetryReader`] (a read that resumes after errors and follows the journal into its
//!   fragment stores);
//! - [`message`] (Go's `message`): framing by content type, v1 UUIDs, a publisher with
//!   transactions, and the read-committed sequencer with its checkpoint.
//!
//! The message layer reaches journals only through two traits, [`message::Appender`] and
//! [`message::ByteSource`], which [`AppendService`] and [`RetryReader`] implement.
//!
//! Lives on: any tokio runtime; every public type is `Send`.

mod append;
pub mod append_service;
pub mod client;
mod codec;
pub mod endpoint;
pub mod error;
mod fragment;
mod fragments;
pub mod message;
mod pool;
pub mod read;
mod retry;
mod routes;

pub use append::APPEND_CHUNK;
pub use append_service::AppendService;
pub use client::{Client, ClientOptions, ListWatch};
pub use endpoint::Endpoint;
pub use error::Error;
pub use protocol;
pub use read::{ReadStream, RetryReader};

#[cfg(test)]
mod tests {
    /// What a binding (Python, other runtimes) needs: every public type can cross threads.
    #[test]
    fn public_types_are_send() {
        fn send<T: Send>() {}
        fn shared<T: Send + Sync>() {}
        shared::<super::Client>();
        shared::<super::AppendService>();
        send::<super::RetryReader>();
        send::<super::ReadStream>();
        send::<super::ListWatch>();
        send::<super::message::AppendTicket>();
        shared::<super::Error>();
    }
}

/// The README's example, compiled as a doctest so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
