//! Durable mode (`--tpc.durable`, Courant): every acknowledged append has been synced
//! (`fdatasync`) before its acknowledgement, and appends share syncs. Seen through
//! `/debug/metrics`: `courant_spool_syncs_total` (spool syncs) and
//! `courant_spool_sync_batches_total` (batches of syncs run together on a core). Without
//! the flag, no sync ever runs. Also: the flag reads back from `print-config`.

use bytes::Bytes;
use courant_tests::protocol::{AppendRequest, Status};
use courant_tests::*;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// The samples of `/debug/metrics` whose series starts with `name`, summed over labels.
async fn metric_sum(b: &Broker, name: &str) -> f64 {
    let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", b.port()))
        .await
        .expect("connect for metrics");
    tcp.write_all(b"GET /debug/metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut raw = Vec::new();
    tcp.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        text.contains(&format!("# TYPE {name} counter")),
        "no {name} family in:\n{text}"
    );
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .map(|l| {
            l.rsplit_once(' ')
                .and_then(|(_, v)| v.parse::<f64>().ok())
                .unwrap_or_else(|| panic!("bad sample {l:?}"))
        })
        .sum()
}

/// `writers` tasks, each appending `per_writer` records to journal `journal_of(w)`
/// concurrently; returns the number of acknowledged appends.
async fn concurrent_appends(
    b: &Broker,
    writers: u32,
    per_writer: u32,
    journal_of: fn(u32) -> String,
) -> u64 {
    let mut tasks = Vec::new();
    for w in 0..writers {
        let ch = b.connect().await;
        tasks.push(tokio::spawn(async move {
            for seq in 0..per_writer {
                let rec = make_record(w, seq, 100);
                let out = append_full(
                    &ch,
                    AppendRequest {
                        journal: journal_of(w),
                        ..Default::default()
                    },
                    &[Bytes::from(rec.clone())],
                    true,
                )
                .await;
                let resp = out.result.expect("durable append");
                assert_status(resp.status, Status::Ok, "durable append");
                let commit = resp.commit.unwrap();
                assert_eq!(commit.end - commit.begin, rec.len() as i64);
            }
        }));
    }
    for t in tasks {
        t.await.expect("appender");
    }
    u64::from(writers * per_writer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_appends_are_synced_in_shared_batches() {
    within(90, async {
        let b = Broker::start(&["--tpc.durable", "--tpc.cores", "1"]).await;
        let ch = b.connect().await;
        let names: Vec<String> = (0..8).map(|i| format!("durable/j{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        create_journals(&ch, &refs).await;
        assert_eq!(metric_sum(&b, "courant_spool_syncs_total").await, 0.0);

        // One appender per journal, all on the one core.
        let appends = concurrent_appends(&b, 8, 15, |w| format!("durable/j{w}")).await as f64;
        let syncs = metric_sum(&b, "courant_spool_syncs_total").await;
        let batches = metric_sum(&b, "courant_spool_sync_batches_total").await;
        eprintln!("{appends} appends to 8 journals: {syncs} spool syncs in {batches} batches");
        // Every append waited for a sync that started after its commit. An append of one
        // journal holds the spool until it is acknowledged, so each needs its own sync
        // (the first fragment's roll is covered by the next append's sync).
        assert!(syncs >= appends, "{syncs} syncs for {appends} appends");
        assert!(
            syncs <= appends + 8.0,
            "{syncs} syncs for {appends} appends"
        );
        // Journals committing together share batches (one wake-up for several syncs).
        assert!(
            batches < appends * 0.9,
            "{batches} batches for {appends} appends: no group commit"
        );

        // Eight appenders on one journal: all acknowledged, the content is intact.
        let before = metric_sum(&b, "courant_spool_syncs_total").await;
        let appends = concurrent_appends(&b, 8, 5, |_| "durable/j0".to_string()).await as f64;
        let syncs = metric_sum(&b, "courant_spool_syncs_total").await - before;
        assert!(
            syncs >= 1.0 && syncs <= appends + 1.0,
            "{syncs} syncs for {appends} appends"
        );
        let content = read_content(&ch, "durable/j0").await;
        let records = parse_records(&content).expect("intact records");
        assert_eq!(records.len(), 15 + 40);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_flag_nothing_is_synced() {
    within(60, async {
        let b = Broker::start(&["--tpc.cores", "1"]).await;
        let ch = b.connect().await;
        create_journals(&ch, &["plain/a", "plain/b"]).await;
        let appends =
            concurrent_appends(&b, 2, 10, |w| format!("plain/{}", ["a", "b"][w as usize])).await;
        assert_eq!(appends, 20);
        assert_eq!(metric_sum(&b, "courant_spool_syncs_total").await, 0.0);
        assert_eq!(
            metric_sum(&b, "courant_spool_sync_batches_total").await,
            0.0
        );
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flag_reads_back_from_print_config_and_the_environment() {
    within(60, async {
        let dir = tempfile::tempdir().unwrap();
        let (status, off) = faults::run(&["print-config"], Some(dir.path()), &[]).await;
        assert!(status.success(), "{off}");
        assert!(off.contains("\ndurable = false\n"), "{off}");
        let (status, on) =
            faults::run(&["print-config", "--tpc.durable"], Some(dir.path()), &[]).await;
        assert!(status.success(), "{on}");
        let tpc = on.split("[tpc]\n").nth(1).expect("a [tpc] section");
        assert!(tpc.contains("durable = true\n"), "{on}");
        std::fs::write(dir.path().join("courant.ini"), &on).unwrap();
        let (status, again) = faults::run(&["print-config"], Some(dir.path()), &[]).await;
        assert!(status.success(), "{again}");
        assert_eq!(again, on, "courant.ini with durable = true reads back");
        let other = tempfile::tempdir().unwrap();
        let (status, env) = faults::run(
            &["print-config"],
            Some(other.path()),
            &[("COURANT_TPC_DURABLE", "true")],
        )
        .await;
        assert!(status.success(), "{env}");
        assert_eq!(env, on);
    })
    .await
}
