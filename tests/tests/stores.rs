//! Fragments in object storage, through the `file://` store (the single-node default and
//! `--broker.file-root`): uploads after a roll, listings of fragments written by other
//! tools, reads of persisted history (streamed or by `fragment_url`), ListFragments with
//! signed URLs, store health and its gating of appends, and restarts.
//!
//! Spec §10 scenarios covered: 12, 14, 22, 24 (first half), 35 (persisted part), 37 (layout
//! on disk), 38 (resume after persistence).

use bytes::Bytes;
use courant_tests::protocol::{
    AppendRequest, CompressionCodec, FragmentStoreHealthRequest, FragmentStoreHealthResponse,
    FragmentsRequest, FragmentsResponse, JournalSpec, ReadRequest, Status,
};
use courant_tests::*;
use sha1::Digest;
use std::path::{Path, PathBuf};
use std::time::Duration;

const HEALTH: &str = "/protocol.Journal/FragmentStoreHealth";

fn store_spec(name: &str, codec: CompressionCodec, stores: &[&str]) -> JournalSpec {
    let mut s = spec(name, &[]);
    let f = s.fragment.as_mut().unwrap();
    f.length = 64 << 10;
    f.compression_codec = codec as i32;
    f.stores = stores.iter().map(|s| s.to_string()).collect();
    s
}

fn hex_sum(data: &[u8]) -> String {
    hex::encode(sha1::Sha1::digest(data))
}

/// Gazette's content name of `[begin, begin+len)` holding `data`.
fn content_name(begin: i64, data: &[u8], ext: &str) -> String {
    format!(
        "{begin:016x}-{:016x}-{}{ext}",
        begin + data.len() as i64,
        hex_sum(data)
    )
}

/// Fragment files (not temporaries) under `dir`, recursively: (relative path, bytes).
fn fragment_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                pending.push(p);
            } else if !e.file_name().to_string_lossy().starts_with('.') {
                let rel = p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
                out.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// (begin, end) of a content name.
fn span_of(name: &str) -> (i64, i64) {
    let base = name.rsplit('/').next().unwrap();
    let mut parts = base.split('-');
    let begin = i64::from_str_radix(parts.next().unwrap(), 16).unwrap();
    let end = i64::from_str_radix(parts.next().unwrap(), 16).unwrap();
    (begin, end)
}

/// Waits until the persisted fragments under `dir` cover `[0, end)` contiguously.
async fn await_persisted(dir: &Path, end: i64) -> Vec<(String, Vec<u8>)> {
    for _ in 0..300 {
        let files = fragment_files(dir);
        let mut spans: Vec<_> = files.iter().map(|(n, _)| span_of(n)).collect();
        spans.sort();
        let mut at = 0;
        for (b, e) in spans {
            if b <= at && e > at {
                at = e;
            }
        }
        if at >= end {
            return files;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("fragments under {} never covered [0, {end})", dir.display());
}

async fn list_fragments(ch: &protocol::grpc::Channel, req: FragmentsRequest) -> FragmentsResponse {
    let mut call = ch.call(LIST_FRAGMENTS).await.expect("ListFragments call");
    call.sender.send(&req).await.expect("send");
    let _ = call.sender.close();
    finish_unary_response(&mut call)
        .await
        .expect("ListFragments")
}

async fn store_health(
    ch: &protocol::grpc::Channel,
    req: FragmentStoreHealthRequest,
) -> FragmentStoreHealthResponse {
    let mut call = ch.call(HEALTH).await.expect("FragmentStoreHealth call");
    call.sender.send(&req).await.expect("send");
    let _ = call.sender.close();
    finish_unary_response(&mut call)
        .await
        .expect("FragmentStoreHealth")
}

fn root_arg(root: &Path) -> String {
    format!("--broker.file-root={}", root.display())
}

/// Appends `total` bytes in chunks of `chunk`, each its own append; returns the bytes.
async fn append_bytes(
    ch: &protocol::grpc::Channel,
    journal: &str,
    total: usize,
    chunk: usize,
    seed: u32,
) -> Vec<u8> {
    let all = compressible_data(total, seed);
    for piece in all.chunks(chunk) {
        append_ok(ch, journal, piece).await;
    }
    all
}

/// Round trip with every codec through a file store outside the data directory: append,
/// let the fragments persist, wipe the broker's data directory, start a fresh broker on
/// the same store, and read every byte back. Raw fragments' SHA-1 match their names.
#[tokio::test]
async fn round_trip_every_codec_through_a_wiped_broker() {
    within(120, async {
        let root = tempfile::tempdir().unwrap();
        let arg = root_arg(root.path());
        let mut broker = Broker::start(&[&arg]).await;
        let ch = broker.connect().await;
        let codecs = [
            (CompressionCodec::None, "raw"),
            (CompressionCodec::Gzip, "gz"),
            (CompressionCodec::Zstandard, "zst"),
            (CompressionCodec::Snappy, "sz"),
        ];
        let mut specs = Vec::new();
        for (codec, ext) in codecs {
            specs.push(store_spec(
                &format!("round/trip/{ext}"),
                codec,
                &["file:///"],
            ));
        }
        apply_specs(&ch, &specs).await;
        let mut written = Vec::new();
        for (i, (_, ext)) in codecs.iter().enumerate() {
            let journal = format!("round/trip/{ext}");
            // 1 MiB in 32 KiB appends over 64 KiB fragments: many fragments.
            let mut all = append_bytes(&ch, &journal, 1 << 20, 32 << 10, i as u32 + 1).await;
            // Push the last fragment over the length, so that the next append rolls it.
            let extra = compressible_data(65 << 10, 99);
            append_ok(&ch, &journal, &extra).await;
            all.extend_from_slice(&extra);
            append_ok(&ch, &journal, b"!").await;
            written.push((journal, [all, b"!".to_vec()].concat()));
        }
        let (mut fragments, mut bytes) = (0usize, 0usize);
        for (journal, all) in &written {
            let files = await_persisted(&root.path().join(journal), all.len() as i64 - 1).await;
            fragments += files.len();
            bytes += files.iter().map(|(_, b)| b.len()).sum::<usize>();
            assert!(
                files.len() > 4,
                "{journal}: expected many fragments, got {}",
                files.len()
            );
            for (name, bytes) in &files {
                let (b, e) = span_of(name);
                if name.ends_with(".raw") {
                    assert_eq!(
                        name.as_str(),
                        content_name(b, &all[b as usize..e as usize], ".raw"),
                        "{journal}: a raw fragment's name is its content's"
                    );
                    assert_eq!(bytes.as_slice(), &all[b as usize..e as usize]);
                } else {
                    let ext = journal.rsplit('/').next().unwrap();
                    assert!(name.ends_with(&format!(".{ext}")), "{name}");
                    // Compressed, and named by the SHA-1 of the uncompressed bytes.
                    assert_eq!(
                        name.split('-').nth(2).unwrap().split('.').next().unwrap(),
                        hex_sum(&all[b as usize..e as usize])
                    );
                }
            }
        }
        // Store metrics: one completed upload per fragment, its stored bytes, nothing
        // queued or in flight once done, and a healthy store.
        let want = [
            ("courant_store_uploads_completed_total", fragments as f64),
            ("courant_store_upload_bytes_total", bytes as f64),
            ("courant_store_uploads_in_flight", 0.0),
            ("courant_store_upload_queue_depth", 0.0),
            ("courant_store_uploads_failed_total", 0.0),
            ("courant_store_listing_errors_total", 0.0),
            ("courant_store_healthy{store=\"file:///\"}", 1.0),
        ];
        let mut metrics = String::new();
        for _ in 0..100 {
            metrics = scrape_metrics(&broker).await;
            if want.iter().all(|(k, v)| metric(&metrics, k) == Some(*v)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for (k, v) in want {
            assert_eq!(metric(&metrics, k), Some(v), "{k} in:\n{metrics}");
        }
        // Let the spool files of persisted fragments go, then wipe the broker's data.
        drop(ch);
        broker.kill9();
        std::fs::remove_dir_all(broker.data_dir()).unwrap();
        std::fs::create_dir_all(broker.data_dir()).unwrap();
        broker.restart().await;
        let ch = broker.connect().await;
        apply_specs(&ch, &specs).await;
        for (journal, all) in &written {
            // The last byte was in a spool that the wipe lost; everything else is in the store.
            let persisted = all.len() - 1;
            let (msgs, end) = read_msgs(
                &ch,
                ReadRequest {
                    journal: journal.clone(),
                    offset: 0,
                    end_offset: persisted as i64,
                    ..Default::default()
                },
            )
            .await;
            end.unwrap_or_else(|e| panic!("{journal}: {e}"));
            let got = content_of(&msgs);
            assert_eq!(got.len(), persisted, "{journal}: bytes read back");
            assert!(
                got == all[..persisted],
                "{journal}: content read back differs"
            );
            // Every metadata message names a persisted fragment with a file:// URL.
            for m in msgs.iter().filter(|m| m.fragment.is_some()) {
                let f = m.fragment.as_ref().unwrap();
                assert_eq!(f.backing_store, "file:///");
                assert!(f.mod_time > 0);
                assert!(
                    m.fragment_url.starts_with("file:///round/trip/"),
                    "{}",
                    m.fragment_url
                );
            }
        }
    })
    .await;
}

/// The broker's `/debug/metrics` text.
async fn scrape_metrics(b: &Broker) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", b.port()))
        .await
        .unwrap();
    tcp.write_all(b"GET /debug/metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut raw = Vec::new();
    tcp.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    text
}

/// The value of the sample `series` (name with labels, exactly as rendered).
fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// Writes a raw fragment file into a file store as another tool would.
fn write_fragment(root: &Path, journal: &str, begin: i64, content: &[u8]) -> PathBuf {
    let dir = root.join(journal);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(content_name(begin, content, ".raw"));
    std::fs::write(&path, content).unwrap();
    path
}

/// Scenario 22 over a fragment file written by another tool, plus a `.gz` written by the
/// `gzip` CLI (when present) and unparseable files beside them, which are skipped.
#[tokio::test]
async fn scenario_22_foreign_fragments_are_listed_and_served() {
    within(60, async {
        let root = tempfile::tempdir().unwrap();
        let arg = root_arg(root.path());
        write_fragment(root.path(), "remote/journal", 95, b"remote fragment data!");
        std::fs::write(
            root.path().join("remote/journal/README.txt"),
            b"not a fragment",
        )
        .unwrap();
        let broker = Broker::start(&[&arg]).await;
        let ch = broker.connect().await;
        apply_specs(
            &ch,
            &[store_spec(
                "remote/journal",
                CompressionCodec::Snappy,
                &["file:///"],
            )],
        )
        .await;

        let (msgs, end) = read_msgs(
            &ch,
            ReadRequest {
                journal: "remote/journal".into(),
                offset: 100,
                ..Default::default()
            },
        )
        .await;
        end.unwrap();
        assert_eq!(msgs.len(), 3, "{msgs:?}");
        let f = msgs[0].fragment.as_ref().unwrap();
        assert_eq!((msgs[0].offset, f.begin, f.end), (100, 95, 116));
        assert_eq!(f.backing_store, "file:///");
        assert!(f.mod_time > 0);
        assert_eq!(
            msgs[0].fragment_url,
            format!(
                "file:///remote/journal/{}",
                content_name(95, b"remote fragment data!", ".raw")
            )
        );
        assert_eq!(
            (msgs[1].offset, &msgs[1].content[..]),
            (100, &b"e fragment data!"[..])
        );
        assert_status(
            msgs[2].status,
            Status::OffsetNotYetAvailable,
            "after the fragment",
        );
        assert_eq!((msgs[2].offset, msgs[2].write_head), (116, 116));

        // do_not_proxy: metadata with the URL, then EOF; the client fetches it itself.
        let (msgs, end) = read_msgs(
            &ch,
            ReadRequest {
                journal: "remote/journal".into(),
                offset: 100,
                do_not_proxy: true,
                ..Default::default()
            },
        )
        .await;
        end.unwrap();
        assert_eq!(msgs.len(), 1, "{msgs:?}");
        assert!(!msgs[0].fragment_url.is_empty());

        // Blocking read at 10 with end_offset 20: jumps to the first fragment at 95, EOF.
        let (msgs, end) = read_msgs(
            &ch,
            ReadRequest {
                journal: "remote/journal".into(),
                offset: 10,
                end_offset: 20,
                block: true,
                ..Default::default()
            },
        )
        .await;
        end.unwrap();
        assert_eq!(msgs.len(), 1, "{msgs:?}");
        assert_eq!(msgs[0].offset, 95);

        // A gzip file written by the gzip CLI is read too (multi-member: two members).
        if std::process::Command::new("gzip")
            .arg("--version")
            .output()
            .is_ok()
        {
            let dir = root.path().join("gz/journal/a=1");
            std::fs::create_dir_all(&dir).unwrap();
            let mut gz = Vec::new();
            for part in [&b"hello, "[..], &b"world"[..]] {
                let out = std::process::Command::new("sh")
                    .arg("-c")
                    .arg(format!(
                        "printf '%s' '{}' | gzip -c",
                        String::from_utf8_lossy(part)
                    ))
                    .output()
                    .unwrap();
                gz.extend_from_slice(&out.stdout);
            }
            std::fs::write(dir.join(content_name(0, b"hello, world", ".gz")), gz).unwrap();
            apply_specs(
                &ch,
                &[store_spec(
                    "gz/journal",
                    CompressionCodec::Gzip,
                    &["file:///"],
                )],
            )
            .await;
            let (msgs, end) = read_msgs(
                &ch,
                ReadRequest {
                    journal: "gz/journal".into(),
                    offset: 0,
                    ..Default::default()
                },
            )
            .await;
            end.unwrap();
            assert_eq!(content_of(&msgs), b"hello, world");
            assert_eq!(msgs[0].fragment.as_ref().unwrap().path_postfix, "a=1");
        }
    })
    .await;
}

/// A corrupt or truncated object gives a read error for its range, not a crash.
#[tokio::test]
async fn corrupt_objects_fail_reads_not_the_broker() {
    within(60, async {
        let root = tempfile::tempdir().unwrap();
        let arg = root_arg(root.path());
        let dir = root.path().join("bad/journal");
        std::fs::create_dir_all(&dir).unwrap();
        // Garbage named as a gzip fragment [0,100), a truncated raw one [100,200).
        std::fs::write(
            dir.join(content_name(0, &[7u8; 100], ".gz")),
            b"\x1f\x8bnot really gzip",
        )
        .unwrap();
        std::fs::write(dir.join(content_name(100, &[8u8; 100], ".raw")), [8u8; 60]).unwrap();
        let mut broker = Broker::start(&[&arg]).await;
        let ch = broker.connect().await;
        apply_specs(
            &ch,
            &[store_spec(
                "bad/journal",
                CompressionCodec::Gzip,
                &["file:///"],
            )],
        )
        .await;
        for offset in [0, 100] {
            let (_, end) = read_msgs(
                &ch,
                ReadRequest {
                    journal: "bad/journal".into(),
                    offset,
                    ..Default::default()
                },
            )
            .await;
            let err = end.expect_err("a corrupt object must fail the read");
            assert!(err.message.contains("reading fragment"), "{err}");
        }
        assert!(broker.is_running());
        assert_serving(&broker).await;
    })
    .await;
}

/// Scenario 12: a journal whose store already holds [0,1024).
#[tokio::test]
async fn scenario_12_append_offsets_against_a_listed_fragment() {
    within(60, async {
        let root = tempfile::tempdir().unwrap();
        let arg = root_arg(root.path());
        write_fragment(root.path(), "listed/journal", 0, &[b'x'; 1024]);
        let broker = Broker::start(&[&arg]).await;
        let ch = broker.connect().await;
        apply_specs(
            &ch,
            &[store_spec(
                "listed/journal",
                CompressionCodec::None,
                &["file:///"],
            )],
        )
        .await;
        let at = |offset: i64| AppendRequest {
            journal: "listed/journal".into(),
            offset,
            ..Default::default()
        };
        let chunk = [Bytes::from_static(b"more")];
        let r = append_full(&ch, at(0), &chunk, true).await.result.unwrap();
        assert_status(r.status, Status::IndexHasGreaterOffset, "offset 0");
        let r = append_full(&ch, at(512), &chunk, true)
            .await
            .result
            .unwrap();
        assert_status(r.status, Status::WrongAppendOffset, "offset 512");
        let r = append_full(&ch, at(1024), &chunk, true)
            .await
            .result
            .unwrap();
        assert_status(r.status, Status::Ok, "offset 1024");
        assert_eq!(r.commit.as_ref().unwrap().begin, 1024);
        // Later appends need no offset.
        let r = append_ok(&ch, "listed/journal", b"again").await;
        assert_eq!(r.commit.as_ref().unwrap().begin, 1028);
        assert_eq!(read_all(&ch, "listed/journal", 1024).await.0, b"moreagain");
    })
    .await;
}

/// Scenario 14 and FragmentStoreHealth: a journal whose first store cannot be used (a
/// `gs://` store with neither `GOOGLE_APPLICATION_CREDENTIALS` nor `STORAGE_EMULATOR_HOST`
/// set) gets FRAGMENT_STORE_UNHEALTHY; the default file store is healthy and passes the
/// delete probe.
#[tokio::test]
async fn scenario_14_unhealthy_store_gates_appends() {
    within(60, async {
        let broker = Broker::start(&[]).await;
        let ch = broker.connect().await;
        apply_specs(
            &ch,
            &[store_spec(
                "sick/journal",
                CompressionCodec::None,
                &["gs://bucket/"],
            )],
        )
        .await;
        let r = append(&ch, "sick/journal", &[b"x"]).await.unwrap();
        assert_status(r.status, Status::FragmentStoreUnhealthy, "append");
        assert!(
            r.store_health_error
                .contains("fragment store gs://bucket/ unhealthy"),
            "{}",
            r.store_health_error
        );
        assert!(
            r.store_health_error
                .contains("gs:// stores need GOOGLE_APPLICATION_CREDENTIALS"),
            "{}",
            r.store_health_error
        );

        let h = store_health(
            &ch,
            FragmentStoreHealthRequest {
                fragment_store: "gs://bucket/".into(),
                ..Default::default()
            },
        )
        .await;
        assert_status(h.status, Status::FragmentStoreUnhealthy, "gs health");
        check_unrouted_header(h.header.as_ref().unwrap(), "gs health");
        let h = store_health(
            &ch,
            FragmentStoreHealthRequest {
                fragment_store: "file:///".into(),
                check_delete: true,
                check_delete_prefix: "probe/".into(),
            },
        )
        .await;
        assert_status(h.status, Status::Ok, "file health");
        assert_eq!(h.store_health_error, "");
        // Invalid requests are errors.
        let mut call = ch.call(HEALTH).await.unwrap();
        call.sender
            .send(&FragmentStoreHealthRequest {
                fragment_store: "ftp://x/".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        let _ = call.sender.close();
        assert!(
            finish_unary_response::<FragmentStoreHealthResponse>(&mut call)
                .await
                .is_err()
        );
    })
    .await;
}

/// Scenario 35 over persisted fragments with controlled mod times, and signed URLs.
#[tokio::test]
async fn scenario_35_list_fragments_with_mod_time_filters() {
    within(60, async {
        let root = tempfile::tempdir().unwrap();
        let arg = root_arg(root.path());
        let fixture = [
            (0i64, 40i64, 90i64),
            (40, 110, 101),
            (99, 130, 200),
            (131, 318, 150),
            (319, 400, 290),
        ];
        for (b, e, mt) in fixture {
            let p = write_fragment(
                root.path(),
                "frag/journal",
                b,
                &vec![b'f'; (e - b) as usize],
            );
            let ok = std::process::Command::new("touch")
                .arg("-d")
                .arg(format!("@{mt}"))
                .arg(&p)
                .status()
                .unwrap();
            assert!(ok.success());
        }
        let broker = Broker::start(&[&arg]).await;
        let ch = broker.connect().await;
        apply_specs(
            &ch,
            &[store_spec(
                "frag/journal",
                CompressionCodec::None,
                &["file:///"],
            )],
        )
        .await;
        let req = |begin: i64, end: i64| FragmentsRequest {
            journal: "frag/journal".into(),
            begin_mod_time: begin,
            end_mod_time: end,
            signature_ttl: Some(duration(60)),
            ..Default::default()
        };
        let spans = |r: &FragmentsResponse| -> Vec<(i64, i64)> {
            r.fragments
                .iter()
                .map(|f| {
                    let s = f.spec.as_ref().unwrap();
                    (s.begin, s.end)
                })
                .collect()
        };
        let all = list_fragments(&ch, req(0, 0)).await;
        assert_status(all.status, Status::Ok, "all");
        assert_eq!(
            spans(&all),
            vec![(0, 40), (40, 110), (99, 130), (131, 318), (319, 400)]
        );
        assert_eq!(all.next_page_token, 0);
        for f in &all.fragments {
            let s = f.spec.as_ref().unwrap();
            assert!(
                f.signed_url.starts_with("file:///frag/journal/"),
                "{}",
                f.signed_url
            );
            assert_eq!(s.backing_store, "file:///");
        }
        let mod_times: Vec<i64> = all
            .fragments
            .iter()
            .map(|f| f.spec.as_ref().unwrap().mod_time)
            .collect();
        assert_eq!(mod_times, vec![90, 101, 200, 150, 290]);
        assert_eq!(
            spans(&list_fragments(&ch, req(100, 180)).await),
            vec![(40, 110), (131, 318)]
        );
        assert_eq!(spans(&list_fragments(&ch, req(100, 0)).await).len(), 4);
        let page = list_fragments(
            &ch,
            FragmentsRequest {
                page_limit: 3,
                ..req(0, 0)
            },
        )
        .await;
        assert_eq!(page.next_page_token, 131);
        let rest = list_fragments(
            &ch,
            FragmentsRequest {
                next_page_token: 131,
                ..req(0, 0)
            },
        )
        .await;
        assert_eq!(spans(&rest), vec![(131, 318), (319, 400)]);
        assert!(
            list_fragments(&ch, req(10000, 20000))
                .await
                .fragments
                .is_empty()
        );
        // Without signatureTTL, no URLs.
        let unsigned = list_fragments(
            &ch,
            FragmentsRequest {
                signature_ttl: None,
                ..req(0, 0)
            },
        )
        .await;
        assert!(unsigned.fragments.iter().all(|f| f.signed_url.is_empty()));
    })
    .await;
}

/// Zero configuration: fragments persist under `<data-dir>/fragments`, the local spool
/// files of persisted fragments go away, and after a restart the journal appends on at
/// its write head (Courant's single-node rule) and reads its whole history.
#[tokio::test]
async fn default_store_persists_and_restarts_resume_at_the_head() {
    within(90, async {
        let mut broker = Broker::start(&[]).await;
        let ch = broker.connect().await;
        let mut s = spec("zero/config", &[]);
        s.fragment.as_mut().unwrap().length = 1024;
        apply_specs(&ch, &[s.clone()]).await;
        let first = append_bytes(&ch, "zero/config", 8 << 10, 2 << 10, 9).await;
        // Roll the last fragment (it is over the length) with a one-byte append.
        append_ok(&ch, "zero/config", b"#").await;
        let store = broker.data_dir().join("fragments/zero/config");
        let files = await_persisted(&store, first.len() as i64).await;
        assert!(files.iter().all(|(n, _)| n.ends_with(".raw")));
        // Persisted fragments' spool files are removed (only the current spool's remain).
        for _ in 0..100 {
            let spools: usize = walk_count(&broker.data_dir().join("spools"), ".spool");
            if spools <= 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(walk_count(&broker.data_dir().join("spools"), ".spool") <= 1);

        // Make the spool empty and persisted too: one more roll, then restart.
        append_ok(&ch, "zero/config", &[b'z'; 1100]).await;
        append_ok(&ch, "zero/config", b"!").await;
        let total = first.len() as i64 + 1 + 1100;
        await_persisted(&store, total).await;
        drop(ch);
        broker.kill9();
        broker.restart().await;
        let ch = broker.connect().await;
        let r = append_ok(&ch, "zero/config", b"after restart").await;
        assert_eq!(r.commit.as_ref().unwrap().begin, total + 1);
        let all = read_content(&ch, "zero/config").await;
        assert_eq!(all.len() as i64, total + 1 + 13);
        assert_eq!(&all[..first.len()], &first[..]);
        assert!(all.ends_with(b"!after restart"));
    })
    .await;
}

fn walk_count(dir: &Path, suffix: &str) -> usize {
    let mut n = 0;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                pending.push(p);
            } else if p.to_string_lossy().ends_with(suffix) {
                n += 1;
            }
        }
    }
    n
}
