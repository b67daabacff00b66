//! What the run measured: HdrHistograms of latency, counters, and errors by kind.
//!
//! Three latency histograms, all in nanoseconds with 3 significant digits:
//! - **publish**: per record, `ack time − intended send time` (the OMB "publish latency").
//! - **send lag**: per record, `actual send time − intended send time of the batch` (OMB's
//!   "publish delay"): how far behind its own schedule the generator was. Large values
//!   mean the load generator (or the in-flight limit) could not keep up with the rate.
//! - **append RPC**: per append sent inside the window, `ack time − actual send time`:
//!   the broker's own latency, without batching or schedule delays.
//! - **end-to-end**: per record seen by a tailing reader, `receive time − intended send time`.
//!
//! Latency histograms count only records whose *intended* time falls in the measurement
//! window, so warm-up traffic never leaks in and records queued at the end are still
//! measured when they are acknowledged in the grace period. Throughput counts what was
//! *acknowledged* (or read) inside the window. Each histogram also has an "interval" twin,
//! reset every progress tick, for the live p99 and the per-second series in the JSON.
//!
//! Histograms are sharded (one mutex per connection) so that acknowledgements on different
//! tokio workers rarely contend; a lock is taken once per append, not per record.
//!
//! Lives on: shared by every task of the run (`Arc<Stats>`).

use crate::schedule::Schedule;
use hdrhistogram::Histogram;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};

/// Highest latency a histogram tracks (larger values are clamped): one hour.
pub const MAX_LATENCY_NS: u64 = 3_600 * 1_000_000_000;

pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3).expect("static histogram bounds are valid")
}

/// The measurement window, in clock nanoseconds: `[start_ns, end_ns)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub start_ns: u64,
    pub end_ns: u64,
}

impl Window {
    pub fn contains(&self, t_ns: u64) -> bool {
        self.start_ns <= t_ns && t_ns < self.end_ns
    }

    pub fn seconds(&self) -> f64 {
        (self.end_ns - self.start_ns) as f64 / 1e9
    }
}

/// When an append's records were meant to be sent.
#[derive(Debug, Clone, Copy)]
pub enum Intended {
    /// Every record at this time (max rate: the send time).
    At(u64),
    /// Records `first_seq..` of the journal's open-loop schedule. Each record's time is the
    /// schedule's own [`Schedule::intended_ns`], the very function that counts the records
    /// due in the window, so that no record falls on the other side of a window edge by
    /// rounding (which reported up to one record per journal as never acknowledged).
    Scheduled { schedule: Schedule, first_seq: u64 },
}

/// One append as sent: its records' intended times and its size.
#[derive(Debug, Clone, Copy)]
pub struct Batch {
    pub intended: Intended,
    pub records: u32,
    pub bytes: u64,
    /// When the append was handed to the connection.
    pub send_ns: u64,
}

impl Batch {
    pub fn intended_ns(&self, i: u32) -> u64 {
        match self.intended {
            Intended::At(t) => t,
            Intended::Scheduled {
                schedule,
                first_seq,
            } => schedule.intended_ns(first_seq + u64::from(i)),
        }
    }

    /// Intended time of the last record: the moment the batch was full and due.
    pub fn due_ns(&self) -> u64 {
        self.intended_ns(self.records.saturating_sub(1))
    }
}

/// Count and first example of one kind of error.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorCount {
    /// Failed RPCs (appends) or events (reads).
    pub count: u64,
    /// Records in the failed appends.
    pub records: u64,
    pub example: String,
}

struct Hists {
    publish: Histogram<u64>,
    rpc: Histogram<u64>,
    delay: Histogram<u64>,
    e2e: Histogram<u64>,
    iv_publish: Histogram<u64>,
    iv_delay: Histogram<u64>,
    iv_e2e: Histogram<u64>,
}

impl Hists {
    fn new() -> Self {
        Hists {
            publish: new_histogram(),
            rpc: new_histogram(),
            delay: new_histogram(),
            e2e: new_histogram(),
            iv_publish: new_histogram(),
            iv_delay: new_histogram(),
            iv_e2e: new_histogram(),
        }
    }
}

/// Totals since the start (warm-up included), for progress deltas.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub acked_records: u64,
    pub acked_bytes: u64,
    pub acked_appends: u64,
    pub read_records: u64,
    pub failed_appends: u64,
}

/// Latency histograms of one progress interval (all acknowledgements, warm-up included).
pub struct IntervalHists {
    pub publish: Histogram<u64>,
    pub delay: Histogram<u64>,
    pub e2e: Histogram<u64>,
}

/// Whole-window latency histograms.
pub struct FinalHists {
    pub publish: Histogram<u64>,
    /// Per append sent inside the window: acknowledgement − actual send.
    pub rpc: Histogram<u64>,
    pub delay: Histogram<u64>,
    pub e2e: Histogram<u64>,
}

/// Counters over the measurement window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WindowCounts {
    /// Acknowledged with the ack inside the window.
    pub acked_records: u64,
    pub acked_bytes: u64,
    pub acked_appends: u64,
    /// Read by tailing readers inside the window.
    pub read_records: u64,
    pub read_bytes: u64,
    /// Records intended in the window whose append failed.
    pub failed_records: u64,
}

pub struct Stats {
    pub window: Window,
    shards: Box<[Mutex<Hists>]>,
    acked_records: AtomicU64,
    acked_bytes: AtomicU64,
    acked_appends: AtomicU64,
    read_records: AtomicU64,
    failed_appends: AtomicU64,
    in_flight: AtomicI64,
    w_acked_records: AtomicU64,
    w_acked_bytes: AtomicU64,
    w_acked_appends: AtomicU64,
    w_read_records: AtomicU64,
    w_read_bytes: AtomicU64,
    w_failed_records: AtomicU64,
    w_dispatched_records: AtomicU64,
    errors: Mutex<BTreeMap<String, ErrorCount>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Counting code does not panic midway through an update that matters; keep going.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Stats {
    pub fn new(window: Window, shards: usize) -> Stats {
        Stats {
            window,
            shards: (0..shards.max(1))
                .map(|_| Mutex::new(Hists::new()))
                .collect(),
            acked_records: AtomicU64::new(0),
            acked_bytes: AtomicU64::new(0),
            acked_appends: AtomicU64::new(0),
            read_records: AtomicU64::new(0),
            failed_appends: AtomicU64::new(0),
            in_flight: AtomicI64::new(0),
            w_acked_records: AtomicU64::new(0),
            w_acked_bytes: AtomicU64::new(0),
            w_acked_appends: AtomicU64::new(0),
            w_read_records: AtomicU64::new(0),
            w_read_bytes: AtomicU64::new(0),
            w_failed_records: AtomicU64::new(0),
            w_dispatched_records: AtomicU64::new(0),
            errors: Mutex::new(BTreeMap::new()),
        }
    }

    fn shard(&self, shard: usize) -> MutexGuard<'_, Hists> {
        lock(&self.shards[shard % self.shards.len()])
    }

    pub fn append_started(&self) {
        self.in_flight.fetch_add(1, Relaxed);
    }

    pub fn append_finished(&self) {
        self.in_flight.fetch_sub(1, Relaxed);
    }

    pub fn in_flight(&self) -> i64 {
        self.in_flight.load(Relaxed)
    }

    /// Counts the records of an append being sent whose intended time is in the window.
    pub fn on_dispatch(&self, batch: &Batch) {
        let in_window = (0..batch.records)
            .filter(|&i| self.window.contains(batch.intended_ns(i)))
            .count() as u64;
        self.w_dispatched_records.fetch_add(in_window, Relaxed);
    }

    /// Records intended in the window that were sent.
    pub fn window_dispatched(&self) -> u64 {
        self.w_dispatched_records.load(Relaxed)
    }

    /// Records a successful append acknowledged at `ack_ns`.
    pub fn on_ack(&self, shard: usize, batch: &Batch, ack_ns: u64) {
        let n = u64::from(batch.records);
        self.acked_records.fetch_add(n, Relaxed);
        self.acked_bytes.fetch_add(batch.bytes, Relaxed);
        self.acked_appends.fetch_add(1, Relaxed);
        if self.window.contains(ack_ns) {
            self.w_acked_records.fetch_add(n, Relaxed);
            self.w_acked_bytes.fetch_add(batch.bytes, Relaxed);
            self.w_acked_appends.fetch_add(1, Relaxed);
        }
        let delay_ns = batch.send_ns.saturating_sub(batch.due_ns());
        let mut h = self.shard(shard);
        if self.window.contains(batch.send_ns) {
            h.rpc
                .saturating_record(ack_ns.saturating_sub(batch.send_ns));
        }
        if let Intended::At(intended) = batch.intended {
            // Every record shares one intended time: one histogram update for the batch.
            let lat = ack_ns.saturating_sub(intended);
            h.iv_publish.saturating_record_n(lat, n);
            h.iv_delay.saturating_record_n(delay_ns, n);
            if self.window.contains(intended) {
                h.publish.saturating_record_n(lat, n);
                h.delay.saturating_record_n(delay_ns, n);
            }
            return;
        }
        let mut in_window = 0;
        for i in 0..batch.records {
            let intended = batch.intended_ns(i);
            let lat = ack_ns.saturating_sub(intended);
            h.iv_publish.saturating_record(lat);
            if self.window.contains(intended) {
                h.publish.saturating_record(lat);
                in_window += 1;
            }
        }
        h.iv_delay.saturating_record_n(delay_ns, n);
        if in_window > 0 {
            h.delay.saturating_record_n(delay_ns, in_window);
        }
    }

    /// Records a failed append (a non-OK status or an RPC error).
    pub fn on_append_failure(&self, key: String, example: impl FnOnce() -> String, batch: &Batch) {
        self.failed_appends.fetch_add(1, Relaxed);
        let in_window = (0..batch.records)
            .filter(|&i| self.window.contains(batch.intended_ns(i)))
            .count() as u64;
        self.w_failed_records.fetch_add(in_window, Relaxed);
        self.count_error(key, example, u64::from(batch.records));
    }

    /// Records an error that is not a failed append (e.g. a reader's).
    pub fn on_error(&self, key: String, example: impl FnOnce() -> String) {
        self.count_error(key, example, 0);
    }

    fn count_error(&self, key: String, example: impl FnOnce() -> String, records: u64) {
        let mut errors = lock(&self.errors);
        let e = errors.entry(key).or_default();
        if e.count == 0 {
            e.example = example();
        }
        e.count += 1;
        e.records += records;
    }

    /// Records what a tailing reader received at `recv_ns`: `bytes` of stream holding
    /// records stamped with `stamps` (intended send times).
    pub fn on_read(&self, shard: usize, recv_ns: u64, bytes: u64, stamps: &[u64]) {
        let n = stamps.len() as u64;
        self.read_records.fetch_add(n, Relaxed);
        if self.window.contains(recv_ns) {
            self.w_read_records.fetch_add(n, Relaxed);
            self.w_read_bytes.fetch_add(bytes, Relaxed);
        }
        if stamps.is_empty() {
            return;
        }
        let mut h = self.shard(shard);
        for &ts in stamps {
            let lat = recv_ns.saturating_sub(ts);
            h.iv_e2e.saturating_record(lat);
            if self.window.contains(ts) {
                h.e2e.saturating_record(lat);
            }
        }
    }

    pub fn totals(&self) -> Totals {
        Totals {
            acked_records: self.acked_records.load(Relaxed),
            acked_bytes: self.acked_bytes.load(Relaxed),
            acked_appends: self.acked_appends.load(Relaxed),
            read_records: self.read_records.load(Relaxed),
            failed_appends: self.failed_appends.load(Relaxed),
        }
    }

    pub fn window_counts(&self) -> WindowCounts {
        WindowCounts {
            acked_records: self.w_acked_records.load(Relaxed),
            acked_bytes: self.w_acked_bytes.load(Relaxed),
            acked_appends: self.w_acked_appends.load(Relaxed),
            read_records: self.w_read_records.load(Relaxed),
            read_bytes: self.w_read_bytes.load(Relaxed),
            failed_records: self.w_failed_records.load(Relaxed),
        }
    }

    /// Merges and resets the interval histograms.
    pub fn take_interval(&self) -> IntervalHists {
        let mut out = IntervalHists {
            publish: new_histogram(),
            delay: new_histogram(),
            e2e: new_histogram(),
        };
        for shard in self.shards.iter() {
            let mut h = lock(shard);
            // Same bounds everywhere, so adding cannot fail.
            let _ = out.publish.add(&h.iv_publish);
            let _ = out.delay.add(&h.iv_delay);
            let _ = out.e2e.add(&h.iv_e2e);
            h.iv_publish.reset();
            h.iv_delay.reset();
            h.iv_e2e.reset();
        }
        out
    }

    /// The whole-window histograms, merged over shards.
    pub fn final_hists(&self) -> FinalHists {
        let mut out = FinalHists {
            publish: new_histogram(),
            rpc: new_histogram(),
            delay: new_histogram(),
            e2e: new_histogram(),
        };
        for shard in self.shards.iter() {
            let h = lock(shard);
            let _ = out.publish.add(&h.publish);
            let _ = out.rpc.add(&h.rpc);
            let _ = out.delay.add(&h.delay);
            let _ = out.e2e.add(&h.e2e);
        }
        out
    }

    pub fn errors(&self) -> BTreeMap<String, ErrorCount> {
        lock(&self.errors).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Window = Window {
        start_ns: 1_000,
        end_ns: 2_000,
    };

    #[test]
    fn latency_counts_from_each_records_intended_time() {
        let s = Stats::new(WINDOW, 2);
        // Records intended at 990, 1000, 1010, 1020; acked at 1100: the first is warm-up.
        let batch = Batch {
            intended: Intended::Scheduled {
                schedule: Schedule::from_parts(990.0, 10.0),
                first_seq: 0,
            },
            records: 4,
            bytes: 400,
            send_ns: 1_030,
        };
        s.on_ack(1, &batch, 1_100);
        let f = s.final_hists();
        assert_eq!(f.publish.len(), 3);
        assert_eq!(f.publish.max(), 100);
        assert_eq!(f.publish.min(), 80);
        // One append sent inside the window, acknowledged 70 ns after its send.
        assert_eq!(f.rpc.len(), 1);
        assert_eq!(f.rpc.max(), 70);
        // Send lag: sent at 1030, due (last record) at 1020.
        assert_eq!(f.delay.len(), 3);
        assert_eq!(f.delay.max(), 10);
        let w = s.window_counts();
        assert_eq!(
            (w.acked_records, w.acked_bytes, w.acked_appends),
            (4, 400, 1)
        );
        // The interval view includes the warm-up record.
        assert_eq!(s.take_interval().publish.len(), 4);
        assert_eq!(
            s.take_interval().publish.len(),
            0,
            "interval histograms reset"
        );
    }

    /// A batch's records are meant at exactly the times the schedule gives them, the times
    /// that count the records due in the window: with a fractional interval, a batch's
    /// first time plus each record's rounded step would put some of them 1 ns earlier, and
    /// a record at the window's start outside it.
    #[test]
    fn batches_keep_the_schedules_exact_times() {
        let schedule = Schedule::for_journal(1_000_000_007, 2_047_133.0, 4, 3, 3000);
        let window = Window {
            start_ns: schedule.intended_ns(4_500),
            end_ns: schedule.intended_ns(10_500),
        };
        let mut in_window = 0;
        for first_seq in (0..15_000).step_by(3000) {
            let batch = Batch {
                intended: Intended::Scheduled {
                    schedule,
                    first_seq,
                },
                records: 3000,
                bytes: 0,
                send_ns: 0,
            };
            for i in 0..3000 {
                let t = batch.intended_ns(i);
                assert_eq!(t, schedule.intended_ns(first_seq + u64::from(i)));
                in_window += u64::from(window.contains(t));
            }
        }
        assert_eq!(in_window, 6_000);
        assert_eq!(
            schedule.count_between(window.start_ns, window.end_ns),
            in_window
        );
    }

    #[test]
    fn acks_after_the_window_count_latency_but_not_throughput() {
        let s = Stats::new(WINDOW, 1);
        let batch = Batch {
            intended: Intended::At(1_500),
            records: 10,
            bytes: 1_000,
            send_ns: 1_500,
        };
        s.on_ack(0, &batch, 2_500);
        assert_eq!(s.final_hists().publish.len(), 10);
        assert_eq!(s.window_counts().acked_records, 0);
        assert_eq!(s.totals().acked_records, 10);
    }

    #[test]
    fn failures_are_counted_by_kind_with_the_first_example() {
        let s = Stats::new(WINDOW, 1);
        let batch = Batch {
            intended: Intended::At(1_200),
            records: 5,
            bytes: 500,
            send_ns: 1_200,
        };
        s.on_append_failure(
            "append status NOT_ALLOWED".into(),
            || "first".into(),
            &batch,
        );
        s.on_append_failure(
            "append status NOT_ALLOWED".into(),
            || "second".into(),
            &batch,
        );
        s.on_error("read grpc Unavailable".into(), || "gone".into());
        let e = s.errors();
        assert_eq!(
            e["append status NOT_ALLOWED"],
            ErrorCount {
                count: 2,
                records: 10,
                example: "first".into()
            }
        );
        assert_eq!(e["read grpc Unavailable"].count, 1);
        assert_eq!(s.window_counts().failed_records, 10);
        assert_eq!(s.totals().failed_appends, 2);
    }

    #[test]
    fn reads_record_end_to_end_latency_for_window_records() {
        let s = Stats::new(WINDOW, 3);
        s.on_read(2, 1_500, 300, &[900, 1_100, 1_400]);
        let f = s.final_hists();
        assert_eq!(f.e2e.len(), 2);
        assert_eq!(f.e2e.max(), 400);
        assert_eq!(s.window_counts().read_records, 3);
        assert_eq!(s.take_interval().e2e.len(), 3);
    }
}
