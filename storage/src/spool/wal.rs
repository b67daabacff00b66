//! Durable mode's per-core commit log (write-ahead log): one preallocated file per core into
//! which every durable commit of the core's spools is copied, so that one durable write per
//! batch makes all of them durable, instead of two `fdatasync`s per spool (its content file
//! and its `.commits` log).
//!
//! # Why
//!
//! Syncing each spool's two files cost 2 × journals `fdatasync`s per batch, each an io-wq
//! work item (measured: 67–105 k context switches/s for 8 journals, durable at 0.2–0.4× the
//! records/s of non-durable). An `fdatasync` that overwrites a preallocated, already
//! written file needs no journal commit of the file system (0.10 ms here, against 0.14 ms
//! after an append). The log is such a file, and it is the only file a durable append
//! waits for.
//!
//! # Write path
//!
//! A spool's commit writes its content and commit record to its own files as always (page
//! cache), then `Wal::log` copies the same bytes into the core's pending batch. One flush
//! task places each batch at the log's position, padded to whole 4 KiB blocks, and writes
//! it with `O_DIRECT | O_DSYNC` through io_uring: the write completes once the batch is on
//! the device, with no `fdatasync` and no io-wq worker (on a file system that refuses
//! `O_DIRECT`, a buffered write and an `fdatasync`). Up to [`WRITES_IN_FLIGHT`] batches are
//! written at once; a [`super::SyncTicket`] of a commit returns once its batch and every
//! batch before it are written. Commits that create files or directories (a fragment's
//! first, a roll's or discard's durable begin) are *barriers*: they still sync the spool's
//! files and directories through the gate, because a record can only be replayed into files
//! that exist. So are commits too large to copy ([`Wal::max_record`]).
//!
//! # Halves and checkpoints
//!
//! The file is used in two halves. When writing enters a half, a *checkpoint* starts: every
//! spool that logged a record since the previous checkpoint is synced through its gate, so
//! that its own files hold every record of the other half. Writing re-enters that half only
//! once its checkpoint ended (and no earlier batch's write is still in flight).
//!
//! # Replay
//!
//! [`replay`] runs at broker start, before any spool opens (blocking `std::fs`, once). It
//! reads each half's chain of records from its start (skipping a batch's zero padding to
//! the next block), then for each fragment applies the records in offset order, each only
//! if it continues exactly what the files hold: its start offset is the committed end of
//! the `.commits` log, the SHA-1 of the content up to there equals the record's, and the
//! crc32c of the log's bytes up to there equals the record's. A record already covered is
//! skipped as present; one that does not continue the files (a fragment since discarded,
//! files removed because the fragment was persisted, a record of an older lap or run) is
//! skipped, so records of any age are safe to read. Replay writes the content, then the
//! commit record, syncs the files, and finally zeroes the start of each half's chain so that
//! the next start does not read the records again.
//!
//! ```text
//! header (block 0, HEADER_LEN bytes used; written once per run, before any record):
//!   [0..8)   magic "CRNTWAL1"
//!   [8..16)  u64 LE runs that opened the log
//!   [16..24) u64 LE start of the second half
//!   [24..28) u32 LE crc32c of [0..24)
//! records from DATA_START and from the second half's start, back to back within a batch,
//! each batch starting on a 4 KiB block:
//!   [0..4)   u32 LE n = length of [8..8+n)
//!   [4..8)   u32 LE crc32c of [8..8+n)
//!   [8..16)  u64 LE lap of this run (diagnostics)
//!   [16..18) u16 LE journal name length j, then the name
//!   i64 LE fragment begin, i64 LE from (committed end before), i64 LE to (after)
//!   [20] SHA-1 of the fragment's content [begin, from) (the zero sum when empty)
//!   u64 LE commit-log length before (where the commit record goes), u32 LE crc32c of the
//!   log's bytes before it, u32 LE length l of the log bytes, the log bytes, then the
//!   content [from, to)
//! ```
//!
//! Lives on: one core (`!Send`), shared by that core's [`super::SyncBatcher`]; [`replay`]
//! runs on the starting thread.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use glommio::io::BufferedFile;
use sha1::Digest;

use futures_util::future::LocalBoxFuture;

use super::failure::Failure;
use crate::StorageError;
use crate::fragment::{open_rw, write_all};

/// Size of a core's log file: written once with zeros so that syncs never change its
/// metadata.
pub const DEFAULT_SIZE: u64 = 32 << 20;
/// Records start here; the header has the first block.
const DATA_START: u64 = 4096;
const HEADER_LEN: usize = 28;
const MAGIC: &[u8; 8] = b"CRNTWAL1";
/// The record's fixed part before the journal name: length, crc, lap, name length.
const RECORD_PREFIX: usize = 18;
/// The fixed part after the name: begin, from, to, sum, log length, log crc, log bytes length.
const RECORD_MIDDLE: usize = 8 * 3 + 20 + 8 + 4 + 4;
const ZEROS_CHUNK: usize = 1 << 20;

/// The directory of the logs under a spool root.
pub fn dir(root: &Path) -> PathBuf {
    root.join("wal")
}

/// The log file of core `core` under a spool root.
pub fn path(root: &Path, core: usize) -> PathBuf {
    dir(root).join(format!("core-{core}.wal"))
}

/// What a spool logs for one commit.
pub(crate) struct Entry<'a> {
    pub journal: &'a str,
    pub begin: i64,
    pub from: i64,
    pub to: i64,
    pub sum_from: [u8; 20],
    pub log_pos: u64,
    pub log_crc: u32,
    pub log_bytes: &'a [u8],
    pub content: &'a [Bytes],
}

impl Entry<'_> {
    fn encoded_len(&self) -> usize {
        let content: usize = self.content.iter().map(Bytes::len).sum();
        RECORD_PREFIX + self.journal.len() + RECORD_MIDDLE + self.log_bytes.len() + content
    }

    /// Appends the record with a zero lap and crc (set by the flush).
    fn encode(&self, out: &mut Vec<u8>) {
        let len = self.encoded_len();
        out.reserve(len);
        out.extend_from_slice(&((len - 8) as u32).to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes());
        out.extend_from_slice(&(self.journal.len() as u16).to_le_bytes());
        out.extend_from_slice(self.journal.as_bytes());
        for v in [self.begin, self.from, self.to] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.sum_from);
        out.extend_from_slice(&self.log_pos.to_le_bytes());
        out.extend_from_slice(&self.log_crc.to_le_bytes());
        out.extend_from_slice(&(self.log_bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(self.log_bytes);
        for chunk in self.content {
            out.extend_from_slice(chunk);
        }
    }
}

/// Sets the lap and crc of every record of `batch` (records back to back).
fn seal(batch: &mut [u8], lap: u64) {
    let mut at = 0;
    while at + 8 <= batch.len() {
        let n = u32::from_le_bytes(batch[at..at + 4].try_into().expect("4 bytes")) as usize;
        let body = at + 8..at + 8 + n;
        batch[at + 8..at + 16].copy_from_slice(&lap.to_le_bytes());
        let crc = crc32c::crc32c(&batch[body.clone()]);
        batch[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());
        at = body.end;
    }
}

/// The log's header: written once per run, before any record.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Header {
    /// Runs that opened the log (diagnostics).
    runs: u64,
    /// Start of the second half.
    mid: u64,
}

impl Header {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.runs.to_le_bytes());
        out.extend_from_slice(&self.mid.to_le_bytes());
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// The second half's start, if it lies within a file of `len` bytes.
    fn mid_within(&self, len: usize) -> Option<u64> {
        (self.mid >= DATA_START && self.mid < len as u64).then_some(self.mid)
    }

    fn decode(buf: &[u8]) -> Option<Header> {
        let header = buf.get(..HEADER_LEN)?;
        if &header[..8] != MAGIC || crc32c::crc32c(&header[..24]) != le_u32(header, 24)? {
            return None;
        }
        Some(Header {
            runs: le_u64(header, 8)?,
            mid: le_u64(header, 16)?,
        })
    }
}

fn le_u32(buf: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(buf.get(at..at + 4)?.try_into().ok()?))
}

fn le_u64(buf: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(buf.get(at..at + 8)?.try_into().ok()?))
}

fn le_i64(buf: &[u8], at: usize) -> Option<i64> {
    le_u64(buf, at).map(|v| v as i64)
}

/// Batches start on this boundary (O_DIRECT's alignment); the rest of a batch's last block is
/// zeros.
const BLOCK: u64 = 4096;

/// Rounds `n` up to a whole number of blocks.
fn blocks(n: u64) -> u64 {
    n.div_ceil(BLOCK) * BLOCK
}

/// Batch writes in flight at once.
const WRITES_IN_FLIGHT: usize = 2;

/// One part of a batch, padded to whole blocks, ready for its file.
enum Part {
    Direct(glommio::io::DmaBuffer),
    Buffered(Vec<u8>),
}

/// How batches reach the device.
enum LogFile {
    /// `O_DIRECT | O_DSYNC`: a write completes once it is on the device, submitted
    /// through io_uring without a worker thread. Measured against a buffered write and an
    /// io_uring `fdatasync` (3,000 single writes, quiet machine): 78 µs, 1.9 context switches
    /// and 21 µs of CPU a write against 95 µs, 4.0 and 40 µs.
    Direct(glommio::io::DmaFile),
    /// Where the file system refuses `O_DIRECT` (tmpfs): a buffered write, then
    /// `fdatasync`.
    Buffered(Rc<BufferedFile>),
}

/// What a log tells its observer (the broker's metrics).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LogEvent {
    /// A sync of the log made `records` more commits durable.
    Synced { records: usize },
    /// Writing entered a half: a checkpoint of the other half's spools started.
    Checkpoint,
}

/// Told of every [`LogEvent`].
pub type LogObserver = Box<dyn Fn(LogEvent)>;

/// A spool's side of the log: what a checkpoint needs from each spool that logged a record
/// since the previous one. The spool's sync gate ([`super::SyncGate`]) implements it; the
/// log names only this trait, so that it does not depend on the gate's module.
pub(crate) trait LoggedSpool {
    /// Marks the spool as logged since the last checkpoint; true if it was not.
    fn mark_logged(&self) -> bool;
    /// Clears the mark, then returns a sync of the spool's own files covering everything
    /// committed so far (taken now; the returned future only waits for it).
    fn checkpoint(&self) -> LocalBoxFuture<'static, Result<(), StorageError>>;
}

/// A core's commit log. See the module docs.
pub struct Wal {
    observer: Option<LogObserver>,
    /// Records of the batch being filled.
    pending_records: Cell<usize>,
    path: PathBuf,
    size: u64,
    /// Start of the second half.
    mid: u64,
    file: RefCell<Option<Rc<LogFile>>>,
    /// Laps of this run (stamped on records, for diagnostics).
    lap: Cell<u64>,
    /// The half being written (0 or 1) and where the next record goes.
    half: Cell<usize>,
    pos: Cell<u64>,
    /// The checkpoint started when writing entered the current half: it syncs the spools
    /// of every record of the other half, and must end before writing goes back there.
    checkpoint: RefCell<Option<glommio::Task<Result<(), StorageError>>>>,
    /// Records of the batch being filled.
    pending: RefCell<Vec<u8>>,
    /// Number of the batch being filled; tickets wait until `flushed` reaches theirs.
    filling: Cell<u64>,
    flushed: Cell<u64>,
    /// The flush task is running (it takes batches until none is pending).
    flushing: Cell<bool>,
    /// Batch writes in flight, and the batches written (out of order) past `flushed`.
    writes_in_flight: Cell<usize>,
    written: RefCell<std::collections::BTreeSet<u64>>,
    /// The flush task, waiting for a write in flight to end.
    write_waiter: RefCell<Option<Waker>>,
    failed: RefCell<Option<Failure>>,
    waiters: RefCell<Vec<Waker>>,
    /// Gates with records since the last checkpoint started.
    touched: RefCell<Vec<Box<dyn LoggedSpool>>>,
    flushes: Cell<u64>,
    checkpoints: Cell<u64>,
    /// Test builds: open the log without `O_DIRECT`, as on a file system that refuses it.
    #[cfg(test)]
    buffered_only: Cell<bool>,
}

impl Wal {
    /// A log at `path` of `size` bytes (at least 64 KiB); the file is created or reused by
    /// [`Wal::start`] or the first flush.
    pub fn new(path: PathBuf, size: u64, observer: Option<LogObserver>) -> Rc<Wal> {
        let size = size.max(64 << 10) / BLOCK * BLOCK;
        let mid = DATA_START + ((size - DATA_START) / 2) / 4096 * 4096;
        Rc::new(Wal {
            observer,
            pending_records: Cell::new(0),
            path,
            size,
            mid,
            file: RefCell::new(None),
            lap: Cell::new(0),
            half: Cell::new(0),
            pos: Cell::new(DATA_START),
            checkpoint: RefCell::new(None),
            pending: RefCell::new(Vec::new()),
            filling: Cell::new(1),
            flushed: Cell::new(0),
            flushing: Cell::new(false),
            writes_in_flight: Cell::new(0),
            written: RefCell::new(Default::default()),
            write_waiter: RefCell::new(None),
            failed: RefCell::new(None),
            waiters: RefCell::new(Vec::new()),
            touched: RefCell::new(Vec::new()),
            flushes: Cell::new(0),
            checkpoints: Cell::new(0),
            #[cfg(test)]
            buffered_only: Cell::new(false),
        })
    }

    /// Prepares the file now (in the background) rather than at the first durable commit.
    pub fn start(self: &Rc<Self>) {
        if !self.flushing.replace(true) {
            glommio::spawn_local(self.clone().flush_loop()).detach();
        }
    }

    /// Opens the log without `O_DIRECT` (test builds), as on a file system that refuses it.
    #[cfg(test)]
    pub(crate) fn buffered_only(&self) {
        self.buffered_only.set(true);
    }

    /// Whether the log writes with `O_DIRECT | O_DSYNC` (once opened).
    pub fn direct(&self) -> bool {
        matches!(self.file.borrow().as_deref(), Some(LogFile::Direct(_)))
    }

    /// The largest record a commit may log (a quarter of a half); larger commits are
    /// barriers.
    pub fn max_record(&self) -> usize {
        ((self.mid - DATA_START) / 4) as usize
    }

    /// Syncs of the log done so far (each makes one or more batches durable).
    pub fn flushes(&self) -> u64 {
        self.flushes.get()
    }

    /// Checkpoints started so far (one each time writing enters a half).
    pub fn checkpoints(&self) -> u64 {
        self.checkpoints.get()
    }

    /// Copies `entry` into the pending batch; returns the batch's number, or None if the
    /// entry is too large to log (the caller makes the commit a barrier instead).
    pub(crate) fn log<G>(self: &Rc<Self>, entry: &Entry<'_>, gate: &G) -> Option<u64>
    where
        G: LoggedSpool + Clone + 'static,
    {
        if entry.encoded_len() > self.max_record() || entry.journal.len() > u16::MAX as usize {
            return None;
        }
        entry.encode(&mut self.pending.borrow_mut());
        self.pending_records.set(self.pending_records.get() + 1);
        if gate.mark_logged() {
            self.touched.borrow_mut().push(Box::new(gate.clone()));
        }
        if !self.flushing.replace(true) {
            glommio::spawn_local(self.clone().flush_loop()).detach();
        }
        Some(self.filling.get())
    }

    pub(crate) fn failure(&self) -> Option<StorageError> {
        self.failed.borrow().as_ref().map(Failure::error)
    }

    /// Returns once batch `batch` is on the device, or the error that failed the log.
    pub(crate) async fn wait(&self, batch: u64) -> Result<(), StorageError> {
        std::future::poll_fn(|cx: &mut Context<'_>| {
            if let Some(failure) = self.failed.borrow().as_ref() {
                return Poll::Ready(Err(failure.error()));
            }
            if self.flushed.get() >= batch {
                return Poll::Ready(Ok(()));
            }
            let mut waiters = self.waiters.borrow_mut();
            if !waiters.iter().any(|w| w.will_wake(cx.waker())) {
                waiters.push(cx.waker().clone());
            }
            Poll::Pending
        })
        .await
    }

    fn fail(&self, e: &StorageError) {
        if self.failed.borrow().is_none() {
            tracing::error!(error = %e, "commit log failed; durable appends on this core are refused");
            *self.failed.borrow_mut() = Some(Failure::of(e));
        }
        self.wake_all();
        if let Some(waker) = self.write_waiter.borrow_mut().take() {
            waker.wake();
        }
    }

    async fn flush_loop(self: Rc<Self>) {
        if let Err(e) = self.ensure_open().await {
            self.fail(&e);
        }
        loop {
            // Let the commits runnable in this tick join the batch.
            glommio::executor().yield_now().await;
            if self.failed.borrow().is_some() || self.pending.borrow().is_empty() {
                break;
            }
            if self.writes_in_flight.get() >= WRITES_IN_FLIGHT {
                self.until_writes_end(WRITES_IN_FLIGHT - 1).await;
                continue;
            }
            let batch = std::mem::take(&mut *self.pending.borrow_mut());
            let records = self.pending_records.replace(0);
            let number = self.filling.get();
            self.filling.set(number + 1);
            let parts = match self.place_batch(batch).await {
                Ok(parts) => parts,
                Err(e) => {
                    self.fail(&e);
                    break;
                }
            };
            self.writes_in_flight.set(self.writes_in_flight.get() + 1);
            glommio::spawn_local(self.clone().write_parts(number, records, parts)).detach();
        }
        self.flushing.set(false);
        // A record logged after the last look at `pending` but before `flushing` was
        // cleared would otherwise wait for a flush that never comes.
        if !self.pending.borrow().is_empty()
            && self.failed.borrow().is_none()
            && !self.flushing.replace(true)
        {
            glommio::spawn_local(self.clone().flush_loop()).detach();
        }
    }

    fn observe(&self, event: LogEvent) {
        if let Some(observer) = &self.observer {
            observer(event);
        }
    }

    fn wake_all(&self) {
        for waker in std::mem::take(&mut *self.waiters.borrow_mut()) {
            waker.wake();
        }
    }

    fn io_err(&self, op: &'static str, e: impl Into<std::io::Error>) -> StorageError {
        StorageError::io(op, &self.path, e.into())
    }

    /// Opens (creating and filling with zeros if needed) the file and writes its header.
    async fn ensure_open(&self) -> Result<(), StorageError> {
        if self.file.borrow().is_some() {
            return Ok(());
        }
        let _op = crate::in_flight::op();
        if let Some(parent) = self.path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| self.io_err("creating", e))?;
        }
        let created = !self.path.exists();
        let file = open_rw(&self.path, created)
            .await
            .map_err(|e| self.io_err("opening", e))?;
        let len = file
            .file_size()
            .await
            .map_err(|e| self.io_err("sizing", e))?;
        if len < self.size {
            let zeros = vec![0u8; ZEROS_CHUNK];
            let mut at = len;
            while at < self.size {
                let n = ((self.size - at) as usize).min(ZEROS_CHUNK);
                write_all(&file, &zeros[..n], at)
                    .await
                    .map_err(|e| self.io_err("preallocating", e))?;
                at += n as u64;
            }
        }
        let runs = read_header(&file).await.map_or(0, |h| h.runs);
        let header = Header {
            runs: runs + 1,
            mid: self.mid,
        };
        write_all(&file, &header.encode(), 0)
            .await
            .map_err(|e| self.io_err("writing", e))?;
        file.fdatasync()
            .await
            .map_err(|e| self.io_err("syncing", e))?;
        if created && let Some(parent) = self.path.parent() {
            super::sync_dir(parent).await?;
        }
        let direct = glommio::io::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DSYNC)
            .dma_open(&self.path)
            .await;
        #[cfg(test)]
        let direct = if self.buffered_only.get() {
            Err(glommio::GlommioError::from(
                std::io::Error::from_raw_os_error(libc::EINVAL),
            ))
        } else {
            direct
        };
        let log = match direct {
            Ok(direct) => {
                let _ = file.close().await;
                LogFile::Direct(direct)
            }
            Err(e) => {
                tracing::info!(path = %self.path.display(), error = %e,
                    "commit log without O_DIRECT (buffered writes and fdatasync)");
                LogFile::Buffered(Rc::new(file))
            }
        };
        self.half.set(0);
        self.pos.set(DATA_START);
        *self.file.borrow_mut() = Some(Rc::new(log));
        Ok(())
    }

    fn half_end(&self) -> u64 {
        if self.half.get() == 0 {
            self.mid
        } else {
            self.size
        }
    }

    /// Places `batch` (whole records) at the log's position, moving to the other half where
    /// it does not fit: the parts to write, each at its position, padded to whole blocks.
    async fn place_batch(&self, mut batch: Vec<u8>) -> Result<Vec<(u64, Part)>, StorageError> {
        let file = self.file.borrow().clone().expect("opened");
        let mut parts = Vec::new();
        let mut start = 0;
        while start < batch.len() {
            // As many whole records as fit (in whole blocks) before the end of the half.
            let room = self.half_end() - self.pos.get();
            let mut end = start;
            while end + 8 <= batch.len() {
                let n = 8 + le_u32(&batch, end).expect("in bounds") as usize;
                if blocks((end + n - start) as u64) > room {
                    break;
                }
                end += n;
            }
            if end == start {
                self.enter_other_half().await?;
                continue;
            }
            let part = &mut batch[start..end];
            seal(part, self.lap.get());
            let len = blocks(part.len() as u64);
            let padded = match &*file {
                LogFile::Direct(direct) => {
                    let mut buf = direct.alloc_dma_buffer(len as usize);
                    let bytes = buf.as_bytes_mut();
                    bytes[..part.len()].copy_from_slice(part);
                    bytes[part.len()..].fill(0);
                    Part::Direct(buf)
                }
                LogFile::Buffered(_) => {
                    let mut padded = part.to_vec();
                    padded.resize(len as usize, 0);
                    Part::Buffered(padded)
                }
            };
            parts.push((self.pos.get(), padded));
            self.pos.set(self.pos.get() + len);
            start = end;
        }
        Ok(parts)
    }

    /// Writes batch `number`'s parts; once they are on the device, the batch (and every
    /// batch before it that is written too) is flushed.
    async fn write_parts(self: Rc<Self>, number: u64, records: usize, parts: Vec<(u64, Part)>) {
        let _op = crate::in_flight::op();
        let file = self.file.borrow().clone().expect("opened");
        let result = async {
            for (pos, part) in parts {
                match (&*file, part) {
                    (LogFile::Direct(direct), Part::Direct(buf)) => {
                        let len = buf.len();
                        let n = direct
                            .write_at(buf, pos)
                            .await
                            .map_err(|e| self.io_err("writing", e))?;
                        if n != len {
                            let short = std::io::Error::from(std::io::ErrorKind::WriteZero);
                            return Err(self.io_err("writing", short));
                        }
                    }
                    (LogFile::Buffered(buffered), Part::Buffered(bytes)) => {
                        write_all(buffered, &bytes, pos)
                            .await
                            .map_err(|e| self.io_err("writing", e))?;
                    }
                    _ => unreachable!("parts are made for the log's file"),
                }
            }
            if let LogFile::Buffered(buffered) = &*file {
                buffered
                    .fdatasync()
                    .await
                    .map_err(|e| self.io_err("syncing", e))?;
            }
            Ok(())
        }
        .await;
        self.writes_in_flight.set(self.writes_in_flight.get() - 1);
        match result {
            Ok(()) => {
                {
                    let mut written = self.written.borrow_mut();
                    written.insert(number);
                    while written.remove(&(self.flushed.get() + 1)) {
                        self.flushed.set(self.flushed.get() + 1);
                    }
                }
                self.flushes.set(self.flushes.get() + 1);
                self.observe(LogEvent::Synced { records });
                self.wake_all();
            }
            Err(e) => self.fail(&e),
        }
        if let Some(waker) = self.write_waiter.borrow_mut().take() {
            waker.wake();
        }
    }

    /// Returns once at most `most` batch writes are in flight (or the log failed).
    async fn until_writes_end(&self, most: usize) {
        std::future::poll_fn(|cx: &mut Context<'_>| {
            if self.writes_in_flight.get() <= most || self.failed.borrow().is_some() {
                return Poll::Ready(());
            }
            *self.write_waiter.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    /// Moves writing to the other half: waits for the checkpoint that syncs the spools of
    /// its records (started when writing left it), then starts the checkpoint of the half
    /// being left.
    async fn enter_other_half(&self) -> Result<(), StorageError> {
        // No write of an earlier batch may land in the half once it is reused.
        self.until_writes_end(0).await;
        let previous = self.checkpoint.borrow_mut().take();
        if let Some(task) = previous {
            task.await?;
        }
        // Tickets now, so that they cover every commit logged so far.
        let gates = std::mem::take(&mut *self.touched.borrow_mut());
        let syncs: Vec<_> = gates.iter().map(|gate| gate.checkpoint()).collect();
        *self.checkpoint.borrow_mut() = Some(glommio::spawn_local(async move {
            for result in futures_util::future::join_all(syncs).await {
                result?;
            }
            Ok(())
        }));
        self.checkpoints.set(self.checkpoints.get() + 1);
        self.observe(LogEvent::Checkpoint);
        let half = 1 - self.half.get();
        self.half.set(half);
        self.pos.set(if half == 0 { DATA_START } else { self.mid });
        self.lap.set(self.lap.get() + 1);
        Ok(())
    }
}

async fn read_header(file: &BufferedFile) -> Option<Header> {
    let buf = crate::fragment::read_up_to(file, 0, HEADER_LEN)
        .await
        .ok()?;
    Header::decode(&buf)
}

/// One decoded record.
#[derive(Debug, Clone, PartialEq)]
struct Record {
    journal: String,
    begin: i64,
    from: i64,
    to: i64,
    sum_from: [u8; 20],
    log_pos: u64,
    log_crc: u32,
    log_bytes: Vec<u8>,
    content: Vec<u8>,
}

/// Decodes the record at the start of `buf`, with its encoded length; None for anything
/// else (zeros, a torn or foreign record). Records of every lap and run decode: replay
/// applies only those that continue their fragment's files. Never panics.
fn decode_record(buf: &[u8]) -> Option<(Record, usize)> {
    let n = le_u32(buf, 0)? as usize;
    let body = buf.get(8..8usize.checked_add(n)?)?;
    if n < 10 || crc32c::crc32c(body) != le_u32(buf, 4)? {
        return None;
    }
    let name_len = u16::from_le_bytes(body.get(8..10)?.try_into().ok()?) as usize;
    let journal = std::str::from_utf8(body.get(10..10 + name_len)?).ok()?;
    let mut at = 10 + name_len;
    let begin = le_i64(body, at)?;
    let from = le_i64(body, at + 8)?;
    let to = le_i64(body, at + 16)?;
    at += 24;
    let sum_from: [u8; 20] = body.get(at..at + 20)?.try_into().ok()?;
    at += 20;
    let log_pos = le_u64(body, at)?;
    let log_crc = le_u32(body, at + 8)?;
    let log_len = le_u32(body, at + 12)? as usize;
    at += 16;
    let log_bytes = body.get(at..at.checked_add(log_len)?)?.to_vec();
    at += log_len;
    let content = body.get(at..)?.to_vec();
    let span = to.checked_sub(from)?;
    if begin < 0 || from < begin || span < 0 || span as u64 != content.len() as u64 {
        return None;
    }
    Some((
        Record {
            journal: journal.to_owned(),
            begin,
            from,
            to,
            sum_from,
            log_pos,
            log_crc,
            log_bytes,
            content,
        },
        8 + n,
    ))
}

/// The valid records of a log's bytes: each half's chain of records from its start.
fn decode_log(buf: &[u8]) -> Vec<Record> {
    let Some(header) = Header::decode(buf) else {
        return Vec::new();
    };
    let mut records = Vec::new();
    for start in [Some(DATA_START), header.mid_within(buf.len())] {
        let Some(mut at) = start.and_then(|s| usize::try_from(s).ok()) else {
            continue;
        };
        loop {
            match buf.get(at..).and_then(decode_record) {
                Some((record, len)) => {
                    records.push(record);
                    at += len;
                }
                // The zeros that end a batch's last block: the next batch starts on the
                // next block.
                None if at % BLOCK as usize != 0 && buf.get(at..at + 4) == Some(&[0; 4]) => {
                    at = at.div_ceil(BLOCK as usize) * BLOCK as usize;
                }
                None => break,
            }
        }
    }
    records
}

/// What [`replay`] did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ReplayReport {
    /// Log files read.
    pub logs: usize,
    /// Valid records found.
    pub records: usize,
    /// Records written back into spool files.
    pub applied: usize,
    /// Records the spool files already held.
    pub present: usize,
    /// Records that did not continue their fragment's files (not applied).
    pub skipped: usize,
}

/// Replays every core's log under the spool root `root` into the spool files, then cuts each
/// log's chains of records (see the module docs). Blocking; run before any spool opens.
pub fn replay(root: &Path) -> Result<ReplayReport, StorageError> {
    let mut report = ReplayReport::default();
    let wal_dir = dir(root);
    let entries = match std::fs::read_dir(&wal_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(report),
        Err(e) => return Err(StorageError::io("listing", &wal_dir, e)),
    };
    let mut logs = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| StorageError::io("listing", &wal_dir, e))?;
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "wal") {
            logs.push(path);
        }
    }
    logs.sort();
    let mut fragments: BTreeMap<(String, i64), Vec<Record>> = BTreeMap::new();
    let mut mids = Vec::new();
    for path in &logs {
        let buf = std::fs::read(path).map_err(|e| StorageError::io("reading", path, e))?;
        let records = decode_log(&buf);
        mids.push(Header::decode(&buf).map(|h| h.mid_within(buf.len())));
        report.logs += 1;
        report.records += records.len();
        for record in records {
            fragments
                .entry((record.journal.clone(), record.begin))
                .or_default()
                .push(record);
        }
    }
    for ((journal, begin), mut records) in fragments {
        records.sort_by_key(|r| (r.from, r.to));
        replay_fragment(root, &journal, begin, &records, &mut report)?;
    }
    // Every record is now in synced spool files: cut each half's chain at its start, so
    // that the next replay does not read them again.
    for (path, mid) in logs.iter().zip(mids) {
        use std::os::unix::fs::FileExt;
        let Some(mid) = mid else { continue };
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| StorageError::io("opening", path, e))?;
        let mut starts = std::iter::once(DATA_START).chain(mid);
        starts
            .try_for_each(|at| file.write_all_at(&[0; 8], at))
            .and_then(|()| file.sync_data())
            .map_err(|e| StorageError::io("resetting", path, e))?;
    }
    if report.records > 0 {
        tracing::info!(?report, "replayed the commit logs of durable mode");
    }
    Ok(report)
}

/// Applies `records` (of one fragment, in offset order) to its files where they continue
/// them.
fn replay_fragment(
    root: &Path,
    journal: &str,
    begin: i64,
    records: &[Record],
    report: &mut ReplayReport,
) -> Result<(), StorageError> {
    let dir = super::journal_dir(root, journal);
    let skip_all = |report: &mut ReplayReport, why: &str| {
        tracing::info!(journal, begin, why, "commit log records not replayed");
        report.skipped += records.len();
        Ok(())
    };
    match std::fs::read_to_string(dir.join(super::JOURNAL_FILE)) {
        Ok(name) if name == journal => {}
        _ => return skip_all(report, "no spool directory of this journal"),
    }
    let names = crate::fragment::FragmentFile::new(&dir, begin);
    let open = |path: &Path| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
    };
    let (Ok(content), Ok(log)) = (open(names.path()), open(names.commits_path())) else {
        return skip_all(
            report,
            "the fragment's files are gone (persisted or discarded)",
        );
    };
    let io = |op, path: &Path, e| StorageError::io(op, path, e);
    let log_buf =
        std::fs::read(names.commits_path()).map_err(|e| io("reading", names.commits_path(), e))?;
    let content_len = content
        .metadata()
        .map_err(|e| io("sizing", names.path(), e))?
        .len();
    let Some(scanned) = crate::record::scan(&log_buf, begin, content_len) else {
        return skip_all(report, "the fragment's commit log has no header");
    };
    let mut ends = FileEnds {
        journal,
        begin,
        end: scanned.end,
        log_len: scanned.valid_len as u64,
        log_crc: crc32c::crc32c(&log_buf[..scanned.valid_len]),
        sum: None,
    };
    let mut changed = false;
    for record in records {
        changed |= ends.apply(&names, &content, &log, record, report)?;
    }
    if changed {
        content
            .sync_data()
            .map_err(|e| io("syncing", names.path(), e))?;
        log.sync_data()
            .map_err(|e| io("syncing", names.commits_path(), e))?;
    }
    Ok(())
}

/// Where a fragment's files end during a replay: what the next record must continue.
struct FileEnds<'a> {
    journal: &'a str,
    begin: i64,
    end: i64,
    log_len: u64,
    log_crc: u32,
    /// The SHA-1 of [begin, end), computed only once a record needs it.
    sum: Option<sha1::Sha1>,
}

impl FileEnds<'_> {
    /// Writes `record` into the fragment's files if it continues them; true if it did.
    fn apply(
        &mut self,
        names: &crate::fragment::FragmentFile,
        content: &std::fs::File,
        log: &std::fs::File,
        record: &Record,
        report: &mut ReplayReport,
    ) -> Result<bool, StorageError> {
        use std::os::unix::fs::FileExt;
        let io = |op, path: &Path, e| StorageError::io(op, path, e);
        let (journal, begin, end) = (self.journal, self.begin, self.end);
        if record.to <= end {
            report.present += 1;
            return Ok(false);
        }
        let hasher = match &mut self.sum {
            Some(hasher) => hasher,
            None => self.sum.insert(
                hash_prefix(content, (end - begin) as u64)
                    .map_err(|e| io("re-hashing", names.path(), e))?,
            ),
        };
        let sum_here = if end == begin {
            protocol::sum::sum_to_bytes(&protocol::sum::zero_sum())
        } else {
            hasher.clone().finalize().into()
        };
        if record.from != end
            || record.log_pos != self.log_len
            || record.log_crc != self.log_crc
            || record.sum_from != sum_here
        {
            tracing::warn!(
                journal,
                begin,
                end,
                from = record.from,
                "a commit log record does not continue its fragment's files; not replayed"
            );
            report.skipped += 1;
            return Ok(false);
        }
        content
            .write_all_at(&record.content, (record.from - begin) as u64)
            .map_err(|e| io("replaying into", names.path(), e))?;
        log.set_len(self.log_len)
            .and_then(|()| log.write_all_at(&record.log_bytes, self.log_len))
            .map_err(|e| io("replaying into", names.commits_path(), e))?;
        hasher.update(&record.content);
        self.log_crc = crc32c::crc32c_append(self.log_crc, &record.log_bytes);
        self.log_len += record.log_bytes.len() as u64;
        self.end = record.to;
        report.applied += 1;
        Ok(true)
    }
}

/// SHA-1 of the first `len` bytes of `file`.
fn hash_prefix(file: &std::fs::File, len: u64) -> std::io::Result<sha1::Sha1> {
    use std::os::unix::fs::FileExt;
    let mut sum = sha1::Sha1::new();
    let mut chunk = vec![0u8; 1 << 20];
    let mut pos = 0u64;
    while pos < len {
        let want = ((len - pos) as usize).min(chunk.len());
        file.read_exact_at(&mut chunk[..want], pos)?;
        sum.update(&chunk[..want]);
        pos += want as u64;
    }
    Ok(sum)
}

#[cfg(test)]
mod tests;
