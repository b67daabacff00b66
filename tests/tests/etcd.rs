//! Cluster mode against a real etcd (`--etcd.address`), one broker: the member
//! announcement, Apply and List through etcd, the allocator assigning journals under the
//! member's lease, the primary advertising Routes, the keyspace revision rule, and
//! INSUFFICIENT_JOURNAL_BROKERS. Multi-broker behaviour is `tests/go/cluster`. Needs `COURANT_TEST_ETCD` (an etcd client URL,
//! set by `.ci/steps/50-etcd.sh`); skipped with a printed reason otherwise.
//!
//! The test talks to etcd through its JSON gateway (`/v3/kv/*`, etcd ≥ 3.4) over plain
//! HTTP/1.1, so neither etcdctl nor an etcd client crate is needed here.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use courant_tests::*;
use prost::Message;
use protocol::process_spec::Id;
use protocol::{AppendRequest, BrokerSpec, ProcessSpec, Status};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ZONE: &str = "zone-a";
const SUFFIX: &str = "courant-etcd-test";

fn etcd_url() -> Option<String> {
    match std::env::var("COURANT_TEST_ETCD") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            eprintln!(
                "skipping: COURANT_TEST_ETCD is not set (run .ci/steps/50-etcd.sh, which starts etcd)"
            );
            None
        }
    }
}

/// A prefix of its own for every test run, so runs never see each other's keys.
fn unique_prefix(name: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "/courant-test/{name}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// One POST to etcd's JSON gateway.
async fn etcd_post(url: &str, path: &str, body: Value) -> Value {
    let hostport = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let body = body.to_string();
    let mut sock = tokio::net::TcpStream::connect(&hostport)
        .await
        .unwrap_or_else(|e| panic!("connecting to etcd at {hostport}: {e}"));
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: {hostport}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    sock.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    sock.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8_lossy(&raw);
    let (head, rest) = text.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "etcd {path}: {text}");
    // The gateway may answer chunked: take the JSON object between the outer braces.
    let start = rest.find('{').expect("a JSON body");
    let end = rest.rfind('}').expect("a JSON body");
    serde_json::from_str(&rest[start..=end]).unwrap_or_else(|e| panic!("etcd {path}: {e}: {rest}"))
}

fn int(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap(),
        Value::Number(n) => n.as_i64().unwrap(),
        _ => 0,
    }
}

/// Puts `key` (no lease); returns etcd's revision after the put.
async fn etcd_put(url: &str, key: &str, value: &[u8]) -> i64 {
    let resp = etcd_post(
        url,
        "/v3/kv/put",
        json!({"key": B64.encode(key), "value": B64.encode(value)}),
    )
    .await;
    int(&resp["header"]["revision"])
}

/// A key's (value, mod_revision, lease), if it exists.
async fn etcd_get(url: &str, key: &str) -> Option<(Vec<u8>, i64, i64)> {
    let resp = etcd_post(url, "/v3/kv/range", json!({"key": B64.encode(key)})).await;
    let kv = resp["kvs"].as_array()?.first()?.clone();
    let value = kv["value"]
        .as_str()
        .map(|v| B64.decode(v).unwrap())
        .unwrap_or_default();
    Some((value, int(&kv["mod_revision"]), int(&kv["lease"])))
}

/// The keyspace revision of `prefix` as Gazette defines it: the greatest ModRevision of the
/// keys under it (a prefix range, like the broker's watch).
async fn etcd_prefix_revision(url: &str, prefix: &str) -> i64 {
    let mut end = prefix.as_bytes().to_vec();
    *end.last_mut().expect("a non-empty prefix") += 1;
    let resp = etcd_post(
        url,
        "/v3/kv/range",
        json!({"key": B64.encode(prefix), "range_end": B64.encode(&end), "keys_only": true}),
    )
    .await;
    resp["kvs"]
        .as_array()
        .map(|kvs| {
            kvs.iter()
                .map(|kv| int(&kv["mod_revision"]))
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0)
}

fn broker_spec(zone: &str, suffix: &str, endpoint: &str) -> BrokerSpec {
    BrokerSpec {
        process_spec: Some(ProcessSpec {
            id: Some(Id {
                zone: zone.into(),
                suffix: suffix.into(),
            }),
            endpoint: endpoint.into(),
        }),
        journal_limit: 10,
        exiting: false,
    }
}

fn me() -> Id {
    Id {
        zone: ZONE.into(),
        suffix: SUFFIX.into(),
    }
}

async fn append_at(ch: &Channel, journal: &str, data: &[u8], min_rev: i64) -> AppendResponse {
    append_full(
        ch,
        AppendRequest {
            journal: journal.into(),
            min_etcd_revision: min_rev,
            ..Default::default()
        },
        &[Bytes::copy_from_slice(data)],
        true,
    )
    .await
    .result
    .unwrap_or_else(|e| panic!("Append to {journal}: {e}"))
}

use protocol::AppendResponse;
use protocol::grpc::Channel;

#[tokio::test]
async fn etcd_member_apply_assign_append_read() {
    let Some(url) = etcd_url() else { return };
    let prefix = unique_prefix("basic");
    let mut broker = Broker::start(&[
        "--etcd.address",
        &url,
        "--etcd.prefix",
        &prefix,
        "--etcd.lease",
        "2s",
        "--broker.zone",
        ZONE,
        "--broker.id",
        SUFFIX,
        "--broker.limit",
        "77",
    ])
    .await;
    let ch = broker.connect().await;

    // 1. The member key: our BrokerSpec, under a lease.
    let member_key = format!("{prefix}/members/{ZONE}#{SUFFIX}");
    let (value, _, lease) = etcd_get(&url, &member_key)
        .await
        .unwrap_or_else(|| panic!("no member key {member_key}\n{}", broker.stderr()));
    let spec = BrokerSpec::decode(&value[..]).expect("a binary BrokerSpec");
    assert_eq!(spec, {
        let mut want = broker_spec(ZONE, SUFFIX, &broker.endpoint());
        want.journal_limit = 77;
        want
    });
    assert_ne!(lease, 0, "the member key is held by the broker's lease");

    // 2. Apply writes <root>/items/<name>; List reads it back.
    let apply_rev = create_journals(&ch, &["etcd/aa", "etcd/bb", "etcd/cc"]).await;
    let (item, item_rev, _) = etcd_get(&url, &format!("{prefix}/items/etcd/aa"))
        .await
        .expect("the item key");
    assert_eq!(item_rev, apply_rev, "the Apply's revision is the item's");
    assert_eq!(
        protocol::JournalSpec::decode(&item[..]).unwrap().name,
        "etcd/aa"
    );
    // 3. The allocator (this broker is the only member, hence the leader) assigns every
    // journal to us; our pulse then advertises the Route in the assignment values.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let listed = list_journals(&ch, selector(&[], &[])).await;
        let names: Vec<_> = listed
            .iter()
            .map(|j| j.spec.as_ref().unwrap().name.as_str())
            .collect();
        assert_eq!(names, ["etcd/aa", "etcd/bb", "etcd/cc"]);
        let assigned = listed.iter().all(|j| {
            let route = j.route.clone().unwrap_or_default();
            route.members == [me()] && route.primary == 0
        });
        if assigned {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "journals were not assigned to the only broker: {listed:?}\n{}",
            broker.stderr()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // Every journal's pulse writes its Route into its assignment value, each in its own
    // txn (one revision each, in no set order): wait for all of them, since each one is a
    // change under the prefix that moves the keyspace revision.
    for journal in ["etcd/aa", "etcd/bb", "etcd/cc"] {
        let assign_value = format!("{prefix}/assign/{journal}#{ZONE}#{SUFFIX}#0");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        loop {
            let (value, _, assign_lease) = etcd_get(&url, &assign_value)
                .await
                .expect("the assignment key");
            assert_eq!(
                assign_lease, lease,
                "assignments live under the member's lease"
            );
            let route = protocol::Route::decode(&value[..]).unwrap();
            if route.members == [me()] {
                assert_eq!(route.primary, 0);
                assert!(
                    route.endpoints.is_empty(),
                    "advertised Routes carry no endpoints"
                );
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the Route of {journal} was never advertised"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    // The broker is now idle in etcd (its next write is the pulse a minute from now).
    let last_change = etcd_prefix_revision(&url, &prefix).await;

    // Append and Read work, and the header's revision is the keyspace's: the ModRevision
    // of the last change under the prefix (min_etcd_revision waits until the broker's watch
    // has applied it).
    let resp = append_at(&ch, "etcd/aa", b"hello etcd", last_change).await;
    assert_status(resp.status, Status::Ok, "append to an assigned journal");
    let h = resp.header.clone().unwrap();
    let settled = h.etcd.unwrap().revision;
    assert_eq!(
        settled, last_change,
        "the last ModRevision under the prefix"
    );
    assert!(settled > apply_rev);
    assert_ne!(h.etcd.unwrap().cluster_id, 0);
    assert_ne!(h.etcd.unwrap().member_id, 0);
    assert_ne!(h.etcd.unwrap().raft_term, 0);
    let route = h.route.unwrap();
    assert_eq!(route.members, [me()]);
    assert_eq!(route.primary, 0);
    assert_eq!(route.endpoints, [broker.endpoint()]);
    assert_eq!(h.process_id, Some(me()));
    let (data, _) = read_all(&ch, "etcd/aa", 0).await;
    assert_eq!(data, b"hello etcd");

    // A change outside the prefix moves etcd's revision, not the keyspace's. (A key that
    // merely extends the prefix string, like `{prefix}-x`, is inside it, for Gazette too.)
    let outside = etcd_put(&url, &unique_prefix("outside"), b"1").await;
    assert!(outside > settled);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let resp = append_at(&ch, "etcd/aa", b"!", 0).await;
    assert_status(resp.status, Status::Ok, "second append");
    assert_eq!(resp.header.unwrap().etcd.unwrap().revision, settled);

    // 4. Replication 2 with a single broker: the Route has fewer members than desired
    // (scenario 10), so appends get INSUFFICIENT_JOURNAL_BROKERS.
    let mut two = courant_tests::spec("etcd/dd", &[]);
    two.replication = 2;
    let rev = apply_specs(&ch, &[two]).await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let resp = append_at(&ch, "etcd/dd", b"x", rev).await;
    assert_status(
        resp.status,
        Status::InsufficientJournalBrokers,
        "replication 2 on one broker",
    );
    let h = resp.header.unwrap();
    assert_eq!(h.route.unwrap().members, [me()]);

    // 5. The lease is kept alive: well past its 2 s TTL the member key is still there.
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    let (_, _, still) = etcd_get(&url, &member_key)
        .await
        .unwrap_or_else(|| panic!("the member key expired\n{}", broker.stderr()));
    assert_eq!(still, lease);

    // 6. A graceful shutdown revokes the lease: the member key goes away.
    assert!(
        broker.terminate(15).await,
        "broker exits on SIGTERM\n{}",
        broker.stderr()
    );
    assert!(
        etcd_get(&url, &member_key).await.is_none(),
        "the member key is deleted with the broker's lease"
    );
}

/// Appends until the journal is assigned and the append is OK (at most 20 s).
async fn append_when_assigned(ch: &Channel, journal: &str, data: &[u8], broker: &Broker) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let resp = append_at(ch, journal, data, 0).await;
        if resp.status == Status::Ok as i32 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "append to {journal}: {resp:?}\n{}",
            broker.stderr()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A broker (one core) reaching etcd at `url` through a [`CutProxy`], under a fresh
/// prefix and broker ID made from `name`, with `--etcd.lease lease`.
///
/// [`CutProxy`]: courant_tests::faults::CutProxy
async fn broker_via_proxy(
    url: &str,
    name: &str,
    lease: &str,
) -> (courant_tests::faults::CutProxy, Broker) {
    let prefix = unique_prefix(name);
    let upstream = url.trim_start_matches("http://").trim_end_matches('/');
    let proxy = courant_tests::faults::CutProxy::start(upstream).await;
    let via_proxy = format!("http://127.0.0.1:{}", proxy.port());
    let id = format!("courant-{name}-test");
    let broker = Broker::start(&[
        "--etcd.address",
        &via_proxy,
        "--etcd.prefix",
        &prefix,
        "--etcd.lease",
        lease,
        "--broker.zone",
        ZONE,
        "--broker.id",
        &id,
        "--tpc.cores",
        "1",
    ])
    .await;
    (proxy, broker)
}

/// etcd compacts the revision a broker's keyspace watch must resume from (the watch broke
/// in a network outage, and the keyspace moved on and was compacted meanwhile): the broker
/// reloads the keyspace and goes on in place, as Gazette's does; it neither exits nor
/// drops the journals it serves (a blocked read stays open and gets the next append).
#[tokio::test]
async fn etcd_compacted_watch_reloads_in_place() {
    let Some(url) = etcd_url() else { return };
    let (proxy, mut broker) = broker_via_proxy(&url, "compact", "20s").await;
    let ch = broker.connect().await;
    create_journals(&ch, &["compact/a"]).await;
    append_when_assigned(&ch, "compact/a", b"before\n", &broker).await;

    // A blocked read at the write head, served across the reload.
    let mut reading = read_streamed(
        &ch,
        &protocol::ReadRequest {
            journal: "compact/a".into(),
            offset: 7,
            block: true,
            ..Default::default()
        },
    )
    .await;

    // The outage: the keyspace moves on in etcd and is compacted past the watch.
    proxy.cut();
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let mut rev = 0;
    for i in 0..5 {
        rev = etcd_put(&url, &format!("/courant-test-noise/{i}"), b"noise").await;
    }
    let compacted = etcd_post(
        &url,
        "/v3/kv/compaction",
        json!({"revision": rev, "physical": true}),
    )
    .await;
    assert!(compacted.get("header").is_some(), "{compacted}");
    let cut_at = std::time::Instant::now();
    proxy.restore();

    // The broker reloads, keeps running, and takes keyspace changes again.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !broker.stderr().contains("reloaded the keyspace") {
        assert!(
            broker.is_running(),
            "the broker exited on a compacted watch:\n{}",
            broker.stderr()
        );
        assert!(
            std::time::Instant::now() < deadline,
            "no reload:\n{}",
            broker.stderr()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    eprintln!(
        "keyspace reloaded {:?} after the outage ended",
        cut_at.elapsed()
    );
    let ch = broker.connect().await;
    create_journals(&ch, &["compact/b"]).await;
    append_when_assigned(&ch, "compact/b", b"new\n", &broker).await;
    append_when_assigned(&ch, "compact/a", b"after\n", &broker).await;
    eprintln!("served again {:?} after the outage ended", cut_at.elapsed());
    assert!(broker.is_running());
    assert_eq!(read_content(&ch, "compact/a").await, b"before\nafter\n");

    // The read opened before the outage was never dropped: it gets the new append.
    let mut got = Vec::new();
    while got.len() < 6 {
        let msg = reading
            .next_within(std::time::Duration::from_secs(10))
            .await
            .expect("the blocked read delivers the next append")
            .expect("the blocked read is still open")
            .expect("not ended");
        got.extend_from_slice(&msg.content);
    }
    assert_eq!(got, b"after\n");
}

/// A broker whose link to etcd is blackholed (connections open, nothing answered) for
/// longer than its lease exits within about the lease's TTL, with an error saying why,
/// as Gazette's does when its etcd session ends: etcd may have expired its lease and
/// handed its journals to others, so it must not go on serving them. Before, it noticed
/// only once etcd answered again (and said its lease had expired), however long that
/// took.
#[tokio::test]
async fn etcd_blackholed_past_the_lease_exits() {
    let Some(url) = etcd_url() else { return };
    let (proxy, mut broker) = broker_via_proxy(&url, "blackhole", "2s").await;
    let ch = broker.connect().await;
    create_journals(&ch, &["blackhole/a"]).await;
    append_when_assigned(&ch, "blackhole/a", b"before\n", &broker).await;
    // Renewals keep it alive well past its TTL while etcd answers.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert!(broker.is_running(), "{}", broker.stderr());

    proxy.freeze();
    let frozen = std::time::Instant::now();
    let deadline = frozen + std::time::Duration::from_secs(12);
    while broker.is_running() {
        assert!(
            std::time::Instant::now() < deadline,
            "the broker still runs 12 s into an etcd blackhole, with a 2 s lease:\n{}",
            broker.stderr()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let took = frozen.elapsed();
    eprintln!("the broker exited {took:?} into the blackhole");
    proxy.thaw();
    let stderr = broker.stderr();
    assert!(
        stderr.contains("unable to keep member lease alive")
            && stderr.contains("is etcd reachable?"),
        "the broker says why it stopped:\n{stderr}"
    );
    assert!(
        took <= std::time::Duration::from_secs(4),
        "exited {took:?} into the blackhole; the lease's TTL is 2 s:\n{stderr}"
    );
}
