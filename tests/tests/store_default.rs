//! `--store.default ""`: journals whose spec names no store are never persisted (Gazette's
//! behaviour), while their fragments stay local, readable and recoverable after `kill -9`.

use bytes::Bytes;
use courant_tests::protocol::{AppendRequest, FragmentsRequest, FragmentsResponse, Status};
use courant_tests::*;
use std::time::Duration;

fn files_under(dir: &std::path::Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            let p = e.path();
            if p.is_dir() { files_under(&p) } else { 1 }
        })
        .sum()
}

async fn append(ch: &courant_tests::protocol::grpc::Channel, journal: &str, data: &[u8]) {
    let first = AppendRequest {
        journal: journal.into(),
        ..Default::default()
    };
    let resp = append_full(ch, first, &[Bytes::copy_from_slice(data)], true)
        .await
        .result
        .expect("Append");
    assert_status(resp.status, Status::Ok, "append");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journals_without_stores_stay_local_without_a_default_store() {
    within(60, async {
        let mut broker = Broker::start(&["--store.default", ""]).await;
        let ch = broker.connect().await;
        let mut s = spec("local/only", &[]);
        s.fragment.as_mut().unwrap().length = 1024;
        apply_specs(&ch, &[s]).await;

        // Several appends over the fragment length: each later one rolls the spool.
        let mut expect = Vec::new();
        for i in 0..6u8 {
            let data = vec![b'a' + i; 1500];
            append(&ch, "local/only", &data).await;
            expect.extend_from_slice(&data);
        }
        // Give an uploader (if one wrongly ran) time to write to the default store's root.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(
            files_under(&broker.data_dir().join("fragments")),
            0,
            "nothing may be persisted without a store"
        );

        let resp: FragmentsResponse = ch
            .unary(
                LIST_FRAGMENTS,
                &FragmentsRequest {
                    journal: "local/only".into(),
                    ..Default::default()
                },
            )
            .await
            .expect("ListFragments");
        assert_status(resp.status, Status::Ok, "ListFragments");
        assert!(
            resp.fragments.len() >= 2,
            "rolled fragments: {:?}",
            resp.fragments
        );
        for f in &resp.fragments {
            let spec = f.spec.as_ref().unwrap();
            assert!(spec.backing_store.is_empty(), "local fragment: {spec:?}");
            assert_eq!(spec.mod_time, 0);
        }
        let (content, head) = read_all(&ch, "local/only", 0).await;
        assert_eq!(content, expect);
        assert_eq!(head, expect.len() as i64);

        // Local fragments are recovered after a crash.
        drop(ch);
        broker.kill9();
        broker.restart().await;
        let ch = broker.connect().await;
        let (content, _) = read_all(&ch, "local/only", 0).await;
        assert_eq!(content, expect, "every acknowledged byte survives kill -9");
    })
    .await
}
