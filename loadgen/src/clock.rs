//! One monotonic clock for the whole process.
//!
//! Every time the load generator handles (a record's intended send time, the moment an
//! append is acknowledged, the moment a tailing reader sees a record) is a count of
//! nanoseconds since one process-wide epoch. Writers embed that count in each record, and
//! readers in the same process subtract it from their own reading of the same clock, which
//! is what makes end-to-end latency meaningful without synchronised wall clocks.
//!
//! Lives on: any thread (the epoch is set once and never changes).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

static EPOCH: OnceLock<Instant> = OnceLock::new();

/// The process-wide epoch, fixed by the first call.
pub fn epoch() -> Instant {
    *EPOCH.get_or_init(Instant::now)
}

/// Nanoseconds since [`epoch`].
pub fn now_ns() -> u64 {
    epoch().elapsed().as_nanos() as u64
}

/// The `Instant` that is `ns` nanoseconds after [`epoch`].
pub fn instant_at(ns: u64) -> Instant {
    epoch() + Duration::from_nanos(ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_and_instant_at_agree() {
        let a = now_ns();
        let at = instant_at(a);
        assert!(at <= Instant::now());
        assert!(now_ns() >= a);
        assert_eq!(instant_at(0), epoch());
    }
}
