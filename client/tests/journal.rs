//! The journal layer against a real `courant serve`: appends (one content, several
//! chunks, a stream, the batching AppendService), reads (RetryReader from an offset, from
//! the write head, blocking), List and its watch, and the errors of bad input.

mod common;

use bytes::Bytes;
use common::{client, proxied_client, read_to_head};
use courant_client::protocol::{AppendRequest, LabelSelector, ReadRequest};
use courant_client::{AppendService, Client, ClientOptions, Error, RetryReader};
use courant_tests::{Broker, spec, within};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_and_reads_round_trip() {
    within(60, async {
        let broker = Broker::start(&[]).await;
        let c = client(&broker, None);
        let journal = "client/round-trip";
        c.apply_specs(&[spec(journal, &[("app", "test")])])
            .await
            .expect("apply");

        let commit = c
            .append(journal, Bytes::from_static(b"hello "))
            .await
            .expect("append");
        assert_eq!((commit.begin, commit.end), (0, 6));
        let chunks =
            futures_util::stream::iter([Bytes::from_static(b"wor"), Bytes::from_static(b"ld")]);
        let commit = c
            .append_stream(journal, chunks)
            .await
            .expect("append_stream");
        assert_eq!((commit.begin, commit.end), (6, 11));
        let big = Bytes::from(vec![b'x'; 3 << 20]);
        let req = AppendRequest {
            journal: journal.into(),
            ..Default::default()
        };
        let resp = c
            .append_with(req, vec![big.clone()])
            .await
            .expect("a 3 MiB append");
        assert_eq!(resp.commit.unwrap().end, 11 + (3 << 20));

        let all = read_to_head(&c, journal, 0).await.expect("read");
        assert_eq!(&all[..11], b"hello world");
        assert_eq!(&all[11..], &big[..]);
        // Reads through a proxying broker see the same bytes.
        let proxied = read_to_head(&proxied_client(&broker), journal, 6)
            .await
            .expect("read");
        assert_eq!(&proxied[..], &all[6..]);

        // The appends' Headers taught the client the journal's Route.
        let route = c.route(journal).expect("a cached route");
        assert_eq!(route.primary, 0);
        assert_eq!(route.endpoints[0], broker.endpoint());

        // From the write head: nothing yet, and the offset is the head.
        let mut tail = RetryReader::new(&c, journal, -1, false).unwrap();
        assert!(tail.next_chunk().await.unwrap().is_none());
        assert_eq!(tail.offset(), all.len() as i64);
        assert_eq!(tail.write_head(), all.len() as i64);

        // A blocking reader at the head gets the next append.
        let head = all.len() as i64;
        let mut blocking = RetryReader::new(&c, journal, head, true).unwrap();
        let waiter = tokio::spawn(async move { blocking.next_chunk().await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        c.append(journal, Bytes::from_static(b"later"))
            .await
            .unwrap();
        let (at, bytes) = waiter.await.unwrap().unwrap().unwrap();
        assert_eq!((at, &bytes[..]), (head, &b"later"[..]));
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_append_service_batches_writers_in_order() {
    within(60, async {
        let broker = Broker::start(&[]).await;
        let c = client(&broker, None);
        let journal = "client/batched";
        c.apply_specs(&[spec(journal, &[])]).await.unwrap();
        // A small buffer, so that writers wait on back-pressure too.
        let service = std::sync::Arc::new(AppendService::with_max_buffered(&c, 256));
        let mut writers = Vec::new();
        for w in 0..4u8 {
            let service = service.clone();
            writers.push(tokio::spawn(async move {
                let mut tickets = Vec::new();
                for i in 0..100u32 {
                    let record = format!("w{w}-{i:03};");
                    tickets.push(service.append(journal, Bytes::from(record)).await.unwrap());
                }
                let mut last = (0, 0);
                let mut spans = Vec::new();
                for t in tickets {
                    let span = t.wait().await.unwrap();
                    assert!(
                        span.0 < span.1 && span >= last,
                        "writer {w}: {span:?} after {last:?}"
                    );
                    last = span;
                    spans.push(span);
                }
                spans
            }));
        }
        let mut spans = std::collections::BTreeSet::new();
        for w in writers {
            spans.extend(w.await.unwrap());
        }
        let all = String::from_utf8(read_to_head(&c, journal, 0).await.unwrap()).unwrap();
        let records: Vec<&str> = all.split_terminator(';').collect();
        assert_eq!(records.len(), 400);
        for w in 0..4 {
            let mine: Vec<&str> = records
                .iter()
                .copied()
                .filter(|r| r.starts_with(&format!("w{w}-")))
                .collect();
            let want: Vec<String> = (0..100).map(|i| format!("w{w}-{i:03}")).collect();
            assert_eq!(mine, want, "writer {w}'s records, in its order");
        }
        // Records shared appends: fewer appends than records, and they tile the journal.
        assert!(spans.len() < 400, "{} appends for 400 records", spans.len());
        let mut at = 0;
        for (begin, end) in &spans {
            assert_eq!(*begin, at, "appends follow each other: {spans:?}");
            at = *end;
        }
        assert_eq!(at, all.len() as i64);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_its_watch_show_journals_and_routes() {
    within(60, async {
        let broker = Broker::start(&[]).await;
        let c = proxied_client(&broker);
        c.apply_specs(&[spec("client/listed/one", &[("team", "a")])])
            .await
            .unwrap();
        let mut watch = c.list_watch(LabelSelector::default());
        let first = watch.next().await.unwrap();
        assert_eq!(first.len(), 1);
        c.apply_specs(&[spec("client/listed/two", &[("team", "b")])])
            .await
            .unwrap();
        let second = watch.next().await.unwrap();
        let names: Vec<String> = second
            .iter()
            .map(|j| j.spec.as_ref().unwrap().name.clone())
            .collect();
        assert_eq!(names, ["client/listed/one", "client/listed/two"]);

        let selector = courant_client::protocol::LabelSelector {
            include: Some(courant_tests::label_set(&[("team", "b")])),
            exclude: None,
        };
        let listed = c.list(selector).await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].spec.as_ref().unwrap().name, "client/listed/two");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gives_clear_errors() {
    within(60, async {
        let broker = Broker::start(&[]).await;
        let c = client(&broker, None);

        let err = c
            .append("/bad//name", Bytes::from_static(b"x"))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Invalid(_)), "{err}");
        assert!(
            err.to_string().contains("\"/bad//name\": invalid name"),
            "{err}"
        );

        // A journal that does not exist: the broker's answer, at once (not retried).
        let started = std::time::Instant::now();
        let err = c
            .append("client/missing", Bytes::from_static(b"x"))
            .await
            .unwrap_err();
        assert_eq!(err.status(), Some("JOURNAL_NOT_FOUND"), "{err}");
        assert!(err.to_string().contains("journal client/missing"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(2));

        // A read of it gives up after a few attempts, naming the journal and offset.
        let err = read_to_head(&c, "client/missing", 7).await.unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("journal client/missing") && text.contains("offset 7"),
            "{text}"
        );
        assert_eq!(
            err.status().map(|s| s.starts_with("JOURNAL_NOT_FOUND")),
            Some(true),
            "{text}"
        );

        // A record larger than the append service's per-journal buffer.
        let service = AppendService::with_max_buffered(&c, 1024);
        let err = service
            .append("client/any", Bytes::from(vec![0; 2000]))
            .await
            .err()
            .unwrap();
        let text = err.to_string();
        assert!(
            text.contains("journal client/any") && text.contains("2000 bytes"),
            "{text}"
        );

        // A message over the broker's 4 MiB limit is refused with ResourceExhausted.
        let huge = courant_tests::label_set(&[("big", &"v".repeat(5 << 20))]);
        let selector = LabelSelector {
            include: Some(huge),
            exclude: None,
        };
        let err = c.list(selector).await.unwrap_err();
        assert_eq!(
            err.code(),
            Some(courant_client::protocol::grpc::Code::ResourceExhausted),
            "{err}"
        );
        assert!(err.to_string().starts_with("List: "), "{err}");

        // An invalid spec: Apply's error names the journal.
        let mut bad = spec("client/bad-spec", &[]);
        bad.replication = 0;
        let err = c.apply_specs(&[bad]).await.unwrap_err();
        assert!(err.to_string().contains("client/bad-spec"), "{err}");
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_goes_away_mid_read_gives_a_clear_error() {
    within(60, async {
        let mut broker = Broker::start(&[]).await;
        let c = Client::with_options(ClientOptions {
            endpoints: vec![broker.endpoint()],
            retry_timeout: Duration::from_secs(2),
            ..Default::default()
        })
        .unwrap();
        let journal = "client/goes-away";
        c.apply_specs(&[spec(journal, &[])]).await.unwrap();
        c.append(journal, Bytes::from_static(b"0123456789"))
            .await
            .unwrap();
        let mut reader = RetryReader::with_request(
            &c,
            ReadRequest {
                journal: journal.into(),
                offset: 0,
                block: true,
                ..Default::default()
            },
        )
        .unwrap();
        let (at, bytes) = reader.next_chunk().await.unwrap().unwrap();
        assert_eq!((at, bytes.len()), (0, 10));
        broker.kill9();
        let started = std::time::Instant::now();
        let err = reader.next_chunk().await.unwrap_err();
        let text = err.to_string();
        assert!(started.elapsed() < Duration::from_secs(10), "{text}");
        assert!(
            text.contains("journal client/goes-away at offset 10"),
            "{text}"
        );
        assert!(text.contains("still failing after retrying"), "{text}");
        assert_eq!(
            err.code(),
            Some(courant_client::protocol::grpc::Code::Unavailable),
            "{text}"
        );
    })
    .await
}
