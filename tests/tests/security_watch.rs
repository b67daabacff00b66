//! `--broker.watch-delay` (Gazette's flag): watched etcd changes are applied after
//! the delay, so an Apply (answered once this broker's keyspace holds its revision) takes at
//! least the delay, and can be fast with `0`. Needs `COURANT_TEST_ETCD` (set by
//! `.ci/steps/50-etcd.sh`); skipped with a printed reason otherwise.

use courant_tests::*;
use std::time::{Duration, Instant};

/// The fastest and slowest of three Applies on a broker with `--broker.watch-delay delay`.
async fn apply_times(url: &str, delay: &str) -> (Duration, Duration) {
    let p = courant_tests::etcd_env::unique_etcd_prefix("watch-delay");
    let broker = Broker::start(&[
        "--etcd.address",
        url,
        "--etcd.prefix",
        &p,
        "--broker.id",
        "watcher",
        "--broker.watch-delay",
        delay,
    ])
    .await;
    let ch = broker.connect().await;
    let (mut fastest, mut slowest) = (Duration::MAX, Duration::ZERO);
    for i in 0..3 {
        let started = Instant::now();
        apply_specs(&ch, &[spec(&format!("watch/j{i}"), &[])]).await;
        fastest = fastest.min(started.elapsed());
        slowest = slowest.max(started.elapsed());
    }
    (fastest, slowest)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watched_changes_wait_for_the_watch_delay() {
    let Some(url) = std::env::var("COURANT_TEST_ETCD")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        eprintln!("skipping: COURANT_TEST_ETCD is not set (run .ci/steps/50-etcd.sh)");
        return;
    };
    within(60, async {
        let (delayed, _) = apply_times(&url, "1500ms").await;
        assert!(delayed >= Duration::from_millis(1450), "{delayed:?}");
        // Without the delay an Apply can be fast (the fastest of three, so that a loaded
        // machine's slow first Apply does not count).
        let (immediate, _) = apply_times(&url, "0").await;
        assert!(immediate < Duration::from_millis(1000), "{immediate:?}");
    })
    .await;
}
