//! Route following in a two-broker cluster on a real etcd: a client that knows only one
//! broker learns each journal's Route from response Headers and then appends to, and
//! reads from, the primary directly (shown by stopping the broker it was given). Needs
//! `COURANT_TEST_ETCD` (an etcd client URL, set by `.ci/steps/50-etcd.sh`); without it the
//! test prints why and passes.

mod common;

use bytes::Bytes;
use common::{client, proxied_client, read_counting};
use courant_client::protocol::LabelSelector;
use courant_tests::{Broker, spec, within};
use std::time::Duration;

async fn start(etcd: &str, prefix: &str, id: &str) -> Broker {
    Broker::start(&[
        "--etcd.address",
        etcd,
        "--etcd.prefix",
        prefix,
        "--etcd.lease",
        "2s",
        "--broker.zone",
        "zone",
        "--broker.id",
        id,
    ])
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_of_one_broker_follows_routes_to_the_other() {
    let Some(etcd) = courant_tests::etcd_env::test_etcd() else {
        return;
    };
    within(90, async {
        let prefix = courant_tests::etcd_env::unique_etcd_prefix("client-routes");
        let a = start(&etcd, &prefix, "broker-a").await;
        let mut b = start(&etcd, &prefix, "broker-b").await;
        let names: Vec<String> = (0..6).map(|i| format!("client/routes/j{i}")).collect();
        let specs: Vec<_> = names.iter().map(|n| spec(n, &[])).collect();
        let setup = proxied_client(&b);
        setup.apply_specs(&specs).await.unwrap();

        // Wait until every journal has a primary, and pick one that broker A leads.
        let mut led_by_a = None;
        for _ in 0..200 {
            let listed = setup.list(LabelSelector::default()).await.unwrap();
            let primaries: Vec<(String, String)> = listed
                .iter()
                .filter_map(|j| {
                    let r = j.route.as_ref()?;
                    let p = usize::try_from(r.primary).ok()?;
                    Some((j.spec.as_ref()?.name.clone(), r.endpoints.get(p)?.clone()))
                })
                .collect();
            if primaries.len() == names.len() {
                led_by_a = primaries.into_iter().find(|(_, e)| *e == a.endpoint());
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (journal, _) = led_by_a.expect("broker A leads one of six journals");

        // A routing client given only broker B: its first append is proxied by B, and the
        // response's Header teaches it A's endpoint.
        let c = client(&b, None);
        c.append(&journal, Bytes::from_static(b"first;"))
            .await
            .unwrap();
        let route = c.route(&journal).expect("a cached route");
        assert_eq!(route.endpoints[route.primary as usize], a.endpoint());

        // A reader of a fresh client given only B asks B not to proxy: B, not a member,
        // answers NOT_JOURNAL_BROKER with the Route, and the reader follows it to A.
        let fresh = client(&b, None);
        let (got, _) = read_counting(&fresh, &journal, 0).await.unwrap();
        assert_eq!(got, b"first;");

        // With B gone, the routed client still appends to and reads from A.
        b.kill9();
        c.append(&journal, Bytes::from_static(b"second;"))
            .await
            .unwrap();
        let (got, _) = read_counting(&c, &journal, 0).await.unwrap();
        assert_eq!(got, b"first;second;");
        drop(a);
    })
    .await
}
