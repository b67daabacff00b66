//! The spool: a journal's current fragment, written through io_uring and
//! recoverable after `kill -9`.
//!
//! A spool appends content in two phases, as Gazette's replication protocol
//! does: [`Spool::write`] places uncommitted bytes in the file and folds them
//! into a *pending* running SHA-1, then [`Spool::commit`] makes them part of
//! the fragment (or [`Spool::rollback`] forgets them). Readers only ever see
//! the committed fragment.
//!
//! # Write path
//!
//! 1. `write`: the content is written at file position `end - begin + delta`:
//!    copied into a shared mapping of the file's reserved blocks when shorter
//!    than 4 KiB (see `Spool::maps_content`), else one `pwrite` on the core.
//!    The pending SHA-1 and `delta` advance.
//! 2. `commit`: one record (end, time, the fragment's SHA-1, registers if
//!    changed, crc32c) is
//!    appended to the `.commits` log: copied into a shared mapping of the log's
//!    first blocks (see `Spool::map_log`), or written with `pwrite` where the log
//!    cannot be mapped. **This is the durability
//!    point against process crashes**: page-cache writes survive `kill -9`.
//!    Then the pending SHA-1, end and registers are adopted.
//! 3. `sync` (optional, not part of `commit`): `fdatasync` of the content
//!    file and the log, and `fsync` of the directories whose entries changed.
//!    Only this survives power loss. No fsync is ever retried: a failed sync
//!    poisons the spool.
//!
//! A failed content write or commit (a full disk) fails that call only: the
//! committed fragment, the pending content before the call and the sums are
//! unchanged, bytes the failed call may have left in the files lie past what
//! any reader or recovery sees (a torn commit record is cut from the log
//! before the next record), and the next call tries again, so appends resume
//! by themselves once space is back.
//!
//! # Files
//!
//! `<root>/<16 hex digits of SHA1(journal)[..8]>/` holds `JOURNAL` (the
//! journal's name) and, per fragment, `<begin %016x>.spool` (content; file
//! position 0 is journal offset `begin`) and `<begin %016x>.commits` (the
//! commit log, see `record.rs`). Files are created at a fragment's first
//! write or commit, so empty spools leave nothing behind.
//!
//! Directory creation, listing and the small `JOURNAL` file use blocking
//! `std::fs` calls, once per `open`; all fragment I/O goes through glommio.
//!
//! # Recovery
//!
//! See [`Spool::open`]: each fragment is cut to the end of its last intact
//! commit record whose sum its content matches, and re-hashed; the fragment with the greatest begin becomes
//! the spool again, the others are returned as completed fragments.

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use glommio::io::{BufferedFile, Directory};
use protocol::{CompressionCodec, Fragment, LabelSet};
use sha1::{Digest, Sha1};

use crate::StorageError;
use crate::fragment::{FragmentFile, LocalFragment, Window, extend, open_rw, reserve, write_all};
use crate::record::{self, CommitRecord};
use crate::summer::Summer;
use protocol::sum::zero_sum;

pub mod durable;
mod failure;
mod recovery;
pub mod summing;
pub mod wal;
/// Kept here too: the broker's simulator reads `spool::in_flight::count`.
pub use crate::in_flight;
pub use durable::{SyncBatcher, SyncGate, SyncTicket};
#[cfg(test)]
use recovery::RECOVERY_READ_LEN;
use recovery::{RecoveredFragment, list_fragments, prepare_dir, recover_fragment};
pub use wal::Wal;

/// Content writes shorter than this go through the content file's mapping; longer ones
/// through `pwrite`: each new 4 KiB page of a mapping costs a page fault, more than
/// `pwrite`'s bulk copy (`ARCHITECTURE.md`, "The spool's writes").
const MAPPED_WRITE_MAX: usize = 4 << 10;
/// The commit log's file is extended ahead of its records by at least this much...
const LOG_EXTEND_MIN: u64 = 64 << 10;
/// ...and at most this much (otherwise as much again as the log holds).
const LOG_EXTEND_MAX: u64 = 1 << 20;
/// Name of the file holding the journal's name in its spool directory.
const JOURNAL_FILE: &str = "JOURNAL";

/// The journal's fragment currently being written.
///
/// Lives on: the journal's owner core (`!Send`; methods take `&mut self`, so
/// writes, commits and rolls of one spool never overlap).
pub struct Spool {
    root: PathBuf,
    dir: PathBuf,
    /// The committed fragment: what readers and peers may see.
    fragment: Fragment,
    registers: LabelSet,
    /// Uncommitted bytes written past `fragment.end`.
    delta: i64,
    first_append_time: Option<SystemTime>,
    file: Rc<FragmentFile>,
    /// The commit log, once created (shared with a sync in flight in durable mode).
    commits: Option<Rc<BufferedFile>>,
    /// Length of the commit log: where the next record goes.
    commits_len: u64,
    /// The commit log's records are copied into this mapping of its first blocks (see
    /// [`Spool::map_log`]): unmapped until the first record and after a cut, off where
    /// mapping failed (a file system without `fallocate` or shared mappings, a full disk).
    log_map: Window,
    /// The log's file was extended past `commits_len` (zeros): the completed fragment's
    /// log is cut to its records.
    log_extended: bool,
    /// The log's records carry the fragment's sum (`record`'s format 2): every log this
    /// spool creates, not one recovered from an older version.
    log_sums: bool,
    /// Content writes shorter than [`MAPPED_WRITE_MAX`] are copied into this mapping of
    /// the content file's reserved blocks (see [`Spool::maps_content`]); off where mapping
    /// failed or the spool is durable.
    content_map: Window,
    /// A reservation may have extended the content file past what it holds: the completed
    /// file is cut to its content.
    content_extended: bool,
    /// Registers as of the last record in the log (None: no record yet).
    logged_registers: Option<LabelSet>,
    /// SHA-1 over [begin, end).
    committed_sum: Summer,
    /// SHA-1 over [begin, end + delta).
    pending_sum: Summer,
    /// Furthest file position ever written (may exceed the committed length
    /// after a rollback).
    written_len: u64,
    /// File position up to which the content file's blocks are reserved ahead of writes
    /// (`fragment::reserve`); `None` where the file system refused a reservation.
    reserved: Option<u64>,
    /// A reservation was started whose outcome `reserved` may not hold (its write was
    /// dropped while it ran): the completed file is truncated to free what it reserved.
    reserving: bool,
    /// Whether directory entries were created since the last `sync`.
    dirs_dirty: bool,
    /// The registers are not known to hold at `begin` (after [`Spool::discard`], which
    /// keeps the registers of the commits it forgets): the next roll takes a proposal's
    /// registers even in place, as a spool behind the proposal would.
    registers_unknown: bool,
    /// A commit record may have been partly written past `commits_len`: cut the log back
    /// to `commits_len` before the next record.
    log_tail_dirty: bool,
    poisoned: Option<String>,
    /// Durable mode: the sync generations of this spool (see [`durable`]).
    gate: Option<SyncGate>,
    /// crc32c of the commit log's bytes [0, commits_len) (what a commit-log record of
    /// durable mode checks before it is replayed; see [`wal`]).
    log_crc: u32,
    /// Durable mode with a commit log: the pending content, kept (not copied) until the
    /// commit logs it.
    wal_pending: Vec<Bytes>,
    wal_pending_len: usize,
    /// The pending content outgrew what a log record may hold: the commit is a barrier.
    wal_overflow: bool,
    /// Test builds: the next content write or commit fails after writing half its bytes.
    #[cfg(test)]
    fail_next: Option<FailNext>,
}

/// An injected failure (test builds).
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum FailNext {
    Write,
    Commit,
}

/// The directory holding `journal`'s spools under `root`.
pub fn journal_dir(root: &Path, journal: &str) -> PathBuf {
    let digest = Sha1::digest(journal.as_bytes());
    root.join(hex::encode(&digest[..8]))
}

impl Spool {
    /// Opens the spool of `journal` under `root`, creating its directory, or
    /// recovering its fragments after a crash or restart:
    ///
    /// * For each `.spool` file, the last intact record of its `.commits` log
    ///   gives the committed end (a torn record at the tail is ignored, as is
    ///   every record after a damaged one), cut back, where the records carry
    ///   sums, to the last record whose sum the content matches (a power loss
    ///   can keep records whose content never reached the disk). Content past that end was never
    ///   acknowledged: the file is cut to it. Registers are those of the last
    ///   intact record, the SHA-1 is recomputed from the file, and the first
    ///   append time is that of the first record that added content.
    /// * Fragments with no committed bytes are deleted.
    /// * The fragment with the greatest begin becomes the spool (appends
    ///   continue into it, under its recorded codec); the others are returned
    ///   as completed fragments, in begin order, for the broker to index and
    ///   persist.
    /// * With nothing to recover, the spool is empty at offset 0 with `codec`
    ///   and empty registers.
    ///
    /// At most one `Spool` of a journal may be open at a time.
    pub async fn open(
        root: &Path,
        journal: &str,
        codec: CompressionCodec,
    ) -> Result<(Spool, Vec<LocalFragment>), StorageError> {
        let _op = in_flight::op();
        let dir = journal_dir(root, journal);
        prepare_dir(&dir, journal)?;

        let mut recovered = Vec::new();
        for begin in list_fragments(&dir)? {
            if let Some(fragment) = recover_fragment(&dir, journal, begin).await? {
                recovered.push(fragment);
            }
        }
        // Only the last fragment may be empty (the spool a roll began): empty earlier ones
        // were rolled past before their files were removed.
        let last = recovered.len().saturating_sub(1);
        let mut kept = Vec::with_capacity(recovered.len());
        for (i, fragment) in recovered.into_iter().enumerate() {
            if i < last && fragment.fragment.end == fragment.fragment.begin {
                FragmentFile::new(&dir, fragment.fragment.begin)
                    .remove()
                    .await?;
            } else {
                kept.push(fragment);
            }
        }
        let mut recovered = kept;
        let spool = match recovered.pop() {
            Some(current) => Spool::from_recovered(root, dir.clone(), current),
            None => Spool::empty(
                root,
                dir.clone(),
                journal,
                0,
                codec as i32,
                LabelSet::default(),
            ),
        };
        let mut completed = Vec::with_capacity(recovered.len());
        for fragment in recovered {
            completed.push(fragment.into_completed(&dir).await);
        }
        tracing::info!(
            journal,
            dir = %dir.display(),
            begin = spool.fragment.begin,
            end = spool.fragment.end,
            completed = completed.len(),
            "opened spool"
        );
        Ok((spool, completed))
    }

    fn empty(
        root: &Path,
        dir: PathBuf,
        journal: &str,
        begin: i64,
        codec: i32,
        registers: LabelSet,
    ) -> Spool {
        assert!(begin >= 0);
        let file = Rc::new(FragmentFile::new(&dir, begin));
        Spool {
            root: root.to_owned(),
            dir,
            fragment: Fragment {
                journal: journal.to_owned(),
                begin,
                end: begin,
                sum: Some(zero_sum()),
                compression_codec: codec,
                backing_store: String::new(),
                mod_time: 0,
                path_postfix: String::new(),
            },
            registers,
            delta: 0,
            first_append_time: None,
            file,
            commits: None,
            commits_len: 0,
            log_map: Window::default(),
            log_extended: false,
            log_sums: true,
            content_map: Window::default(),
            content_extended: false,
            logged_registers: None,
            committed_sum: Summer::new(),
            pending_sum: Summer::new(),
            written_len: 0,
            reserved: Some(0),
            reserving: false,
            dirs_dirty: true,
            registers_unknown: false,
            log_tail_dirty: false,
            poisoned: None,
            gate: None,
            log_crc: 0,
            wal_pending: Vec::new(),
            wal_pending_len: 0,
            wal_overflow: false,
            #[cfg(test)]
            fail_next: None,
        }
    }

    fn from_recovered(root: &Path, dir: PathBuf, r: RecoveredFragment) -> Spool {
        let written_len = (r.fragment.end - r.fragment.begin) as u64;
        let file = Rc::new(FragmentFile::with_file(&dir, r.fragment.begin, r.file));
        Spool {
            root: root.to_owned(),
            dir,
            fragment: r.fragment,
            logged_registers: Some(r.registers.clone()),
            registers: r.registers,
            delta: 0,
            first_append_time: r.first_append_time,
            file,
            commits: Some(Rc::new(r.commits)),
            commits_len: r.commits_len,
            log_map: Window::default(),
            log_extended: false,
            log_sums: r.log_sums,
            content_map: Window::default(),
            content_extended: false,
            pending_sum: r.sum.clone(),
            committed_sum: r.sum,
            written_len,
            reserved: Some(written_len),
            reserving: false,
            dirs_dirty: true,
            registers_unknown: false,
            log_tail_dirty: false,
            poisoned: None,
            gate: None,
            log_crc: r.log_crc,
            wal_pending: Vec::new(),
            wal_pending_len: 0,
            wal_overflow: false,
            #[cfg(test)]
            fail_next: None,
        }
    }

    /// The committed fragment: journal, begin, end, SHA-1 of [begin, end)
    /// (zero when empty) and codec; never persisted, so `backing_store` is
    /// empty, `mod_time` 0 and `path_postfix` empty.
    pub fn fragment(&self) -> &Fragment {
        &self.fragment
    }

    /// The journal's registers as of the last commit (or as set or recovered).
    pub fn registers(&self) -> &LabelSet {
        &self.registers
    }

    /// Whether the registers are not known to hold at the fragment's begin (after
    /// [`Spool::discard`]: they may be those of the commits it forgot), until a proposal
    /// is agreed.
    pub fn registers_unknown(&self) -> bool {
        self.registers_unknown
    }

    /// Marks the registers as known or not to hold (see [`Spool::registers_unknown`]). The
    /// primary keeps them unknown across its own proposal, which its spool trivially
    /// matches, and marks them known once every peer agrees; a cluster broker marks a
    /// recovered spool's unknown.
    pub fn set_registers_unknown(&mut self, unknown: bool) {
        self.registers_unknown = unknown;
    }

    /// Number of uncommitted bytes written past the committed end.
    pub fn delta(&self) -> i64 {
        self.delta
    }

    /// Wall-clock time of the first commit that added content to this
    /// fragment, if any did.
    pub fn first_append_time(&self) -> Option<SystemTime> {
        self.first_append_time
    }

    /// The fragment's content file, shared with readers.
    pub fn file(&self) -> Rc<FragmentFile> {
        self.file.clone()
    }

    /// The directory holding this journal's spool files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The fragment that committing the pending content would produce:
    /// end + delta, with the SHA-1 of [begin, end + delta).
    pub fn next(&self) -> Fragment {
        let mut next = self.fragment.clone();
        next.end += self.delta;
        next.sum = Some(if next.end == next.begin {
            zero_sum()
        } else {
            self.pending_sum.sum()
        });
        next
    }

    /// Writes uncommitted `content` after any already pending, at journal
    /// offset `end + delta`. Not visible to readers until `commit`.
    pub async fn write(&mut self, content: &Bytes) -> Result<(), StorageError> {
        self.write_summing(content, None).await
    }

    /// `write`, adding `content` also to `also` (an append's own sum) in the same pass over
    /// the bytes as the spool's sum (see [`Summer::update_pair`]). `also` is updated only
    /// when the write succeeds.
    pub async fn write_summing(
        &mut self,
        content: &Bytes,
        also: Option<&mut Summer>,
    ) -> Result<(), StorageError> {
        let _op = in_flight::op();
        self.check()?;
        if content.is_empty() {
            return Ok(());
        }
        let pos = self.content_len() + self.delta as u64;
        let file = self.file.clone();
        // A write that creates the content file adds a directory entry (a roll's durable
        // begin created it already).
        let creates = file.get().is_none();
        #[cfg(test)]
        let fail = self.fail_next.take_if(|f| *f == FailNext::Write).is_some();
        #[cfg(not(test))]
        let fail = false;
        let mut reserved = self.reserved;
        let end = pos + content.len() as u64;
        self.reserving |= reserved.is_some_and(|r| end > r);
        let maps = self.maps_content();
        self.content_extended |= maps;
        let map = &mut self.content_map;
        let result = async {
            let handle = file.get_or_create().await?;
            reserve(handle, &mut reserved, end, maps).await;
            if fail {
                let half = content.get(..content.len() / 2).unwrap_or_default();
                write_all(handle, half, pos)
                    .await
                    .and_then(|()| Err(std::io::Error::from(std::io::ErrorKind::StorageFull)))
                    .map_err(|e| StorageError::io("writing", file.path(), e))?;
            }
            if maps
                && content.len() < MAPPED_WRITE_MAX
                && let Some(reserved) = reserved
                && (map.covers(end) || map.remap(handle, Ok(reserved)))
                && map.write(pos, content)
            {
                return Ok(());
            }
            write_all(handle, content, pos)
                .await
                .map_err(|e| StorageError::io("writing", file.path(), e))
        }
        .await;
        self.reserved = reserved;
        self.reserving = false;
        if let Err(e) = result {
            // Nothing is adopted: the next write goes to the same position, over whatever
            // part of this one reached the file, and a completed fragment is cut to its end.
            self.written_len = self.written_len.max(pos + content.len() as u64);
            tracing::warn!(journal = %self.fragment.journal, error = %e,
                "spool write failed; the append is refused, the spool stays usable");
            return Err(e);
        }
        self.dirs_dirty |= creates;
        self.written_len = self.written_len.max(pos + content.len() as u64);
        // May yield (a batch with the core's other writes): until it returns, nothing of
        // this write is adopted, so a caller dropped meanwhile leaves the spool as a failed
        // write does.
        summing::sum(&mut self.pending_sum, also, content).await;
        self.delta += content.len() as i64;
        if let Some(wal) = self.gate.as_ref().and_then(SyncGate::wal)
            && !self.wal_overflow
        {
            self.wal_pending_len += content.len();
            if self.wal_pending_len > wal.max_record() {
                self.wal_overflow = true;
                self.wal_pending.clear();
            } else {
                self.wal_pending.push(content.clone());
            }
        }
        Ok(())
    }

    /// Commits the pending content with `registers`, returning the new
    /// committed fragment. Content writes have all completed (each `write`
    /// awaits its own); the commit record is appended and awaited, and only
    /// then is the new state adopted. A commit with no pending content and
    /// unchanged registers writes nothing.
    pub async fn commit(&mut self, registers: LabelSet) -> Result<Fragment, StorageError> {
        let _op = in_flight::op();
        self.check()?;
        assert!(self.delta >= 0);
        if self.delta == 0 && registers == self.registers {
            return Ok(self.fragment.clone());
        }
        let next = self.next();
        let now = SystemTime::now();

        let mut buf = Vec::with_capacity(96);
        // Also when a first commit's write failed after creating the log.
        if self.commits_len == 0 {
            self.start_log(&mut buf);
        }
        let (log_pos, log_crc) = (self.commits_len, self.log_crc);
        let changed = self.logged_registers.as_ref() != Some(&registers);
        record::encode_record(
            &CommitRecord {
                end: next.end,
                time_unix_ms: unix_ms(now),
                sum: self.record_sum(&next),
                registers: changed.then(|| registers.clone()),
            },
            &mut buf,
        );
        if let Err(e) = self.append_log(&buf).await {
            tracing::warn!(journal = %self.fragment.journal, error = %e,
                "spool commit failed; the append is refused, the spool stays usable");
            return Err(e);
        }

        let barrier = self.note_commit();
        self.log_commit(barrier, &next, log_pos, log_crc, &buf);
        if self.delta > 0 && self.first_append_time.is_none() {
            self.first_append_time = Some(now);
        }
        self.fragment = next;
        self.committed_sum = self.pending_sum.clone();
        self.logged_registers = Some(registers.clone());
        self.registers = registers;
        self.delta = 0;
        assert!(self.fragment.end >= self.fragment.begin);
        Ok(self.fragment.clone())
    }

    /// Discards pending content: the next write overwrites its positions.
    pub fn rollback(&mut self) {
        if self.delta != 0 {
            tracing::debug!(journal = %self.fragment.journal, delta = self.delta, "spool rollback");
        }
        self.delta = 0;
        self.pending_sum = self.committed_sum.clone();
        self.clear_wal_pending();
    }

    fn clear_wal_pending(&mut self) {
        self.wal_pending.clear();
        self.wal_pending_len = 0;
        self.wal_overflow = false;
    }

    /// Durable mode with a commit log: copies the commit just written (content `[from,
    /// next.end)` and the log's `buf`, written at `log_pos` after bytes whose crc32c is
    /// `log_crc`) into the core's log, or makes it a barrier if it cannot be logged.
    fn log_commit(
        &mut self,
        barrier: bool,
        next: &Fragment,
        log_pos: u64,
        log_crc: u32,
        buf: &[u8],
    ) {
        let Some(gate) = &self.gate else { return };
        let Some(wal) = gate.wal() else { return };
        if !barrier {
            let sum_from = self
                .fragment
                .sum
                .as_ref()
                .map_or([0; 20], protocol::sum::sum_to_bytes);
            let entry = wal::Entry {
                journal: &self.fragment.journal,
                begin: self.fragment.begin,
                from: self.fragment.end,
                to: next.end,
                sum_from,
                log_pos,
                log_crc,
                log_bytes: buf,
                content: &self.wal_pending,
            };
            match (!self.wal_overflow)
                .then(|| wal.log(&entry, gate))
                .flatten()
            {
                Some(batch) => gate.set_wal_batch(batch),
                None => gate.set_barrier(),
            }
        }
        self.clear_wal_pending();
    }

    /// Replaces the registers without committing, as a replica does when it
    /// rolls forward to a peer's larger proposal. They reach the log with the
    /// next commit; until then a crash restores the logged ones.
    pub fn set_registers(&mut self, registers: LabelSet) {
        self.registers = registers;
    }

    /// Completes the current fragment and begins an empty one at `at` (no
    /// less than the committed end) with `codec`; registers carry over and
    /// pending content is discarded. Returns the completed fragment if it has
    /// content; an empty one is deleted instead.
    pub async fn roll(
        &mut self,
        at: i64,
        codec: CompressionCodec,
    ) -> Result<Option<LocalFragment>, StorageError> {
        let _op = in_flight::op();
        self.check()?;
        if at < self.fragment.end {
            return Err(StorageError::InvalidRoll {
                journal: self.fragment.journal.clone(),
                at,
                end: self.fragment.end,
            });
        }
        self.rollback();
        let mut next = Spool::empty(
            &self.root,
            self.dir.clone(),
            &self.fragment.journal,
            at,
            codec as i32,
            self.registers.clone(),
        );
        next.dirs_dirty = self.dirs_dirty;
        // The completed fragment's files are synced by the next sync (its commits may not
        // all be synced yet); the new fragment's begin becomes a commit of its own.
        if let Some(gate) = &self.gate {
            gate.retire_current(true);
        }
        next.gate = self.gate.clone();
        // The new fragment's begin is made durable (an empty content file and a commit
        // log whose one record ends at `at`), so that after `kill -9` the spool recovers
        // at `at` rather than at the completed fragment's end: a roll forward must never
        // be undone, or the journal's write head would go back. When both fragments share
        // a begin (an empty spool rolled in place), the old files go first.
        let in_place = at == self.fragment.begin;
        if !in_place && let Err(e) = next.mark_begin().await {
            return Err(self.poison(e));
        }
        let previous = std::mem::replace(self, next);
        let completed = previous.complete().await;
        if in_place && let Err(e) = self.mark_begin().await {
            return Err(self.poison(e));
        }
        Ok(completed)
    }

    /// Writes the empty fragment's files: a content file and a commit log whose one record
    /// ends at `begin` with the spool's registers (recovery then finds the fragment).
    async fn mark_begin(&mut self) -> Result<(), StorageError> {
        debug_assert!(self.commits.is_none() && self.fragment.end == self.fragment.begin);
        self.file.get_or_create().await?;
        let mut buf = Vec::with_capacity(96);
        self.start_log(&mut buf);
        record::encode_record(
            &CommitRecord {
                end: self.fragment.begin,
                time_unix_ms: unix_ms(SystemTime::now()),
                sum: self.record_sum(&self.fragment),
                registers: Some(self.registers.clone()),
            },
            &mut buf,
        );
        self.append_log(&buf).await?;
        self.logged_registers = Some(self.registers.clone());
        self.note_commit();
        Ok(())
    }

    /// Applies a replication proposal (Gazette's spool rules, spec §2.5), as a replica does
    /// for every proposal of its primary and a primary does for its own:
    ///
    /// 1. Roll forward if the proposal ends beyond anything this spool knows (`end + delta`),
    ///    or is zero-length at exactly the committed end: the current fragment is completed
    ///    (returned if it has content, for indexing and persistence) and an empty one begins
    ///    at the proposal's end with its codec; when that end is beyond the committed end,
    ///    the proposal's registers are adopted.
    /// 2. A proposal equal to the committed fragment (all eight fields) with equal registers
    ///    is OK and discards pending content (this is also how a primary rolls back).
    /// 3. A proposal equal to [`Spool::next`] commits the pending content with its registers.
    /// 4. Anything else is a mismatch: the spool is unchanged (beyond step 1) and the caller
    ///    answers with [`Spool::fragment`] and [`Spool::registers`].
    pub async fn apply_proposal(
        &mut self,
        proposal: &Fragment,
        registers: &LabelSet,
    ) -> Result<(bool, Option<LocalFragment>), StorageError> {
        let _op = in_flight::op();
        self.check()?;
        let mut completed = None;
        let zero_length = proposal.end == proposal.begin;
        if proposal.end > self.fragment.end + self.delta
            || (proposal.end == self.fragment.end && zero_length)
        {
            // Gazette's rule: registers come with a proposal beyond our end. A discarded
            // spool takes them in place too: the ones it kept may be of commits it forgot,
            // and a replica that keeps them at an end where its peers hold others would
            // answer PROPOSAL_MISMATCH to every sync (found by the simulator).
            let adopt = proposal.end > self.fragment.end || self.registers_unknown;
            let codec = CompressionCodec::try_from(proposal.compression_codec)
                .unwrap_or(CompressionCodec::None);
            if adopt {
                // Adopted before the roll, so that its durable begin logs them.
                self.registers = registers.clone();
            }
            completed = self.roll(proposal.end, codec).await?;
        }
        if same_fragment(&self.fragment, proposal) && &self.registers == registers {
            self.rollback();
            self.registers_unknown = false;
            return Ok((true, completed));
        }
        if self.delta != 0 && same_fragment(&self.next(), proposal) {
            self.commit(registers.clone()).await?;
            self.registers_unknown = false;
            return Ok((true, completed));
        }
        Ok((false, completed))
    }

    /// Writes replicated content whose `content_delta` says how many bytes of this append
    /// the primary had already sent; it must equal this spool's pending byte count.
    pub async fn apply_content(
        &mut self,
        content: &Bytes,
        content_delta: i64,
    ) -> Result<(), ContentError> {
        let _op = in_flight::op();
        if content_delta != self.delta {
            return Err(ContentError::Delta(format!(
                "invalid ContentDelta ({content_delta}; expected {})",
                self.delta
            )));
        }
        self.write(content).await.map_err(ContentError::Storage)
    }

    /// Forgets the current fragment's content, keeping its begin, codec and registers: its
    /// files are removed and the spool is empty at `begin`. A replica rejoining a cluster
    /// does this with its recovered spool, whose last commits it cannot tell acknowledged
    /// from abandoned (a primary may have failed before acknowledging, and the journal's
    /// history moved on without this broker); the pipeline's sync then rolls it forward.
    pub async fn discard(&mut self) -> Result<(), StorageError> {
        let _op = in_flight::op();
        self.check()?;
        let mut next = Spool::empty(
            &self.root,
            self.dir.clone(),
            &self.fragment.journal,
            self.fragment.begin,
            self.fragment.compression_codec,
            self.registers.clone(),
        );
        next.dirs_dirty = true;
        next.registers_unknown = true;
        if let Some(gate) = &self.gate {
            gate.retire_current(false);
        }
        next.gate = self.gate.clone();
        let mut previous = std::mem::replace(self, next);
        if let Some(log) = previous.commits.take()
            && let Err(e) = close_log(log).await
        {
            tracing::warn!(error = %e, "closing a discarded commit log");
        }
        previous.file.remove().await?;
        // As after a roll: the empty spool's begin survives a crash.
        self.mark_begin().await
    }

    /// Flushes the fragment's content and commit log to the device
    /// (`fdatasync`), and the directories if entries were created since the
    /// last sync. Covers only the current fragment: call it before `roll` if
    /// the completed fragment must survive power loss too.
    pub async fn sync(&mut self) -> Result<(), StorageError> {
        let _op = in_flight::op();
        self.check()?;
        if let Some(ticket) = self.sync_ticket() {
            return ticket.wait().await;
        }
        if let Err(e) = self.sync_inner().await {
            return Err(self.poison(e));
        }
        Ok(())
    }

    async fn sync_inner(&mut self) -> Result<(), StorageError> {
        if let Some(file) = self.file.get() {
            file.fdatasync()
                .await
                .map_err(|e| StorageError::io("syncing", self.file.path(), e.into()))?;
        }
        if let Some(log) = &self.commits {
            log.fdatasync()
                .await
                .map_err(|e| StorageError::io("syncing", self.file.commits_path(), e.into()))?;
        }
        if self.dirs_dirty {
            for dir in [&self.dir, &self.root] {
                sync_dir(dir).await?;
            }
            self.dirs_dirty = false;
        }
        Ok(())
    }

    /// Durable mode: from now on every commit advances `gate`'s generation, and
    /// [`Spool::sync_ticket`] (and [`Spool::sync`]) wait through it. Everything the spool
    /// holds so far counts as one commit, so the first sync covers it (a recovered
    /// fragment may have been only in the page cache).
    pub fn set_sync_gate(&mut self, gate: SyncGate) {
        self.gate = Some(gate);
        self.content_map.turn_off();
        self.dirs_dirty = true;
        if self.commits.is_some() {
            self.note_commit();
        }
    }

    /// Durable mode: a ticket whose [`SyncTicket::wait`] returns once everything committed
    /// so far is on the device. Taken right after a commit, it may be awaited after the
    /// spool is released: commits made meanwhile share syncs. None without a gate.
    pub fn sync_ticket(&self) -> Option<SyncTicket> {
        self.gate.as_ref().map(SyncGate::ticket)
    }

    /// Tells the gate (if any) of a commit written to the log. Returns whether the commit
    /// created files or directories (a barrier: it syncs the spool's own files even with a
    /// commit log).
    fn note_commit(&mut self) -> bool {
        let Some(gate) = &self.gate else { return false };
        let barrier = self.dirs_dirty;
        let dirs: &[&Path] = if barrier {
            &[&self.dir, &self.root]
        } else {
            &[]
        };
        gate.note_commit(&self.file, self.commits.as_ref(), dirs);
        if barrier {
            gate.set_barrier();
        }
        self.dirs_dirty = false;
        barrier
    }

    fn content_len(&self) -> u64 {
        (self.fragment.end - self.fragment.begin) as u64
    }

    fn check(&self) -> Result<(), StorageError> {
        if self.poisoned.is_none()
            && let Some(gate) = &self.gate
            && let Some(failure) = gate
                .failure()
                .or_else(|| gate.wal().and_then(|w| w.failure()))
        {
            return Err(StorageError::Poisoned {
                journal: self.fragment.journal.clone(),
                cause: failure.to_string(),
            });
        }
        match &self.poisoned {
            None => Ok(()),
            Some(cause) => Err(StorageError::Poisoned {
                journal: self.fragment.journal.clone(),
                cause: cause.clone(),
            }),
        }
    }

    fn poison(&mut self, e: StorageError) -> StorageError {
        tracing::error!(journal = %self.fragment.journal, error = %e, "spool poisoned");
        self.poisoned = Some(e.to_string());
        e
    }

    async fn append_log(&mut self, buf: &[u8]) -> Result<(), StorageError> {
        if self.log_tail_dirty
            && let Some(log) = &self.commits
        {
            // A failed append may have left part of a record: cut it, so that the log
            // never holds a torn record before an intact one. (A mapping would then reach
            // past the file's end: it goes first, and the next record maps again.)
            self.log_map.unmap();
            self.log_extended = false;
            log.truncate(self.commits_len)
                .await
                .map_err(|e| StorageError::io("truncating", self.file.commits_path(), e.into()))?;
            self.log_tail_dirty = false;
        }
        if self.commits.is_none() {
            let path = self.file.commits_path();
            let log = open_rw(path, true)
                .await
                .map_err(|e| StorageError::io("creating", path, e))?;
            self.commits = Some(Rc::new(log));
            self.commits_len = 0;
            self.log_crc = 0;
            self.dirs_dirty = true;
        }
        #[cfg(test)]
        if self.fail_next.take_if(|f| *f == FailNext::Commit).is_some() {
            let log = self.commits.as_ref().expect("created above");
            let half = buf.get(..buf.len() / 2).unwrap_or_default();
            let _ = write_all(log, half, self.commits_len).await;
            self.log_tail_dirty = true;
            return Err(StorageError::io(
                "appending to",
                self.file.commits_path(),
                std::io::Error::from(std::io::ErrorKind::StorageFull),
            ));
        }
        let end = self.commits_len + buf.len() as u64;
        let mapped = self.map_log(end).await && self.log_map.write(self.commits_len, buf);
        let log = self.commits.as_ref().expect("created above");
        if !mapped && let Err(e) = write_all(log, buf, self.commits_len).await {
            self.log_tail_dirty = true;
            return Err(StorageError::io(
                "appending to",
                self.file.commits_path(),
                e,
            ));
        }
        self.commits_len += buf.len() as u64;
        self.log_crc = crc32c::crc32c_append(self.log_crc, buf);
        Ok(())
    }

    /// Whether content is written through a mapping of the content file: not in durable
    /// mode (its commit log replays content by the file's length), not where the commit
    /// log's records carry no sums, and not once mapping failed.
    ///
    /// Why: a short append's content `pwrite` cost about a twentieth of the broker's CPU
    /// (`ARCHITECTURE.md`, "The spool's writes"). The file's blocks are reserved ahead of the
    /// writes and its length extended with them (`reserve`), so a mapped page never lies
    /// past the end of the file nor needs a block at the copy; the zeros past the committed
    /// end are what the length no longer bounds, and recovery checks the content against
    /// the records' sums instead.
    fn maps_content(&self) -> bool {
        self.gate.is_none() && self.log_sums && !self.content_map.is_off()
    }

    /// Encodes a new commit log's header into `buf`: a log this spool creates has records
    /// with sums, whatever the log it recovered had.
    fn start_log(&mut self, buf: &mut Vec<u8>) {
        record::encode_header(self.fragment.compression_codec, buf);
        self.log_sums = true;
    }

    /// The sum a commit record of `fragment` carries in this spool's log (none in a log
    /// recovered from a version without sums).
    fn record_sum(&self, fragment: &Fragment) -> Option<[u8; 20]> {
        let sum = fragment.sum.unwrap_or_else(zero_sum);
        self.log_sums.then(|| protocol::sum::sum_to_bytes(&sum))
    }

    /// Makes the commit log's mapping cover `[0, end)`, extending the file ahead of it
    /// (zeros, which recovery reads as the end of the log), and returns whether the record
    /// ending at `end` may be copied into it; false sends records through `pwrite` for the
    /// rest of this fragment.
    ///
    /// Why: a commit record is a few dozen bytes, and its `pwrite` (an ext4 buffered write
    /// per append) cost about a twentieth of the broker's CPU for one-record appends
    /// (`ARCHITECTURE.md`, "The spool's writes"). A copy into a mapping costs no system call; the
    /// kernel faults in one page per 4 KiB of records.
    async fn map_log(&mut self, end: u64) -> bool {
        if self.log_map.is_off() {
            return false;
        }
        if self.log_map.covers(end) {
            return true;
        }
        let Some(log) = self.commits.clone() else {
            return false;
        };
        let from = self.log_map.len();
        let to = (end + end.clamp(LOG_EXTEND_MIN, LOG_EXTEND_MAX)).next_multiple_of(4096);
        // Before the await: a caller dropped meanwhile may leave the file extended.
        self.log_extended = true;
        let extended = extend(&log, from, to).await;
        self.log_map.remap(&log, extended.map(|()| to))
    }

    /// Closes the log and hands back the fragment if it has content, else
    /// deletes its files.
    async fn complete(mut self) -> Option<LocalFragment> {
        self.log_map.unmap();
        self.content_map.unmap();
        if self.log_extended
            && let Some(log) = &self.commits
            && let Err(e) = log.truncate(self.commits_len).await
        {
            tracing::warn!(path = %self.file.commits_path().display(), error = %e, "cutting a completed commit log");
        }
        let had_log = self.commits.is_some();
        if let Some(log) = self.commits.take()
            && let Err(e) = close_log(log).await
        {
            tracing::warn!(path = %self.file.commits_path().display(), error = %e, "closing commit log");
        }
        let content_len = self.content_len();
        if content_len == 0 {
            if (had_log || self.file.get().is_some())
                && let Err(e) = self.file.remove().await
            {
                tracing::warn!(path = %self.file.path().display(), error = %e, "removing empty spool");
            }
            return None;
        }
        // Cut rolled-back bytes so the file holds exactly the fragment (which also frees
        // the blocks reserved past its end).
        let reserved_past = self.reserving
            || self.content_extended
            || self.reserved.is_some_and(|r| r > content_len);
        if (self.written_len > content_len || reserved_past)
            && let Some(file) = self.file.get()
            && let Err(e) = file.truncate(content_len).await
        {
            tracing::warn!(path = %self.file.path().display(), error = %e, "truncating completed spool");
        }
        Some(LocalFragment {
            fragment: self.fragment,
            file: self.file,
        })
    }

    /// Makes the next content write or commit fail with ENOSPC after writing half of its
    /// bytes, as on a full disk.
    #[cfg(test)]
    pub(crate) fn fail_next(&mut self, what: FailNext) {
        self.fail_next = Some(what);
    }

    /// Marks the spool failed, as a failed sync would.
    #[cfg(test)]
    pub(crate) fn poison_for_test(&mut self) {
        let e = StorageError::io("testing", &self.dir, std::io::ErrorKind::Other.into());
        self.poison(e);
    }
}

impl std::fmt::Debug for Spool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spool")
            .field("fragment", &self.fragment)
            .field("registers", &self.registers)
            .field("delta", &self.delta)
            .field("poisoned", &self.poisoned)
            .finish()
    }
}

/// Why replicated content could not be applied.
#[derive(Debug)]
pub enum ContentError {
    /// The primary's `content_delta` disagrees with this spool: a protocol error.
    Delta(String),
    Storage(StorageError),
}

impl std::fmt::Display for ContentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ContentError::Delta(msg) => f.write_str(msg),
            ContentError::Storage(e) => write!(f, "{e}"),
        }
    }
}

/// Gazette's Fragment equality over its eight fields; an absent sum equals the zero sum
/// (Go always sends one, prost decodes it as present).
pub fn same_fragment(a: &Fragment, b: &Fragment) -> bool {
    let sum = |f: &Fragment| f.sum.unwrap_or_default();
    a.journal == b.journal
        && a.begin == b.begin
        && a.end == b.end
        && sum(a) == sum(b)
        && a.compression_codec == b.compression_codec
        && a.backing_store == b.backing_store
        && a.mod_time == b.mod_time
        && a.path_postfix == b.path_postfix
}

/// Closes a commit log, unless a sync in flight still holds it (it is then closed when
/// the sync lets go of it).
async fn close_log(log: Rc<BufferedFile>) -> glommio::Result<(), ()> {
    match Rc::try_unwrap(log) {
        Ok(log) => log.close().await,
        Err(_shared) => Ok(()),
    }
}

async fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    let handle = Directory::open(dir)
        .await
        .map_err(|e| StorageError::io("opening", dir, e.into()))?;
    handle
        .sync()
        .await
        .map_err(|e| StorageError::io("syncing", dir, e.into()))?;
    let _ = handle.close().await;
    Ok(())
}

fn unix_ms(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(_) => 0,
    }
}

fn from_unix_ms(ms: i64) -> Option<SystemTime> {
    UNIX_EPOCH.checked_add(Duration::from_millis(u64::try_from(ms).ok()?))
}

#[cfg(test)]
mod tests;
