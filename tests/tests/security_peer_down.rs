//! Replication to a broker that is down answers UNAVAILABLE, as Gazette's does,
//! so clients that retry only on UNAVAILABLE retry. A broker in cluster mode (real etcd)
//! shares the keyspace with a member whose endpoint nothing listens on; a journal replicated
//! to both gets appends answered UNAVAILABLE with a message saying what to check, whichever
//! of the two is its primary (the pipeline's dial, or the proxy's). Needs
//! `COURANT_TEST_ETCD` (set by `.ci/steps/50-etcd.sh`); skipped with a printed reason
//! otherwise.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use courant_tests::protocol::grpc::Code;
use courant_tests::protocol::process_spec::Id;
use courant_tests::protocol::{BrokerSpec, ProcessSpec};
use courant_tests::*;
use prost::Message;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A PUT through etcd's JSON gateway.
async fn etcd_put(url: &str, key: &str, value: &[u8]) {
    let hostport = url.trim_start_matches("http://").trim_end_matches('/');
    let body = format!(
        r#"{{"key":"{}","value":"{}"}}"#,
        B64.encode(key),
        B64.encode(value)
    );
    let mut sock = tokio::net::TcpStream::connect(hostport).await.unwrap();
    let req = format!(
        "POST /v3/kv/put HTTP/1.1\r\nHost: {hostport}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    sock.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    sock.read_to_end(&mut raw).await.unwrap();
    assert!(
        raw.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&raw)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_to_a_down_peer_is_unavailable() {
    let Some(url) = std::env::var("COURANT_TEST_ETCD")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        eprintln!("skipping: COURANT_TEST_ETCD is not set (run .ci/steps/50-etcd.sh)");
        return;
    };
    within(100, async {
        let prefix = courant_tests::etcd_env::unique_etcd_prefix("peer-down");
        // A port nothing listens on.
        let dead = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let ghost = BrokerSpec {
            process_spec: Some(ProcessSpec {
                id: Some(Id {
                    zone: "zone-b".into(),
                    suffix: "down".into(),
                }),
                endpoint: format!("http://127.0.0.1:{dead}"),
            }),
            journal_limit: 10,
            exiting: false,
        };
        let broker = Broker::start(&[
            "--etcd.address",
            &url,
            "--etcd.prefix",
            &prefix,
            "--etcd.lease",
            "2s",
            "--broker.zone",
            "zone-a",
            "--broker.id",
            "alive",
        ])
        .await;
        // Announced after the broker, so that the live broker is the allocator's leader (the
        // oldest member).
        etcd_put(
            &url,
            &format!("{prefix}/members/zone-b#down"),
            &ghost.encode_to_vec(),
        )
        .await;
        let ch = broker.connect().await;
        let mut s = spec("peer/down", &[]);
        s.replication = 2;
        apply_specs(&ch, &[s]).await;

        let started = Instant::now();
        let mut last = String::new();
        let err = loop {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "no append reached the down peer; last answer: {last}\n{}",
                broker.stderr()
            );
            let res = append(&ch, "peer/down", &[b"x"]).await;
            last = match &res {
                Ok(r) => format!("status {}", status_name(r.status)),
                Err(e) => format!("{e:?}"),
            };
            match res {
                Err(e) if e.message.contains("127.0.0.1") || e.message.contains("down") => {
                    break e;
                }
                // Not yet assigned (e.g. NO_JOURNAL_PRIMARY_BROKER): wait.
                _ => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        };
        assert_eq!(err.code, Code::Unavailable, "{err:?}");
        eprintln!("append answered: {err:?}");
    })
    .await;
}
