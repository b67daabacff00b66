//! Leftovers of a broker killed during fragment uploads: the `file://` store's temporary
//! `.partial-*` files of a dead broker are removed on the next listing after a restart, and
//! never listed (no "failed to parse fragment" warning for them). A deleted journal's
//! spool files are closed, not held until the journal is re-created.

use courant_tests::protocol::{FragmentsRequest, FragmentsResponse, Status};
use courant_tests::*;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            files_under(&p, out)
        } else {
            out.push(p)
        }
    }
}

fn partials(root: &Path) -> Vec<PathBuf> {
    let mut all = Vec::new();
    files_under(root, &mut all);
    all.retain(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(".partial-"))
    });
    all
}

/// The hostname as the broker writes it into temporary file names.
fn host_tag() -> String {
    let raw = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    raw.trim()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

async fn list_fragments(ch: &courant_tests::protocol::grpc::Channel, journal: &str) -> usize {
    let resp: FragmentsResponse = ch
        .unary(
            LIST_FRAGMENTS,
            &FragmentsRequest {
                journal: journal.into(),
                ..Default::default()
            },
        )
        .await
        .expect("ListFragments");
    assert_status(resp.status, Status::Ok, "ListFragments");
    resp.fragments.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_uploads_of_a_killed_broker_are_removed_quietly() {
    within(90, async {
        let mut broker = Broker::start(&["--tpc.cores", "1"]).await;
        let ch = broker.connect().await;
        let journal = "leftover/j";
        let mut s = spec(journal, &[]);
        s.fragment.as_mut().unwrap().length = 1024;
        apply_specs(&ch, &[s]).await;
        let mut expect = Vec::new();
        for i in 0..4u8 {
            let data = vec![b'a' + i; 1500];
            append_ok(&ch, journal, &data).await;
            expect.extend_from_slice(&data);
        }
        // Wait for uploaded fragments in the default store.
        let root = broker.data_dir().join("fragments");
        let deadline = Instant::now() + Duration::from_secs(30);
        let uploaded = loop {
            let mut files = Vec::new();
            files_under(&root, &mut files);
            files.retain(|p| p.extension().is_some_and(|e| e == "raw" || e == "gz"));
            if let Some(f) = files.first() {
                break f.clone();
            }
            assert!(Instant::now() < deadline, "no fragment was uploaded");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };

        // kill -9 mid-upload leaves `.partial-<name>.<host>-<pid>.<random>` files beside the
        // fragments: plant what the killed broker's uploads would have left.
        let pid: u32 = std::fs::read_to_string(broker.data_dir().join("courant.lock"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        drop(ch);
        broker.kill9();
        let dir = uploaded.parent().unwrap();
        let name = uploaded.file_name().unwrap().to_str().unwrap();
        for i in 0..3u64 {
            let p = dir.join(format!(
                ".partial-{name}.{}-{pid}.{:016x}",
                host_tag(),
                0xdead_0000 + i
            ));
            std::fs::write(&p, vec![0x55; 100_000]).unwrap();
        }
        // (The kill may also have cut a real upload short: its leftover counts too.)
        let left = partials(&root).len();
        assert!(left >= 3, "{left}");
        eprintln!("{left} partial uploads after kill -9 (3 planted)");

        broker.restart().await;
        let ch = broker.connect().await;
        let started = Instant::now();
        loop {
            list_fragments(&ch, journal).await;
            if partials(&root).is_empty() {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "partial uploads left after restart: {:?}",
                partials(&root)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        eprintln!(
            "partial uploads removed {:?} after restart",
            started.elapsed()
        );
        let (content, _) = read_all(&ch, journal, 0).await;
        assert_eq!(content, expect, "every acknowledged byte survives");
        let log = broker.stderr();
        assert!(
            !log.contains("failed to parse fragment"),
            "temporary files are skipped quietly:\n{log}"
        );
    })
    .await
}

/// The broker's open descriptors on files under `dir` (Linux `/proc`).
fn open_files_under(pid: u32, dir: &Path) -> Vec<PathBuf> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    fds.flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter(|target| target.starts_with(dir))
        .collect()
}

/// Deleting journals closes their spool files once no call holds them: a broker whose
/// journals come and go (consumers' recovery logs, say) does not run out of descriptors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_journals_spool_files_are_closed() {
    within(60, async {
        let b = Broker::start(&[]).await;
        let pid = b.pid().expect("broker running");
        let spools = b.data_dir().join("spools");
        let ch = b.connect().await;
        let names: Vec<String> = (0..4).map(|i| format!("gone/journal-{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        create_journals(&ch, &refs).await;
        for name in &names {
            append_ok(&ch, name, b"some content").await;
        }
        let open = open_files_under(pid, &spools);
        assert!(
            open.len() >= names.len(),
            "expected each written journal's spool open, saw {open:?}"
        );
        for name in &names {
            let r = apply(&ch, vec![delete(name, -1)]).await.unwrap();
            assert_status(r.status, Status::Ok, "delete");
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let open = open_files_under(pid, &spools);
            if open.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "spool files still open 20 s after their journals were deleted: {open:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // A re-created journal opens its spool again and takes appends.
        create_journals(&ch, &refs[..1]).await;
        append_ok(&ch, &names[0], b"again").await;
        assert_serving(&b).await;
    })
    .await
}
