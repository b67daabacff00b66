//! Durable mode's per-core commit log (write-ahead log): one preallocated file per core into
//! which every durable commit of the core's spools is copied, so that one `fdatasync` per
//! tick makes all of them durable, instead of two per spool (its content file and its
//! `.commits` log).
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
//! task writes the batch at the log's position (one `pwrite`) and syncs it (one
//! `fdatasync`); a [`super::SyncTicket`] of that commit returns once its batch is flushed.
//! Commits that create files or directories (a fragment's first, a roll's or discard's
//! durable begin) are *barriers*: they still sync the spool's files and directories through
//! the gate, because a record can only be replayed into files that exist. So are commits
//! too large to copy ([`Wal::max_record`]).
//!
//! # Wrapping
//!
//! When the next batch does not fit, the log is *checkpointed*: every spool that logged a
//! record since the last checkpoint is synced through its gate, so that its files hold
//! everything the log did, then the header's epoch is raised and writing starts over. A
//! record is valid only with the header's epoch, so records of earlier laps are never
//! replayed.
//!
//! # Replay
//!
//! [`replay`] runs at broker start, before any spool opens (blocking `std::fs`, once). For
//! each fragment it applies the fragment's records in offset order, each only if it
//! continues exactly what the files hold: its start offset is the committed end of the
//! `.commits` log, the SHA-1 of the content up to there equals the record's, and the
//! crc32c of the log's bytes up to there equals the record's. A record already covered is
//! skipped; one that does not continue the files (a fragment since discarded, or files
//! that do not exist any more because the fragment was persisted and removed) ends the
//! fragment's replay. Replay writes the content, then the commit record, syncs the files,
//! and finally raises each log's epoch.
//!
//! ```text
//! header (block 0, HEADER_LEN bytes used):
//!   [0..8)   magic "CRNTWAL1"
//!   [8..16)  u64 LE epoch
//!   [16..20) u32 LE crc32c of [0..16)
//! records from DATA_START, back to back:
//!   [0..4)   u32 LE n = length of [8..8+n)
//!   [4..8)   u32 LE crc32c of [8..8+n)
//!   [8..16)  u64 LE epoch
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

use super::durable::{Failure, SyncGate};
use crate::StorageError;
use crate::fragment::{open_rw, write_all};

/// Size of a core's log file: written once with zeros so that syncs never change its
/// metadata.
pub const DEFAULT_SIZE: u64 = 32 << 20;
/// Records start here; the header has the first block.
const DATA_START: u64 = 4096;
const HEADER_LEN: usize = 28;
const MAGIC: &[u8; 8] = b"CRNTWAL1";
/// The record's fixed part before the journal name: length, crc, epoch, name length.
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

    /// Appends the record with a zero epoch and crc (set by the flush).
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

/// Sets the epoch and crc of every record of `batch` (records back to back).
fn seal(batch: &mut [u8], epoch: u64) {
    let mut at = 0;
    while at + 8 <= batch.len() {
        let n = u32::from_le_bytes(batch[at..at + 4].try_into().expect("4 bytes")) as usize;
        let body = at + 8..at + 8 + n;
        batch[at + 8..at + 16].copy_from_slice(&epoch.to_le_bytes());
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

/// Syncs of the log in flight at once. One: a second sync of the same file started while
/// one is in flight waits for it in the kernel anyway (measured with 2 and 4: each sync took
/// 210–250 µs instead of 170–200, and records/s fell 5–10%); commits logged meanwhile
/// form the next batch.
const SYNCS_IN_FLIGHT: usize = 1;

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

/// A core's commit log. See the module docs.
pub struct Wal {
    observer: Option<LogObserver>,
    /// Records of the batch being filled.
    pending_records: Cell<usize>,
    path: PathBuf,
    size: u64,
    /// Start of the second half.
    mid: u64,
    file: RefCell<Option<Rc<BufferedFile>>>,
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
    syncs_in_flight: Cell<usize>,
    /// The flush task, waiting for a sync in flight to end.
    sync_waiter: RefCell<Option<Waker>>,
    failed: RefCell<Option<Failure>>,
    waiters: RefCell<Vec<Waker>>,
    /// Gates with records since the last checkpoint started.
    touched: RefCell<Vec<SyncGate>>,
    flushes: Cell<u64>,
    checkpoints: Cell<u64>,
}

impl Wal {
    /// A log at `path` of `size` bytes (at least 64 KiB); the file is created or reused by
    /// [`Wal::start`] or the first flush.
    pub fn new(path: PathBuf, size: u64, observer: Option<LogObserver>) -> Rc<Wal> {
        let size = size.max(64 << 10);
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
            syncs_in_flight: Cell::new(0),
            sync_waiter: RefCell::new(None),
            failed: RefCell::new(None),
            waiters: RefCell::new(Vec::new()),
            touched: RefCell::new(Vec::new()),
            flushes: Cell::new(0),
            checkpoints: Cell::new(0),
        })
    }

    /// Prepares the file now (in the background) rather than at the first durable commit.
    pub fn start(self: &Rc<Self>) {
        if !self.flushing.replace(true) {
            glommio::spawn_local(self.clone().flush_loop()).detach();
        }
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
    pub(crate) fn log(self: &Rc<Self>, entry: &Entry<'_>, gate: &SyncGate) -> Option<u64> {
        if entry.encoded_len() > self.max_record() || entry.journal.len() > u16::MAX as usize {
            return None;
        }
        entry.encode(&mut self.pending.borrow_mut());
        self.pending_records.set(self.pending_records.get() + 1);
        if gate.mark_logged() {
            self.touched.borrow_mut().push(gate.clone());
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
        if let Some(waker) = self.sync_waiter.borrow_mut().take() {
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
            if self.syncs_in_flight.get() >= SYNCS_IN_FLIGHT {
                self.until_a_sync_ends().await;
                continue;
            }
            let batch = std::mem::take(&mut *self.pending.borrow_mut());
            let records = self.pending_records.replace(0);
            let number = self.filling.get();
            self.filling.set(number + 1);
            if let Err(e) = self.write_batch(batch).await {
                self.fail(&e);
                break;
            }
            self.syncs_in_flight.set(self.syncs_in_flight.get() + 1);
            glommio::spawn_local(self.clone().sync(number, records)).detach();
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

    /// Syncs the log after batch `number` was written: every batch up to it is durable
    /// when the sync ends (a sync waits for the file's pages under writeback, too).
    async fn sync(self: Rc<Self>, number: u64, records: usize) {
        let _op = super::in_flight::op();
        let file = self.file.borrow().clone().expect("opened");
        let result = file.fdatasync().await;
        self.syncs_in_flight.set(self.syncs_in_flight.get() - 1);
        match result {
            Ok(()) => {
                self.flushed.set(self.flushed.get().max(number));
                self.flushes.set(self.flushes.get() + 1);
                self.observe(LogEvent::Synced { records });
                self.wake_all();
            }
            Err(e) => self.fail(&self.io_err("syncing", e)),
        }
        if let Some(waker) = self.sync_waiter.borrow_mut().take() {
            waker.wake();
        }
    }

    async fn until_a_sync_ends(&self) {
        let start = self.flushes.get();
        std::future::poll_fn(|cx: &mut Context<'_>| {
            if self.flushes.get() != start
                || self.syncs_in_flight.get() < SYNCS_IN_FLIGHT
                || self.failed.borrow().is_some()
            {
                return Poll::Ready(());
            }
            *self.sync_waiter.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
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
        let _op = super::in_flight::op();
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
        self.half.set(0);
        self.pos.set(DATA_START);
        *self.file.borrow_mut() = Some(Rc::new(file));
        Ok(())
    }

    fn half_end(&self) -> u64 {
        if self.half.get() == 0 {
            self.mid
        } else {
            self.size
        }
    }

    /// Writes `batch` (whole records) at the log's position, moving to the other half where
    /// it does not fit (its sync is the caller's).
    async fn write_batch(&self, mut batch: Vec<u8>) -> Result<(), StorageError> {
        let file = self.file.borrow().clone().expect("opened");
        let mut start = 0;
        while start < batch.len() {
            // As many whole records as fit before the end of the half.
            let room = (self.half_end() - self.pos.get()) as usize;
            let mut end = start;
            while end + 8 <= batch.len() {
                let n = 8 + le_u32(&batch, end).expect("in bounds") as usize;
                if end + n - start > room {
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
            write_all(&file, part, self.pos.get())
                .await
                .map_err(|e| self.io_err("writing", e))?;
            self.pos.set(self.pos.get() + (end - start) as u64);
            start = end;
        }
        Ok(())
    }

    /// Moves writing to the other half: waits for the checkpoint that syncs the spools of
    /// its records (started when writing left it), then starts the checkpoint of the half
    /// being left.
    async fn enter_other_half(&self) -> Result<(), StorageError> {
        let previous = self.checkpoint.borrow_mut().take();
        if let Some(task) = previous {
            task.await?;
        }
        // Tickets now, so that they cover every commit logged so far.
        let gates = std::mem::take(&mut *self.touched.borrow_mut());
        let tickets: Vec<_> = gates
            .iter()
            .map(|gate| {
                gate.clear_logged();
                gate.ticket_all()
            })
            .collect();
        *self.checkpoint.borrow_mut() = Some(glommio::spawn_local(async move {
            for result in
                futures_util::future::join_all(tickets.into_iter().map(|t| t.wait())).await
            {
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
        while let Some((record, len)) = buf.get(at..).and_then(decode_record) {
            records.push(record);
            at += len;
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

/// Replays every core's log under the spool root `root` into the spool files, then starts a
/// new epoch in each (see the module docs). Blocking; run before any spool opens.
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
    use std::os::unix::fs::FileExt;
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
    let mut end = scanned.end;
    let mut log_len = scanned.valid_len as u64;
    let mut log_crc = crc32c::crc32c(&log_buf[..scanned.valid_len]);
    // The SHA-1 of [begin, end), computed only once a record needs it.
    let mut sum: Option<sha1::Sha1> = None;
    let mut changed = false;
    for record in records {
        if record.to <= end {
            report.present += 1;
            continue;
        }
        let hasher = match &mut sum {
            Some(hasher) => hasher,
            None => sum.insert(
                hash_prefix(&content, (end - begin) as u64)
                    .map_err(|e| io("re-hashing", names.path(), e))?,
            ),
        };
        let sum_here = if end == begin {
            protocol::sum::sum_to_bytes(&protocol::sum::zero_sum())
        } else {
            hasher.clone().finalize().into()
        };
        if record.from != end
            || record.log_pos != log_len
            || record.log_crc != log_crc
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
            continue;
        }
        content
            .write_all_at(&record.content, (record.from - begin) as u64)
            .map_err(|e| io("replaying into", names.path(), e))?;
        log.set_len(log_len)
            .and_then(|()| log.write_all_at(&record.log_bytes, log_len))
            .map_err(|e| io("replaying into", names.commits_path(), e))?;
        hasher.update(&record.content);
        log_crc = crc32c::crc32c_append(log_crc, &record.log_bytes);
        log_len += record.log_bytes.len() as u64;
        end = record.to;
        report.applied += 1;
        changed = true;
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
