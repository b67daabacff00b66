//! Retries with Gazette's backoff (`broker/client`: 50 ms, 50 ms, 100 ms, 100 ms, 1 s,
//! 1 s, then 5 s), bounded by an overall timeout after which the last error is surfaced.
//!
//! Lives on: the stack of one operation (a [`Retry`] per call or per reader).

use crate::Error;
use std::time::{Duration, Instant};

/// Gazette's backoff before retry number `attempt` (0-based).
pub(crate) fn backoff(attempt: u32) -> Duration {
    match attempt {
        0 | 1 => Duration::from_millis(50),
        2 | 3 => Duration::from_millis(100),
        4 | 5 => Duration::from_secs(1),
        _ => Duration::from_secs(5),
    }
}

/// The retry state of one operation: attempts since the last success, and when the
/// failures began.
pub(crate) struct Retry {
    timeout: Duration,
    attempt: u32,
    since: Option<Instant>,
}

impl Retry {
    pub(crate) fn new(timeout: Duration) -> Retry {
        Retry {
            timeout,
            attempt: 0,
            since: None,
        }
    }

    /// The operation made progress: later failures start a fresh count.
    pub(crate) fn reset(&mut self) {
        self.attempt = 0;
        self.since = None;
    }

    /// Waits before the next attempt after `err`, or returns the error (wrapped with
    /// `context`) when the wait would end past the timeout.
    pub(crate) async fn wait(
        &mut self,
        context: impl FnOnce() -> String,
        err: Error,
    ) -> Result<(), Error> {
        let since = *self.since.get_or_insert_with(Instant::now);
        let pause = backoff(self.attempt);
        if since.elapsed() + pause > self.timeout {
            return Err(Error::RetriesExhausted {
                context: context(),
                elapsed: since.elapsed(),
                last: Box::new(err),
            });
        }
        self.attempt += 1;
        tokio::time::sleep(pause).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_follows_gazette() {
        let ms: Vec<u128> = (0..8).map(|a| backoff(a).as_millis()).collect();
        assert_eq!(ms, [50, 50, 100, 100, 1000, 1000, 5000, 5000]);
    }

    #[tokio::test]
    async fn retries_end_with_the_last_error_past_the_timeout() {
        let mut retry = Retry::new(Duration::from_millis(1000));
        let mut waits = 0;
        let err = loop {
            match retry
                .wait(|| "journal a/b".into(), Error::Invalid("boom".into()))
                .await
            {
                Ok(()) => waits += 1,
                Err(e) => break e,
            }
        };
        // 50 + 50 + 100 + 100 ms fit in the second; the next pause (1 s) would not.
        assert_eq!(waits, 4);
        let text = err.to_string();
        assert!(
            text.starts_with("journal a/b: still failing after retrying"),
            "{text}"
        );
        assert!(text.ends_with("boom"), "{text}");
        retry.reset();
        assert_eq!(retry.attempt, 0);
    }
}
