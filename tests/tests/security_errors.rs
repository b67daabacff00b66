//! Errors clients see: Gazette's codes and messages without server paths.
//! * An Append to journal `""` answers the invalid-name error Read answers (not
//!   JOURNAL_NOT_FOUND).
//! * A full disk (the data dir on a 2 MiB tmpfs) answers the Append with the OS error and
//!   no path or file descriptor; the path is only in the broker's log. Mounting needs
//!   root with CAP_SYS_ADMIN: without it the test says so and checks nothing else.

use courant_tests::protocol::grpc::Code;
use courant_tests::protocol::{ReadRequest, Status};
use courant_tests::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_to_the_empty_journal_is_an_invalid_name() {
    within(60, async {
        let broker = Broker::start(&[]).await;
        let ch = broker.connect().await;
        let read = read_stream(
            &ch,
            &ReadRequest {
                journal: String::new(),
                ..Default::default()
            },
        )
        .await;
        let read_err = match read {
            Err(e) => e,
            Ok(call) => {
                let mut s = Streamed::<courant_tests::protocol::ReadResponse>::new(call);
                s.next().await.expect_err("Read of \"\" must fail")
            }
        };
        let res = append(&ch, "", &[b"x"]).await;
        match res {
            Ok(resp) => panic!(
                "Append to \"\" answered {} instead of an invalid-name error",
                status_name(resp.status)
            ),
            Err(e) => {
                assert_eq!(e.code, Code::Unknown, "{e:?}");
                assert_eq!(e.message, read_err.message, "same error as Read");
                assert!(e.message.contains("Journal: invalid length"), "{e:?}");
            }
        }
    })
    .await;
}

/// A tmpfs of `size` mounted at a fresh directory, unmounted on drop.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::Builder::new()
            .prefix("courant-full-disk-")
            .tempdir()
            .ok()?;
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Tmpfs(dir))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.0.path())
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_answers_without_paths() {
    let Some(fs) = Tmpfs::mount("2m") else {
        eprintln!("skipping: cannot mount a tmpfs here (needs CAP_SYS_ADMIN)");
        return;
    };
    within(90, async {
        let data = fs.0.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        // No store: fragments stay local, so the disk fills.
        let mut broker = Broker::start_in(Some(&data), &["--store.default", ""]).await;
        let ch = broker.connect().await;
        let mut s = spec("full/disk", &[]);
        s.fragment.as_mut().unwrap().length = 64 << 20;
        apply_specs(&ch, &[s]).await;
        let chunk = vec![b'z'; 256 << 10];
        let mut failure = None;
        for _ in 0..64 {
            match append(&ch, "full/disk", &[&chunk]).await {
                Ok(resp) if resp.status == Status::Ok as i32 => continue,
                Ok(resp) => panic!("unexpected status {}", status_name(resp.status)),
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        let e = failure.expect("a 2 MiB disk must fill");
        eprintln!("full disk answered: {e:?}");
        assert_eq!(e.code, Code::Unknown, "{e:?}");
        assert!(e.message.contains("No space left on device"), "{e:?}");
        let root = fs.0.path().display().to_string();
        assert!(!e.message.contains(&root), "path in {:?}", e.message);
        assert!(!e.message.contains("fd:"), "fd in {:?}", e.message);
        assert!(!e.message.contains("Some("), "internals in {:?}", e.message);
        let _ = broker.terminate(10).await;
        assert!(broker.stderr().contains(&root), "the log keeps the path");
    })
    .await;
}
