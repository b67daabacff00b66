//! Descriptors and idle connections: the broker raises its soft RLIMIT_NOFILE
//! to the hard limit at start, and closes (GOAWAY, then EOF) HTTP/2 connections with no
//! call in flight for `--tpc.h2-idle-timeout`, while connections with a call in flight
//! stay open.

use courant_tests::protocol::ReadRequest;
use courant_tests::*;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// (soft, hard) "Max open files" of process `pid`.
fn nofile(pid: u32) -> Option<(u64, u64)> {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let mut nums = line
        .split_whitespace()
        .filter_map(|w| w.parse::<u64>().ok());
    Some((nums.next()?, nums.next()?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_soft_fd_limit_is_raised_to_the_hard_limit() {
    let hard = nofile(std::process::id()).expect("/proc limits").1;
    assert!(
        hard > 256,
        "the hard limit ({hard}) must exceed the lowered soft one"
    );
    let dir = tempfile::tempdir().unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let script = format!(
        "ulimit -Sn 256 && exec {} serve --broker.port {port} --broker.host 127.0.0.1 \
         --broker.bind 127.0.0.1 --data-dir {}",
        courant_bin().display(),
        dir.path().join("data").display()
    );
    let mut child = tokio::process::Command::new("sh")
        .args(["-c", &script])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    let started = Instant::now();
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "broker did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (soft, now_hard) = nofile(pid).expect("the broker's limits");
    let _ = child.kill().await;
    assert_eq!(now_hard, hard);
    assert_eq!(
        soft, hard,
        "soft RLIMIT_NOFILE raised from 256 to the hard limit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_http2_connections_are_closed() {
    within(60, async {
        let broker = Broker::start(&["--tpc.h2-idle-timeout", "1s"]).await;
        let ch = broker.connect().await;
        apply_specs(&ch, &[spec("idle/j", &[])]).await;

        // A connection that sends the preface and SETTINGS, then nothing.
        let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", broker.port()))
            .await
            .unwrap();
        tcp.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
            .await
            .unwrap();
        let start = Instant::now();
        let mut got = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut got)).await;
        assert!(read.is_ok(), "an idle connection must be closed");
        let elapsed = start.elapsed();
        assert!(
            elapsed >= Duration::from_millis(900),
            "closed too early: {elapsed:?}"
        );
        // Frames: 9-byte headers; a GOAWAY (type 7) precedes the close.
        let mut at = 0;
        let mut goaway = false;
        while at + 9 <= got.len() {
            let len = u32::from_be_bytes([0, got[at], got[at + 1], got[at + 2]]) as usize;
            goaway |= got[at + 3] == 7;
            at += 9 + len;
        }
        assert!(goaway, "GOAWAY before the close: {got:?}");

        // A connection with a call in flight (a blocking Read) outlives the timeout.
        let ch2 = broker.connect().await;
        let mut reads = read_streamed(
            &ch2,
            &ReadRequest {
                journal: "idle/j".into(),
                offset: 0,
                block: true,
                ..Default::default()
            },
        )
        .await;
        tokio::time::sleep(Duration::from_millis(2500)).await;
        // `ch` sat idle meanwhile and was closed: clients reconnect, as this one does.
        let ch = broker.connect().await;
        append_ok(&ch, "idle/j", b"still here\n").await;
        let mut content = Vec::new();
        while content.len() < 11 {
            let msg = reads
                .next()
                .await
                .expect("the blocking read survives")
                .expect("a response");
            content.extend_from_slice(&msg.content);
        }
        assert_eq!(content, b"still here\n");
    })
    .await;
}
