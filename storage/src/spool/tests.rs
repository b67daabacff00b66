//! Unit tests of the spool: appends, commits, rolls, recovery after a crash.

use super::*;
use crate::testing::sum_of_bytes;
use crate::testing::{labels, run};
use protocol::CompressionCodec::{Gzip, None as Raw, Snappy};

const J: &str = "a/journal";

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// Found by the first simulator: a roll forward to an empty fragment left nothing on
/// disk, so after `kill -9` the spool recovered the completed fragment and the write
/// head went back (from 9 to 5 here).
#[test]
fn roll_forward_survives_a_crash() {
    let tmp = tempfile::tempdir().unwrap();
    run(|| async move {
        let regs = labels(&[("w", "1")]);
        let (mut spool, _) = Spool::open(tmp.path(), J, Raw).await.unwrap();
        spool.write(&b("abcde")).await.unwrap();
        spool.commit(LabelSet::default()).await.unwrap();
        let mut proposal = spool.fragment().clone();
        (proposal.begin, proposal.end, proposal.sum) = (9, 9, Some(Default::default()));
        let (ok, completed) = spool.apply_proposal(&proposal, &regs).await.unwrap();
        assert!(ok && completed.is_some());
        drop((spool, completed)); // kill -9
        let (mut spool, completed) = Spool::open(tmp.path(), J, Raw).await.unwrap();
        assert_eq!((spool.fragment().begin, spool.fragment().end), (9, 9));
        assert_eq!(spool.registers(), &regs);
        // It is an empty spool like any other: its own fragment, proposed, is agreed.
        assert_eq!(spool.fragment().sum, Some(zero_sum()));
        let own = spool.fragment().clone();
        let (ok, done) = spool.apply_proposal(&own, &regs).await.unwrap();
        assert!(ok && done.is_none());
        assert_eq!(completed.len(), 1);
        assert_eq!(completed[0].fragment.end, 5);

        // Rolled again (in place, to another codec) and crashed: still at 9; the empty
        // fragment rolled past leaves nothing behind.
        let mut spool = spool;
        spool.roll(9, Snappy).await.unwrap();
        drop(spool);
        let (mut spool, completed) = Spool::open(tmp.path(), J, Raw).await.unwrap();
        assert_eq!(spool.fragment().end, 9);
        assert_eq!(spool.fragment().compression_codec, Snappy as i32);
        assert_eq!(completed.len(), 1);
        spool.roll(12, Raw).await.unwrap();
        drop(spool);
        let (spool, completed) = Spool::open(tmp.path(), J, Raw).await.unwrap();
        assert_eq!(spool.fragment().end, 12);
        assert_eq!(completed.len(), 1, "the empty fragment at 9 is gone");
    });
}

/// A discarded spool stays empty at its begin across a crash, rather than recovering
/// an earlier fragment as the spool.
#[test]
fn discard_survives_a_crash() {
    let tmp = tempfile::tempdir().unwrap();
    run(|| async move {
        let (mut spool, _) = Spool::open(tmp.path(), J, Raw).await.unwrap();
        spool.write(&b("abc")).await.unwrap();
        spool.commit(LabelSet::default()).await.unwrap();
        spool.roll(3, Raw).await.unwrap();
        spool.write(&b("defg")).await.unwrap();
        spool.commit(LabelSet::default()).await.unwrap();
        spool.discard().await.unwrap();
        assert_eq!((spool.fragment().begin, spool.fragment().end), (3, 3));
        drop(spool);
        let (spool, completed) = Spool::open(tmp.path(), J, Raw).await.unwrap();
        assert_eq!((spool.fragment().begin, spool.fragment().end), (3, 3));
        assert_eq!(completed.len(), 1);
    });
}

/// Found by the simulator once its appends used registers: a discarded spool kept the
/// registers of the commits it forgot, and at an end where its peers held others it
/// answered PROPOSAL_MISMATCH to every roll in place (Gazette's rule keeps one's own
/// registers there), so the journal's pipeline never synced. A discarded spool takes the
/// proposal's registers in place; any other spool still follows Gazette's rule.
#[test]
fn a_discarded_spool_takes_a_roll_in_place_with_its_registers() {
    let tmp = tempfile::tempdir().unwrap();
    run(|| async move {
        let forgotten = labels(&[("writer", "forgotten")]);
        let peers = labels(&[("writer", "peers")]);
        let (mut spool, _) = Spool::open(tmp.path(), J, Raw).await.unwrap();
        spool.write(&b("abc")).await.unwrap();
        spool.commit(forgotten.clone()).await.unwrap();
        spool.discard().await.unwrap();
        assert_eq!(spool.registers(), &forgotten);
        let (ok, _) = spool
            .apply_proposal(&frag(0, 0, b"", Raw), &peers)
            .await
            .unwrap();
        assert!(ok, "a discarded spool syncs with its peers' registers");
        assert_eq!(spool.registers(), &peers);
        // Known registers again: Gazette's rule applies (scenario 27).
        let (ok, _) = spool
            .apply_proposal(&frag(0, 0, b"", Raw), &forgotten)
            .await
            .unwrap();
        assert!(!ok);
        assert_eq!(spool.registers(), &peers);
    });
}

async fn read_all(file: &FragmentFile, f: &Fragment) -> Vec<u8> {
    file.read_at(f.begin, (f.end - f.begin) as usize)
        .await
        .unwrap()
        .to_vec()
}

fn frag(begin: i64, end: i64, sum: &[u8], codec: CompressionCodec) -> Fragment {
    Fragment {
        journal: J.into(),
        begin,
        end,
        sum: Some(if end == begin {
            zero_sum()
        } else {
            sum_of_bytes(sum)
        }),
        compression_codec: codec as i32,
        ..Default::default()
    }
}

/// Spec §10 scenarios 26, 28 and 29: proposals commit, roll back, mismatch and roll
/// forward exactly as Gazette's spool does; content deltas must be exact.
#[test]
fn proposals_follow_gazette_rules() {
    let tmp = tempfile::tempdir().unwrap();
    run(|| async move {
        let (mut spool, _) = Spool::open(tmp.path(), J, Raw).await.unwrap();
        let none = LabelSet::default();
        // Sync proposal of the empty fragment: OK.
        let (ok, done) = spool
            .apply_proposal(&frag(0, 0, b"", Raw), &none)
            .await
            .unwrap();
        assert!(ok && done.is_none());
        spool.apply_content(&b("foobar"), 0).await.unwrap();
        let err = spool.apply_content(&b("x"), 2).await.unwrap_err();
        assert_eq!(err.to_string(), "invalid ContentDelta (2; expected 6)");
        spool.apply_content(&b("bazbing"), 6).await.unwrap();
        let regs = labels(&[("reg", "value")]);
        let p = frag(0, 13, b"foobarbazbing", Raw);
        // A wrong sum over the pending content: mismatch, nothing changes.
        let (ok, _) = spool
            .apply_proposal(&frag(0, 13, b"foobarbazbinG", Raw), &regs)
            .await
            .unwrap();
        assert!(!ok);
        assert_eq!(spool.delta(), 13);
        let (ok, _) = spool.apply_proposal(&p, &regs).await.unwrap();
        assert!(ok);
        assert_eq!(spool.fragment(), &p);
        assert_eq!(spool.registers(), &regs);

        // Pending bytes, then a proposal of the committed fragment: rollback.
        spool.apply_content(&b("abcd"), 0).await.unwrap();
        let (ok, _) = spool.apply_proposal(&p, &regs).await.unwrap();
        assert!(ok);
        assert_eq!(spool.delta(), 0);

        // Mismatched begin within bounds: mismatch, spool unchanged.
        spool.apply_content(&b("abcd"), 0).await.unwrap();
        let mut bad = frag(1, 17, b"x", Raw);
        let (ok, done) = spool.apply_proposal(&bad, &none).await.unwrap();
        assert!(!ok && done.is_none());
        assert_eq!(spool.delta(), 4);
        assert_eq!(spool.fragment(), &p);
        // The same beyond our end: roll forward to [20,20), adopting its registers,
        // completing [0,13) for persistence; still a mismatch.
        bad.end = 20;
        let other = labels(&[("peer", "regs")]);
        let (ok, done) = spool.apply_proposal(&bad, &other).await.unwrap();
        assert!(!ok);
        assert_eq!(done.unwrap().fragment, p);
        assert_eq!(spool.fragment(), &frag(20, 20, b"", Raw));
        assert_eq!(spool.registers(), &other);
        assert_eq!(spool.delta(), 0);

        // A zero-length proposal at our end with another codec rolls to it.
        let (ok, done) = spool
            .apply_proposal(&frag(20, 20, b"", Gzip), &other)
            .await
            .unwrap();
        assert!(ok && done.is_none());
        assert_eq!(spool.fragment().compression_codec, Gzip as i32);

        // A roll proposal at a greater offset: OK, registers adopted.
        let (ok, _) = spool
            .apply_proposal(&frag(30, 30, b"", Raw), &regs)
            .await
            .unwrap();
        assert!(ok);
        assert_eq!(spool.registers(), &regs);
        assert_eq!(spool.fragment().begin, 30);

        // Scenario 27: a proposal [1234,5678) on a fresh spool rolls to [5678,5678)
        // and mismatches; then that empty fragment with other registers mismatches.
        let (mut fresh, _) = Spool::open(&tmp.path().join("b"), J, Raw).await.unwrap();
        let (ok, _) = fresh
            .apply_proposal(&frag(1234, 5678, b"x", Raw), &none)
            .await
            .unwrap();
        assert!(!ok);
        assert_eq!(fresh.fragment(), &frag(5678, 5678, b"", Raw));
        let wrong = labels(&[("wrong", "register")]);
        let (ok, _) = fresh
            .apply_proposal(&frag(5678, 5678, b"", Raw), &wrong)
            .await
            .unwrap();
        assert!(!ok);
        assert_eq!(fresh.registers(), &none);
    });
}

#[test]
fn write_commit_rollback() {
    let tmp = tempfile::tempdir().unwrap();
    run(|| async move {
        let (mut spool, completed) = Spool::open(tmp.path(), J, Snappy).await.unwrap();
        assert!(completed.is_empty());
        let empty = spool.fragment().clone();
        assert_eq!((empty.begin, empty.end), (0, 0));
        assert_eq!(empty.journal, J);
        assert_eq!(empty.sum, Some(zero_sum()));
        assert_eq!(empty.compression_codec, Snappy as i32);
        assert_eq!(spool.next(), empty);
        assert!(spool.first_append_time().is_none());

        spool.write(&b("foo")).await.unwrap();
        spool.write(&b("bar")).await.unwrap();
        assert_eq!(spool.delta(), 6);
        // Pending content is invisible.
        assert_eq!(spool.fragment(), &empty);
        let next = spool.next();
        assert_eq!((next.begin, next.end), (0, 6));
        assert_eq!(next.sum, Some(sum_of_bytes(b"foobar")));

        let regs = labels(&[("AA", "11")]);
        let committed = spool.commit(regs.clone()).await.unwrap();
        assert_eq!(committed, next);
        assert_eq!(spool.fragment(), &next);
        assert_eq!(spool.registers(), &regs);
        assert_eq!(spool.delta(), 0);
        assert!(spool.first_append_time().is_some());
        assert_eq!(committed.backing_store, "");
        assert_eq!(committed.mod_time, 0);
        assert_eq!(committed.path_postfix, "");

        // A rolled-back write is overwritten by the next one.
        spool.write(&b("XXXXXXXX")).await.unwrap();
        spool.rollback();
        assert_eq!(spool.delta(), 0);
        assert_eq!(spool.next(), committed);
        spool.write(&b("baz")).await.unwrap();
        let committed = spool.commit(regs.clone()).await.unwrap();
        assert_eq!((committed.begin, committed.end), (0, 9));
        assert_eq!(committed.sum, Some(sum_of_bytes(b"foobarbaz")));

        let file = spool.file();
        assert_eq!(read_all(&file, &committed).await, b"foobarbaz");
        // Reads within the fragment, and reads past its end (which readers bound by the
        // committed end): the rolled-back bytes, then the zeros of the blocks reserved ahead
        // of a mapped spool's writes, or the end of the file.
        assert_eq!(&file.read_at(3, 3).await.unwrap()[..], b"bar");
        let past = file.read_at(6, 100).await.unwrap();
        assert_eq!(&past[..8], b"bazXXXXX");
        assert!(past[8..].iter().all(|&b| b == 0));
        assert_eq!(past.len(), if spool.maps_content() { 100 } else { 8 });
        assert!(matches!(
            file.read_at(-1, 1).await,
            Err(StorageError::InvalidOffset { .. })
        ));

        // A commit of nothing with the same registers is a no-op.
        assert_eq!(spool.commit(regs).await.unwrap(), committed);
    });
}

#[test]
fn roll_completes_and_deletes_empty() {
    let tmp = tempfile::tempdir().unwrap();
    run(|| async move {
        let (mut spool, _) = Spool::open(tmp.path(), J, Raw).await.unwrap();
        let dir = spool.dir().to_owned();
        let regs = labels(&[("reg", "value")]);

        // Rolling an empty spool leaves no files.
        spool.write(&b("uncommitted")).await.unwrap();
        assert!(spool.roll(100, Gzip).await.unwrap().is_none());
        assert!(!dir.join(format!("{:016x}.spool", 0)).exists());
        assert_eq!(spool.fragment().begin, 100);
        assert_eq!(spool.fragment().compression_codec, Gzip as i32);

        spool.write(&b("abcd")).await.unwrap();
        spool.commit(regs.clone()).await.unwrap();
        spool.write(&b("pending")).await.unwrap();
        assert!(matches!(
            spool.roll(103, Raw).await,
            Err(StorageError::InvalidRoll {
                at: 103,
                end: 104,
                ..
            })
        ));
        let done = spool.roll(104, Raw).await.unwrap().expect("has content");
        assert_eq!((done.fragment.begin, done.fragment.end), (100, 104));
        assert_eq!(done.fragment.sum, Some(sum_of_bytes(b"abcd")));
        assert_eq!(done.fragment.compression_codec, Gzip as i32);
        assert_eq!(read_all(&done.file, &done.fragment).await, b"abcd");
        // Rolled-back bytes were cut from the completed file.
        assert_eq!(std::fs::metadata(done.file.path()).unwrap().len(), 4);

        let f = spool.fragment().clone();
        assert_eq!((f.begin, f.end, f.sum), (104, 104, Some(zero_sum())));
        assert_eq!(spool.registers(), &regs);
        assert_eq!(spool.delta(), 0);
        assert!(spool.first_append_time().is_none());

        // The completed fragment's files go away on remove, while its open
        // file stays readable.
        done.file.remove().await.unwrap();
        assert!(!done.file.path().exists());
        assert!(!done.file.commits_path().exists());
        assert_eq!(read_all(&done.file, &done.fragment).await, b"abcd");
    });
}

/// The spool half of spec §10 scenario 29 (the proposal comparison itself belongs to a
/// Replicate handler): committed [0,4) GZIP with 4 bytes pending; a roll within bounds
/// is refused and leaves the spool as it was; a roll to 9 completes [0,4) "abcd" for
/// persistence, discards the pending bytes, starts [9,9) and takes the proposal's
/// registers.
#[test]
fn scenario_29_roll_forward_beyond_the_end() {
    let tmp = tempfile::tempdir().unwrap();
    run(|| async move {
        let (mut spool, _) = Spool::open(tmp.path(), J, Gzip).await.unwrap();
        spool.write(&b("abcd")).await.unwrap();
        spool.commit(labels(&[("reg", "one")])).await.unwrap();
        spool.write(&b("efgh")).await.unwrap();
        let before = (spool.fragment().clone(), spool.next(), spool.delta());

        assert!(matches!(
            spool.roll(1, Gzip).await,
            Err(StorageError::InvalidRoll { at: 1, end: 4, .. })
        ));
        assert_eq!(
            (spool.fragment().clone(), spool.next(), spool.delta()),
            before
        );
        assert_eq!(spool.registers(), &labels(&[("reg", "one")]));

        let done = spool.roll(9, Gzip).await.unwrap().expect("[0,4) completes");
        spool.set_registers(labels(&[("reg", "proposal")]));
        assert_eq!((done.fragment.begin, done.fragment.end), (0, 4));
        assert_eq!(done.fragment.compression_codec, Gzip as i32);
        assert_eq!(done.fragment.sum, Some(sum_of_bytes(b"abcd")));
        assert_eq!(read_all(&done.file, &done.fragment).await, b"abcd");
        let f = spool.fragment().clone();
        assert_eq!((f.begin, f.end, f.sum), (9, 9, Some(zero_sum())));
        assert_eq!(spool.delta(), 0);
        assert_eq!(spool.registers(), &labels(&[("reg", "proposal")]));
        // The spool goes on at 9.
        spool.write(&b("ij")).await.unwrap();
        let c = spool.commit(spool.registers().clone()).await.unwrap();
        assert_eq!((c.begin, c.end), (9, 11));
    });
}

#[test]
fn recovery_cuts_uncommitted_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_owned();
    run(|| async move {
        let regs = labels(&[("AA", "11"), ("BB", "22")]);
        let (committed, first_append) = {
            let (mut spool, _) = Spool::open(&root, J, Snappy).await.unwrap();
            spool.roll(1000, Gzip).await.unwrap();
            spool.write(&b("hello ")).await.unwrap();
            spool.commit(labels(&[("AA", "11")])).await.unwrap();
            spool.write(&b("world")).await.unwrap();
            let committed = spool.commit(regs.clone()).await.unwrap();
            spool.write(&b(" never acknowledged")).await.unwrap();
            (committed, spool.first_append_time().unwrap())
            // Dropped without committing the pending bytes.
        };

        let (mut spool, completed) = Spool::open(&root, J, Raw).await.unwrap();
        assert!(completed.is_empty());
        assert_eq!(spool.fragment(), &committed);
        assert_eq!(committed.sum, Some(sum_of_bytes(b"hello world")));
        assert_eq!(committed.compression_codec, Gzip as i32);
        assert_eq!(spool.registers(), &regs);
        let recovered = spool.first_append_time().unwrap();
        let drift = recovered
            .duration_since(first_append)
            .or_else(|e| Ok::<_, ()>(e.duration()))
            .unwrap();
        assert!(drift < Duration::from_millis(1));
        let file = spool.file();
        assert_eq!(std::fs::metadata(file.path()).unwrap().len(), 11);
        assert_eq!(&file.read_at(1000, 100).await.unwrap()[..], b"hello world");

        // Appending continues where the commits left off.
        spool.write(&b("!")).await.unwrap();
        let f = spool.commit(regs.clone()).await.unwrap();
        assert_eq!((f.begin, f.end), (1000, 1012));
        assert_eq!(f.sum, Some(sum_of_bytes(b"hello world!")));
        drop(spool);

        let (spool, _) = Spool::open(&root, J, Raw).await.unwrap();
        assert_eq!(spool.fragment(), &f);
        assert_eq!(spool.registers(), &regs);
    });
}

#[test]
fn recovery_ignores_torn_commit_record() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_owned();
    run(|| async move {
        let (first, log_path) = {
            let (mut spool, _) = Spool::open(&root, J, Raw).await.unwrap();
            spool.write(&b("first")).await.unwrap();
            let first = spool.commit(labels(&[("k", "1")])).await.unwrap();
            spool.write(&b("second")).await.unwrap();
            spool.commit(labels(&[("k", "2")])).await.unwrap();
            (first, spool.file().commits_path().to_owned())
        };
        // Tear the last record: cut the log mid-record. (A running spool keeps zeros
        // ahead of its records, so the records end before the file does.)
        let buf = std::fs::read(&log_path).unwrap();
        let len = crate::record::scan(&buf, first.begin, 11)
            .unwrap()
            .valid_len as u64;
        assert!(buf[len as usize..].iter().all(|&b| b == 0));
        let log = std::fs::OpenOptions::new()
            .write(true)
            .open(&log_path)
            .unwrap();
        log.set_len(len - 5).unwrap();
        drop(log);

        let (mut spool, _) = Spool::open(&root, J, Raw).await.unwrap();
        assert_eq!(spool.fragment(), &first);
        assert_eq!(spool.registers(), &labels(&[("k", "1")]));
        let file = spool.file();
        assert_eq!(std::fs::metadata(file.path()).unwrap().len(), 5);
        // The torn tail was cut, so new records follow the intact ones.
        spool.write(&b("third")).await.unwrap();
        let third = spool.commit(labels(&[("k", "3")])).await.unwrap();
        drop(spool);
        let (spool, _) = Spool::open(&root, J, Raw).await.unwrap();
        assert_eq!(spool.fragment(), &third);
        assert_eq!(third.sum, Some(sum_of_bytes(b"firstthird")));
        assert_eq!(spool.registers(), &labels(&[("k", "3")]));
    });
}

#[test]
fn recovery_of_several_fragments() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_owned();
    run(|| async move {
        let (a, b_) = {
            let (mut spool, _) = Spool::open(&root, J, Raw).await.unwrap();
            spool.write(&b("aaaa")).await.unwrap();
            spool.commit(LabelSet::default()).await.unwrap();
            let a = spool.roll(4, Snappy).await.unwrap().unwrap();
            spool.write(&b("bb")).await.unwrap();
            spool.commit(labels(&[("x", "y")])).await.unwrap();
            let b_ = spool.roll(10, Raw).await.unwrap().unwrap();
            // A spool written but never committed: discarded on recovery.
            spool.write(&b("cc")).await.unwrap();
            (a.fragment, b_.fragment)
        };
        let dir = journal_dir(&root, J);
        assert!(dir.join(format!("{:016x}.spool", 10)).exists());

        let (spool, completed) = Spool::open(&root, J, Raw).await.unwrap();
        // The roll to 10 was durable: the spool is empty there, its uncommitted
        // content cut, and both earlier fragments are completed.
        assert_eq!(
            std::fs::metadata(dir.join(format!("{:016x}.spool", 10)))
                .unwrap()
                .len(),
            0
        );
        assert_eq!((spool.fragment().begin, spool.fragment().end), (10, 10));
        assert_eq!(spool.registers(), &labels(&[("x", "y")]));
        assert_eq!(completed.len(), 2);
        assert_eq!(completed[0].fragment, a);
        assert_eq!(completed[1].fragment, b_);
        assert_eq!(read_all(&completed[0].file, &a).await, b"aaaa");
        assert_eq!(std::fs::read_to_string(dir.join("JOURNAL")).unwrap(), J);
    });
}

#[test]
fn journal_mismatch_and_poison() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_owned();
    run(|| async move {
        let dir = journal_dir(&root, J);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("JOURNAL"), "another/journal").unwrap();
        assert!(matches!(
            Spool::open(&root, J, Raw).await,
            Err(StorageError::JournalMismatch { .. })
        ));
        std::fs::remove_file(dir.join("JOURNAL")).unwrap();

        let (mut spool, _) = Spool::open(&root, J, Raw).await.unwrap();
        spool.write(&b("ok")).await.unwrap();
        spool.sync().await.unwrap();
        spool.poison_for_test();
        for result in [
            spool.write(&b("x")).await.err(),
            spool.commit(LabelSet::default()).await.err(),
            spool.sync().await.err(),
            spool.roll(10, Raw).await.err(),
        ] {
            assert!(
                matches!(result, Some(StorageError::Poisoned { .. })),
                "{result:?}"
            );
        }
    });
}

/// A full disk: a content write and a commit that fail halfway refuse that append only;
/// the committed fragment is untouched, nothing half-written is ever read or
/// recovered, and the spool takes the next append without being reopened.
#[test]
fn failed_writes_and_commits_leave_the_spool_usable() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_owned();
    run(|| async move {
        let (mut spool, _) = Spool::open(&root, J, Raw).await.unwrap();
        // The very first commit fails after creating the log.
        spool.write(&b("hello")).await.unwrap();
        spool.fail_next(FailNext::Commit);
        assert!(spool.commit(LabelSet::default()).await.is_err());
        spool.rollback();
        assert_eq!(spool.fragment().end, 0);
        spool.write(&b("hello")).await.unwrap();
        let first = spool.commit(LabelSet::default()).await.unwrap();
        assert_eq!(first.end, 5);

        // A content write fails halfway: nothing changes.
        spool.fail_next(FailNext::Write);
        let err = spool.write(&b("garbage!")).await.unwrap_err();
        assert!(err.to_string().contains("writing"), "{err}");
        assert_eq!(spool.fragment(), &first);
        assert_eq!(spool.delta(), 0);
        spool.rollback();
        spool.write(&b(" world")).await.unwrap();
        let second = spool.commit(LabelSet::default()).await.unwrap();
        assert_eq!(second.sum, Some(sum_of_bytes(b"hello world")));

        // A commit fails halfway through its record: the append is rolled back.
        spool.write(&b(" lost")).await.unwrap();
        spool.fail_next(FailNext::Commit);
        assert!(spool.commit(labels(&[("a", "b")])).await.is_err());
        assert_eq!(spool.fragment(), &second);
        spool.rollback();
        assert_eq!(
            read_all(&spool.file(), spool.fragment()).await,
            b"hello world"
        );
        spool.write(&b("!")).await.unwrap();
        let third = spool.commit(labels(&[("c", "d")])).await.unwrap();
        assert_eq!(third.sum, Some(sum_of_bytes(b"hello world!")));
        assert_eq!(read_all(&spool.file(), &third).await, b"hello world!");
        drop(spool);

        // Recovery finds exactly the committed appends and registers.
        let (spool, completed) = Spool::open(&root, J, Raw).await.unwrap();
        assert!(completed.is_empty());
        assert_eq!(spool.fragment(), &third);
        assert_eq!(spool.registers(), &labels(&[("c", "d")]));
        assert_eq!(read_all(&spool.file(), &third).await, b"hello world!");
    });
}

#[test]
fn large_content_rehash() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_owned();
    run(|| async move {
        // Spans several recovery read chunks.
        let content: Vec<u8> = (0..(2 * RECOVERY_READ_LEN + 12345))
            .map(|i| (i % 251) as u8)
            .collect();
        let committed = {
            let (mut spool, _) = Spool::open(&root, J, Raw).await.unwrap();
            for chunk in content.chunks(32 * 1024) {
                spool.write(&Bytes::copy_from_slice(chunk)).await.unwrap();
            }
            spool.commit(LabelSet::default()).await.unwrap()
        };
        assert_eq!(committed.sum, Some(sum_of_bytes(&content)));
        let (spool, _) = Spool::open(&root, J, Raw).await.unwrap();
        assert_eq!(spool.fragment(), &committed);
    });
}

/// Writes reserve the content file's blocks ahead of them (changing its length only where
/// the spool writes through a mapping), and
/// the completed fragment frees what lies past its end.
#[test]
fn reserved_blocks_are_freed_at_completion() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_owned();
    run(|| async move {
        let (spool, content) = spool_with_100_kb_committed(&root).await;
        let path = spool.file().path().to_owned();
        let meta = std::fs::metadata(&path).unwrap();
        // A spool writing through a mapping extends the file with its reservation.
        let expected = match spool.reserved {
            Some(reserved) if spool.maps_content() => reserved,
            _ => content.len() as u64,
        };
        assert_eq!(meta.len(), expected, "a reservation keeps the length");
        if spool.reserved.is_none() {
            eprintln!("this file system refuses reservations: nothing more to check");
            return;
        }
        // 512-byte blocks: the reservation reaches at least 256 KiB past the write.
        assert!(
            meta.blocks() * 512 >= content.len() as u64 + (256 << 10),
            "{meta:?}"
        );
        roll_and_check_blocks_freed(spool, &content, &path).await;
    });
}

/// A new spool under `root` with 100,000 patterned bytes written and committed.
async fn spool_with_100_kb_committed(root: &Path) -> (Spool, Vec<u8>) {
    let content: Vec<u8> = (0..100_000).map(|i| (i % 251) as u8).collect();
    let (mut spool, _) = Spool::open(root, J, Raw).await.unwrap();
    spool
        .write(&Bytes::copy_from_slice(&content))
        .await
        .unwrap();
    spool.commit(LabelSet::default()).await.unwrap();
    (spool, content)
}

/// Rolls `spool`, whose committed content is `content` in the file at `path`, and checks
/// that the completed file holds exactly that content and no blocks reserved past it.
async fn roll_and_check_blocks_freed(mut spool: Spool, content: &[u8], path: &Path) {
    use std::os::unix::fs::MetadataExt;
    let done = spool
        .roll(content.len() as i64, Raw)
        .await
        .unwrap()
        .unwrap();
    let meta = std::fs::metadata(path).unwrap();
    assert_eq!(meta.len(), content.len() as u64);
    assert!(
        meta.blocks() * 512 < content.len() as u64 + 8192,
        "{meta:?}"
    );
    assert_eq!(read_all(&done.file, &done.fragment).await, content);
}

/// A write dropped while its reservation runs (on the core's blocking-pool thread) leaves
/// the spool usable and its content unchanged, and the completed fragment is still cut to
/// its end, freeing what that reservation took although the spool never learned its
/// outcome.
#[test]
fn a_write_dropped_during_its_reservation_still_frees_the_blocks() {
    use futures_util::FutureExt;
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_owned();
    run(|| async move {
        let content = {
            let (spool, content) = spool_with_100_kb_committed(&root).await;
            // Left as a crash leaves it, but without the blocks reserved past its end.
            std::fs::OpenOptions::new()
                .write(true)
                .open(spool.file().path())
                .unwrap()
                .set_len(content.len() as u64)
                .unwrap();
            content
        };
        // Reopened, the spool holds its file's blocks exactly: a write past them reserves.
        let (mut spool, _) = Spool::open(&root, J, Raw).await.unwrap();
        let path = spool.file().path().to_owned();
        let before = std::fs::metadata(&path).unwrap().blocks();
        let more = Bytes::from_static(b"never adopted");
        assert!(
            spool.write(&more).now_or_never().is_none(),
            "the write waits for its reservation"
        );
        // The pool has one thread and runs its work in order: once this returns, the
        // dropped write's fallocate has run.
        glommio::executor().spawn_blocking(|| ()).await;
        let reserved = std::fs::metadata(&path).unwrap().blocks();
        assert_eq!(spool.fragment().end, content.len() as i64);
        if reserved == before {
            eprintln!("this file system refuses reservations: nothing more to check");
            return;
        }
        roll_and_check_blocks_freed(spool, &content, &path).await;
    });
}

/// The records of `log_path` (a fragment beginning at `begin` with `content_len` bytes):
/// their length, and whether everything after them is zeros.
fn log_records(log_path: &Path, begin: i64, content_len: u64) -> (u64, u64, bool) {
    let buf = std::fs::read(log_path).unwrap();
    let scanned = crate::record::scan(&buf, begin, content_len).unwrap();
    let zeros = buf[scanned.valid_len..].iter().all(|&b| b == 0);
    (scanned.valid_len as u64, buf.len() as u64, zeros)
}

#[test]
fn mapped_commit_records_survive_a_crash_and_completed_logs_are_cut_to_them() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_owned();
    run(|| async move {
        let (mut spool, _) = Spool::open(&root, J, Raw).await.unwrap();
        let mut last = None;
        // Enough records to outgrow the first mapping (64 KiB ahead of the first record).
        for i in 0..3000 {
            spool.write(&b("x")).await.unwrap();
            last = Some(
                spool
                    .commit(labels(&[("k", &i.to_string())]))
                    .await
                    .unwrap(),
            );
        }
        let last = last.unwrap();
        assert!(spool.log_map.len() > 64 << 10);
        let log_path = spool.file().commits_path().to_owned();
        let (records, file_len, zeros) = log_records(&log_path, 0, 3000);
        assert_eq!(records, spool.commits_len);
        assert!(
            file_len > records && zeros,
            "the log keeps zeroed room ahead"
        );
        // kill -9: nothing is closed or cut.
        drop(spool);

        let (mut spool, completed) = Spool::open(&root, J, Raw).await.unwrap();
        assert!(completed.is_empty());
        assert_eq!(spool.fragment(), &last);
        assert_eq!(spool.registers(), &labels(&[("k", "2999")]));
        let (records, file_len, _) = log_records(&log_path, 0, 3000);
        assert_eq!(file_len, records, "recovery cut the zeros");

        // Appends go on (mapping again), and a roll cuts the completed log to its records.
        spool.write(&b("yz")).await.unwrap();
        let f = spool.commit(labels(&[("k", "last")])).await.unwrap();
        assert_eq!(f.end, 3002);
        let done = spool.roll(3002, Raw).await.unwrap().unwrap();
        assert_eq!(done.fragment, f);
        let (records, file_len, _) = log_records(&log_path, 0, 3002);
        assert_eq!(file_len, records);
        assert_eq!(std::fs::metadata(done.file.path()).unwrap().len(), 3002);
        drop(spool);
        let (spool, completed) = Spool::open(&root, J, Raw).await.unwrap();
        assert_eq!(completed.len(), 1);
        assert_eq!(completed[0].fragment, f);
        assert_eq!((spool.fragment().begin, spool.fragment().end), (3002, 3002));
    });
}

#[test]
fn commit_records_go_through_pwrite_where_the_log_cannot_be_mapped() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_owned();
    run(|| async move {
        let (mut spool, _) = Spool::open(&root, J, Raw).await.unwrap();
        // As after a failed `fallocate` or `mmap` (a file system without them).
        spool.log_map.turn_off();
        spool.write(&b("hello")).await.unwrap();
        let f = spool.commit(labels(&[("k", "v")])).await.unwrap();
        assert_eq!(spool.log_map.len(), 0);
        let log_path = spool.file().commits_path().to_owned();
        let (records, file_len, _) = log_records(&log_path, 0, 5);
        assert_eq!((records, file_len), (spool.commits_len, spool.commits_len));
        drop(spool);
        let (spool, _) = Spool::open(&root, J, Raw).await.unwrap();
        assert_eq!(spool.fragment(), &f);
        assert_eq!(spool.registers(), &labels(&[("k", "v")]));
    });
}

#[test]
fn mapped_content_survives_a_crash_and_is_cut_to_its_commits() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_owned();
    run(|| async move {
        let (mut spool, _) = Spool::open(&root, J, Raw).await.unwrap();
        assert!(spool.maps_content());
        let mut last = None;
        for part in ["one", "two", "three"] {
            spool.write(&b(part)).await.unwrap();
            last = Some(spool.commit(labels(&[("k", part)])).await.unwrap());
        }
        spool.write(&b("pending")).await.unwrap();
        assert!(spool.content_map.len() > 0);
        let path = spool.file().path().to_owned();
        assert!(
            std::fs::metadata(&path).unwrap().len() > 11,
            "reserved ahead"
        );
        assert_eq!(
            read_all(&spool.file(), spool.fragment()).await,
            b"onetwothree"
        );
        // kill -9: the pending write and the reserved zeros are cut at recovery.
        drop(spool);
        let (spool, _) = Spool::open(&root, J, Raw).await.unwrap();
        assert_eq!(spool.fragment(), &last.unwrap());
        assert_eq!(spool.fragment().sum, Some(sum_of_bytes(b"onetwothree")));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 11);
    });
}

/// A power loss can keep commit records whose content never reached the disk (blocks
/// reserved ahead read as zeros): recovery keeps the records whose sums the content matches.
#[test]
fn content_that_does_not_match_its_records_sums_is_cut_back() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_owned();
    run(|| async move {
        let first = {
            let (mut spool, _) = Spool::open(&root, J, Raw).await.unwrap();
            spool.write(&b("aaaa")).await.unwrap();
            let first = spool.commit(labels(&[("k", "1")])).await.unwrap();
            for part in ["bbbb", "cccc"] {
                spool.write(&b(part)).await.unwrap();
                spool.commit(labels(&[("k", part)])).await.unwrap();
            }
            first
        };
        // The last two commits' content lost: zeros where it was.
        let dir = journal_dir(&root, J);
        let content = FragmentFile::new(&dir, 0);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(content.path())
            .unwrap();
        std::os::unix::fs::FileExt::write_all_at(&file, &[0u8; 8], 4).unwrap();
        drop(file);

        let (mut spool, _) = Spool::open(&root, J, Raw).await.unwrap();
        assert_eq!(spool.fragment(), &first);
        assert_eq!(spool.registers(), &labels(&[("k", "1")]));
        assert_eq!(std::fs::metadata(content.path()).unwrap().len(), 4);
        // The cut log takes new records after the intact one.
        spool.write(&b("dd")).await.unwrap();
        let f = spool.commit(labels(&[("k", "2")])).await.unwrap();
        drop(spool);
        let (spool, _) = Spool::open(&root, J, Raw).await.unwrap();
        assert_eq!(spool.fragment(), &f);
        assert_eq!(f.sum, Some(sum_of_bytes(b"aaaadd")));

        // Content matching no record at all: the fragment is dropped.
        drop(spool);
        std::fs::write(content.path(), b"XXXXXX").unwrap();
        let (spool, completed) = Spool::open(&root, J, Raw).await.unwrap();
        assert!(completed.is_empty());
        assert_eq!((spool.fragment().begin, spool.fragment().end), (0, 0));
    });
}

/// A spool recovered from a log written before records had sums goes on with records
/// without sums, through `pwrite`.
#[test]
fn logs_without_sums_are_recovered_and_continued() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_owned();
    run(|| async move {
        drop(Spool::open(&root, J, Raw).await.unwrap());
        let dir = journal_dir(&root, J);
        let names = FragmentFile::new(&dir, 0);
        let mut log = Vec::new();
        log.extend_from_slice(b"CRNTCMT1");
        log.extend_from_slice(&(Raw as i32).to_le_bytes());
        let crc = crc32c::crc32c(&log);
        log.extend_from_slice(&crc.to_le_bytes());
        record::encode_record(
            &CommitRecord {
                end: 5,
                time_unix_ms: 1,
                sum: None,
                registers: Some(labels(&[("k", "old")])),
            },
            &mut log,
        );
        std::fs::write(names.commits_path(), &log).unwrap();
        std::fs::write(names.path(), b"hello").unwrap();

        let (mut spool, _) = Spool::open(&root, J, Raw).await.unwrap();
        assert_eq!(spool.fragment().end, 5);
        assert_eq!(spool.registers(), &labels(&[("k", "old")]));
        assert!(!spool.maps_content());
        spool.write(&b(" world")).await.unwrap();
        let f = spool.commit(labels(&[("k", "new")])).await.unwrap();
        assert_eq!(std::fs::metadata(names.path()).unwrap().len(), 11);
        drop(spool);
        let bytes = std::fs::read(names.commits_path()).unwrap();
        assert_eq!(&bytes[..8], b"CRNTCMT1");
        let (spool, _) = Spool::open(&root, J, Raw).await.unwrap();
        assert_eq!(spool.fragment(), &f);
        assert_eq!(f.sum, Some(sum_of_bytes(b"hello world")));
        assert_eq!(spool.registers(), &labels(&[("k", "new")]));
    });
}
