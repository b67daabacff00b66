//! Idle HTTP/2 connections: a connection with no call in flight for
//! `--tpc.h2-idle-timeout` ([`DEFAULT_H2_IDLE_TIMEOUT`] by default) is sent GOAWAY, so
//! clients that open connections and send nothing (or stop using them) do not hold a
//! descriptor and the connection's buffers forever. Clients reconnect on their next call,
//! as gRPC clients do after GOAWAY (Go's `MaxConnectionIdle` does the same for grpc-go).
//!
//! Lives on: the core serving the connection (`Rc`, `Cell`: never shared across cores).

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Shortest wait between idle checks of a connection.
const IDLE_POLL_MIN: std::time::Duration = std::time::Duration::from_millis(50);

/// Default of `--tpc.h2-idle-timeout`.
pub const DEFAULT_H2_IDLE_TIMEOUT: &str = "5m";
/// How long an idle connection sent GOAWAY may take to close before it is dropped (a
/// client that sends nothing never answers the GOAWAY's PING).
pub const GOAWAY_GRACE: Duration = Duration::from_secs(1);

/// Calls in flight on one connection and when the last one started or ended.
pub struct Activity {
    active: Cell<usize>,
    since: Cell<Instant>,
}

/// Marks a call in flight until dropped.
pub struct Guard(Rc<Activity>);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.active.set(self.0.active.get().saturating_sub(1));
        self.0.since.set(Instant::now());
    }
}

impl Default for Activity {
    fn default() -> Self {
        Self::new()
    }
}

impl Activity {
    pub fn new() -> Activity {
        Activity {
            active: Cell::new(0),
            since: Cell::new(Instant::now()),
        }
    }

    /// Calls in flight.
    pub fn in_flight(&self) -> usize {
        self.active.get()
    }

    /// A call started; it ends when the guard drops.
    pub fn start(self: &Rc<Self>) -> Guard {
        self.active.set(self.active.get() + 1);
        self.since.set(Instant::now());
        Guard(self.clone())
    }

    /// Whether the connection has been idle (no call in flight) for `timeout` at `now`;
    /// else how much longer it must stay idle.
    fn remaining(&self, timeout: Duration, now: Instant) -> Option<Duration> {
        if self.active.get() > 0 {
            return Some(timeout);
        }
        let idle = now.saturating_duration_since(self.since.get());
        timeout.checked_sub(idle).filter(|d| !d.is_zero())
    }

    /// Resolves once the connection has had no call in flight for `timeout`.
    pub async fn idle_for(&self, timeout: Duration) {
        while let Some(wait) = self.remaining(timeout, Instant::now()) {
            glommio::timer::sleep(wait.max(IDLE_POLL_MIN)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_only_without_calls_in_flight() {
        let a = Rc::new(Activity::new());
        let t = Duration::from_secs(10);
        let now = Instant::now();
        assert!(a.remaining(t, now).is_some());
        assert_eq!(a.remaining(t, now + t), None);
        let g = a.start();
        assert_eq!(a.remaining(t, now + 3 * t), Some(t), "a call in flight");
        drop(g);
        let after = Instant::now();
        assert!(a.remaining(t, after).is_some());
        assert_eq!(a.remaining(t, after + t), None);
    }
}
