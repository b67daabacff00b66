//! Recovery of a journal's spool directory after a crash or restart (see
//! [`super::Spool::open`]): the directory's `JOURNAL` file, its fragments, and each
//! fragment's commit log scanned and checked against its content.
//!
//! Lives on: the journal's owner core, at `open`.

use std::path::Path;
use std::rc::Rc;
use std::time::SystemTime;

use glommio::io::BufferedFile;
use protocol::Fragment;

use super::{JOURNAL_FILE, from_unix_ms};
use crate::StorageError;
use crate::fragment::{FragmentFile, LocalFragment, open_rw, read_up_to};
use crate::record;
use crate::summer::Summer;
use protocol::LabelSet;
use protocol::sum::zero_sum;

/// Chunk size for re-hashing a fragment's content during recovery.
pub(super) const RECOVERY_READ_LEN: usize = 1 << 20;

/// A fragment read back from disk by `open`.
pub(super) struct RecoveredFragment {
    pub(super) fragment: Fragment,
    pub(super) registers: LabelSet,
    pub(super) first_append_time: Option<SystemTime>,
    pub(super) file: BufferedFile,
    pub(super) commits: BufferedFile,
    pub(super) commits_len: u64,
    /// crc32c of the log's first `commits_len` bytes.
    pub(super) log_crc: u32,
    /// The log's records carry sums.
    pub(super) log_sums: bool,
    pub(super) sum: Summer,
}

impl RecoveredFragment {
    pub(super) async fn into_completed(self, dir: &Path) -> LocalFragment {
        if let Err(e) = self.commits.close().await {
            tracing::warn!(error = %e, "closing recovered commit log");
        }
        let file = FragmentFile::with_file(dir, self.fragment.begin, self.file);
        LocalFragment {
            fragment: self.fragment,
            file: Rc::new(file),
        }
    }
}

/// Creates the journal directory and its `JOURNAL` file, or checks that an
/// existing directory belongs to `journal`. Blocking, once per `open`.
pub(super) fn prepare_dir(dir: &Path, journal: &str) -> Result<(), StorageError> {
    std::fs::create_dir_all(dir).map_err(|e| StorageError::io("creating", dir, e))?;
    let path = dir.join(JOURNAL_FILE);
    match std::fs::read(&path) {
        // An empty file is a JOURNAL write lost to power failure: rewrite it.
        Ok(found) if !found.is_empty() => {
            if found != journal.as_bytes() {
                return Err(StorageError::JournalMismatch {
                    dir: dir.to_owned(),
                    journal: journal.to_owned(),
                    found: String::from_utf8_lossy(&found).into_owned(),
                });
            }
            Ok(())
        }
        Ok(_) => std::fs::write(&path, journal).map_err(|e| StorageError::io("writing", &path, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::write(&path, journal).map_err(|e| StorageError::io("writing", &path, e))
        }
        Err(e) => Err(StorageError::io("reading", &path, e)),
    }
}

/// Begins of the fragments in `dir` (named `<begin %016x>.spool`), ascending.
/// Commit logs without a content file are leftovers of a deletion cut short,
/// and are removed. Blocking, once per `open`.
pub(super) fn list_fragments(dir: &Path) -> Result<Vec<i64>, StorageError> {
    let mut spools = Vec::new();
    let mut logs = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| StorageError::io("listing", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| StorageError::io("listing", dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(begin) = name.strip_suffix(".spool").and_then(parse_begin) {
            spools.push(begin);
        } else if let Some(begin) = name.strip_suffix(".commits").and_then(parse_begin) {
            logs.push(begin);
        }
    }
    spools.sort_unstable();
    for begin in logs {
        if spools.binary_search(&begin).is_err() {
            let path = dir.join(format!("{begin:016x}.commits"));
            tracing::warn!(path = %path.display(), "removing commit log without content file");
            std::fs::remove_file(&path).map_err(|e| StorageError::io("removing", &path, e))?;
        }
    }
    Ok(spools)
}

fn parse_begin(hex: &str) -> Option<i64> {
    if hex.len() != 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    i64::try_from(u64::from_str_radix(hex, 16).ok()?).ok()
}

/// Recovers the fragment beginning at `begin`, or deletes its files and
/// returns None if it has no committed content.
pub(super) async fn recover_fragment(
    dir: &Path,
    journal: &str,
    begin: i64,
) -> Result<Option<RecoveredFragment>, StorageError> {
    let names = FragmentFile::new(dir, begin);
    let path = names.path();
    let file = open_rw(path, false)
        .await
        .map_err(|e| StorageError::io("opening", path, e))?;
    let content_len = file
        .file_size()
        .await
        .map_err(|e| StorageError::io("sizing", path, e.into()))?;
    let (log, log_len, buf) = read_commit_log(names.commits_path()).await?;
    let scanned = match &log {
        Some(_) => record::scan(&buf, begin, content_len),
        None => None,
    };

    // A fragment without content is kept only if its log marks its begin (a roll's).
    let (Some(scanned), Some(log)) = (scanned.filter(|s| s.end > begin || s.records > 0), log)
    else {
        tracing::warn!(journal, begin, path = %path.display(), "removing spool without committed content");
        names.remove().await?;
        return Ok(None);
    };
    let Some((scanned, sum)) =
        intact_commits(&file, path, (journal, begin), &buf, content_len, scanned).await?
    else {
        tracing::warn!(journal, begin, path = %path.display(),
            "removing spool whose content matches none of its commit records");
        names.remove().await?;
        return Ok(None);
    };
    let log_crc = crc32c::crc32c(&buf[..scanned.valid_len]);
    let tail_zero = buf[scanned.valid_len..].iter().all(|&b| b == 0);
    let tails = Tails {
        journal,
        begin,
        content_len,
        log_len,
        tail_zero,
    };
    tails.cut(&file, &log, &names, &scanned).await?;
    tracing::info!(
        journal,
        begin,
        end = scanned.end,
        records = scanned.records,
        "recovered spool fragment"
    );
    Ok(Some(recovered(
        journal, begin, scanned, file, log, log_crc, sum,
    )))
}

/// Opens and reads a fragment's commit log: the file, its length and its bytes (None, 0 and
/// nothing where the log does not exist).
async fn read_commit_log(
    log_path: &Path,
) -> Result<(Option<BufferedFile>, u64, Vec<u8>), StorageError> {
    let log = match open_rw(log_path, false).await {
        Ok(log) => log,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((None, 0, Vec::new())),
        Err(e) => return Err(StorageError::io("opening", log_path, e)),
    };
    let log_len = log
        .file_size()
        .await
        .map_err(|e| StorageError::io("sizing", log_path, e.into()))?;
    let buf = read_up_to(&log, 0, log_len as usize)
        .await
        .map_err(|e| StorageError::io("reading", log_path, e))?;
    Ok((Some(log), log_len, buf))
}

/// The commits whose content is intact, with the sum of their content: the content must
/// match the sum of the last record. Where a power loss kept records whose content never
/// reached the disk (its blocks read as zeros), the fragment is cut back to the last record
/// whose content is intact; None if none is.
async fn intact_commits(
    file: &BufferedFile,
    path: &Path,
    (journal, begin): (&str, i64),
    buf: &[u8],
    content_len: u64,
    scanned: record::Recovered,
) -> Result<Option<(record::Recovered, Summer)>, StorageError> {
    let committed_len = (scanned.end - begin) as u64;
    let sum = hash_content(file, committed_len)
        .await
        .map_err(|e| StorageError::io("re-hashing", path, e))?;
    let Some(&(_, want)) = scanned.ends.last() else {
        return Ok(Some((scanned, sum)));
    };
    if want == digest_of(&sum, committed_len) {
        return Ok(Some((scanned, sum)));
    }
    let (keep, intact) = hash_checked(file, begin, &scanned.ends)
        .await
        .map_err(|e| StorageError::io("re-hashing", path, e))?;
    let Some(kept) = record::scan_first(buf, begin, content_len, keep).filter(|s| s.records > 0)
    else {
        return Ok(None);
    };
    tracing::warn!(
        journal,
        begin,
        end = scanned.end,
        intact_end = kept.end,
        "spool content does not match its commit records past the intact end (lost before reaching the disk): cutting"
    );
    Ok(Some((kept, intact)))
}

/// What a recovered fragment's files hold past its last intact commit.
struct Tails<'a> {
    journal: &'a str,
    begin: i64,
    content_len: u64,
    log_len: u64,
    /// The log holds only zeros past its last valid record.
    tail_zero: bool,
}

impl Tails<'_> {
    /// Truncates the content file and the commit log to the last intact commit.
    async fn cut(
        &self,
        file: &BufferedFile,
        log: &BufferedFile,
        names: &FragmentFile,
        scanned: &record::Recovered,
    ) -> Result<(), StorageError> {
        let (journal, begin) = (self.journal, self.begin);
        let committed_len = (scanned.end - begin) as u64;
        if self.content_len > committed_len {
            let cut = self.content_len - committed_len;
            if scanned.sums {
                // Also the blocks a spool writing through a mapping reserved ahead.
                tracing::info!(
                    journal,
                    begin,
                    end = scanned.end,
                    cut,
                    "cutting spool content past the last commit"
                );
            } else {
                tracing::warn!(
                    journal,
                    begin,
                    end = scanned.end,
                    cut,
                    "cutting uncommitted spool content"
                );
            }
            file.truncate(committed_len)
                .await
                .map_err(|e| StorageError::io("truncating", names.path(), e.into()))?;
        }
        if self.log_len > scanned.valid_len as u64 {
            let cut = self.log_len - scanned.valid_len as u64;
            // Zeros are the room a running spool keeps ahead of its records (`map_log`).
            if self.tail_zero {
                tracing::debug!(journal, begin, cut, "cutting the commit log's room ahead");
            } else {
                tracing::warn!(journal, begin, cut, "cutting torn commit log tail");
            }
            log.truncate(scanned.valid_len as u64)
                .await
                .map_err(|e| StorageError::io("truncating", names.commits_path(), e.into()))?;
        }
        Ok(())
    }
}

/// The recovered fragment of `scanned`'s intact commits, whose content `sum` summed.
fn recovered(
    journal: &str,
    begin: i64,
    scanned: record::Recovered,
    file: BufferedFile,
    log: BufferedFile,
    log_crc: u32,
    sum: Summer,
) -> RecoveredFragment {
    let committed_len = (scanned.end - begin) as u64;
    let fragment = Fragment {
        journal: journal.to_owned(),
        begin,
        end: scanned.end,
        // An empty fragment (a roll's durable begin) has the zero sum, as every empty
        // spool: its own proposal must match it after a restart.
        sum: Some(protocol::sum::sum_from_bytes(&digest_of(
            &sum,
            committed_len,
        ))),
        compression_codec: scanned.codec,
        backing_store: String::new(),
        mod_time: 0,
        path_postfix: String::new(),
    };
    RecoveredFragment {
        fragment,
        registers: scanned.registers,
        first_append_time: scanned.first_append_unix_ms.and_then(from_unix_ms),
        file,
        commits: log,
        commits_len: scanned.valid_len as u64,
        log_crc,
        log_sums: scanned.sums,
        sum,
    }
}

/// The sum a commit record holds for `len` bytes summed by `sum` (the zero sum when empty).
fn digest_of(sum: &Summer, len: u64) -> [u8; 20] {
    if len == 0 {
        protocol::sum::sum_to_bytes(&zero_sum())
    } else {
        sum.digest()
    }
}

/// Hashes `file` (a fragment beginning at `begin`) record by record: returns how many of
/// the records' `ends` (in order) its content matches before the first that it does not,
/// and the sum of the content up to the last match.
async fn hash_checked(
    file: &BufferedFile,
    begin: i64,
    ends: &[(i64, [u8; 20])],
) -> std::io::Result<(usize, Summer)> {
    let mut sum = Summer::new();
    let mut pos = 0u64;
    for (i, (end, want)) in ends.iter().enumerate() {
        let intact = sum.clone();
        let len = (end - begin) as u64;
        hash_range(file, &mut sum, pos, len).await?;
        pos = pos.max(len);
        if digest_of(&sum, len) != *want {
            return Ok((i, intact));
        }
    }
    Ok((ends.len(), sum))
}

/// SHA-1 over the first `len` bytes of `file`.
async fn hash_content(file: &BufferedFile, len: u64) -> std::io::Result<Summer> {
    let mut sum = Summer::new();
    hash_range(file, &mut sum, 0, len).await?;
    Ok(sum)
}

/// Adds the bytes `[from, to)` of `file` to `sum`.
async fn hash_range(
    file: &BufferedFile,
    sum: &mut Summer,
    from: u64,
    to: u64,
) -> std::io::Result<()> {
    let mut pos = from;
    while pos < to {
        let want = (to - pos).min(RECOVERY_READ_LEN as u64) as usize;
        let chunk = read_up_to(file, pos, want).await?;
        if chunk.len() != want {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        sum.update(&chunk);
        pos += want as u64;
    }
    Ok(())
}
