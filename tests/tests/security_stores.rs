//! Journal names never escape a store's root, against real store servers: for
//! each store kind whose server `.ci/steps/30-stores.sh` started (SeaweedFS S3, azurite,
//! fake-gcs-server; the `COURANT_TEST_*` variables it exports), Apply of a journal whose
//! name climbs out of the store's prefix is refused with a message naming it, while a clean
//! journal in the same store is accepted and takes appends. The `file://` store is covered
//! end to end by `security_traversal.rs`; each store's key mapping by the broker's unit
//! tests (`stores::*::*leaving*`). Without the variables the kind is skipped, with a line
//! saying so.

use courant_tests::protocol::grpc::Code;
use courant_tests::*;

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn prefix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("courant-test/traversal-{nanos:x}-{}/", std::process::id())
}

/// Store URLs of the servers the environment names.
fn stores() -> Vec<String> {
    let mut out = Vec::new();
    match var("COURANT_TEST_S3_ENDPOINT") {
        Some(endpoint) => out.push(format!(
            "s3://{}/{}?endpoint={}",
            var("COURANT_TEST_S3_BUCKET").unwrap_or_else(|| "fragments".into()),
            prefix(),
            endpoint.trim_end_matches('/')
        )),
        None => eprintln!("SKIP s3: COURANT_TEST_S3_ENDPOINT is not set (.ci/steps/30-stores.sh)"),
    }
    match var("COURANT_TEST_AZURE_CONTAINER") {
        Some(c) => out.push(format!("azure://{c}/{}", prefix())),
        None => eprintln!("SKIP azure: COURANT_TEST_AZURE_CONTAINER is not set"),
    }
    match var("COURANT_TEST_GCS_BUCKET") {
        Some(b) => out.push(format!("gs://{b}/{}", prefix())),
        None => eprintln!("SKIP gcs: COURANT_TEST_GCS_BUCKET is not set"),
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_refuses_escaping_names_in_every_real_store() {
    let stores = stores();
    if stores.is_empty() {
        return;
    }
    within(120, async {
        let broker = Broker::start(&[]).await;
        let ch = broker.connect().await;
        for (i, store) in stores.iter().enumerate() {
            let mut bad = spec("../../escape/j", &[]);
            bad.fragment.as_mut().unwrap().stores = vec![store.clone()];
            let err = apply(&ch, vec![upsert(bad)]).await.expect_err(&format!(
                "Apply of ../../escape/j in {store} must be refused"
            ));
            assert_eq!(err.code, Code::Unknown, "{store}: {err:?}");
            assert!(
                err.message.contains("\"../../escape/j\"")
                    && err.message.contains("leave")
                    && err.message.contains("root"),
                "{store}: {}",
                err.message
            );

            let name = format!("sec/ok-{i}");
            let mut good = spec(&name, &[]);
            good.fragment.as_mut().unwrap().stores = vec![store.clone()];
            apply_specs(&ch, &[good]).await;
            append_ok(&ch, &name, b"inside the root\n").await;
        }
    })
    .await;
}
