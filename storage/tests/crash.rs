//! Crash test: a child process appends and commits in a loop, reporting each
//! acknowledged end on stdout; the parent kills it with SIGKILL mid-stream,
//! then recovers the spool and checks that no acknowledged byte was lost and
//! that the recovered fragment is exactly a prefix of what was written.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use bytes::Bytes;
use protocol::{CompressionCodec, LabelSet};
use sha1::{Digest, Sha1};
use storage::Spool;

const JOURNAL: &str = "crash/journal";
const DIR_ENV: &str = "COURANT_STORAGE_CRASH_DIR";

/// The deterministic content of chunk `i`.
fn chunk(i: usize) -> Vec<u8> {
    (0..(1000 + i * 37 % 4000))
        .map(|j| ((i * 131 + j) % 251) as u8)
        .collect()
}

fn executor() -> glommio::LocalExecutor {
    glommio::LocalExecutorBuilder::default()
        .io_memory(512 << 10)
        .make()
        .expect("glommio executor")
}

/// The child: runs only when the parent sets `DIR_ENV`.
#[test]
#[ignore = "run by kill9_loses_no_committed_byte in a child process"]
fn crash_child() {
    let Ok(dir) = std::env::var(DIR_ENV) else {
        return;
    };
    executor().run(async move {
        let (mut spool, _) = Spool::open(dir.as_ref(), JOURNAL, CompressionCodec::None)
            .await
            .unwrap();
        for i in 0.. {
            // Bytes left pending by the previous round are rolled back, and
            // overwritten by this round's content.
            spool.rollback();
            spool.write(&Bytes::from(chunk(i))).await.unwrap();
            spool
                .write(&Bytes::from(chunk(i + 1_000_000)))
                .await
                .unwrap();
            let f = spool.commit(LabelSet::default()).await.unwrap();
            println!("ACK {}", f.end);
            // Pending, never committed: must not survive the kill.
            spool
                .write(&Bytes::from_static(b"pending at kill"))
                .await
                .unwrap();
        }
    });
}

#[test]
fn kill9_loses_no_committed_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "crash_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DIR_ENV, tmp.path())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();

    let mut acked = 0i64;
    let mut acks = 0;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some(end) = line.strip_prefix("ACK ") {
            acked = end.parse().unwrap();
            acks += 1;
            if acks == 300 {
                child.kill().unwrap(); // SIGKILL
                break;
            }
        }
    }
    child.wait().unwrap();
    assert_eq!(acks, 300, "child stopped early");

    executor().run(async move {
        let (spool, completed) = Spool::open(tmp.path(), JOURNAL, CompressionCodec::None)
            .await
            .unwrap();
        assert!(completed.is_empty());
        let f = spool.fragment().clone();
        // The child may have committed more after its last line was read.
        assert!(
            f.end >= acked,
            "recovered end {} < acknowledged {acked}",
            f.end
        );

        let mut expect = Vec::new();
        let mut i = 0;
        while (expect.len() as i64) < f.end {
            expect.extend_from_slice(&chunk(i));
            expect.extend_from_slice(&chunk(i + 1_000_000));
            i += 1;
        }
        assert_eq!(
            expect.len() as i64,
            f.end,
            "recovered end is not a commit boundary"
        );
        let got = spool.file().read_at(0, expect.len() + 100).await.unwrap();
        assert_eq!(&got[..], &expect[..]);

        let digest: [u8; 20] = Sha1::digest(&expect).into();
        let sum = f.sum.unwrap();
        assert_eq!(sum.part1.to_be_bytes(), digest[0..8]);
        assert_eq!(sum.part2.to_be_bytes(), digest[8..16]);
        assert_eq!(sum.part3.to_be_bytes(), digest[16..20]);
    });
}
