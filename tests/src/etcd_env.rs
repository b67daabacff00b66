//! The real etcd some tests need: `COURANT_TEST_ETCD` (an etcd client URL, set by
//! `.ci/steps/50-etcd.sh`), and a key prefix of their own for each run.

/// The etcd URL, or `None` (having printed why the test is skipped).
pub fn test_etcd() -> Option<String> {
    let url = std::env::var("COURANT_TEST_ETCD")
        .ok()
        .filter(|u| !u.is_empty());
    if url.is_none() {
        eprintln!("skipping: COURANT_TEST_ETCD is not set (run .ci/steps/50-etcd.sh)");
    }
    url
}

/// A keyspace prefix no other test or run uses.
pub fn unique_etcd_prefix(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("/courant-test/{name}-{nanos:x}-{}", std::process::id())
}
