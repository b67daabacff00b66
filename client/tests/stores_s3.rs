//! Reads that fetch persisted fragments from S3 (SeaweedFS, which checks SigV4) through
//! the presigned URLs brokers hand out, for every codec. `.ci/steps/30-stores.sh` starts
//! the server and exports `COURANT_TEST_S3_ENDPOINT`, `COURANT_TEST_S3_BUCKET` and the
//! `AWS_*` credentials; without them the test prints why and passes.

mod common;

use bytes::Bytes;
use common::{client, read_counting};
use courant_client::Client;
use courant_client::protocol::CompressionCodec;
use courant_tests::{Broker, compressible_data, spec, within};
use std::time::Duration;

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The store URL of a fresh key prefix, or `None` (with the reason printed) without S3.
fn s3_store(test: &str) -> Option<String> {
    let Some(endpoint) = var("COURANT_TEST_S3_ENDPOINT") else {
        eprintln!(
            "SKIP {test}: COURANT_TEST_S3_ENDPOINT is not set (run .ci/steps/30-stores.sh for S3 tests)"
        );
        return None;
    };
    for required in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"] {
        assert!(
            var(required).is_some(),
            "COURANT_TEST_S3_ENDPOINT is set but {required} is not"
        );
    }
    let bucket = var("COURANT_TEST_S3_BUCKET").unwrap_or_else(|| "fragments".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let prefix = format!(
        "courant-client-test/{test}-{nanos:x}-{}/",
        std::process::id()
    );
    Some(format!(
        "s3://{bucket}/{prefix}?endpoint={}",
        endpoint.trim_end_matches('/')
    ))
}

/// Waits until ListFragments shows persisted fragments covering `[0, end)`; returns how
/// many there are.
async fn await_persisted(c: &Client, journal: &str, end: i64) -> usize {
    for _ in 0..300 {
        let frags = c
            .fragments(journal, Some(Duration::from_secs(60)))
            .await
            .unwrap();
        let mut at = 0;
        let mut persisted = 0;
        for f in &frags {
            let spec = f.spec.as_ref().unwrap();
            if !spec.backing_store.is_empty() && spec.begin <= at && spec.end > at {
                assert!(
                    f.signed_url.starts_with("http"),
                    "{journal}: {}",
                    f.signed_url
                );
                at = spec.end;
                persisted += 1;
            }
        }
        if at >= end {
            return persisted;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{journal}: persisted fragments never covered [0, {end})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_fetch_fragments_from_s3_presigned_urls() {
    let Some(store) = s3_store("reads_fetch_fragments_from_s3_presigned_urls") else {
        return;
    };
    within(120, async {
        let broker = Broker::start(&[]).await;
        let c = client(&broker, None);
        let codecs = [
            CompressionCodec::None,
            CompressionCodec::Gzip,
            CompressionCodec::Snappy,
            CompressionCodec::Zstandard,
            CompressionCodec::GzipOffloadDecompression,
        ];
        for (i, codec) in codecs.into_iter().enumerate() {
            let journal = format!("client/s3/{}", codec.as_str_name().to_lowercase());
            let mut s = spec(&journal, &[]);
            let f = s.fragment.as_mut().unwrap();
            f.length = 1024;
            f.compression_codec = codec as i32;
            f.stores = vec![store.clone()];
            c.apply_specs(&[s]).await.unwrap();
            let all = compressible_data(6 * 1500, i as u32 + 11);
            for piece in all.chunks(1500) {
                c.append(&journal, Bytes::copy_from_slice(piece))
                    .await
                    .unwrap();
            }
            let persisted = await_persisted(&c, &journal, 5 * 1500).await;
            assert!(persisted >= 4, "{journal}: {persisted} persisted fragments");
            for from in [0, 1700] {
                let (got, fetched) = read_counting(&c, &journal, from).await.unwrap();
                assert!(got == all[from as usize..], "{journal} from {from}");
                assert!(
                    fetched >= 3,
                    "{journal} from {from}: {fetched} fetched from S3"
                );
            }
        }
    })
    .await
}
