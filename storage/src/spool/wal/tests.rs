//! The commit log of durable mode: logging, flushing, wrapping, and replay after the page
//! cache lost what only the log had on the device (simulated by cutting the spool files
//! back to what their last own sync covered).

use std::path::Path;
use std::rc::Rc;

use bytes::Bytes;
use protocol::CompressionCodec::None as Raw;
use protocol::LabelSet;
use sha1::{Digest, Sha1};

use super::super::{Spool, SyncBatcher, SyncGate};
use super::*;
use crate::testing::run;

async fn spool_with_wal(root: &Path, journal: &str, wal_size: u64) -> (Spool, Rc<SyncBatcher>) {
    let wal = Wal::new(path(root, 0), wal_size, None);
    let batcher = SyncBatcher::with_wal(None, wal);
    let (mut spool, _) = Spool::open(root, journal, Raw).await.unwrap();
    spool.set_sync_gate(SyncGate::new(&batcher));
    (spool, batcher)
}

async fn append(spool: &mut Spool, content: &[u8]) {
    spool.write(&Bytes::copy_from_slice(content)).await.unwrap();
    spool.commit(LabelSet::default()).await.unwrap();
    spool.sync_ticket().unwrap().wait().await.unwrap();
}

/// Lengths of the fragment's content file and commit log.
fn lens(spool: &Spool) -> (u64, u64) {
    let file = spool.file();
    let len = |p: &Path| std::fs::metadata(p).unwrap().len();
    (len(file.path()), len(file.commits_path()))
}

/// Cuts the fragment's files back to `to`, as a power loss that kept only what was synced.
fn lose_page_cache(root: &Path, journal: &str, begin: i64, to: (u64, u64)) {
    let names =
        crate::fragment::FragmentFile::new(&super::super::journal_dir(root, journal), begin);
    let cut = |p: &Path, len: u64| {
        std::fs::OpenOptions::new()
            .write(true)
            .open(p)
            .unwrap()
            .set_len(len)
            .unwrap()
    };
    cut(names.path(), to.0);
    cut(names.commits_path(), to.1);
}

fn sha1(data: &[u8]) -> protocol::Sha1Sum {
    protocol::sum::sum_from_bytes(&Sha1::digest(data).into())
}

async fn reopen(root: &Path, journal: &str) -> Spool {
    Spool::open(root, journal, Raw).await.unwrap().0
}

#[test]
fn logged_commits_share_one_log_sync_and_replay_restores_them_after_a_power_loss() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_owned();
    let synced = {
        let root = root.clone();
        let mut synced = (0, 0);
        run(|| async {
            let (mut spool, batcher) = spool_with_wal(&root, "a/j", DEFAULT_SIZE / 8).await;
            // The fragment's first commit creates its files: a barrier, synced in place.
            append(&mut spool, b"one").await;
            assert_eq!(batcher.syncs(), 1);
            synced = lens(&spool);
            append(&mut spool, b"two").await;
            append(&mut spool, b"three").await;
            assert_eq!(
                batcher.syncs(),
                1,
                "logged commits do not sync the spool's files"
            );
            assert_eq!(batcher.wal().unwrap().flushes(), 2);
        });
        synced
    };
    lose_page_cache(&root, "a/j", 0, synced);
    let report = replay(&root).unwrap();
    assert_eq!(
        (report.logs, report.records, report.applied, report.skipped),
        (1, 2, 2, 0)
    );
    run(|| async {
        let spool = reopen(&root, "a/j").await;
        assert_eq!(spool.fragment().end, 11);
        assert_eq!(spool.fragment().sum, Some(sha1(b"onetwothree")));
    });
    // The replay raised the log's epoch: its records are not replayed a second time.
    assert_eq!(replay(&root).unwrap().records, 0);
}

#[test]
fn replay_leaves_files_that_already_hold_the_records() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_owned();
    run(|| async {
        let (mut spool, _) = spool_with_wal(&root, "a/j", DEFAULT_SIZE / 8).await;
        for part in [&b"one"[..], b"two", b"three"] {
            append(&mut spool, part).await;
        }
    });
    let report = replay(&root).unwrap();
    assert_eq!((report.records, report.present, report.applied), (2, 2, 0));
    run(|| async {
        assert_eq!(
            reopen(&root, "a/j").await.fragment().sum,
            Some(sha1(b"onetwothree"))
        );
    });
}

#[test]
fn a_record_that_does_not_continue_the_files_is_not_replayed() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_owned();
    let mut synced = (0, 0);
    run(|| async {
        let (mut spool, _) = spool_with_wal(&root, "a/j", DEFAULT_SIZE / 8).await;
        append(&mut spool, b"one").await;
        synced = lens(&spool);
        append(&mut spool, b"two").await;
    });
    lose_page_cache(&root, "a/j", 0, synced);
    // Other content under the same commit log: the record's SHA-1 of [begin, from) differs.
    let content = crate::fragment::FragmentFile::new(&super::super::journal_dir(&root, "a/j"), 0);
    std::fs::write(content.path(), b"ONE").unwrap();
    let report = replay(&root).unwrap();
    assert_eq!((report.applied, report.skipped), (0, 1));
    run(|| async {
        // Nor does the spool's own record hold for that content (its sum is of "one"): the
        // fragment is dropped rather than served with content its commit never had.
        assert_eq!(reopen(&root, "a/j").await.fragment().end, 0);
    });
}

#[test]
fn records_of_removed_fragments_are_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_owned();
    run(|| async {
        let (mut spool, _) = spool_with_wal(&root, "a/j", DEFAULT_SIZE / 8).await;
        append(&mut spool, b"one").await;
        append(&mut spool, b"two").await;
        // Persisted and removed, as the broker does once a store holds the fragment.
        spool.file().remove().await.unwrap();
    });
    let report = replay(&root).unwrap();
    assert_eq!((report.records, report.applied, report.skipped), (1, 0, 1));
}

#[test]
fn the_log_wraps_through_a_checkpoint_that_syncs_the_spools() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_owned();
    let mut expected = Vec::new();
    let mut synced = (0, 0);
    run(|| async {
        // The smallest log (64 KiB): 4 KiB records wrap it every 15 commits.
        let (mut spool, batcher) = spool_with_wal(&root, "a/j", 0).await;
        for i in 0..40u8 {
            let part = vec![i; 4000];
            append(&mut spool, &part).await;
            expected.extend_from_slice(&part);
        }
        let wal = batcher.wal().unwrap();
        assert!(wal.checkpoints() >= 3, "{} checkpoints", wal.checkpoints());
        // The first commit's barrier, then syncs of the spool by checkpoints.
        assert!(batcher.syncs() >= 3, "{} syncs", batcher.syncs());
        // The earliest commit the log still holds: a checkpoint that ended synced the
        // spool's files up to it, and a power loss may lose everything after.
        let bytes = std::fs::read(path(&root, 0)).unwrap();
        let records = decode_log(&bytes);
        let first = records.iter().min_by_key(|r| r.from).unwrap();
        assert!(
            first.from > 3 && records.len() < 20,
            "{} records from {}",
            records.len(),
            first.from
        );
        let log = std::fs::read(spool.file().commits_path()).unwrap();
        assert_eq!(
            crc32c::crc32c(&log[..first.log_pos as usize]),
            first.log_crc
        );
        synced = (first.from as u64, first.log_pos);
    });
    lose_page_cache(&root, "a/j", 0, synced);
    let report = replay(&root).unwrap();
    assert!(report.applied > 0 && report.skipped == 0, "{report:?}");
    run(|| async {
        let spool = reopen(&root, "a/j").await;
        assert_eq!(spool.fragment().end, expected.len() as i64);
        assert_eq!(spool.fragment().sum, Some(sha1(&expected)));
    });
}

#[test]
fn a_commit_too_large_to_log_syncs_the_spool_files() {
    let tmp = tempfile::tempdir().unwrap();
    run(|| async {
        let (mut spool, batcher) = spool_with_wal(tmp.path(), "a/j", 0).await;
        append(&mut spool, b"one").await;
        let max = batcher.wal().unwrap().max_record();
        spool.write(&Bytes::from(vec![7u8; max])).await.unwrap();
        spool.write(&Bytes::from(vec![8u8; 10])).await.unwrap();
        spool.commit(LabelSet::default()).await.unwrap();
        spool.sync_ticket().unwrap().wait().await.unwrap();
        assert_eq!(batcher.syncs(), 2);
        assert_eq!(batcher.wal().unwrap().flushes(), 0);
        // Pending content rolled back is never logged.
        spool.write(&Bytes::from_static(b"gone")).await.unwrap();
        spool.rollback();
        append(&mut spool, b"kept").await;
        let bytes = std::fs::read(path(tmp.path(), 0)).unwrap();
        let records = decode_log(&bytes);
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].content, b"kept");
    });
}

fn sample_entry_bytes(lap: u64) -> Vec<u8> {
    let content = [Bytes::from_static(b"hello")];
    let entry = Entry {
        journal: "a/j",
        begin: 0,
        from: 3,
        to: 8,
        sum_from: [1; 20],
        log_pos: 40,
        log_crc: 9,
        log_bytes: b"commit",
        content: &content,
    };
    let mut buf = Vec::new();
    entry.encode(&mut buf);
    seal(&mut buf, lap);
    buf
}

#[test]
fn records_decode_only_whole() {
    let buf = sample_entry_bytes(5);
    let (record, len) = decode_record(&buf).unwrap();
    assert_eq!(len, buf.len());
    assert_eq!(
        (
            record.journal.as_str(),
            record.from,
            record.to,
            record.log_pos,
            record.log_crc
        ),
        ("a/j", 3, 8, 40, 9)
    );
    assert_eq!(
        (record.log_bytes.as_slice(), record.content.as_slice()),
        (&b"commit"[..], &b"hello"[..])
    );
    // Every torn prefix and every flipped byte is refused, without a panic.
    for cut in 0..buf.len() {
        assert!(decode_record(&buf[..cut]).is_none(), "torn at {cut}");
    }
    for at in 0..buf.len() {
        let mut bad = buf.clone();
        bad[at] ^= 0x40;
        assert!(decode_record(&bad).is_none(), "flipped at {at}");
    }
}

#[test]
fn hostile_log_files_replay_nothing_and_never_panic() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir(tmp.path())).unwrap();
    // A valid header, then a record whose length runs past the file, then garbage files.
    let mut file = Header {
        runs: 3,
        mid: 1 << 20,
    }
    .encode();
    file.resize(DATA_START as usize, 0);
    let mut record = sample_entry_bytes(3);
    record[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
    file.extend_from_slice(&record);
    std::fs::write(path(tmp.path(), 0), &file).unwrap();
    std::fs::write(path(tmp.path(), 1), b"not a log").unwrap();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let noise: Vec<u8> = (0..100_000)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    std::fs::write(path(tmp.path(), 2), &noise).unwrap();
    // A valid record of a journal with no spool directory.
    let mut file = Header {
        runs: 1,
        mid: u64::MAX,
    }
    .encode();
    file.resize(DATA_START as usize, 0);
    file.extend_from_slice(&sample_entry_bytes(1));
    std::fs::write(path(tmp.path(), 3), &file).unwrap();
    let report = replay(tmp.path()).unwrap();
    assert_eq!(
        (report.logs, report.records, report.applied, report.skipped),
        (4, 1, 0, 1)
    );
}

/// Several journals of one core committing at once: their commits share batches, batches
/// overlap on the device, and after a power loss that kept only each fragment's first
/// commit, replay restores every acknowledged one. Once with `O_DIRECT`, once buffered.
#[test]
fn concurrent_journals_share_batches_and_all_replay() {
    for buffered in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_owned();
        let journals: Vec<String> = (0..6).map(|i| format!("a/j{i}")).collect();
        let mut synced = Vec::new();
        run(|| async {
            let wal = Wal::new(path(&root, 0), DEFAULT_SIZE / 8, None);
            if buffered {
                wal.buffered_only();
            }
            let batcher = SyncBatcher::with_wal(None, wal.clone());
            let mut tasks = Vec::new();
            for journal in &journals {
                let (mut spool, _) = Spool::open(&root, journal, Raw).await.unwrap();
                spool.set_sync_gate(SyncGate::new(&batcher));
                append(&mut spool, journal.as_bytes()).await;
                synced.push(lens(&spool));
                tasks.push(glommio::spawn_local(async move {
                    for i in 0..40u32 {
                        let content = format!("<{i}>");
                        spool.write(&Bytes::from(content)).await.unwrap();
                        spool.commit(LabelSet::default()).await.unwrap();
                        let ticket = spool.sync_ticket().unwrap();
                        // Wait without holding back the other journals' commits.
                        glommio::executor().yield_now().await;
                        ticket.wait().await.unwrap();
                    }
                }));
            }
            for task in tasks {
                task.await;
            }
            assert_eq!(wal.direct(), !buffered);
            assert!(
                wal.flushes() < 6 * 40,
                "{} flushes for {} commits: no shared batches",
                wal.flushes(),
                6 * 40
            );
        });
        for (journal, to) in journals.iter().zip(&synced) {
            lose_page_cache(&root, journal, 0, *to);
        }
        let report = replay(&root).unwrap();
        assert_eq!((report.applied, report.skipped), (6 * 40, 0), "{report:?}");
        run(|| async {
            for journal in &journals {
                let mut expected = journal.clone().into_bytes();
                for i in 0..40 {
                    expected.extend_from_slice(format!("<{i}>").as_bytes());
                }
                let spool = reopen(&root, journal).await;
                assert_eq!(spool.fragment().sum, Some(sha1(&expected)), "{journal}");
            }
        });
    }
}
