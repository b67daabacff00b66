//! A full disk, survived in place: with its data dir on a small tmpfs (in a mount namespace
//! of its own), a broker refuses the appends that do not fit with a clear error, keeps
//! serving reads of everything acknowledged (and nothing half-written), and takes appends
//! again by itself once space is freed: no restart, no acknowledged byte lost. And a broker
//! whose log output fails (stderr on a full device) keeps serving.

use courant_tests::faults::{Proc, can_mount_tmpfs, connect, free_port, wait_port};
use courant_tests::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const JOURNAL: &str = "disk/full";

fn chunk(i: usize, len: usize) -> Vec<u8> {
    let mut out = format!("append {i:06} ").into_bytes();
    out.resize(len, b'a' + (i % 26) as u8);
    out.push(b'\n');
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_appends_and_recovers_in_place() {
    // One fragment, never persisted: only the spool fills the disk.
    full_disk("", 1 << 30).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_with_rolls_and_uploads_recovers_in_place() {
    // Fragments of 256 KiB rolled and uploaded to the default file store, on the same disk.
    full_disk("file:///", 256 << 10).await
}

async fn full_disk(default_store: &str, fragment_len: i64) {
    if !can_mount_tmpfs() {
        eprintln!("skipping: cannot mount a tmpfs in a mount namespace (needs root)");
        return;
    }
    within(120, async {
        let tmp = tempfile::tempdir().unwrap();
        let mnt = tmp.path().join("mnt");
        std::fs::create_dir_all(&mnt).unwrap();
        let port = free_port();
        let bin = courant_bin();
        let default_store = default_store.to_string();
        let default_store = default_store.as_str();
        // A mount namespace held by a sleeping process: 8 MiB of disk, 5 MiB of it taken
        // by a file to delete later.
        let ready = tmp.path().join("ready");
        let script = format!(
            "mount -t tmpfs -o size=8m courant-full '{m}' && \
             head -c 5242880 /dev/zero > '{m}/filler' && touch '{r}' && exec sleep 600",
            m = mnt.display(),
            r = ready.display(),
        );
        let holder = Proc::spawn_cmd(
            Command::new("unshare").args(["-m", "--propagation", "private", "sh", "-c", &script]),
            true,
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ready.exists() {
            assert!(Instant::now() < deadline, "no tmpfs:\n{}", holder.output());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let ns = holder.pid().to_string();
        // The broker runs in the holder's mount namespace (nsenter execs it).
        let start_broker = || {
            let mut cmd = Command::new("nsenter");
            cmd.args(["-t", &ns, "-m", "--"])
                .arg(&bin)
                .args(["serve", "--broker.port", &port.to_string()])
                .args(["--broker.bind", "127.0.0.1", "--broker.host", "127.0.0.1"])
                .args(["--tpc.cores", "1", "--store.default", default_store])
                .arg("--data-dir")
                .arg(mnt.join("data"));
            Proc::spawn_cmd(&mut cmd, true)
        };
        let mut broker = start_broker();
        assert!(
            wait_port(port, Duration::from_secs(20)).await,
            "broker did not start:\n{}",
            broker.output()
        );
        let ch = connect(port).await;
        let mut s = spec(JOURNAL, &[]);
        s.fragment.as_mut().unwrap().length = fragment_len;
        apply_specs(&ch, &[s]).await;

        // Append until the disk is full.
        let mut acked = Vec::new();
        let mut refused = None;
        for i in 0..400 {
            let data = chunk(i, 64 << 10);
            match append(&ch, JOURNAL, &[&data]).await {
                Ok(resp) if resp.status == protocol::Status::Ok as i32 => {
                    acked.extend_from_slice(&data)
                }
                Ok(resp) => panic!("append {i}: {resp:?}"),
                Err(err) => {
                    refused = Some(err);
                    break;
                }
            }
        }
        let err = refused.expect("the disk never filled up");
        eprintln!("acknowledged {} bytes before: {err}", acked.len());
        assert!(
            err.message.contains("No space left") || err.message.contains("space"),
            "a clear error: {err}"
        );
        // Still full: refused again (unless finished uploads freed their local copies), and
        // reads serve exactly the acknowledged bytes.
        for i in 0..3 {
            let data = chunk(1000 + i, 64 << 10);
            match append(&ch, JOURNAL, &[&data]).await {
                Ok(resp) if resp.status == protocol::Status::Ok as i32 => {
                    assert!(!default_store.is_empty(), "an append fit on a full disk");
                    acked.extend_from_slice(&data);
                }
                Ok(resp) => panic!("append: {resp:?}"),
                Err(_) => {}
            }
            let (content, head) = read_all(&ch, JOURNAL, 0).await;
            assert_eq!(head, acked.len() as i64, "no half-written append counts");
            assert!(content == acked, "reads serve the acknowledged bytes");
        }

        // Free space inside the broker's mount namespace.
        let freed = Command::new("nsenter")
            .args(["-t", &ns, "-m", "rm", "-f"])
            .arg(mnt.join("filler"))
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(freed.success(), "nsenter rm failed");
        let started = Instant::now();
        let mut i = 2000;
        loop {
            let data = chunk(i, 64 << 10);
            i += 1;
            match append(&ch, JOURNAL, &[&data]).await {
                Ok(resp) if resp.status == protocol::Status::Ok as i32 => {
                    acked.extend_from_slice(&data);
                    break;
                }
                other => {
                    assert!(
                        started.elapsed() < Duration::from_secs(15),
                        "appends did not resume after space was freed: {other:?}"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        eprintln!(
            "appends resumed {:?} after space was freed",
            started.elapsed()
        );
        for j in 0..10 {
            let data = chunk(3000 + j, 64 << 10);
            append_ok(&ch, JOURNAL, &data).await;
            acked.extend_from_slice(&data);
        }
        let (content, head) = read_all(&ch, JOURNAL, 0).await;
        assert_eq!(head, acked.len() as i64);
        assert!(
            content == acked,
            "appends lost: every acknowledged byte is read back"
        );
        assert!(
            broker.wait_exit(Duration::ZERO).await.is_none(),
            "no restart"
        );

        // And after kill -9, recovery from the disk finds every acknowledged byte.
        drop(ch);
        drop(broker);
        let broker = start_broker();
        // (Not the port: a killed broker's listeners outlive it briefly.)
        assert!(
            broker
                .wait_output("courant serving", Duration::from_secs(20))
                .await,
            "broker did not restart:\n{}",
            broker.output()
        );
        let ch = connect(port).await;
        let (content, head) = read_all(&ch, JOURNAL, 0).await;
        assert_eq!(head, acked.len() as i64, "after a restart");
        assert!(
            content == acked,
            "after a restart, every acknowledged byte is read back"
        );
        eprintln!(
            "appends lost: 0 ({} bytes acknowledged, read back before and after kill -9)",
            acked.len()
        );
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_log_output_never_takes_the_broker_down() {
    within(60, async {
        let tmp = tempfile::tempdir().unwrap();
        let port = free_port();
        let mut cmd = Command::new(courant_bin());
        cmd.args([
            "serve",
            "--broker.bind",
            "127.0.0.1",
            "--broker.host",
            "127.0.0.1",
        ])
        .args(["--broker.port", &port.to_string(), "--log.level", "debug"])
        .args(["--tpc.cores", "1", "--data-dir"])
        .arg(tmp.path().join("data"))
        .stderr(
            std::fs::File::options()
                .write(true)
                .open("/dev/full")
                .unwrap(),
        );
        let mut broker = Proc::spawn_cmd(&mut cmd, false);
        assert!(
            wait_port(port, Duration::from_secs(20)).await,
            "did not start"
        );
        let ch = connect(port).await;
        create_journals(&ch, &["quiet/j"]).await;
        for i in 0..20 {
            append_ok(&ch, "quiet/j", &chunk(i, 100)).await;
            // Something the broker logs about: an append to a missing journal.
            let _ = append(&connect(port).await, "quiet/missing", &[b"x"]).await;
        }
        assert_eq!(read_all(&ch, "quiet/j", 0).await.1, 20 * 101);
        assert!(
            broker.wait_exit(Duration::from_millis(500)).await.is_none(),
            "the broker exited when its log output failed"
        );
    })
    .await
}
