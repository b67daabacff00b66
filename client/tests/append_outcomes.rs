//! Which appends are retried, against a fake broker that misbehaves on purpose: a status
//! the broker sends before taking content is retried (the append certainly was not
//! committed); a connection lost after the commit was sent is surfaced as an uncertain
//! outcome, never retried (a retry could write the content twice).

use bytes::Bytes;
use courant_client::protocol::grpc::ServerCall;
use courant_client::protocol::{AppendRequest, AppendResponse, Fragment, Header, Status};
use courant_client::{Client, ClientOptions, Error};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

#[derive(Clone, Copy)]
enum Answer {
    /// Reads the whole append, then answers with this status.
    Status(Status),
    /// Reads the whole append (its commit included), then drops the connection.
    DropAfterCommit,
}

/// A fake broker on a loopback port answering the n-th append with `answer(n)`; returns
/// its endpoint and the count of appends it received.
async fn fake_broker(answer: fn(usize) -> Answer) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(serve_connection(tcp, counter, answer));
        }
    });
    (endpoint, calls)
}

async fn serve_connection(
    tcp: tokio::net::TcpStream,
    calls: Arc<AtomicUsize>,
    answer: fn(usize) -> Answer,
) {
    let Ok(mut conn) = h2::server::handshake(tcp).await else {
        return;
    };
    let drop_conn = Arc::new(tokio::sync::Notify::new());
    loop {
        let accepted = tokio::select! {
            a = conn.accept() => a,
            _ = drop_conn.notified() => return,
        };
        let Some(Ok((req, respond))) = accepted else {
            return;
        };
        let n = calls.fetch_add(1, Ordering::SeqCst);
        let drop_conn = drop_conn.clone();
        tokio::spawn(async move {
            let mut call = ServerCall::new(req, respond, 4 << 20);
            let mut bytes = 0;
            while let Ok(Some(msg)) = call.inbound.next::<AppendRequest>().await {
                bytes += msg.content.len() as i64;
            }
            match answer(n) {
                Answer::DropAfterCommit => drop_conn.notify_one(),
                Answer::Status(status) => {
                    let resp = AppendResponse {
                        status: status as i32,
                        header: Some(Header::default()),
                        commit: (status == Status::Ok).then(|| Fragment {
                            journal: "client/fake".into(),
                            begin: 0,
                            end: bytes,
                            ..Default::default()
                        }),
                        registers: Some(Default::default()),
                        ..Default::default()
                    };
                    let _ = call.outbound.send(&resp).await;
                    call.outbound.finish(Ok(()));
                }
            }
        });
    }
}

fn client(endpoint: &str) -> Client {
    Client::with_options(ClientOptions {
        endpoints: vec![endpoint.to_string()],
        retry_timeout: Duration::from_secs(5),
        ..Default::default()
    })
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statuses_sent_before_content_are_retried() {
    let (endpoint, calls) = fake_broker(|n| match n {
        0 => Answer::Status(Status::NotJournalPrimaryBroker),
        1 => Answer::Status(Status::InsufficientJournalBrokers),
        _ => Answer::Status(Status::Ok),
    })
    .await;
    let c = client(&endpoint);
    let commit = tokio::time::timeout(
        Duration::from_secs(10),
        c.append("client/fake", Bytes::from_static(b"abc")),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!((commit.begin, commit.end), (0, 3));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "two refusals, then the append"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_statuses_are_surfaced_at_once() {
    let (endpoint, calls) = fake_broker(|_| Answer::Status(Status::WrongAppendOffset)).await;
    let err = client(&endpoint)
        .append("client/fake", Bytes::from_static(b"abc"))
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some("WRONG_APPEND_OFFSET"), "{err}");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_lost_after_the_commit_is_never_retried() {
    let (endpoint, calls) = fake_broker(|_| Answer::DropAfterCommit).await;
    let err = tokio::time::timeout(
        Duration::from_secs(10),
        client(&endpoint).append("client/fake", Bytes::from(vec![7; 5000])),
    )
    .await
    .unwrap()
    .unwrap_err();
    assert!(
        matches!(err, Error::AppendUncertain { bytes: 5000, .. }),
        "{err}"
    );
    assert!(
        err.to_string()
            .starts_with("journal client/fake: the outcome of an append of 5000 bytes is unknown"),
        "{err}"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the append was not sent twice"
    );
}
