//! Append flow control, with Gazette's rules and timings.
//!
//! Lives on: the journal's owner core (plain values, no sharing).
//!
//! * Minimum rate: a credit starts at one second's worth of `--broker.min-append-rate`,
//!   drains at that rate and is refilled by received bytes (capped at one second's worth).
//!   A client whose credit runs out is cut off. Rather than ticking every 50 ms, the
//!   receive of the next message is raced against the instant the credit would run out.
//! * Maximum rate: a token bucket per replica at the journal's `max_append_rate` (capped by
//!   a smaller, non-zero `--broker.max-append-rate`), starting with one second of burst and
//!   banking up to ten seconds.

use crate::core::call::CallIn;
use protocol::AppendRequest;
use protocol::grpc::RpcError;
use std::time::{Duration, Instant};

pub struct MinRate {
    rate: f64,
    credit: f64,
    last: Instant,
}

impl MinRate {
    pub fn new(rate_bytes_per_sec: i64) -> MinRate {
        let rate = rate_bytes_per_sec.max(0) as f64;
        MinRate {
            rate,
            credit: rate,
            last: Instant::now(),
        }
    }

    fn drain(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.credit -= elapsed * self.rate;
        self.last = now;
    }

    /// Credits `n` received bytes.
    pub fn on_bytes(&mut self, n: usize) {
        self.drain(Instant::now());
        self.credit = (self.credit + n as f64).min(self.rate);
    }

    /// Receives the next append message, failing if the client's credit runs out first.
    pub async fn recv(&mut self, input: &mut CallIn) -> Result<Option<AppendRequest>, RpcError> {
        if self.rate <= 0.0 {
            return input.next().await;
        }
        self.drain(Instant::now());
        let left = Duration::from_secs_f64((self.credit / self.rate).max(0.0));
        crate::time::within(left, input.next(), || {
            Err(RpcError::unknown(
                "client stream didn't sustain the minimum append data rate",
            ))
        })
        .await
    }
}

pub struct TokenBucket {
    rate: f64,
    tokens: f64,
    last: Instant,
}

impl Default for TokenBucket {
    fn default() -> Self {
        Self::new()
    }
}

impl TokenBucket {
    pub fn new() -> TokenBucket {
        TokenBucket {
            rate: 0.0,
            tokens: 0.0,
            last: Instant::now(),
        }
    }

    /// Takes `n` bytes at `rate` bytes/s (0 = unlimited), returning how long to wait first.
    pub fn take(&mut self, rate: i64, n: usize) -> Option<Duration> {
        if rate <= 0 {
            self.rate = 0.0;
            return None;
        }
        let now = Instant::now();
        let rate = rate as f64;
        if self.rate != rate {
            // A new or changed rate starts with one second of burst.
            self.rate = rate;
            self.tokens = rate;
        } else {
            let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
            self.tokens = (self.tokens + elapsed * rate).min(10.0 * rate);
        }
        self.last = now;
        self.tokens -= n as f64;
        if self.tokens >= 0.0 {
            None
        } else {
            Some(Duration::from_secs_f64(-self.tokens / rate))
        }
    }
}

/// The effective max rate: the journal's, capped by a smaller non-zero global rate.
/// A journal rate of 0 stays unlimited, as in Gazette.
pub fn effective_max_rate(journal: i64, global: i64) -> i64 {
    if journal > 0 && global > 0 && global < journal {
        global
    } else {
        journal
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_bursts_then_delays() {
        let mut b = TokenBucket::new();
        assert_eq!(b.take(1000, 600), None);
        assert_eq!(b.take(1000, 400), None);
        let wait = b.take(1000, 500).unwrap();
        assert!(wait > Duration::from_millis(400) && wait <= Duration::from_millis(500));
        assert_eq!(b.take(0, 1 << 30), None);
    }

    #[test]
    fn max_rate_quirk() {
        assert_eq!(effective_max_rate(0, 100), 0);
        assert_eq!(effective_max_rate(1000, 100), 100);
        assert_eq!(effective_max_rate(50, 100), 50);
        assert_eq!(effective_max_rate(50, 0), 50);
    }

    #[test]
    fn min_rate_credit_caps_at_one_second() {
        let mut m = MinRate::new(1000);
        m.on_bytes(1 << 20);
        assert!(m.credit <= 1000.0);
    }
}
