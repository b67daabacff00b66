//! A second broker on the data dir or the port of a running one refuses to start (and
//! names who holds it), instead of silently sharing spools or splitting the port's traffic.

use courant_tests::faults::Proc;
use courant_tests::*;
use std::time::Duration;

/// Starts a second `courant serve` and expects it to exit with an error within 10 s.
async fn second_refused(args: &[&str]) -> String {
    let mut second = Proc::spawn(args, None, &[]);
    let status = second.wait_exit(Duration::from_secs(10)).await;
    let out = second.output();
    assert!(
        matches!(status, Some(s) if !s.success()),
        "the second broker was not refused (status {status:?}):\n{out}"
    );
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_broker_on_the_same_data_dir_is_refused() {
    within(60, async {
        let mut first = Broker::start(&["--tpc.cores", "1"]).await;
        let ch = first.connect().await;
        create_journals(&ch, &["guard/a"]).await;
        append_ok(&ch, "guard/a", b"first\n").await;

        let dir = first.data_dir().to_str().unwrap().to_string();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
            .to_string();
        let out = second_refused(&[
            "serve",
            "--broker.bind",
            "127.0.0.1",
            "--broker.port",
            &port,
            "--tpc.cores",
            "1",
            "--data-dir",
            &dir,
        ])
        .await;
        assert!(out.contains("--data-dir"), "{out}");
        let pid = first_pid(&first);
        assert!(
            out.contains(&format!("PID {pid}")),
            "holder's PID {pid} named:\n{out}"
        );

        // The first broker is untouched.
        append_ok(&ch, "guard/a", b"second\n").await;
        assert_eq!(read_content(&ch, "guard/a").await, b"first\nsecond\n");

        // kill -9 leaves the lock file, but not the lock: a restart takes it at once.
        first.restart().await;
        let ch = first.connect().await;
        assert_eq!(read_content(&ch, "guard/a").await, b"first\nsecond\n");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_broker_on_the_same_port_is_refused() {
    within(60, async {
        let first = Broker::start(&["--tpc.cores", "2"]).await;
        let other = tempfile::tempdir().unwrap();
        let port = first.port().to_string();
        let out = second_refused(&[
            "serve",
            "--broker.bind",
            "127.0.0.1",
            "--broker.port",
            &port,
            "--tpc.cores",
            "1",
            "--data-dir",
            other.path().to_str().unwrap(),
        ])
        .await;
        assert!(out.contains(&port), "the port is named:\n{out}");
        // Also on an overlapping address (all interfaces, which include loopback).
        let out = second_refused(&[
            "serve",
            "--broker.bind",
            "0.0.0.0",
            "--broker.port",
            &port,
            "--tpc.cores",
            "1",
            "--data-dir",
            other.path().to_str().unwrap(),
        ])
        .await;
        assert!(out.contains("in use"), "{out}");
        // Every connection still reaches the first broker.
        let ch = first.connect().await;
        create_journals(&ch, &["guard/p"]).await;
        for _ in 0..8 {
            let ch = first.connect().await;
            assert_eq!(list_journals(&ch, selector(&[], &[])).await.len(), 1);
        }
    })
    .await;
}

/// The PID the data dir's lock file names (written by the holder).
fn first_pid(first: &Broker) -> u32 {
    let text = std::fs::read_to_string(first.data_dir().join("courant.lock"))
        .expect("the lock file exists");
    text.trim().parse().expect("a PID")
}
