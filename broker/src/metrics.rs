//! Prometheus metrics, counted per core and gathered only when scraped.
//!
//! Lives on: each core owns one [`CoreMetrics`] (an `Arc` of relaxed atomics) and a
//! thread-local cache of per-journal counters. The hot path (an append commit, a read
//! chunk) is a thread-local hash lookup plus a relaxed `fetch_add` on a cache line only this
//! core writes: no lock and no cross-core message. A per-core `Mutex` guards only the map of
//! journals, taken when a core first sees a journal and when `/debug/metrics` is scraped.
//!
//! Why atomics in a per-core `Arc` rather than `Cell`s gathered with a `CoreMsg`: a scrape
//! then needs no round trip through every core's inbox (which a stuck or busy core would
//! delay), and the cost on the hot path is the same uncontended add.
//!
//! Names follow Gazette where Gazette has the metric (`gazette_journal_server_*`,
//! `gazette_write_head`, `gazette_spool_*`, `gazette_append_bytes_total`,
//! `gazette_read_bytes_total`); Courant's own are prefixed `courant_`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// How often each core samples its executor's statistics.
const EXECUTOR_SAMPLE: std::time::Duration = std::time::Duration::from_secs(1);

/// RPC operations, in the order of the per-operation counters.
pub const OPERATIONS: [&str; 8] = [
    "Append",
    "Read",
    "List",
    "Apply",
    "ListFragments",
    "Replicate",
    "FragmentStoreHealth",
    "HTTP",
];

/// Upper bounds (seconds) of the commit latency histogram buckets.
const LATENCY_BOUNDS_S: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// One core's counters. Written only by its core; read by scrapes on any core.
pub struct CoreMetrics {
    core: usize,
    started: [AtomicU64; OPERATIONS.len()],
    completed_ok: [AtomicU64; OPERATIONS.len()],
    completed_err: [AtomicU64; OPERATIONS.len()],
    /// The executor's run time (tasks plus I/O polling) and tasks run, sampled each second.
    busy_ns: AtomicU64,
    tasks: AtomicU64,
    /// Spool summing passes (`storage::spool::summing`) and the writes they summed, sampled
    /// each second.
    sum_passes: AtomicU64,
    sum_writes: AtomicU64,
    /// Messages this core exchanged with other cores for forwarded calls.
    cross_core: AtomicU64,
    /// `--tpc.durable`: spool syncs (one per journal per batch) and sync batches run.
    spool_syncs: AtomicU64,
    sync_batches: AtomicU64,
    log_syncs: AtomicU64,
    log_records: AtomicU64,
    log_checkpoints: AtomicU64,
    journals: Mutex<HashMap<String, Arc<JournalMetrics>>>,
}

/// Counters of one journal on one core.
#[derive(Default)]
pub struct JournalMetrics {
    append_bytes: AtomicU64,
    appends: AtomicU64,
    read_bytes: AtomicU64,
    reads: AtomicU64,
    write_head: AtomicI64,
    commit_buckets: [AtomicU64; LATENCY_BOUNDS_S.len()],
    commit_count: AtomicU64,
    commit_sum_ns: AtomicU64,
}

static REGISTRY: Mutex<Vec<Arc<CoreMetrics>>> = Mutex::new(Vec::new());

thread_local! {
    static LOCAL: RefCell<Option<Local>> = const { RefCell::new(None) };
}

struct Local {
    core: Arc<CoreMetrics>,
    journals: HashMap<String, Arc<JournalMetrics>>,
}

/// Registers the calling thread as core `core`. Called once per executor at start-up.
pub fn register_core(core: usize) {
    let metrics = Arc::new(CoreMetrics {
        core,
        started: Default::default(),
        completed_ok: Default::default(),
        completed_err: Default::default(),
        busy_ns: AtomicU64::new(0),
        tasks: AtomicU64::new(0),
        sum_passes: AtomicU64::new(0),
        sum_writes: AtomicU64::new(0),
        cross_core: AtomicU64::new(0),
        spool_syncs: AtomicU64::new(0),
        sync_batches: AtomicU64::new(0),
        log_syncs: AtomicU64::new(0),
        log_records: AtomicU64::new(0),
        log_checkpoints: AtomicU64::new(0),
        journals: Mutex::new(HashMap::new()),
    });
    REGISTRY
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(metrics.clone());
    LOCAL.with(|l| {
        *l.borrow_mut() = Some(Local {
            core: metrics,
            journals: HashMap::new(),
        })
    });
}

fn op_index(op: &str) -> usize {
    OPERATIONS
        .iter()
        .position(|o| *o == op)
        .unwrap_or(OPERATIONS.len() - 1)
}

fn with_core(f: impl FnOnce(&CoreMetrics)) {
    LOCAL.with(|l| {
        if let Some(local) = l.borrow().as_ref() {
            f(&local.core)
        }
    })
}

fn with_journal(journal: &str, f: impl FnOnce(&JournalMetrics)) {
    LOCAL.with(|l| {
        let mut l = l.borrow_mut();
        let Some(local) = l.as_mut() else { return };
        if let Some(j) = local.journals.get(journal) {
            return f(j);
        }
        let j = local
            .core
            .journals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(journal.to_string())
            .or_default()
            .clone();
        local.journals.insert(journal.to_string(), j.clone());
        f(&j)
    })
}

/// An RPC of `op` began on this core.
pub fn rpc_started(op: &str) {
    with_core(|c| {
        c.started[op_index(op)].fetch_add(1, Relaxed);
    })
}

/// An RPC of `op` ended on this core, successfully or not.
pub fn rpc_completed(op: &str, ok: bool) {
    with_core(|c| {
        let counters = if ok {
            &c.completed_ok
        } else {
            &c.completed_err
        };
        counters[op_index(op)].fetch_add(1, Relaxed);
    })
}

/// One message crossed between this core and another for a forwarded call (the call
/// itself, a request frame, a response frame or the outcome), counted on the accepting core.
pub fn cross_core_message() {
    with_core(|c| {
        c.cross_core.fetch_add(1, Relaxed);
    })
}

/// `--tpc.durable`: this core's sync batcher ran one batch, syncing `spools` spools.
pub fn spool_syncs(spools: usize) {
    with_core(|c| {
        c.spool_syncs.fetch_add(spools as u64, Relaxed);
        c.sync_batches.fetch_add(1, Relaxed);
    })
}

/// `--tpc.durable`: this core's commit log synced a batch of records or began a checkpoint.
pub fn commit_log(event: storage::spool::wal::LogEvent) {
    use storage::spool::wal::LogEvent;
    with_core(|c| match event {
        LogEvent::Synced { records } => {
            c.log_syncs.fetch_add(1, Relaxed);
            c.log_records.fetch_add(records as u64, Relaxed);
        }
        LogEvent::Checkpoint => {
            c.log_checkpoints.fetch_add(1, Relaxed);
        }
    })
}

/// Samples this core's glommio executor statistics once a second, forever (a task on each
/// core), so that scrapes on any core can report every core's utilisation.
pub async fn sample_executor() {
    loop {
        let stats = glommio::executor().executor_stats();
        with_core(|c| {
            let busy = stats.total_runtime().as_nanos().min(u64::MAX as u128) as u64;
            c.busy_ns.store(busy, Relaxed);
            c.tasks.store(stats.tasks_executed(), Relaxed);
            let (passes, writes) = storage::spool::summing::passes();
            c.sum_passes.store(passes, Relaxed);
            c.sum_writes.store(writes, Relaxed);
        });
        glommio::timer::sleep(EXECUTOR_SAMPLE).await;
    }
}

/// Appends in flight on every core (started minus completed), for graceful shutdown.
pub fn appends_in_flight() -> u64 {
    let i = op_index("Append");
    REGISTRY
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|c| {
            let done = c.completed_ok[i].load(Relaxed) + c.completed_err[i].load(Relaxed);
            c.started[i].load(Relaxed).saturating_sub(done)
        })
        .sum()
}

/// An append of `bytes` to `journal` committed; `started` is when it acquired the spool.
pub fn append_committed(journal: &str, bytes: u64, started: Instant, write_head: i64) {
    let elapsed = started.elapsed();
    with_journal(journal, |j| {
        j.appends.fetch_add(1, Relaxed);
        j.append_bytes.fetch_add(bytes, Relaxed);
        j.write_head.store(write_head, Relaxed);
        let secs = elapsed.as_secs_f64();
        if let Some(b) = LATENCY_BOUNDS_S.iter().position(|&bound| secs <= bound) {
            j.commit_buckets[b].fetch_add(1, Relaxed);
        }
        j.commit_count.fetch_add(1, Relaxed);
        j.commit_sum_ns
            .fetch_add(elapsed.as_nanos().min(u64::MAX as u128) as u64, Relaxed);
    })
}

/// A Read RPC of `journal` began serving content.
pub fn read_started(journal: &str) {
    with_journal(journal, |j| {
        j.reads.fetch_add(1, Relaxed);
    })
}

/// `bytes` of `journal` were sent to a reader.
pub fn read_bytes(journal: &str, bytes: u64) {
    with_journal(journal, |j| {
        j.read_bytes.fetch_add(bytes, Relaxed);
    })
}

/// Store metrics, written only by the control thread (the store service's tokio tasks):
/// process-wide relaxed atomics, read by scrapes on any core.
pub mod stores {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::atomic::AtomicU8;

    /// Uploads holding a permit (staging, uploading, confirming).
    pub static UPLOADS_IN_FLIGHT: AtomicI64 = AtomicI64::new(0);
    /// Persist attempts waiting for an upload permit.
    pub static UPLOAD_QUEUE: AtomicI64 = AtomicI64::new(0);
    /// Fragments persisted (uploaded, or found already present).
    pub static UPLOADS_COMPLETED: AtomicU64 = AtomicU64::new(0);
    /// Failed upload attempts (each is retried).
    pub static UPLOADS_FAILED: AtomicU64 = AtomicU64::new(0);
    /// Bytes sent to stores by completed uploads (after compression).
    pub static UPLOAD_BYTES: AtomicU64 = AtomicU64::new(0);
    /// Failed store listings.
    pub static LISTING_ERRORS: AtomicU64 = AtomicU64::new(0);

    static HEALTH: Mutex<BTreeMap<String, Arc<AtomicU8>>> = Mutex::new(BTreeMap::new());

    /// The health gauge of store `url` (1 healthy, 0 not), registered on first use.
    pub fn health(url: &str) -> Arc<AtomicU8> {
        HEALTH
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(url.to_string())
            .or_default()
            .clone()
    }

    pub(super) fn render(out: &mut String) {
        let gauges: [(&str, &str, &AtomicI64); 2] = [
            (
                "courant_store_uploads_in_flight",
                "Fragment uploads in flight (holding one of --store.max-uploads permits).",
                &UPLOADS_IN_FLIGHT,
            ),
            (
                "courant_store_upload_queue_depth",
                "Fragment uploads waiting for an upload permit.",
                &UPLOAD_QUEUE,
            ),
        ];
        for (name, help, v) in gauges {
            family(out, name, "gauge", help);
            let _ = writeln!(out, "{name} {}", v.load(Relaxed).max(0));
        }
        let counters: [(&str, &str, &AtomicU64); 4] = [
            (
                "courant_store_uploads_completed_total",
                "Fragments persisted to their store (uploaded, or found already there).",
                &UPLOADS_COMPLETED,
            ),
            (
                "courant_store_uploads_failed_total",
                "Failed fragment upload attempts (each is retried).",
                &UPLOADS_FAILED,
            ),
            (
                "courant_store_upload_bytes_total",
                "Bytes uploaded to fragment stores (after compression).",
                &UPLOAD_BYTES,
            ),
            (
                "courant_store_listing_errors_total",
                "Failed fragment store listings.",
                &LISTING_ERRORS,
            ),
        ];
        for (name, help, v) in counters {
            family(out, name, "counter", help);
            let _ = writeln!(out, "{name} {}", v.load(Relaxed));
        }
        let name = "courant_store_healthy";
        family(
            out,
            name,
            "gauge",
            "Whether the fragment store's last health check passed (1) or not (0).",
        );
        for (url, v) in HEALTH.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            sample(out, name, &[("store", url)], u64::from(v.load(Relaxed)));
        }
    }
}

/// Renders every core's counters in the Prometheus text exposition format (0.0.4).
pub fn render() -> String {
    let cores: Vec<Arc<CoreMetrics>> = REGISTRY.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut out = String::with_capacity(4096);

    render_operations(&mut out, &cores);
    render_cores(&mut out, &cores);
    render_core_totals(&mut out, &cores);
    render_journals(&mut out, &cores);
    stores::render(&mut out);
    out
}

/// The RPC families: Gazette's, per operation and summed over cores.
fn render_operations(out: &mut String, cores: &[Arc<CoreMetrics>]) {
    // Per operation, summed over cores (Gazette's names), then per core (Courant's).
    family(
        out,
        "gazette_journal_server_started_totals",
        "counter",
        "Total number of started JournalServer RPC invocations, by operation.",
    );
    // Gazette's families count RPCs only; HTTP requests are in the per-core family.
    let rpcs = || {
        OPERATIONS
            .iter()
            .enumerate()
            .filter(|(_, op)| **op != "HTTP")
    };
    for (i, op) in rpcs() {
        let n: u64 = cores.iter().map(|c| c.started[i].load(Relaxed)).sum();
        sample(
            out,
            "gazette_journal_server_started_totals",
            &[("operation", op)],
            n,
        );
    }
    family(
        out,
        "gazette_journal_server_completed_totals",
        "counter",
        "Total number of completed JournalServer RPC invocations, by operation & response status.",
    );
    for (i, op) in rpcs() {
        let ok: u64 = cores.iter().map(|c| c.completed_ok[i].load(Relaxed)).sum();
        let err: u64 = cores.iter().map(|c| c.completed_err[i].load(Relaxed)).sum();
        let name = "gazette_journal_server_completed_totals";
        sample(out, name, &[("operation", op), ("status", "ok")], ok);
        sample(out, name, &[("operation", op), ("status", "<error>")], err);
    }
}

/// Courant's per-core families: RPCs, busy time, cross-core messages, tasks...
fn render_cores(out: &mut String, cores: &[Arc<CoreMetrics>]) {
    family(
        out,
        "courant_core_rpcs_total",
        "counter",
        "RPCs (and HTTP requests) started on each core, by operation.",
    );
    for c in cores {
        let core = c.core.to_string();
        for (i, op) in OPERATIONS.iter().enumerate() {
            let n = c.started[i].load(Relaxed);
            sample(
                out,
                "courant_core_rpcs_total",
                &[("core", &core), ("operation", op)],
                n,
            );
        }
    }

    family(
        out,
        "courant_core_busy_seconds_total",
        "counter",
        "Time each core's executor spent running tasks and polling I/O (its utilisation is \
         the rate of this counter), sampled each second.",
    );
    for c in cores {
        let busy = c.busy_ns.load(Relaxed) as f64 / 1e9;
        let _ = writeln!(
            out,
            "courant_core_busy_seconds_total{{core=\"{}\"}} {busy}",
            c.core
        );
    }
    family(
        out,
        "courant_cross_core_messages_total",
        "counter",
        "Messages exchanged between cores for gRPC calls accepted on one core and served by \
         the journal's owner core (the call, request frames, response frames, the outcome), \
         counted on the accepting core.",
    );
    for c in cores {
        let core = c.core.to_string();
        let n = c.cross_core.load(Relaxed);
        sample(
            out,
            "courant_cross_core_messages_total",
            &[("core", &core)],
            n,
        );
    }
    family(
        out,
        "courant_core_tasks_total",
        "counter",
        "Tasks each core's executor has run, sampled each second.",
    );
    for c in cores {
        let core = c.core.to_string();
        let tasks = c.tasks.load(Relaxed);
        sample(out, "courant_core_tasks_total", &[("core", &core)], tasks);
    }
}

/// Counters summed over cores: spool syncs and durable mode's commit logs.
fn render_core_totals(out: &mut String, cores: &[Arc<CoreMetrics>]) {
    type CoreGetter<'a> = &'a dyn Fn(&CoreMetrics) -> u64;
    let summing: [(&str, &str, CoreGetter); 2] = [
        (
            "courant_spool_sum_passes_total",
            "Passes in which each core computed the SHA-1 sums of its large spool writes \
             together (storage::spool::summing), sampled each second.",
            &|c| c.sum_passes.load(Relaxed),
        ),
        (
            "courant_spool_sum_writes_total",
            "Spool writes whose sums those passes computed: writes per pass is how many \
             writes shared one (sampled each second).",
            &|c| c.sum_writes.load(Relaxed),
        ),
    ];
    for (name, help, get) in summing {
        family(out, name, "counter", help);
        for c in cores {
            sample(out, name, &[("core", &c.core.to_string())], get(c));
        }
    }
    let durable: [(&str, &str, CoreGetter); 5] = [
        (
            "courant_spool_syncs_total",
            "Spool syncs (fdatasync of a journal's spool files) run by each core's sync \
             batcher in durable mode (--tpc.durable): for commits that create files, commits \
             too large for the commit log, and checkpoints of the commit log.",
            &|c| c.spool_syncs.load(Relaxed),
        ),
        (
            "courant_spool_sync_batches_total",
            "Batches of spool syncs each core ran together in durable mode (--tpc.durable).",
            &|c| c.sync_batches.load(Relaxed),
        ),
        (
            "courant_commit_log_syncs_total",
            "Syncs (fdatasync) of each core's commit log in durable mode (--tpc.durable); \
             fewer than logged commits when commits share syncs (group commit).",
            &|c| c.log_syncs.load(Relaxed),
        ),
        (
            "courant_commit_log_records_total",
            "Commits made durable through each core's commit log (--tpc.durable).",
            &|c| c.log_records.load(Relaxed),
        ),
        (
            "courant_commit_log_checkpoints_total",
            "Checkpoints of each core's commit log (--tpc.durable): each syncs the spools of \
             half the log before writing reuses it.",
            &|c| c.log_checkpoints.load(Relaxed),
        ),
    ];
    for (name, help, get) in durable {
        family(out, name, "counter", help);
        for c in cores {
            sample(out, name, &[("core", &c.core.to_string())], get(c));
        }
    }
}

/// The per-journal families, summed over cores (a journal lives on one owner core).
fn render_journals(out: &mut String, cores: &[Arc<CoreMetrics>]) {
    // Per journal: a journal lives on one owner core, but sum over cores all the same.
    let mut journals: std::collections::BTreeMap<String, Vec<Arc<JournalMetrics>>> =
        Default::default();
    for c in cores {
        for (name, j) in c.journals.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            journals.entry(name.clone()).or_default().push(j.clone());
        }
    }
    let sum = |js: &[Arc<JournalMetrics>], f: &dyn Fn(&JournalMetrics) -> u64| -> u64 {
        js.iter().map(|j| f(j)).sum()
    };
    type Getter<'a> = &'a dyn Fn(&JournalMetrics) -> u64;
    let counters: [(&str, &str, Getter); 4] = [
        (
            "gazette_append_bytes_total",
            "Total number of journal bytes appended (committed).",
            &|j| j.append_bytes.load(Relaxed),
        ),
        (
            "courant_append_requests_total",
            "Total number of committed Append RPCs, by journal.",
            &|j| j.appends.load(Relaxed),
        ),
        (
            "gazette_read_bytes_total",
            "Total number of journal bytes read.",
            &|j| j.read_bytes.load(Relaxed),
        ),
        (
            "courant_read_requests_total",
            "Total number of Read RPCs that found their journal, by journal.",
            &|j| j.reads.load(Relaxed),
        ),
    ];
    for (name, help, get) in counters {
        family(out, name, "counter", help);
        for (journal, js) in &journals {
            sample(out, name, &[("journal", journal)], sum(js, get));
        }
    }
    family(
        out,
        "gazette_write_head",
        "gauge",
        "Current write head of the journal (i.e., next byte offset to be written).",
    );
    for (journal, js) in &journals {
        let head = js
            .iter()
            .map(|j| j.write_head.load(Relaxed))
            .max()
            .unwrap_or(0);
        let _ = writeln!(
            out,
            "gazette_write_head{{journal=\"{}\"}} {head}",
            escape(journal)
        );
    }
    let name = "courant_append_commit_seconds";
    family(
        out,
        name,
        "histogram",
        "Time from acquiring the journal's spool to its durable commit, per Append.",
    );
    for (journal, js) in &journals {
        let journal = escape(journal);
        let mut cumulative = 0;
        for (b, bound) in LATENCY_BOUNDS_S.iter().enumerate() {
            cumulative += sum(js, &|j| j.commit_buckets[b].load(Relaxed));
            let _ = writeln!(
                out,
                "{name}_bucket{{journal=\"{journal}\",le=\"{bound}\"}} {cumulative}"
            );
        }
        let count = sum(js, &|j| j.commit_count.load(Relaxed));
        let sum_ns = sum(js, &|j| j.commit_sum_ns.load(Relaxed));
        let _ = writeln!(
            out,
            "{name}_bucket{{journal=\"{journal}\",le=\"+Inf\"}} {count}"
        );
        let _ = writeln!(
            out,
            "{name}_sum{{journal=\"{journal}\"}} {}",
            sum_ns as f64 / 1e9
        );
        let _ = writeln!(out, "{name}_count{{journal=\"{journal}\"}} {count}");
    }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: u64) {
    out.push_str(name);
    out.push('{');
    for (i, (k, v)) in labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{k}=\"{}\"", escape(v));
    }
    let _ = writeln!(out, "}} {value}");
}

/// Escapes a label value as the exposition format requires.
fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_renders() {
        register_core(7);
        rpc_started("Append");
        append_committed("a/j\"x", 12, Instant::now(), 12);
        append_committed("a/j\"x", 3, Instant::now(), 15);
        rpc_completed("Append", true);
        read_started("a/j\"x");
        read_bytes("a/j\"x", 15);
        let text = render();
        assert!(
            text.contains("gazette_append_bytes_total{journal=\"a/j\\\"x\"} 15"),
            "{text}"
        );
        assert!(text.contains("gazette_read_bytes_total{journal=\"a/j\\\"x\"} 15"));
        assert!(text.contains("gazette_write_head{journal=\"a/j\\\"x\"} 15"));
        assert!(text.contains("courant_core_rpcs_total{core=\"7\",operation=\"Append\"} 1"));
        assert!(
            text.contains(
                "courant_append_commit_seconds_bucket{journal=\"a/j\\\"x\",le=\"+Inf\"} 2"
            )
        );
        assert_eq!(appends_in_flight(), 0);
        stores::health("s3://b/p/").store(1, Relaxed);
        stores::UPLOADS_COMPLETED.fetch_add(2, Relaxed);
        let text = render();
        assert!(
            text.contains("courant_store_healthy{store=\"s3://b/p/\"} 1"),
            "{text}"
        );
        assert!(text.contains("# TYPE courant_store_upload_queue_depth gauge"));
        assert!(text.contains("courant_store_uploads_completed_total "));
    }
}
