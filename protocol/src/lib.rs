//! Gazette's `protocol.Journal` wire protocol: messages, validation and gRPC framing.
//!
//! This crate does no I/O of its own. Its gRPC framing is generic over any
//! `AsyncRead + AsyncWrite` transport driven by `h2`, so the broker (on glommio),
//! the load generator and tests (on tokio) share one implementation.

#[allow(clippy::all, missing_docs)]
mod generated {
    include!(concat!(env!("OUT_DIR"), "/protocol.rs"));
}
pub use generated::*;

pub mod codec;
pub mod flags;
pub mod grpc;
mod label_lookup;
pub mod labels;
pub mod method;
pub mod route;
pub mod sum;
pub mod validate;
