//! The embedded single-node keyspace: etcd's data model in one process, persisted under
//! `--data-dir` so that journal specs survive a restart.
//!
//! Lives on: the control thread. It uses blocking `std::fs` calls, which is why it never runs
//! on an executor core. Every transaction is one record appended to `keyspace.log` and
//! fdatasync'ed before the new snapshot is published, so an acknowledged Apply survives
//! `kill -9` and power loss. Record layout (little endian):
//!
//! ```text
//! u32 payload_len | u32 crc32c(payload) | payload
//! payload = i64 revision | u32 op_count | op*
//! op      = u8 kind (1 = put, 2 = delete) | u32 key_len | key | [u32 value_len | value]
//! ```
//!
//! On open the log is replayed; a torn or corrupt tail (a record cut by a crash) is
//! truncated away. Such a record was never acknowledged. A record whose write or sync fails
//! (a full disk) is cut from the log at once (or before the next record, if that cut fails
//! too): the Apply is refused, and no later record lands behind a torn one, where replay
//! would never reach it.

use super::{Backend, Compare, KeyValue, Op, Snapshot, TxnOutcome, decode_items};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;

pub struct Embedded {
    root: String,
    log: File,
    /// Length of the log's intact records: where the next record goes.
    log_len: u64,
    /// A failed record may lie past `log_len`: cut it before writing the next one.
    log_dirty: bool,
    snapshot: Arc<Snapshot>,
    /// Test builds: the next record's write fails after writing half of it.
    #[cfg(test)]
    fail_next_write: bool,
}

const PUT: u8 = 1;
const DELETE: u8 = 2;

impl Embedded {
    /// Opens (or creates) the keyspace in `dir`, with keys under `root` (e.g. "/gazette/cluster").
    pub fn open(dir: &Path, root: &str, member_id: u64) -> Result<Embedded, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let cluster_id = load_or_create_cluster_id(dir)?;
        let path = dir.join("keyspace.log");
        let mut log = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .append(true)
            .open(&path)
            .map_err(|e| format!("opening {}: {e}", path.display()))?;
        let mut raw = Vec::new();
        log.read_to_end(&mut raw)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;

        let mut keys = BTreeMap::new();
        // etcd's revision counter starts at 1 for an empty store.
        let mut revision = 1;
        let valid = replay(&raw, &mut keys, &mut revision);
        if valid < raw.len() {
            tracing::warn!(
                path = %path.display(),
                cut = raw.len() - valid,
                "cutting a torn tail from the keyspace log (an Apply that was never acknowledged)"
            );
            log.set_len(valid as u64)
                .and_then(|()| log.sync_data())
                .map_err(|e| format!("truncating {}: {e}", path.display()))?;
        }
        let journals = decode_items(root, &keys);
        warn_single_copy(journals.values(), "at start");
        let snapshot = Arc::new(Snapshot {
            revision,
            cluster_id,
            member_id,
            raft_term: 1,
            journals,
            keys,
            ..Default::default()
        });
        Ok(Embedded {
            root: root.to_string(),
            log,
            log_len: valid as u64,
            log_dirty: false,
            snapshot,
            #[cfg(test)]
            fail_next_write: false,
        })
    }
}

impl Backend for Embedded {
    fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.clone()
    }

    fn txn(&mut self, compares: &[Compare], ops: &[Op]) -> Result<TxnOutcome, String> {
        let cur = self.snapshot.clone();
        if !super::txn::holds(&cur.keys, compares) {
            return Ok(TxnOutcome {
                succeeded: false,
                revision: cur.revision,
            });
        }
        if ops.is_empty() {
            return Ok(TxnOutcome {
                succeeded: true,
                revision: cur.revision,
            });
        }
        let revision = cur.revision + 1;
        let record = encode_record(revision, ops);
        if self.log_dirty {
            self.log
                .set_len(self.log_len)
                .map_err(|e| format!("cutting a failed record from the keyspace log: {e}"))?;
            self.log_dirty = false;
        }
        if let Err(e) = self.write_record(&record) {
            // Cut what reached the file (also a complete record whose sync failed: it was
            // not acknowledged, and the next record takes its revision).
            self.log_dirty = self.log.set_len(self.log_len).is_err();
            tracing::warn!(error = %e, "writing the keyspace log failed; the change is refused");
            return Err(format!("writing the keyspace log: {e}"));
        }
        self.log_len += record.len() as u64;

        let mut keys = cur.keys.clone();
        super::txn::apply(&mut keys, revision, ops);
        let journals = decode_items(&self.root, &keys);
        warn_single_copy(
            journals
                .values()
                .filter(|item| item.mod_revision == revision),
            "applied",
        );
        self.snapshot = Arc::new(Snapshot {
            revision,
            journals,
            keys,
            ..(*cur).clone()
        });
        Ok(TxnOutcome {
            succeeded: true,
            revision,
        })
    }
}

/// The embedded keyspace has one broker: a journal wanting more than one replica gets one
/// copy of every append, which an operator must hear about (Gazette would refuse the
/// appends with INSUFFICIENT_JOURNAL_BROKERS until enough brokers join).
fn warn_single_copy<'a>(journals: impl Iterator<Item = &'a super::JournalItem>, when: &str) {
    for item in journals {
        let wanted = item.spec.replication;
        if wanted > 1 {
            tracing::warn!(
                journal = %item.spec.name,
                replication = wanted,
                when,
                "journal wants {wanted} replicas but this broker runs alone (embedded \
                 keyspace, no --etcd.address): its appends are acknowledged with 1 copy"
            );
        }
    }
}

impl Embedded {
    fn write_record(&mut self, record: &[u8]) -> std::io::Result<()> {
        #[cfg(test)]
        if std::mem::take(&mut self.fail_next_write) {
            self.log
                .write_all(record.get(..record.len() / 2).unwrap_or_default())?;
            return Err(std::io::ErrorKind::StorageFull.into());
        }
        self.log.write_all(record)?;
        self.log.sync_data()
    }
}

fn load_or_create_cluster_id(dir: &Path) -> Result<u64, String> {
    let path = dir.join("cluster_id");
    if let Ok(text) = std::fs::read_to_string(&path)
        && let Ok(id) = u64::from_str_radix(text.trim(), 16)
        && id != 0
    {
        return Ok(id);
    }
    // Go clients require a non-zero cluster id in every header.
    let id = rand::random::<u64>() | 1;
    let tmp = dir.join("cluster_id.tmp");
    std::fs::write(&tmp, format!("{id:016x}\n"))
        .and_then(|()| File::open(&tmp)?.sync_all())
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(id)
}

fn encode_record(revision: i64, ops: &[Op]) -> Vec<u8> {
    let mut payload = Vec::new();
    payload.extend_from_slice(&revision.to_le_bytes());
    payload.extend_from_slice(&(ops.len() as u32).to_le_bytes());
    for op in ops {
        let (kind, key, value) = match op {
            Op::Put { key, value, .. } => (PUT, key, Some(value)),
            Op::Delete { key } => (DELETE, key, None),
        };
        payload.push(kind);
        payload.extend_from_slice(&(key.len() as u32).to_le_bytes());
        payload.extend_from_slice(key.as_bytes());
        if let Some(value) = value {
            payload.extend_from_slice(&(value.len() as u32).to_le_bytes());
            payload.extend_from_slice(value);
        }
    }
    let mut record = Vec::with_capacity(payload.len() + 8);
    record.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    record.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
    record.extend_from_slice(&payload);
    record
}

/// A bounds-checked reader over untrusted bytes: never panics.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

fn decode_payload(payload: &[u8]) -> Option<(i64, Vec<Op>)> {
    let mut c = Cursor(payload);
    let revision = c.i64()?;
    let n = c.u32()?;
    let mut ops = Vec::new();
    for _ in 0..n {
        let kind = c.take(1)?[0];
        let key_len = c.u32()? as usize;
        let key = String::from_utf8(c.take(key_len)?.to_vec()).ok()?;
        match kind {
            PUT => {
                let len = c.u32()? as usize;
                let value = Bytes::copy_from_slice(c.take(len)?);
                ops.push(Op::put(key, value));
            }
            DELETE => ops.push(Op::Delete { key }),
            _ => return None,
        }
    }
    if !c.0.is_empty() {
        return None;
    }
    Some((revision, ops))
}

/// Replays records into `keys`, returning the length of the valid prefix of `raw`.
fn replay(raw: &[u8], keys: &mut BTreeMap<String, KeyValue>, revision: &mut i64) -> usize {
    let mut c = Cursor(raw);
    let mut valid = 0;
    while let Some(len) = c.u32() {
        let Some(crc) = c.u32() else { break };
        let Some(payload) = c.take(len as usize) else {
            break;
        };
        if crc32c::crc32c(payload) != crc {
            break;
        }
        let Some((rev, ops)) = decode_payload(payload) else {
            break;
        };
        if rev <= *revision {
            break; // Revisions only grow; anything else is corruption.
        }
        super::txn::apply(keys, rev, &ops);
        *revision = rev;
        valid = raw.len() - c.0.len();
    }
    valid
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(k: &str, v: &str) -> Op {
        Op::put(k.into(), Bytes::copy_from_slice(v.as_bytes()))
    }

    #[test]
    fn txn_compares_and_survives_reopen_with_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let mut ks = Embedded::open(dir.path(), "/root", 7).unwrap();
        assert_eq!(ks.snapshot().revision, 1);
        let cluster = ks.snapshot().cluster_id;
        assert_ne!(cluster, 0);

        let out = ks.txn(
            &[Compare {
                key: "a".into(),
                mod_revision: 0,
            }],
            &[put("a", "1")],
        );
        assert_eq!(
            out.unwrap(),
            TxnOutcome {
                succeeded: true,
                revision: 2
            }
        );
        // A stale compare fails and changes nothing.
        let out = ks.txn(
            &[Compare {
                key: "a".into(),
                mod_revision: 0,
            }],
            &[put("a", "2")],
        );
        assert_eq!(
            out.unwrap(),
            TxnOutcome {
                succeeded: false,
                revision: 2
            }
        );
        let out = ks.txn(
            &[Compare {
                key: "a".into(),
                mod_revision: 2,
            }],
            &[put("a", "3"), put("b", "x")],
        );
        assert_eq!(
            out.unwrap(),
            TxnOutcome {
                succeeded: true,
                revision: 3
            }
        );
        let snap = ks.snapshot();
        assert_eq!(snap.keys["a"].create_revision, 2);
        assert_eq!(snap.keys["a"].mod_revision, 3);
        assert_eq!(&snap.keys["a"].value[..], b"3");
        drop(ks);

        // Append garbage as if a crash tore the next record.
        let log = dir.path().join("keyspace.log");
        let good_len = std::fs::metadata(&log).unwrap().len();
        let mut f = OpenOptions::new().append(true).open(&log).unwrap();
        f.write_all(&[9, 0, 0, 0, 1, 2]).unwrap();
        drop(f);

        let mut ks = Embedded::open(dir.path(), "/root", 7).unwrap();
        let snap = ks.snapshot();
        assert_eq!(snap.revision, 3);
        assert_eq!(snap.cluster_id, cluster);
        assert_eq!(&snap.keys["b"].value[..], b"x");
        assert_eq!(std::fs::metadata(&log).unwrap().len(), good_len);
        let out = ks.txn(&[], &[Op::Delete { key: "a".into() }]).unwrap();
        assert_eq!(out.revision, 4);
        assert!(!ks.snapshot().keys.contains_key("a"));
    }

    /// A full disk: the refused change leaves nothing behind, and changes acknowledged after
    /// it survive a reopen (replay would stop at a torn record left in the middle).
    #[test]
    fn a_failed_write_is_refused_and_cut() {
        let dir = tempfile::tempdir().unwrap();
        let mut ks = Embedded::open(dir.path(), "/root", 7).unwrap();
        ks.txn(&[], &[put("a", "1")]).unwrap();
        ks.fail_next_write = true;
        let err = ks.txn(&[], &[put("lost", "x")]).unwrap_err();
        assert!(err.contains("keyspace log"), "{err}");
        assert_eq!(ks.snapshot().revision, 2);
        assert!(!ks.snapshot().keys.contains_key("lost"));
        let out = ks.txn(&[], &[put("b", "2")]).unwrap();
        assert_eq!(out.revision, 3);
        drop(ks);
        let ks = Embedded::open(dir.path(), "/root", 7).unwrap();
        let snap = ks.snapshot();
        assert_eq!(snap.revision, 3);
        assert_eq!(&snap.keys["b"].value[..], b"2");
        assert!(!snap.keys.contains_key("lost"));
    }

    #[test]
    fn decoding_garbage_never_panics() {
        let mut keys = BTreeMap::new();
        let mut rev = 1;
        for len in 0..64 {
            let raw: Vec<u8> = (0..len).map(|i| (i * 37 % 251) as u8).collect();
            let _ = replay(&raw, &mut keys, &mut rev);
            let _ = decode_payload(&raw);
        }
    }
}
