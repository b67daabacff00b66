//! Courant's client for Gazette's `protocol.Journal` service, usable against Courant and
//! Gazette brokers alike, and the base of the Python package (`client/python/`).
//!
//! Two layers, as in Gazette's Go packages:
//! - the journal layer (Go's `broker/client`): routing to primaries, retries, an append
//!   service that batches many writers per journal, and a retrying reader that follows a
//!   read into the fragment stores;
//! - [`message`] (Go's `message`): framing by content type, v1 UUIDs, a publisher with
//!   transactions, and the read-committed sequencer with its checkpoint.
//!
//! The message layer reaches journals only through two traits, [`message::Appender`] and
//! [`message::ByteSource`], which the journal layer implements.
//!
//! Lives on: any tokio runtime; every public type is `Send`.

pub mod error;
pub mod message;

pub use error::Error;
