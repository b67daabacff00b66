//! How a RetryReader handles a broker's answers, against fake brokers that send exactly
//! what each case needs: an offset jump, a response behind the requested offset, and a
//! NOT_JOURNAL_BROKER whose Route points at another broker.

use bytes::Bytes;
use courant_client::protocol::grpc::ServerCall;
use courant_client::protocol::{
    Fragment, Header, ReadRequest, ReadResponse, Route, Status, process_spec,
};
use courant_client::{Client, ClientOptions, Error, RetryReader};
use std::time::Duration;

/// What a fake broker sends in answer to a Read of `offset`.
type Script = fn(i64) -> Vec<ReadResponse>;

/// A fake broker answering every Read with `script(request offset)` then a clean end.
async fn fake_broker(script: Script) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(tcp).await else {
                    return;
                };
                while let Some(Ok((req, respond))) = conn.accept().await {
                    tokio::spawn(async move {
                        let mut call = ServerCall::new(req, respond, 4 << 20);
                        let Ok(Some(req)) = call.inbound.next::<ReadRequest>().await else {
                            return;
                        };
                        for resp in script(req.offset) {
                            let _ = call.outbound.send(&resp).await;
                        }
                        call.outbound.finish(Ok(()));
                    });
                }
            });
        }
    });
    endpoint
}

fn client(endpoint: &str) -> Client {
    Client::with_options(ClientOptions {
        endpoints: vec![endpoint.to_string()],
        retry_timeout: Duration::from_secs(2),
        ..Default::default()
    })
    .unwrap()
}

fn metadata(status: Status, offset: i64, fragment: Option<(i64, i64)>) -> ReadResponse {
    ReadResponse {
        status: status as i32,
        offset,
        write_head: fragment.map_or(offset, |f| f.1),
        fragment: fragment.map(|(begin, end)| Fragment {
            journal: "client/fake".into(),
            begin,
            end,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn content(offset: i64, bytes: &'static [u8]) -> ReadResponse {
    ReadResponse {
        offset,
        content: Bytes::from_static(bytes),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offset_jumps_show_in_the_chunk_offsets() {
    let endpoint = fake_broker(|offset| {
        if offset < 100 {
            // The bytes before 100 are gone: the broker answers from 100.
            vec![
                metadata(Status::Ok, 100, Some((100, 110))),
                content(100, b"0123456789"),
                metadata(Status::OffsetNotYetAvailable, 110, None),
            ]
        } else {
            vec![metadata(Status::OffsetNotYetAvailable, offset, None)]
        }
    })
    .await;
    let mut reader = RetryReader::new(&client(&endpoint), "client/fake", 0, false).unwrap();
    let (at, bytes) = reader.next_chunk().await.unwrap().unwrap();
    assert_eq!((at, &bytes[..]), (100, &b"0123456789"[..]));
    assert!(reader.next_chunk().await.unwrap().is_none());
    assert_eq!(reader.offset(), 110);
    assert_eq!(
        reader.fragment().map(|f| (f.begin, f.end)),
        Some((100, 110))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_behind_the_requested_offset_is_a_protocol_error() {
    let endpoint =
        fake_broker(|_| vec![metadata(Status::Ok, 5, Some((0, 20))), content(5, b"abc")]).await;
    let mut reader = RetryReader::new(&client(&endpoint), "client/fake", 10, false).unwrap();
    let err = reader.next_chunk().await.unwrap_err();
    assert!(matches!(err, Error::Protocol { offset: 10, .. }), "{err}");
    assert!(
        err.to_string().contains("journal client/fake at offset 10"),
        "{err}"
    );
}

/// The endpoint of the second broker, for the first one's Route.
static MEMBER: std::sync::OnceLock<String> = std::sync::OnceLock::new();

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_journal_broker_is_followed_to_the_route_it_names() {
    let member = fake_broker(|offset| {
        vec![
            metadata(Status::Ok, offset, Some((0, 3))),
            content(offset, b"abc"),
            metadata(Status::OffsetNotYetAvailable, 3, None),
        ]
    })
    .await;
    MEMBER.set(member).unwrap();
    let other = fake_broker(|_| {
        let mut resp = metadata(Status::NotJournalBroker, 0, None);
        resp.header = Some(Header {
            route: Some(Route {
                members: vec![process_spec::Id {
                    zone: "z".into(),
                    suffix: "member".into(),
                }],
                primary: 0,
                endpoints: vec![MEMBER.get().unwrap().clone()],
            }),
            ..Default::default()
        });
        vec![resp]
    })
    .await;
    let c = client(&other);
    let mut reader = RetryReader::new(&c, "client/fake", 0, false).unwrap();
    let (at, bytes) = tokio::time::timeout(Duration::from_secs(5), reader.next_chunk())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!((at, &bytes[..]), (0, &b"abc"[..]));
    let route = c.route("client/fake").unwrap();
    assert_eq!(route.endpoints[0], *MEMBER.get().unwrap());
}
