//! Reads that follow a journal into its fragment store: the broker rolls and persists
//! fragments to its default `file://` store (`<data-dir>/fragments`), and the client reads
//! them directly from the file system (with a file root), or through the broker (without
//! one), for every codec, from any offset.

mod common;

use bytes::Bytes;
use common::{client, proxied_client, read_counting, read_to_head};
use courant_client::protocol::CompressionCodec;
use courant_tests::{Broker, compressible_data, spec, within};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Persisted fragment files of `journal` under `root`: (path, begin, end).
fn persisted(root: &Path, journal: &str) -> Vec<(PathBuf, i64, i64)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(root.join(journal)) else {
        return out;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let mut parts = name.split('-');
        let (Some(b), Some(e2)) = (parts.next(), parts.next()) else {
            continue;
        };
        if let (Ok(b), Ok(end)) = (i64::from_str_radix(b, 16), i64::from_str_radix(e2, 16)) {
            out.push((e.path(), b, end));
        }
    }
    out.sort_by_key(|f| f.1);
    out
}

/// Waits until persisted fragments cover `[0, end)`.
async fn await_persisted(root: &Path, journal: &str, end: i64) -> Vec<(PathBuf, i64, i64)> {
    for _ in 0..300 {
        let files = persisted(root, journal);
        let mut at = 0;
        for (_, b, e) in &files {
            if *b <= at && *e > at {
                at = *e;
            }
        }
        if at >= end {
            return files;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "{journal}: fragments never covered [0, {end}) under {}",
        root.display()
    );
}

const CODECS: [CompressionCodec; 4] = [
    CompressionCodec::None,
    CompressionCodec::Gzip,
    CompressionCodec::Snappy,
    CompressionCodec::Zstandard,
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_follow_persisted_fragments_for_every_codec() {
    within(120, async {
        let broker = Broker::start(&[]).await;
        let root = broker.data_dir().join("fragments");
        let c = client(&broker, None);
        let mut written = Vec::new();
        for (i, codec) in CODECS.into_iter().enumerate() {
            let journal = format!("client/codec/{}", codec.as_str_name().to_lowercase());
            let mut s = spec(&journal, &[]);
            let f = s.fragment.as_mut().unwrap();
            f.length = 1024;
            f.compression_codec = codec as i32;
            c.apply_specs(&[s]).await.unwrap();
            // Each append is over the fragment length, so the next one rolls the spool.
            let all = compressible_data(8 * 1500, i as u32 + 1);
            for piece in all.chunks(1500) {
                c.append(&journal, Bytes::copy_from_slice(piece))
                    .await
                    .unwrap();
            }
            written.push((journal, all));
        }
        let direct = client(&broker, Some(&root));
        let via_broker = client(&broker, None);
        let proxied = proxied_client(&broker);
        for (journal, all) in &written {
            // Everything but the last append is persisted.
            let files = await_persisted(&root, journal, 7 * 1500).await;
            assert!(files.len() >= 7, "{journal}: {files:?}");
            // ListFragments shows them with their file:// URLs, signed when asked.
            let listed = c
                .fragments(journal, Some(Duration::from_secs(60)))
                .await
                .unwrap();
            let persisted: Vec<_> = listed
                .iter()
                .filter(|f| !f.spec.as_ref().unwrap().backing_store.is_empty())
                .collect();
            assert!(persisted.len() >= 7, "{journal}: {listed:?}");
            for f in persisted {
                let url = &f.signed_url;
                assert!(url.starts_with(&format!("file:///{journal}/")), "{url}");
            }
            for (name, c) in [
                ("direct", &direct),
                ("via broker", &via_broker),
                ("proxied", &proxied),
            ] {
                for from in [0, 1000, 1500, 4321] {
                    let (got, fetched) = read_counting(c, journal, from).await.unwrap();
                    assert!(
                        got == all[from as usize..],
                        "{journal}, {name}, from {from}"
                    );
                    // Only the client with a file root reads the store itself.
                    if name == "direct" {
                        assert!(fetched >= 4, "{journal}, from {from}: {fetched} fetched");
                    } else {
                        assert_eq!(fetched, 0, "{journal}, {name}");
                    }
                }
            }
        }
    })
    .await
}

/// The direct path really reads the store: a client given a copy of the store in which
/// one fragment's bytes were changed (same length) reads the changed bytes, while the
/// broker still serves the originals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_reads_come_from_the_file_root_and_stay_inside_it() {
    within(60, async {
        let broker = Broker::start(&[]).await;
        let root = broker.data_dir().join("fragments");
        let c = client(&broker, None);
        let journal = "client/direct";
        let mut s = spec(journal, &[]);
        s.fragment.as_mut().unwrap().length = 1024;
        c.apply_specs(&[s]).await.unwrap();
        let all = compressible_data(4 * 1500, 9);
        for piece in all.chunks(1500) {
            c.append(journal, Bytes::copy_from_slice(piece))
                .await
                .unwrap();
        }
        let files = await_persisted(&root, journal, 3 * 1500).await;

        let copy = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(copy.path().join(journal)).unwrap();
        for (path, _, _) in &files {
            let to = copy.path().join(journal).join(path.file_name().unwrap());
            std::fs::copy(path, to).unwrap();
        }
        let (first, b, e) = &files[0];
        let changed = copy.path().join(journal).join(first.file_name().unwrap());
        std::fs::write(&changed, vec![b'#'; (e - b) as usize]).unwrap();

        let got = read_to_head(&client(&broker, Some(copy.path())), journal, 0)
            .await
            .unwrap();
        assert_eq!(got.len(), all.len());
        assert!(
            got[..*e as usize].iter().all(|&x| x == b'#'),
            "read from the copy"
        );
        assert!(got[*e as usize..] == all[*e as usize..]);
        let original = read_to_head(&client(&broker, None), journal, 0)
            .await
            .unwrap();
        assert!(original == all);

        // A fragment that is missing from the client's root is an error naming the journal,
        // offset and location once retries run out.
        std::fs::remove_file(&changed).unwrap();
        let short = courant_client::Client::with_options(courant_client::ClientOptions {
            endpoints: vec![broker.endpoint()],
            file_root: Some(copy.path().to_path_buf()),
            retry_timeout: Duration::from_millis(500),
            ..Default::default()
        })
        .unwrap();
        let err = read_to_head(&short, journal, 10).await.unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("journal client/direct at offset 10"),
            "{text}"
        );
        assert!(text.contains("fragment file:///client/direct/"), "{text}");
    })
    .await
}
