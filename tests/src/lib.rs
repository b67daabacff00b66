//! Helpers shared by the integration tests: a harness that runs a real `courant serve`
//! process on a free loopback port, a small gRPC client toolbox built on
//! `protocol::grpc`, validators that mirror the checks Gazette's Go clients apply to
//! responses (`*.Validate()` in `broker/protocol`), and raw HTTP/2 helpers for sending
//! frames no well-behaved client would send.

use bytes::{BufMut, Bytes, BytesMut};
use protocol::grpc::{Channel, ClientCall, Code, FrameDecoder, RpcError};
use protocol::{
    AppendRequest, AppendResponse, ApplyRequest, ApplyResponse, Fragment, Header, JournalSpec,
    Label, LabelSelector, LabelSet, ListRequest, ListResponse, ReadRequest, ReadResponse, Sha1Sum,
    Status, apply_request::Change, journal_spec, list_response,
};
use std::future::Future;
use std::io::Read as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub use protocol;

mod checks;
mod harness;
mod messages;
mod raw;
mod records;
mod rpc;

pub use checks::*;
pub use harness::*;
pub use messages::*;
pub use raw::*;
pub use records::*;
pub use rpc::*;

pub const LIST: &str = "/protocol.Journal/List";
pub const APPLY: &str = "/protocol.Journal/Apply";
pub const READ: &str = "/protocol.Journal/Read";
pub const APPEND: &str = "/protocol.Journal/Append";
pub const REPLICATE: &str = "/protocol.Journal/Replicate";
pub const LIST_FRAGMENTS: &str = "/protocol.Journal/ListFragments";

/// Largest content chunk Gazette's Read sends: `(1<<15)-32`.
pub const READ_CHUNK_SIZE: usize = 32_736;

/// How long a started broker has to accept TCP connections.
pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(20);

/// Runs a test body with a hard time bound, so a hung broker fails the test instead of
/// hanging the suite.
pub async fn within<F: Future>(secs: u64, fut: F) -> F::Output {
    match tokio::time::timeout(Duration::from_secs(secs), fut).await {
        Ok(out) => out,
        Err(_) => panic!("test did not finish within {secs} s"),
    }
}
