//! A tailing reader: one blocking Read per journal from the write head at the start of the
//! run, parsing records out of the stream to measure end-to-end latency.
//!
//! Each record's first 8 bytes carry its intended send time ([`crate::record`]), so the
//! end-to-end latency of a record is simply "now − stamp" when its last byte arrives.
//! Records that are not ours (no stamp) are skipped. A gap in the stream (an offset jump)
//! makes the parser realign on the next newline. If the stream ends or fails, the reader
//! reopens it from where it stopped; the run's orchestrator cancels the reader once it has
//! caught up with every acknowledged append, or at the hard deadline.
//!
//! Lives on: one tokio task per journal.

use crate::client::{self, READ};
use crate::clock::now_ns;
use crate::record::{Framing, RecordParser, decode_ts};
use crate::stats::Stats;
use protocol::grpc::Channel;
use protocol::{ReadRequest, ReadResponse, Status};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::time::Duration;

/// Pause before reopening a read stream that ended or failed.
const REOPEN_DELAY: Duration = Duration::from_millis(50);

pub struct TailReader {
    pub journal: String,
    pub channel: Channel,
    pub shard: usize,
    /// Offset to start from: the write head before any load was applied.
    pub start_offset: i64,
    pub framing: Framing,
    pub fixed_size: Option<usize>,
    pub stats: Arc<Stats>,
    /// The offset read up to, published for the orchestrator.
    pub position: Arc<AtomicI64>,
}

impl TailReader {
    pub async fn run(self) {
        let mut offset = self.start_offset;
        let mut parser = RecordParser::new(self.framing, self.fixed_size);
        let mut stamps: Vec<u64> = Vec::with_capacity(4096);
        self.position.store(offset, Relaxed);
        loop {
            let req = ReadRequest {
                journal: self.journal.clone(),
                offset,
                block: true,
                ..Default::default()
            };
            let mut call = match self.channel.server_streaming(READ, &req).await {
                Ok(call) => call,
                Err(err) => {
                    self.stats
                        .on_error(format!("read grpc {:?}", err.code), || {
                            format!("{}: {}", self.journal, err.message)
                        });
                    tokio::time::sleep(REOPEN_DELAY).await;
                    continue;
                }
            };
            loop {
                let resp = match call.next::<ReadResponse>().await {
                    Ok(Some(resp)) => resp,
                    Ok(None) => {
                        self.stats
                            .on_error("read stream ended (reopened)".into(), || {
                                format!("{} at offset {offset}", self.journal)
                            });
                        break;
                    }
                    Err(err) => {
                        self.stats
                            .on_error(format!("read grpc {:?}", err.code), || {
                                format!("{}: {}", self.journal, err.message)
                            });
                        break;
                    }
                };
                if resp.status != Status::Ok as i32 {
                    let status = client::status_name(resp.status);
                    self.stats.on_error(format!("read status {status}"), || {
                        format!("{} at offset {offset}", self.journal)
                    });
                    break;
                }
                if resp.offset != offset {
                    // A jump (or, from a broken broker, a rewind): realign on a record.
                    self.stats.on_error("read offset jump".into(), || {
                        format!(
                            "{}: expected offset {offset}, got {}",
                            self.journal, resp.offset
                        )
                    });
                    parser.reset(true);
                    offset = resp.offset;
                }
                if resp.content.is_empty() {
                    continue; // Metadata: a fragment, the write head.
                }
                let recv_ns = now_ns();
                stamps.clear();
                parser.push(&resp.content, |record| {
                    if let Some(ts) = decode_ts(record) {
                        stamps.push(ts);
                    }
                });
                offset += resp.content.len() as i64;
                self.position.store(offset, Relaxed);
                self.stats
                    .on_read(self.shard, recv_ns, resp.content.len() as u64, &stamps);
            }
            tokio::time::sleep(REOPEN_DELAY).await;
        }
    }
}
