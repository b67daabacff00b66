//! A measurement, not a pass/fail test (ignored by default): the broker's peak RSS when
//! 1,000 journals each roll a fragment within the same second against the file store
//! (Gazette's "thundering persist"). Run it with
//!
//! ```text
//! cargo test -p courant-tests --test stores_rss -- --ignored --nocapture
//! ```
//!
//! It prints the broker's RSS before the rolls, its peak (VmHWM) after every fragment is
//! persisted, the most upload staging files seen at once (bounded by
//! `--store.max-uploads`), and how long persisting took.

use courant_tests::protocol::CompressionCodec;
use courant_tests::*;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const JOURNALS: usize = 1000;
const PER_JOURNAL: usize = 256 << 10;

fn proc_status(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn files_under(dir: &Path) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

fn broker_pid(port: u16) -> u32 {
    // The broker is the only `courant serve` process listening on this test's port.
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let port_arg = port.to_string();
        if args.iter().any(|a| a.ends_with(b"courant"))
            && args
                .windows(2)
                .any(|w| w[0] == b"--broker.port" && w[1] == port_arg.as_bytes())
        {
            return pid;
        }
    }
    panic!("no broker process on port {port}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run with --ignored --nocapture"]
async fn peak_rss_with_1000_journals_rolling_in_the_same_second() {
    let broker = Broker::start(&[]).await;
    let pid = broker_pid(broker.port());
    let channels: Vec<_> = {
        let mut v = Vec::new();
        for _ in 0..8 {
            v.push(broker.connect().await);
        }
        v
    };
    let names: Vec<String> = (0..JOURNALS).map(|i| format!("rss/j{i:04}")).collect();
    let specs: Vec<_> = names
        .iter()
        .map(|n| {
            let mut s = spec(n, &[]);
            let f = s.fragment.as_mut().unwrap();
            // The filled spool is over its length, so the trigger append rolls it.
            f.length = PER_JOURNAL as i64 - 1;
            f.compression_codec = CompressionCodec::Gzip as i32;
            s
        })
        .collect();
    for chunk in specs.chunks(100) {
        apply_specs(&channels[0], chunk).await;
    }
    // Fill: each journal's spool gets PER_JOURNAL bytes (its first append rolls the empty
    // first spool; the second append lands in the spool that the trigger will roll).
    let mut x: u32 = 2_463_534_242;
    let payload: Vec<u8> = (0..PER_JOURNAL)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect();
    // Appends to every journal, at most `parallel` at once.
    let run = |bytes: Vec<u8>, parallel: usize| {
        let permits = Arc::new(tokio::sync::Semaphore::new(parallel));
        let mut tasks = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let ch = channels[i % channels.len()].clone();
            let name = name.clone();
            let bytes = bytes.clone();
            let permits = permits.clone();
            tasks.push(tokio::spawn(async move {
                let _permit = permits.acquire().await.unwrap();
                append_ok(&ch, &name, &bytes).await;
            }));
        }
        async move {
            for t in tasks {
                t.await.unwrap();
            }
        }
    };
    run(b"x".to_vec(), 64).await;
    run(payload.clone(), 16).await;
    // Persisting the first tiny fragments is done once the staging dir stays empty.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_before = proc_status(pid, "VmRSS:");
    let hwm_before = proc_status(pid, "VmHWM:");

    // Trigger: the spools are over their length, so one more append to each rolls it;
    // all 1,000 appends are sent at once.
    let uploads_dir = broker.data_dir().join("uploads");
    let max_staged = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (max_staged, done, dir) = (max_staged.clone(), done.clone(), uploads_dir.clone());
        std::thread::spawn(move || {
            let mut peak_rss = 0;
            while !done.load(Ordering::Relaxed) {
                max_staged.fetch_max(files_under(&dir), Ordering::Relaxed);
                peak_rss = peak_rss.max(proc_status(pid, "VmRSS:"));
                std::thread::sleep(Duration::from_millis(5));
            }
            peak_rss
        })
    };
    let started = Instant::now();
    run(b"y".to_vec(), JOURNALS).await;
    let rolled_in = started.elapsed();
    // Persisted: every journal's spool files of the rolled fragments are gone.
    let store = broker.data_dir().join("fragments/rss");
    loop {
        let persisted = names
            .iter()
            .filter(|n| {
                let dir = store.join(n.trim_start_matches("rss/"));
                std::fs::read_dir(&dir)
                    .map(|d| {
                        d.flatten()
                            .any(|e| e.file_name().to_string_lossy().ends_with(".gz"))
                    })
                    .unwrap_or(false)
            })
            .count();
        let big = names
            .iter()
            .filter(|n| {
                let dir = store.join(n.trim_start_matches("rss/"));
                std::fs::read_dir(&dir)
                    .map(|d| {
                        d.flatten()
                            .any(|e| e.metadata().map(|m| m.len() > 1000).unwrap_or(false))
                    })
                    .unwrap_or(false)
            })
            .count();
        if persisted == JOURNALS && big == JOURNALS {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "only {big} of {JOURNALS} big fragments persisted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let persisted_in = started.elapsed();
    done.store(true, Ordering::Relaxed);
    let peak_sampled = sampler.join().unwrap();
    let hwm_after = proc_status(pid, "VmHWM:");
    eprintln!(
        "MEASUREMENT {JOURNALS} journals × {} KiB GZIP fragments rolled in {rolled_in:?}, all persisted after {persisted_in:?}",
        PER_JOURNAL >> 10
    );
    eprintln!(
        "MEASUREMENT broker RSS before the rolls {} MiB (peak so far {} MiB); peak RSS sampled during persist {} MiB; VmHWM after {} MiB; most staged uploads at once {}",
        rss_before >> 10,
        hwm_before >> 10,
        peak_sampled >> 10,
        hwm_after >> 10,
        max_staged.load(Ordering::Relaxed)
    );
}
