//! Journal names never escape a store's root: Apply of a journal whose name (or
//! whose store's find/replace rewriting) would map outside the root of its fragment store
//! is refused with a message naming the journal, whatever the store kind, and nothing is
//! written outside the broker's file root.

use courant_tests::protocol::Status;
use courant_tests::protocol::grpc::Code;
use courant_tests::*;

fn spec_with_store(name: &str, store: Option<&str>) -> courant_tests::protocol::JournalSpec {
    let mut s = spec(name, &[]);
    if let Some(url) = store {
        s.fragment.as_mut().unwrap().stores = vec![url.to_string()];
    }
    s.fragment.as_mut().unwrap().length = 1024;
    s
}

fn tree(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            out.push(e.path().display().to_string());
            if e.path().is_dir() {
                out.extend(tree(&e.path()));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_refuses_names_that_leave_a_stores_root() {
    within(60, async {
        let broker = Broker::start(&[]).await;
        let ch = broker.connect().await;
        // data dir = <tmp>/data, file root = <tmp>/data/fragments.
        let outside = broker.data_dir().parent().unwrap().to_path_buf();
        let before = tree(&outside);

        let cases: [(&str, Option<&str>); 6] = [
            ("../../escape/j", None), // the default file:/// store
            ("../../escape/j", Some("file:///")),
            (
                "../../../escape/j",
                Some("s3://bucket/tenant/?region=us-east-1"),
            ),
            ("../escape/j", Some("gs://bucket/tenant/")),
            ("../escape/j", Some("azure://container/tenant/")),
            // A clean name that the store's rewriting turns into `../`.
            ("evil/j", Some("file:///?find=evil%2F&replace=..%2F..%2F")),
        ];
        for (name, store) in cases {
            let res = apply(&ch, vec![upsert(spec_with_store(name, store))]).await;
            let err = res.expect_err(&format!("Apply of {name:?} in {store:?} must be refused"));
            assert_eq!(err.code, Code::Unknown, "{name:?} {store:?}: {err:?}");
            assert!(
                err.message.contains(&format!("{name:?}"))
                    && err.message.contains("leave")
                    && err.message.contains("root"),
                "{name:?} {store:?}: message: {}",
                err.message
            );
            assert!(
                !err.message.contains(&outside.display().to_string()),
                "no server path in {:?}",
                err.message
            );
        }

        // The refused journals do not exist; appends to them find nothing.
        let resp = append(&ch, "../../escape/j", &[b"x"])
            .await
            .expect("Append");
        assert_status(
            resp.status,
            Status::JournalNotFound,
            "append to a refused journal",
        );

        // A clean journal in the default store still works and persists inside the root.
        apply_specs(&ch, &[spec_with_store("inside/j", None)]).await;
        for _ in 0..3 {
            append_ok(&ch, "inside/j", &[b'y'; 1500]).await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        let after = tree(&outside);
        let new: Vec<_> = after
            .iter()
            .filter(|p| !before.contains(p))
            .filter(|p| !p.starts_with(&broker.data_dir().display().to_string()))
            .collect();
        assert!(new.is_empty(), "written outside the data dir: {new:?}");
        assert!(!outside.join("escape").exists());
    })
    .await;
}
