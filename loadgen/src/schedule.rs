//! The open-loop schedule: when each record is *meant* to be sent.
//!
//! In open-loop mode the offered load does not depend on how fast the broker answers. The
//! target rate is split evenly over the journals, and record `k` of journal `j` has the
//! intended send time
//!
//! ```text
//! start + phase_j + k / rate_j        rate_j = rate / journals
//! ```
//!
//! where `phase_j` staggers the journals evenly across one batch interval so that the
//! aggregate load is smooth instead of every journal firing its batch at the same instant.
//! An append carries `records_per_append` consecutive records and is dispatched at the
//! intended time of its *last* record (the batch is full then), so the time early records
//! spend waiting for the batch to fill counts in their latency, as a producer's linger
//! time does in the OpenMessaging Benchmark.
//!
//! Latency of a record is always `acknowledged − intended`: if the broker (or the limit on
//! appends in flight) makes the generator fall behind, the queueing delay is measured
//! rather than hidden ("coordinated omission").
//!
//! Lives on: each journal's writer task owns its own [`Schedule`] (plain data, `Copy`).

/// Intended send times of one journal's records, in [`crate::clock`] nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    /// Intended time of record 0 (the run start plus this journal's phase).
    first_ns: f64,
    /// Nanoseconds between consecutive records of this journal.
    interval_ns: f64,
}

impl Schedule {
    /// The schedule of journal `index` of `journals` when all of them together must offer
    /// `total_rate` records per second, batched `records_per_append` at a time.
    pub fn for_journal(
        start_ns: u64,
        total_rate: f64,
        journals: usize,
        index: usize,
        records_per_append: usize,
    ) -> Schedule {
        assert!(total_rate > 0.0 && journals > 0 && index < journals);
        assert!(records_per_append > 0);
        let interval_ns = 1e9 * journals as f64 / total_rate;
        let batch_interval_ns = interval_ns * records_per_append as f64;
        let phase_ns = batch_interval_ns * index as f64 / journals as f64;
        Schedule {
            first_ns: start_ns as f64 + phase_ns,
            interval_ns,
        }
    }

    /// A schedule whose record 0 is at `first_ns` and whose records are `interval_ns` apart.
    #[cfg(test)]
    pub fn from_parts(first_ns: f64, interval_ns: f64) -> Schedule {
        Schedule {
            first_ns,
            interval_ns,
        }
    }

    /// Intended send time of record `seq`.
    pub fn intended_ns(&self, seq: u64) -> u64 {
        (self.first_ns + seq as f64 * self.interval_ns) as u64
    }

    /// Nanoseconds between consecutive records (the step of [`Self::intended_ns`]).
    #[cfg(test)]
    pub fn interval_ns(&self) -> f64 {
        self.interval_ns
    }

    /// How many records have an intended time in `[begin_ns, end_ns)`.
    pub fn count_between(&self, begin_ns: u64, end_ns: u64) -> u64 {
        self.first_seq_at_or_after(end_ns)
            .saturating_sub(self.first_seq_at_or_after(begin_ns))
    }

    /// The smallest `seq` whose intended time is at or after `t_ns`.
    pub fn first_seq_at_or_after(&self, t_ns: u64) -> u64 {
        let approx = ((t_ns as f64 - self.first_ns) / self.interval_ns).ceil();
        let mut seq = if approx > 0.0 { approx as u64 } else { 0 };
        // Float rounding can leave `approx` one off either way; settle it exactly against
        // `intended_ns`, which is the definition every other caller uses.
        while seq > 0 && self.intended_ns(seq - 1) >= t_ns {
            seq -= 1;
        }
        while self.intended_ns(seq) < t_ns {
            seq += 1;
        }
        seq
    }
}

/// Records per append when a record may wait at most `linger_ns` for its batch: the
/// batch closes when `records_per_append` records are in it or when its first record has
/// waited `linger_ns`, whichever comes first. With a fixed schedule that is a constant.
pub fn batch_for_linger(
    total_rate: f64,
    journals: usize,
    records_per_append: usize,
    linger_ns: u64,
) -> usize {
    let interval_ns = 1e9 * journals as f64 / total_rate;
    let fit = 1.0 + (linger_ns as f64 / interval_ns).floor();
    (fit.min(records_per_append as f64) as usize).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linger_caps_the_batch() {
        // 10,000 records/s over 2 journals: one record per 200 µs per journal.
        assert_eq!(batch_for_linger(10_000.0, 2, 300, 1_000_000), 6);
        assert_eq!(batch_for_linger(10_000.0, 2, 300, 0), 1);
        assert_eq!(batch_for_linger(10_000.0, 2, 4, 1_000_000), 4);
        assert_eq!(batch_for_linger(1e9, 1, 300, 1_000_000), 300);
    }

    #[test]
    fn intended_times_follow_the_rate() {
        // 1,000 records/s over 4 journals: each journal gets one record every 4 ms.
        let s = Schedule::for_journal(1_000, 1_000.0, 4, 0, 10);
        assert_eq!(s.intended_ns(0), 1_000);
        assert_eq!(s.intended_ns(1), 1_000 + 4_000_000);
        assert_eq!(s.intended_ns(250), 1_000 + 1_000_000_000);
        assert!((s.interval_ns() - 4e6).abs() < 1e-6);
    }

    #[test]
    fn journals_are_staggered_over_one_batch_interval() {
        // Batch interval per journal = 10 records × 4 ms = 40 ms; 4 journals → 10 ms apart.
        let starts: Vec<u64> = (0..4)
            .map(|j| Schedule::for_journal(0, 1_000.0, 4, j, 10).intended_ns(0))
            .collect();
        assert_eq!(starts, vec![0, 10_000_000, 20_000_000, 30_000_000]);
    }

    #[test]
    fn aggregate_rate_matches_the_target() {
        let journals = 7;
        let rate = 123_456.0;
        let total: u64 = (0..journals)
            .map(|j| {
                Schedule::for_journal(5_000_000_000, rate, journals, j, 300)
                    .count_between(6_000_000_000, 16_000_000_000)
            })
            .sum();
        let expected = rate * 10.0;
        assert!(
            (total as f64 - expected).abs() <= journals as f64,
            "{total} vs {expected}"
        );
    }

    #[test]
    fn count_between_is_exact_at_the_edges() {
        let s = Schedule::for_journal(0, 1_000.0, 1, 0, 1); // one record per ms
        assert_eq!(s.count_between(0, 1_000_000), 1); // record 0 only
        assert_eq!(s.count_between(0, 1_000_001), 2);
        assert_eq!(s.count_between(1, 1_000_000), 0);
        assert_eq!(s.first_seq_at_or_after(0), 0);
        assert_eq!(s.first_seq_at_or_after(1), 1);
        assert_eq!(s.first_seq_at_or_after(3_000_000), 3);
        assert_eq!(s.count_between(5, 5), 0);
    }
}
