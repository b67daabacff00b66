//! Time on a core: the one way to bound a future by a timeout ([`within`], [`bound`],
//! [`with_deadline`] for a call's `grpc-timeout`).
//!
//! Lives on: whichever core awaits the future (the timers are glommio's, per core).

use futures_lite::future;
use protocol::grpc::{Code, RpcError};
use std::time::Duration;

/// Races `fut` against a timer of `limit`: `fut`'s output if it finishes first, else
/// `expired()`'s (and `fut` is dropped).
pub fn within<T>(
    limit: Duration,
    fut: impl Future<Output = T>,
    expired: impl FnOnce() -> T,
) -> impl Future<Output = T> {
    bound(Some(limit), fut, expired)
}

/// [`within`] where `None` sets no bound. A plain function returning the race (not an
/// `async fn`): the bounded future is then stored once, not once as the argument and again
/// in each branch's awaited state (every Append's task carried three copies of its
/// handler's state, moved several times at each spawn).
pub fn bound<T>(
    limit: Option<Duration>,
    fut: impl Future<Output = T>,
    expired: impl FnOnce() -> T,
) -> impl Future<Output = T> {
    future::or(fut, async move {
        match limit {
            None => future::pending().await,
            Some(t) => {
                glommio::timer::sleep(t).await;
                expired()
            }
        }
    })
}

/// Bounds a handler by the client's `grpc-timeout`, answering DEADLINE_EXCEEDED as Gazette
/// does (`context deadline exceeded`) when it passes.
pub fn with_deadline(
    timeout: Option<Duration>,
    fut: impl Future<Output = Result<(), RpcError>>,
) -> impl Future<Output = Result<(), RpcError>> {
    bound(timeout, fut, || {
        Err(RpcError::new(
            Code::DeadlineExceeded,
            "context deadline exceeded",
        ))
    })
}
