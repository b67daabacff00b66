//! One journal's writer: builds appends of `records_per_append` records and keeps up to
//! `in_flight` of them outstanding on its connection.
//!
//! Open loop: batch `b` holds records `b·B .. (b+1)·B` of the journal's [`Schedule`] and is
//! dispatched at the intended time of its last record (sleeping on the [`crate::pacer`]).
//! If `in_flight` appends are already outstanding it waits for one to finish — that wait
//! is the generator falling behind, and it shows up in both append latency and send lag,
//! because each record's latency counts from its intended time. Batches keep being sent
//! for every record intended before the window ends, even after it ends, so a broker that
//! fell behind has its backlog measured (until the hard deadline).
//!
//! Max rate: a new append is built the moment an in-flight slot frees up, until the window
//! ends; records are stamped with the send time.
//!
//! Each append runs in its own task inside the writer's `JoinSet`, so cancelling the
//! writer (at the hard deadline) cancels its appends too.
//!
//! Lives on: one tokio task per journal; its appends on any worker.

use crate::client;
use crate::clock::{instant_at, now_ns};
use crate::pacer;
use crate::record::{AppendLayout, SizeRange, SplitMix64, encode_append, journal_frame};
use crate::schedule::Schedule;
use crate::stats::{Batch, Intended, Stats};
use bytes::{Bytes, BytesMut};
use protocol::Status;
use protocol::grpc::Channel;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::time::Duration;
use tokio::task::JoinSet;

/// Pause after a failed append in max-rate mode, so a broker that rejects everything at
/// once is not hammered in a tight loop.
const FAILURE_BACKOFF: Duration = Duration::from_millis(10);

/// What every writer shares.
pub struct WriterConfig {
    pub records_per_append: usize,
    pub sizes: SizeRange,
    pub layout: AppendLayout,
    pub in_flight: usize,
    /// Open-loop total rate; `None` for max rate.
    pub rate: Option<f64>,
    pub journals: usize,
    /// Schedules start here (clock ns).
    pub start_ns: u64,
    pub stats: Arc<Stats>,
    /// Printable filler at least as long as the largest record.
    pub filler: Arc<[u8]>,
    pub seed: u64,
}

/// One journal's identity and connection.
pub struct JournalWriter {
    pub index: usize,
    pub journal: String,
    pub channel: Channel,
    /// Statistics shard (the connection's).
    pub shard: usize,
    /// Highest acknowledged end offset, for readers to know when they have caught up.
    pub acked_end: Arc<AtomicI64>,
}

/// Keeps the buffer of a finished append for reuse, if nothing else still refers to it.
fn recycle(free: &mut Vec<BytesMut>, done: Option<Result<Bytes, tokio::task::JoinError>>) {
    if let Some(Ok(frames)) = done
        && let Ok(buf) = frames.try_into_mut()
    {
        free.push(buf);
    }
}

impl JournalWriter {
    pub async fn run(self, cfg: Arc<WriterConfig>) {
        let frame = journal_frame(&self.journal);
        let mut rng = SplitMix64::new(cfg.seed ^ (self.index as u64).wrapping_mul(0x9E37_79B9));
        let mut sizes = Vec::with_capacity(cfg.records_per_append);
        let mut tasks: JoinSet<Bytes> = JoinSet::new();
        // Buffers of finished appends, reused so that each append does not fault in fresh
        // pages (large allocations are mmapped afresh by the allocator).
        let mut free: Vec<BytesMut> = Vec::with_capacity(cfg.in_flight);

        let this = Arc::new(self);
        let schedule = cfg.rate.map(|rate| {
            Schedule::for_journal(
                cfg.start_ns,
                rate,
                cfg.journals,
                this.index,
                cfg.records_per_append,
            )
        });
        let end_ns = cfg.stats.window.end_ns;
        let per_batch = cfg.records_per_append as u64;

        for batch_no in 0u64.. {
            // Plan the batch: when it is due, and each record's intended time.
            let first_seq = batch_no * per_batch;
            if let Some(s) = &schedule {
                if s.intended_ns(first_seq) >= end_ns {
                    break;
                }
                let due_ns = s.intended_ns(first_seq + per_batch - 1);
                pacer::sleep_until(instant_at(due_ns)).await;
            }
            // Keep at most `in_flight` appends outstanding.
            while tasks.len() >= cfg.in_flight {
                recycle(&mut free, tasks.join_next().await);
            }
            let send_ns = now_ns();
            let intended = match schedule {
                Some(schedule) => Intended::Scheduled {
                    schedule,
                    first_seq,
                },
                None if send_ns >= end_ns => break,
                None => Intended::At(send_ns),
            };
            let times = Batch {
                intended,
                records: cfg.records_per_append as u32,
                bytes: 0,
                send_ns,
            };

            sizes.clear();
            sizes.extend((0..cfg.records_per_append).map(|_| cfg.sizes.sample(&mut rng)));
            let encoded = encode_append(
                free.pop().unwrap_or_default(),
                &frame,
                &sizes,
                |i| times.intended_ns(i as u32),
                cfg.layout,
                &cfg.filler,
            );
            let batch = Batch {
                bytes: encoded.payload_bytes,
                ..times
            };
            cfg.stats.on_dispatch(&batch);
            let (cfg2, this2) = (cfg.clone(), this.clone());
            tasks.spawn(async move {
                // Once h2 has sent and dropped its slices, this handle is the only one left.
                let keep = encoded.frames.clone();
                this2.append(&cfg2, encoded.frames, batch).await;
                keep
            });
        }
        // Let outstanding appends finish (the caller's deadline bounds this).
        while tasks.join_next().await.is_some() {}
    }

    async fn append(&self, cfg: &WriterConfig, frames: Bytes, batch: Batch) {
        let stats = &cfg.stats;
        stats.append_started();
        let result = client::append(&self.channel, frames).await;
        let ack_ns = now_ns();
        stats.append_finished();
        let failed = match result {
            Ok(resp) if resp.status == Status::Ok as i32 => {
                let commit = resp.commit.unwrap_or_default();
                if (commit.end - commit.begin) as u64 != batch.bytes {
                    stats.on_append_failure(
                        "append commit length mismatch".into(),
                        || {
                            format!(
                                "{}: sent {} bytes, commit [{}, {})",
                                self.journal, batch.bytes, commit.begin, commit.end
                            )
                        },
                        &batch,
                    );
                    true
                } else {
                    self.acked_end.fetch_max(commit.end, Relaxed);
                    stats.on_ack(self.shard, &batch, ack_ns);
                    false
                }
            }
            Ok(resp) => {
                let status = client::status_name(resp.status);
                stats.on_append_failure(
                    format!("append status {status}"),
                    || format!("{}: {status}", self.journal),
                    &batch,
                );
                true
            }
            Err(err) => {
                stats.on_append_failure(
                    format!("append grpc {:?}", err.code),
                    || format!("{}: {}", self.journal, err.message),
                    &batch,
                );
                true
            }
        };
        if failed && cfg.rate.is_none() {
            tokio::time::sleep(FAILURE_BACKOFF).await;
        }
    }
}
