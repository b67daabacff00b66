//! Durable mode (`--tpc.durable`, Courant): every acknowledged append has been synced
//! (`fdatasync`) before its acknowledgement, through the core's commit log (appends of all
//! the core's journals share its syncs) or, for a commit that creates files, through the
//! spool's own files. Seen through `/debug/metrics`: `courant_commit_log_syncs_total` and
//! `courant_commit_log_records_total` (the log), `courant_spool_syncs_total` and
//! `courant_spool_sync_batches_total` (spool files). Without the flag, no sync ever runs.
//! After a power loss (simulated: kill -9, then the spool files cut back to what their own
//! syncs covered) the restarted broker replays the log. Also: the flag reads back from
//! `print-config`.

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
        let spool_syncs = metric_sum(&b, "courant_spool_syncs_total").await;
        let logged = metric_sum(&b, "courant_commit_log_records_total").await;
        let log_syncs = metric_sum(&b, "courant_commit_log_syncs_total").await;
        eprintln!(
            "{appends} appends to 8 journals: {logged} logged in {log_syncs} log syncs, \
             {spool_syncs} spool syncs"
        );
        // Every append is acknowledged once the log sync holding it ended. A journal's
        // spool files are synced only where they are created: its first append's and the
        // durable begin of the roll that follows it.
        assert_eq!(logged, appends);
        assert!(spool_syncs <= 16.0, "{spool_syncs} spool syncs");
        // Journals committing together share log syncs (group commit).
        assert!(
            log_syncs >= 1.0 && log_syncs < logged * 0.9,
            "{log_syncs} log syncs for {logged} logged commits: no group commit"
        );

        // Eight appenders on one journal: all acknowledged, the content is intact.
        let before = metric_sum(&b, "courant_commit_log_records_total").await;
        let appends = concurrent_appends(&b, 8, 5, |_| "durable/j0".to_string()).await as f64;
        let logged = metric_sum(&b, "courant_commit_log_records_total").await - before;
        assert_eq!(logged, appends);
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
        for family in [
            "courant_spool_syncs_total",
            "courant_spool_sync_batches_total",
            "courant_commit_log_syncs_total",
            "courant_commit_log_records_total",
        ] {
            assert_eq!(metric_sum(&b, family).await, 0.0, "{family}");
        }
        assert!(!b.data_dir().join("spools").join("wal").exists());
    })
    .await
}

/// Where the record of `log` that commits offset `end` ends (see `storage::record`: a
/// 16-byte header, then records of 24 bytes, the fragment's 20-byte SHA-1 in a log of
/// format 2 (`CRNTCMT2`), and their registers).
fn record_end(log: &[u8], end: i64) -> u64 {
    let fixed = if &log[..8] == b"CRNTCMT2" { 44 } else { 24 };
    let mut at = 16;
    while at + fixed <= log.len() {
        let n = u32::from_le_bytes(log[at..at + 4].try_into().unwrap());
        let record_end = i64::from_le_bytes(log[at + 4..at + 12].try_into().unwrap());
        at += fixed + if n == u32::MAX { 0 } else { n as usize };
        if record_end == end {
            return at as u64;
        }
    }
    panic!("no commit of offset {end} in the log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_after_a_power_loss_replays_the_commit_log() {
    use sha1::Digest;
    within(90, async {
        let mut b = Broker::start(&["--tpc.durable", "--tpc.cores", "1"]).await;
        let ch = b.connect().await;
        create_journals(&ch, &["power/loss"]).await;
        let mut expected = Vec::new();
        for seq in 0..20 {
            let rec = make_record(0, seq, 100);
            append_ok(&ch, "power/loss", &rec).await;
            expected.extend_from_slice(&rec);
        }
        assert_eq!(
            metric_sum(&b, "courant_commit_log_records_total").await,
            20.0
        );
        b.kill9();

        // The power loss: the current fragment's spool files keep only its durable begin
        // (the roll that followed the journal's first append synced them; every later
        // append was acknowledged after the commit log's sync, not theirs).
        let dir = b
            .data_dir()
            .join("spools")
            .join(hex::encode(&sha1::Sha1::digest(b"power/loss")[..8]));
        let begin = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().into_string().unwrap();
                let hex = name.strip_suffix(".commits")?.to_owned();
                i64::from_str_radix(&hex, 16).ok()
            })
            .max()
            .expect("a current fragment");
        assert!(begin > 0, "the journal's first append was rolled past");
        let content = dir.join(format!("{begin:016x}.spool"));
        let log = dir.join(format!("{begin:016x}.commits"));
        let log_bytes = std::fs::read(&log).unwrap();
        let cut = |path: &std::path::Path, len: u64| {
            let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
            assert!(file.metadata().unwrap().len() > len);
            file.set_len(len).unwrap();
        };
        cut(&content, 0);
        cut(&log, record_end(&log_bytes, begin));

        b.restart().await;
        let ch = b.connect().await;
        let read = read_content(&ch, "power/loss").await;
        assert_eq!(read.len(), expected.len(), "acknowledged records were lost");
        assert!(read == expected, "replayed content differs");
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
