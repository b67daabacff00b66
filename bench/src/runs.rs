//! One measured run: `courant-loadgen` (or Gazette's Go AppendService client) against a
//! running broker or cluster, with the brokers' CPU and peak RSS read from `/proc` over the
//! same window as the client's throughput.
//!
//! Broker CPU is sampled when loadgen prints its progress line at the window's start (the
//! last `warm-up` tick) and at its end (the last `measure` tick), so setup and drain are
//! left out; CPU per GB is then (broker cores) / (acknowledged GB/s in the window). For a
//! cluster, CPU is summed over its broker processes, and so is peak RSS (each broker's
//! VmHWM; the largest single one is kept beside the sum).
//!
//! Lives on: the harness's main thread.

use crate::brokers::{Bins, Target};
use crate::procs;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// What loadgen is asked to do.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    pub journals: usize,
    /// Replication of the journals loadgen creates.
    pub replication: usize,
    pub record_size: usize,
    pub records_per_append: usize,
    pub in_flight: usize,
    pub connections: usize,
    /// Open-loop records/s over all journals; `None` = max rate.
    pub rate: Option<f64>,
    pub linger: Option<&'static str>,
    pub warmup_s: f64,
    pub duration_s: f64,
    /// Which client runs the load.
    pub client: Client,
}

/// The client program of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Client {
    /// `courant-loadgen`.
    #[default]
    Loadgen,
    /// `bench/go/appendsvc -mode stream`: one AppendService writer per journal, as fast as
    /// the service takes records; no latency.
    GoStream,
    /// `bench/go/appendsvc -mode record`: this many writers per journal, one record per
    /// StartAppend/Release; closed loop, or open loop at the spec's `rate`.
    GoRecord { writers_per_journal: usize },
    /// `bench/go/appendsvc -mode single`: one `client.Append` of one record at a time.
    GoSingle,
}

impl Client {
    pub fn is_go(self) -> bool {
        self != Client::Loadgen
    }
}

/// Latencies in milliseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Latency {
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

/// The figures of one run.
#[derive(Debug, Clone, Default)]
pub struct Measurement {
    /// The client's exact command.
    pub command: String,
    /// The brokers' exact commands, one per broker (set by the scenario that started them).
    pub broker_commands: Vec<String>,
    pub json: Option<PathBuf>,
    pub offered_rate: Option<f64>,
    pub records_per_s: f64,
    pub mb_per_s: f64,
    pub latency: Option<Latency>,
    /// Summed over the brokers of a cluster.
    pub broker_cores: Option<f64>,
    pub loadgen_cores: Option<f64>,
    /// Summed over the brokers of a cluster.
    pub peak_rss_bytes: Option<u64>,
    /// A cluster's brokers one by one: (cores in the window, peak RSS bytes).
    pub per_broker: Vec<(Option<f64>, Option<u64>)>,
    /// A cluster's journals per primary broker ("zone-a/r3-1: 2, ..."), from etcd.
    pub primaries: String,
    /// Failed appends, unacknowledged records, warnings; empty when clean.
    pub problems: Vec<String>,
    pub load_average: String,
    pub failed: Option<String>,
    /// The per-append cost figures of the measured window (see [`Cost`]).
    pub cost: Cost,
}

/// What one run cost the brokers in its measured window, summed over a cluster's brokers.
#[derive(Debug, Clone, Default)]
pub struct Cost {
    /// Length of the window in seconds.
    pub window_s: f64,
    /// Append RPCs acknowledged per second (`None` for clients that batch records into
    /// appends of their own choosing, such as Gazette's AppendService).
    pub appends_per_s: Option<f64>,
    /// Context switches of the brokers' live threads in the window.
    pub ctx_switches: Option<f64>,
    /// Courant's `courant_cross_core_messages_total` over the window (`None` for Gazette).
    pub cross_core_msgs: Option<f64>,
    /// Distinct io-wq worker threads seen in the brokers during the window (sampled).
    pub io_wq_threads: Option<usize>,
    /// Samples of the brokers' threads taken in the window (about every 50 ms), and of
    /// those, how often each thread was found blocked in the kernel (`procs::blocked_threads`).
    pub samples: u32,
    pub blocked: Vec<(String, u32)>,
    /// The longest stretch of the window in which the brokers ran almost nothing.
    pub stall: Option<Stall>,
}

/// One sample of the brokers' and the client's CPU time and of the machine's steal time.
#[derive(Debug, Clone, Copy)]
pub struct Tick {
    /// Seconds since the window began.
    pub at_s: f64,
    pub brokers_ns: u64,
    pub client_ns: Option<u64>,
    pub steal_ns: Option<u64>,
    /// TCP's loss recovery so far in the brokers' network namespace.
    pub tcp: Option<procs::TcpLoss>,
}

/// A stretch of a window in which the brokers ran under [`IDLE_SHARE`] of a CPU between
/// every two samples, with what the client and the hypervisor did meanwhile: a busy client
/// and no steal point at the brokers (a wake-up that did not come), steal at the machine.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stall {
    pub from_s: f64,
    pub len_s: f64,
    pub client_ms: Option<f64>,
    pub steal_ms: Option<f64>,
    /// TCP's loss recovery from the stall's start to the first sample after it (a
    /// retransmission timeout that ends a stall fires within that interval).
    pub tcp: Option<procs::TcpLoss>,
}

/// Broker CPU under this share of one CPU between two samples counts as idle.
const IDLE_SHARE: f64 = 0.02;
/// A stall at least this long is named in the run's warnings (every row keeps its
/// brokers busy throughout the window).
const STALL_MIN_S: f64 = 0.25;

/// The longest stretch of `ticks` over which the brokers stayed idle, if any.
pub fn longest_stall(ticks: &[Tick]) -> Option<Stall> {
    let mut best: Option<(usize, usize)> = None;
    let mut start = 0;
    for i in 1..ticks.len() {
        let (a, b) = (&ticks[i - 1], &ticks[i]);
        let dt = (b.at_s - a.at_s).max(0.0);
        let used = b.brokers_ns.saturating_sub(a.brokers_ns) as f64;
        if used > IDLE_SHARE * 1e9 * dt {
            start = i;
            continue;
        }
        let len = |(s, e): (usize, usize)| ticks[e].at_s - ticks[s].at_s;
        if best.is_none_or(|b| len(b) < len((start, i))) {
            best = Some((start, i));
        }
    }
    let (s, e) = best?;
    let (a, b) = (&ticks[s], &ticks[e]);
    let after = ticks.get(e + 1).unwrap_or(b);
    let ms = |x: Option<u64>, y: Option<u64>| Some(y?.saturating_sub(x?) as f64 / 1e6);
    Some(Stall {
        from_s: a.at_s,
        len_s: b.at_s - a.at_s,
        client_ms: ms(a.client_ns, b.client_ns),
        steal_ms: ms(a.steal_ns, b.steal_ns),
        tcp: after.tcp.zip(a.tcp).map(|(y, x)| y.since(x)),
    })
}

/// Samples of what [`Cost`] counts, at the start of a window, then during it.
pub struct CostProbe {
    pids: Vec<u32>,
    client: Option<u32>,
    ticks: Vec<Tick>,
    address: String,
    start: Instant,
    ctx0: Option<u64>,
    cross0: Option<f64>,
    io_wq: std::collections::BTreeSet<(u32, u32)>,
    samples: u32,
    blocked: std::collections::BTreeMap<String, u32>,
}

impl CostProbe {
    /// A probe of the brokers `pids` (serving at `address`) under the load of process
    /// `client`.
    pub fn start(pids: &[u32], address: &str, client: Option<u32>) -> CostProbe {
        let mut probe = CostProbe {
            pids: pids.to_vec(),
            client,
            ticks: Vec::new(),
            address: address.to_string(),
            start: Instant::now(),
            ctx0: sum_each(pids, procs::ctx_switches),
            cross0: procs::scrape_counter(address, CROSS_CORE_COUNTER),
            io_wq: Default::default(),
            samples: 0,
            blocked: Default::default(),
        };
        probe.observe();
        probe
    }

    /// Notes the io-wq workers alive now (call often: they come and go), the threads
    /// blocked in the kernel now, and the CPU time used so far.
    pub fn observe(&mut self) {
        self.samples += 1;
        if let Some(brokers_ns) = sum_each(&self.pids, procs::cpu_ns) {
            self.ticks.push(Tick {
                at_s: self.start.elapsed().as_secs_f64(),
                brokers_ns,
                client_ns: self.client.and_then(procs::cpu_ns),
                steal_ns: procs::steal_ns(),
                tcp: self.pids.first().and_then(|&p| procs::tcp_loss(p)),
            });
        }
        for &pid in &self.pids {
            for tid in procs::io_wq_threads(pid) {
                self.io_wq.insert((pid, tid));
            }
            for thread in procs::blocked_threads(pid) {
                *self.blocked.entry(thread).or_default() += 1;
            }
        }
    }

    /// The cost from the start to now (the probe goes on: call it at each tick of the
    /// window and keep the last).
    pub fn cost(&mut self, appends_per_s: Option<f64>) -> Cost {
        self.observe();
        let ctx1 = sum_each(&self.pids, procs::ctx_switches);
        let cross1 = procs::scrape_counter(&self.address, CROSS_CORE_COUNTER);
        Cost {
            window_s: self.start.elapsed().as_secs_f64(),
            appends_per_s,
            ctx_switches: self.ctx0.zip(ctx1).map(|(a, b)| b.saturating_sub(a) as f64),
            cross_core_msgs: self.cross0.zip(cross1).map(|(a, b)| (b - a).max(0.0)),
            io_wq_threads: Some(self.io_wq.len()),
            samples: self.samples,
            blocked: self.blocked.iter().map(|(t, n)| (t.clone(), *n)).collect(),
            stall: longest_stall(&self.ticks),
        }
    }
}

/// Samples a thread must be seen blocked in before a run warns of it.
const BLOCKED_SAMPLES_MIN: u32 = 3;

/// Courant's counter of messages between cores.
const CROSS_CORE_COUNTER: &str = "courant_cross_core_messages_total";

fn sum_each(pids: &[u32], f: fn(u32) -> Option<u64>) -> Option<u64> {
    pids.iter().map(|&p| f(p)).sum()
}

impl Cost {
    /// A warning naming the brokers' threads found blocked in the kernel in the window, if
    /// any: a thread-per-core broker's core that blocks stalls every journal it owns.
    pub fn blocked_warning(&self) -> Option<String> {
        // io_uring's workers block by design (a durable mode's syncs); a thread seen blocked
        // in one or two samples waited less than about 0.1 s.
        let mut seen: Vec<&(String, u32)> = self
            .blocked
            .iter()
            .filter(|(thread, n)| *n >= BLOCKED_SAMPLES_MIN && !thread.starts_with("iou-wrk"))
            .collect();
        if seen.is_empty() {
            return None;
        }
        seen.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let list: Vec<String> = seen
            .iter()
            .take(4)
            .map(|(thread, n)| format!("{thread} ({n})"))
            .collect();
        Some(format!(
            "broker threads blocked in the kernel (state D), in how many of {} samples taken \
             about every 50 ms: {}",
            self.samples,
            list.join(", ")
        ))
    }

    /// A warning naming the window's longest stall of the brokers, if one lasted
    /// [`STALL_MIN_S`] or more.
    pub fn stall_warning(&self) -> Option<String> {
        let stall = self.stall.filter(|s| s.len_s >= STALL_MIN_S)?;
        let ms = |x: Option<f64>| x.map_or("?".to_string(), |v| format!("{v:.0}"));
        let tcp = stall.tcp.map_or(String::new(), |t| {
            format!(
                "; TCP in the brokers' network namespace, from the stall's start to the next \
                 sample after it, counted {} retransmission timeouts, {} retransmitted \
                 segments and {} tail-loss probes",
                t.timeouts, t.retrans_segs, t.loss_probes
            )
        });
        Some(format!(
            "the brokers ran under {:.0} % of a CPU for {:.2} s from {:.2} s into the window \
             (samples about every 50 ms); meanwhile the client used {} ms of CPU and the \
             machine's steal time was {} ms{tcp}",
            IDLE_SHARE * 100.0,
            stall.len_s,
            stall.from_s,
            ms(stall.client_ms),
            ms(stall.steal_ms)
        ))
    }

    fn appends_in_window(&self) -> Option<f64> {
        self.appends_per_s
            .map(|a| a * self.window_s)
            .filter(|n| *n > 0.0)
    }
    pub fn ctx_per_append(&self) -> Option<f64> {
        Some(self.ctx_switches? / self.appends_in_window()?)
    }
    pub fn cross_core_per_append(&self) -> Option<f64> {
        Some(self.cross_core_msgs? / self.appends_in_window()?)
    }
}

impl Measurement {
    /// Broker CPU microseconds per acknowledged Append RPC.
    pub fn cpu_us_per_append(&self) -> Option<f64> {
        let appends = self.cost.appends_per_s.filter(|a| *a > 0.0)?;
        Some(self.broker_cores? * 1e6 / appends)
    }

    /// Broker CPU microseconds per acknowledged record.
    pub fn cpu_us_per_record(&self) -> Option<f64> {
        let records = Some(self.records_per_s).filter(|r| *r > 0.0)?;
        Some(self.broker_cores? * 1e6 / records)
    }

    /// Broker CPU seconds per 10^9 bytes acknowledged.
    pub fn cpu_s_per_gb(&self) -> Option<f64> {
        let gb_per_s = self.mb_per_s / 1e3;
        self.broker_cores
            .filter(|_| gb_per_s > 0.0)
            .map(|c| c / gb_per_s)
    }
    fn failure(command: String, msg: String) -> Measurement {
        Measurement {
            command,
            failed: Some(msg),
            load_average: procs::load_average(),
            ..Default::default()
        }
    }
}

/// CPU seconds of each of `pids`.
fn cpu_each(pids: &[u32]) -> Vec<Option<f64>> {
    pids.iter().map(|&p| procs::cpu_seconds(p)).collect()
}

/// Cores busy between two samples of `cpu_each`, per broker and summed.
fn cores_between(
    t0: Instant,
    c0: &[Option<f64>],
    t1: Instant,
    c1: &[Option<f64>],
) -> (Option<f64>, Vec<Option<f64>>) {
    let secs = t1.saturating_duration_since(t0).as_secs_f64();
    let each: Vec<Option<f64>> = c0
        .iter()
        .zip(c1)
        .map(|(a, b)| match (a, b) {
            (Some(a), Some(b)) if secs > 0.0 => Some((b - a) / secs),
            _ => None,
        })
        .collect();
    (total(&each), each)
}

/// Peak RSS of each of `pids`, and their sum.
fn rss_each(pids: &[u32]) -> (Option<u64>, Vec<Option<u64>>) {
    let each: Vec<Option<u64>> = pids.iter().map(|&p| procs::peak_rss_bytes(p)).collect();
    (total(&each), each)
}

/// The sum of per-broker figures: None when there are none or any is unknown.
fn total<T: Copy + std::iter::Sum<T>>(each: &[Option<T>]) -> Option<T> {
    each.iter()
        .copied()
        .sum::<Option<T>>()
        .filter(|_| !each.is_empty())
}

/// Runs `courant-loadgen` with `spec` against `broker`, journals `<prefix>0000…`, writing
/// its JSON report to `json`.
pub fn loadgen(
    bins: &Bins,
    broker: &mut dyn Target,
    spec: &LoadSpec,
    prefix: &str,
    workload: &str,
    json: &Path,
) -> Measurement {
    let mut cmd = procs::command(&bins.loadgen.to_string_lossy());
    cmd.args(["--broker.address", &broker.address(), "--create"])
        .args(["--journals", &spec.journals.to_string(), "--prefix", prefix])
        .args(["--record-size", &spec.record_size.to_string()])
        .args(["--records-per-append", &spec.records_per_append.to_string()])
        .args(["--in-flight", &spec.in_flight.to_string()])
        .args(["--connections", &spec.connections.to_string()])
        .args(["--warmup", &format!("{}ms", (spec.warmup_s * 1e3) as u64)])
        .args([
            "--duration",
            &format!("{}ms", (spec.duration_s * 1e3) as u64),
        ])
        .args(["--ready-timeout", "60s", "--workload", workload])
        .arg("--json")
        .arg(json);
    if spec.replication != 1 {
        cmd.args(["--replication", &spec.replication.to_string()]);
    }
    if let Some(rate) = spec.rate {
        cmd.args(["--rate", &format!("{}", rate.round() as u64)]);
    }
    if let Some(linger) = spec.linger {
        cmd.args(["--linger", linger]);
    }
    let command = procs::describe(&cmd);
    let load_average = procs::load_average();
    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return Measurement::failure(command, format!("starting loadgen: {e}")),
    };
    let lines = procs::stderr_lines(&mut child);
    // loadgen stops itself (watchdog); this bound is only for a wedged process.
    let limit = Duration::from_secs_f64(spec.warmup_s + spec.duration_s + 60.0 + 40.0);
    let deadline = Instant::now() + limit;
    let pids = broker.pids();
    let mut window_start: Option<(Instant, Vec<Option<f64>>)> = None;
    let mut window_end: Option<(Instant, Vec<Option<f64>>)> = None;
    let mut last_lines: Vec<String> = Vec::new();
    let mut probe: Option<CostProbe> = None;
    let mut ended: Option<Cost> = None;
    loop {
        if let Some(p) = probe.as_mut() {
            p.observe();
        }
        match lines.recv_timeout(Duration::from_millis(50)) {
            Ok((at, line)) => {
                if line.contains("s warm-up]") {
                    window_start = Some((at, cpu_each(&pids)));
                    probe = Some(CostProbe::start(&pids, &broker.address(), Some(child.id())));
                } else if line.contains("s measure]") {
                    window_end = Some((at, cpu_each(&pids)));
                    if let Some(p) = probe.as_mut() {
                        ended = Some(p.cost(None));
                    }
                }
                if let Some(p) = probe.as_mut() {
                    p.observe();
                }
                if !line.starts_with('[') {
                    last_lines.push(line);
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if Instant::now() > deadline {
                    break;
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let (status, killed) = procs::wait_timeout(&mut child, Duration::from_secs(5));
    let (peak_rss_bytes, rss) = rss_each(&pids);
    let (broker_cores, cores) = match (&window_start, &window_end) {
        (Some((t0, c0)), Some((t1, c1))) if t1 > t0 => cores_between(*t0, c0, *t1, c1),
        _ => (None, vec![None; pids.len()]),
    };
    let report = std::fs::read_to_string(json)
        .ok()
        .and_then(|s| serde_json::from_str::<Value>(&s).ok());
    let Some(report) = report else {
        let mut msg = format!("loadgen wrote no report (exit {status:?}, killed {killed})");
        for l in last_lines.iter().rev().take(3).rev() {
            msg += &format!("; {l}");
        }
        return Measurement::failure(command, msg);
    };
    let mut m = from_loadgen_json(&report);
    if let Some(mut cost) = ended {
        cost.appends_per_s = report["courant"]["appendsPerSecond"].as_f64();
        m.problems.extend(cost.blocked_warning());
        m.problems.extend(cost.stall_warning());
        m.cost = cost;
    }
    m.command = command;
    m.json = Some(json.to_path_buf());
    m.broker_cores = broker_cores;
    m.peak_rss_bytes = peak_rss_bytes;
    if pids.len() > 1 {
        m.per_broker = cores.into_iter().zip(rss).collect();
    }
    m.load_average = load_average;
    if broker_cores.is_none() {
        m.problems
            .push("broker CPU not measured (no progress ticks)".into());
    }
    m
}

/// Reads the figures the tables need out of loadgen's JSON report.
pub fn from_loadgen_json(v: &Value) -> Measurement {
    let c = &v["courant"];
    let f = |x: &Value| x.as_f64();
    let latency = f(&v["aggregatedPublishLatency50pct"]).map(|p50| Latency {
        p50,
        p99: f(&v["aggregatedPublishLatency99pct"]).unwrap_or(f64::NAN),
        p999: f(&v["aggregatedPublishLatency999pct"]).unwrap_or(f64::NAN),
        max: f(&v["aggregatedPublishLatencyMax"]).unwrap_or(f64::NAN),
    });
    let mut problems = Vec::new();
    if let Some(errors) = c["errors"].as_object() {
        for (kind, e) in errors {
            problems.push(format!(
                "{kind}: {} appends ({} records)",
                e["count"], e["records"]
            ));
        }
    }
    let unacked = c["unackedRecords"].as_u64().unwrap_or(0);
    if unacked > 0 {
        problems.push(format!(
            "{unacked} records intended in the window were never acknowledged (not in the percentiles)"
        ));
    }
    Measurement {
        offered_rate: f(&c["targetRate"]),
        records_per_s: f(&c["recordsPerSecond"]).unwrap_or(0.0),
        mb_per_s: f(&c["mbPerSecond"]).unwrap_or(0.0),
        latency,
        loadgen_cores: f(&c["loadgenCpuCores"]),
        problems,
        ..Default::default()
    }
}

/// Runs Gazette's Go AppendService client (`bench/go/appendsvc`) against `broker` on
/// journals that `loadgen --create --create-only` makes first.
pub fn appendsvc(
    bins: &Bins,
    broker: &mut dyn Target,
    spec: &LoadSpec,
    prefix: &str,
    json: &Path,
) -> Measurement {
    // Create the journals with loadgen's `--create-only` (Apply, then List until each has
    // a primary): no append or read, so the Go client's connection is the first to call
    // each journal, as when journals are applied with gazctl before their writers start.
    let mut setup = procs::command(&bins.loadgen.to_string_lossy());
    setup
        .args([
            "--broker.address",
            &broker.address(),
            "--create",
            "--create-only",
        ])
        .args(["--journals", &spec.journals.to_string(), "--prefix", prefix])
        .args(["--replication", &spec.replication.to_string()])
        .args(["--ready-timeout", "60s", "-q"]);
    let setup_command = procs::describe(&setup);
    match setup.output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => {
            return Measurement::failure(
                setup_command,
                format!(
                    "creating journals: {}: {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            );
        }
        Err(e) => {
            return Measurement::failure(setup_command, format!("starting loadgen: {e}"));
        }
    }

    let mut cmd = procs::command(&bins.appendsvc.to_string_lossy());
    cmd.args(["-broker", &broker.address(), "-prefix", prefix])
        .args(["-journals", &spec.journals.to_string()]);
    match spec.client {
        Client::GoRecord {
            writers_per_journal,
        } => {
            cmd.args(["-mode", "record"])
                .args(["-writers-per-journal", &writers_per_journal.to_string()]);
            if let Some(rate) = spec.rate {
                cmd.args(["-rate", &format!("{}", rate.round() as u64)]);
            }
        }
        Client::GoSingle => {
            cmd.args(["-mode", "single"]);
        }
        Client::GoStream | Client::Loadgen => {
            cmd.args(["-mode", "stream"]);
        }
    }
    cmd.args(["-record-size", &spec.record_size.to_string()])
        .args(["-warmup", &format!("{}ms", (spec.warmup_s * 1e3) as u64)])
        .args([
            "-duration",
            &format!("{}ms", (spec.duration_s * 1e3) as u64),
        ]);
    let command = procs::describe(&cmd);
    let load_average = procs::load_average();
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let start = Instant::now();
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return Measurement::failure(command, format!("starting appendsvc: {e}")),
    };
    // The client's window is fixed relative to its start: sample the broker at its edges.
    let pids = broker.pids();
    std::thread::sleep(Duration::from_secs_f64(spec.warmup_s + 0.1));
    let (t0, c0) = (Instant::now(), cpu_each(&pids));
    let mut probe = CostProbe::start(&pids, &broker.address(), Some(child.id()));
    let window_end = start + Duration::from_secs_f64(spec.warmup_s + spec.duration_s);
    while Instant::now() < window_end {
        std::thread::sleep(
            window_end
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(50)),
        );
        probe.observe();
    }
    let (t1, c1) = (Instant::now(), cpu_each(&pids));
    let mut cost = probe.cost(None);
    let (broker_cores, _) = cores_between(t0, &c0, t1, &c1);
    let (peak_rss_bytes, _) = rss_each(&pids);
    let output = wait_output(child, Duration::from_secs(40));
    let Some(stdout) = output else {
        return Measurement::failure(command, "appendsvc did not finish".into());
    };
    let _ = std::fs::write(json, &stdout);
    let Ok(v) = serde_json::from_str::<Value>(stdout.trim()) else {
        return Measurement::failure(command, format!("appendsvc printed no JSON: {stdout}"));
    };
    let mut m = from_appendsvc_json(&v);
    cost.appends_per_s = v["appendsPerSecond"].as_f64();
    m.problems.extend(cost.blocked_warning());
    m.problems.extend(cost.stall_warning());
    m.cost = cost;
    m.command = command;
    m.json = Some(json.to_path_buf());
    m.broker_cores = broker_cores;
    m.peak_rss_bytes = peak_rss_bytes;
    m.load_average = load_average;
    m
}

/// Reads the figures the tables need out of the Go client's JSON (`bench/go/appendsvc`).
/// Its `appendsPerSecond` (distinct AsyncAppends or Append RPCs done in the window) goes
/// into the run's [`Cost`] beside the broker's figures.
pub fn from_appendsvc_json(v: &Value) -> Measurement {
    let f = |x: &Value| x.as_f64();
    let l = &v["latencyMs"];
    let latency = f(&l["p50"]).map(|p50| Latency {
        p50,
        p99: f(&l["p99"]).unwrap_or(f64::NAN),
        p999: f(&l["p999"]).unwrap_or(f64::NAN),
        max: f(&l["max"]).unwrap_or(f64::NAN),
    });
    let mut problems = Vec::new();
    if let Some(e) = v["firstError"].as_str() {
        problems.push(format!(
            "{} records failed; first error: {e}",
            v["failedRecords"]
        ));
    }
    let unacked = v["unackedRecords"].as_u64().unwrap_or(0);
    if unacked > 0 {
        problems.push(format!(
            "{unacked} records intended in the window were acknowledged after it (not in the \
             percentiles)"
        ));
    }
    let records_per_s = f(&v["recordsPerSecond"]).unwrap_or(0.0);
    let offered_rate = f(&v["targetRate"]);
    if let Some(target) = offered_rate
        && records_per_s < 0.95 * target
    {
        problems.push(format!(
            "acknowledged {:.0} records/s of {target:.0} offered",
            records_per_s
        ));
    }
    Measurement {
        offered_rate,
        records_per_s,
        mb_per_s: f(&v["mbPerSecond"]).unwrap_or(0.0),
        latency,
        problems,
        cost: Cost {
            appends_per_s: f(&v["appendsPerSecond"]),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Waits for `child` at most `limit` and returns its stdout.
fn wait_output(mut child: std::process::Child, limit: Duration) -> Option<String> {
    let mut stdout = child.stdout.take()?;
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut s);
        s
    });
    let _ = child.stderr.take();
    let (status, _) = procs::wait_timeout(&mut child, limit);
    status?;
    reader.join().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Only threads seen blocked in several samples are named, io_uring's workers never,
    /// the longest blocked first.
    #[test]
    fn blocked_threads_are_named_in_a_warning() {
        let mut cost = Cost {
            samples: 100,
            blocked: vec![
                ("courant-core-0 in jbd2_log_wait_commit".into(), 2),
                ("iou-wrk-123 in ext4_sync_file".into(), 90),
            ],
            ..Default::default()
        };
        assert_eq!(cost.blocked_warning(), None);
        cost.blocked
            .push(("courant-core-1 in balance_dirty_pages".into(), 3));
        cost.blocked
            .push(("courant-core-0 in folio_wait_bit".into(), 40));
        assert_eq!(
            cost.blocked_warning().as_deref(),
            Some(
                "broker threads blocked in the kernel (state D), in how many of 100 samples \
                 taken about every 50 ms: courant-core-0 in folio_wait_bit (40), \
                 courant-core-1 in balance_dirty_pages (3)"
            )
        );
    }

    /// Samples 50 ms apart; `busy[i]` is the brokers' CPU share over the interval ending
    /// at sample `i + 1`; the client uses 40 % of a CPU, steal grows by 1 ms and TCP
    /// retransmits 2 segments a sample, and one retransmission timeout fires at sample 12.
    fn ticks(busy: &[f64]) -> Vec<Tick> {
        let mut out = vec![Tick {
            at_s: 0.0,
            brokers_ns: 0,
            client_ns: Some(0),
            steal_ns: Some(0),
            tcp: Some(procs::TcpLoss::default()),
        }];
        for (i, share) in busy.iter().enumerate() {
            let last = out[i];
            out.push(Tick {
                at_s: last.at_s + 0.05,
                brokers_ns: last.brokers_ns + (share * 0.05e9) as u64,
                client_ns: last.client_ns.map(|c| c + 20_000_000),
                steal_ns: last.steal_ns.map(|s| s + 1_000_000),
                tcp: last.tcp.map(|t| procs::TcpLoss {
                    timeouts: t.timeouts + u64::from(i == 11),
                    retrans_segs: t.retrans_segs + 2,
                    loss_probes: t.loss_probes,
                }),
            });
        }
        out
    }

    /// The longest run of idle intervals is found (not the first), its start and length
    /// are the samples around it, and a stall under the threshold warns of nothing.
    #[test]
    fn the_longest_stall_of_the_brokers_is_named() {
        let busy = [0.5, 0.0, 0.0, 0.5, 0.01, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.4];
        let stall = longest_stall(&ticks(&busy)).expect("a stall");
        assert!((stall.from_s - 0.20).abs() < 1e-9, "{stall:?}");
        assert!((stall.len_s - 0.35).abs() < 1e-9, "{stall:?}");
        assert_eq!(stall.client_ms, Some(140.0));
        assert_eq!(stall.steal_ms, Some(7.0));
        // Counted up to sample 12, the first after the stall: its timeout is included.
        assert_eq!(
            stall.tcp,
            Some(procs::TcpLoss {
                timeouts: 1,
                retrans_segs: 16,
                loss_probes: 0
            })
        );
        let cost = Cost {
            stall: Some(stall),
            ..Default::default()
        };
        assert_eq!(
            cost.stall_warning().as_deref(),
            Some(
                "the brokers ran under 2 % of a CPU for 0.35 s from 0.20 s into the window \
                 (samples about every 50 ms); meanwhile the client used 140 ms of CPU and the \
                 machine's steal time was 7 ms; TCP in the brokers' network namespace, from \
                 the stall's start to the next sample after it, counted 1 retransmission \
                 timeouts, 16 retransmitted segments and 0 tail-loss probes"
            )
        );
        let short = longest_stall(&ticks(&[0.5, 0.0, 0.0, 0.5])).expect("a short stall");
        assert!((short.len_s - 0.10).abs() < 1e-9, "{short:?}");
        let cost = Cost {
            stall: Some(short),
            ..Default::default()
        };
        assert_eq!(cost.stall_warning(), None);
        assert_eq!(longest_stall(&ticks(&[0.5, 0.3, 0.9])), None);
        assert_eq!(longest_stall(&ticks(&[])), None);
    }

    #[test]
    fn figures_come_from_the_loadgen_report() {
        let v = json!({
            "aggregatedPublishLatency50pct": 1.5,
            "aggregatedPublishLatency99pct": 4.0,
            "aggregatedPublishLatency999pct": 8.0,
                        "aggregatedPublishLatencyMax": 10.0,
            "courant": {
                "recordsPerSecond": 2e6, "mbPerSecond": 200.0, "targetRate": null,
                "unackedRecords": 5, "loadgenCpuCores": 0.25,
                "errors": {"grpc Unavailable": {"count": 2, "records": 600, "example": "x"}}
            }
        });
        let mut m = from_loadgen_json(&v);
        assert_eq!(m.records_per_s, 2e6);
        assert_eq!(m.latency.unwrap().p999, 8.0);
        assert_eq!(m.problems.len(), 2);
        assert!(m.offered_rate.is_none());
        m.broker_cores = Some(0.5);
        // 0.5 cores at 0.2 GB/s: 2.5 CPU-seconds per GB, 2.5 ns per byte.
        assert!((m.cpu_s_per_gb().unwrap() - 2.5).abs() < 1e-9);
    }

    #[test]
    fn figures_come_from_the_go_clients_json() {
        let v = json!({
            "mode": "record", "writersPerJournal": 8, "targetRate": 50000.0,
            "ackedRecords": 200000, "failedRecords": 3, "unackedRecords": 7,
            "recordsPerSecond": 40000.0, "mbPerSecond": 4.0, "appendsPerSecond": 8000.0,
            "latencyMs": {"count": 200000, "p50": 0.2, "p99": 0.9, "p999": 2.5, "max": 7.0},
            "firstError": "rpc error: code = Unavailable"
        });
        let mut m = from_appendsvc_json(&v);
        assert_eq!(m.records_per_s, 40000.0);
        assert_eq!(m.offered_rate, Some(50000.0));
        let l = m.latency.unwrap();
        assert_eq!((l.p50, l.p99, l.p999, l.max), (0.2, 0.9, 2.5, 7.0));
        assert_eq!(m.cost.appends_per_s, Some(8000.0));
        // A failure, late acknowledgements, and a rate short of the offered one.
        assert_eq!(m.problems.len(), 3, "{:?}", m.problems);
        m.broker_cores = Some(0.4);
        assert!((m.cpu_us_per_record().unwrap() - 10.0).abs() < 1e-9);
        assert!((m.cpu_us_per_append().unwrap() - 50.0).abs() < 1e-9);

        // The stream mode has no latency and no append count.
        let m = from_appendsvc_json(&json!({"recordsPerSecond": 1e6, "mbPerSecond": 100.0}));
        assert!(m.latency.is_none() && m.cost.appends_per_s.is_none());
        assert!(m.problems.is_empty());
    }

    #[test]
    fn cluster_figures_are_sums() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(2);
        let (sum, each) = cores_between(
            t0,
            &[Some(1.0), Some(2.0), Some(3.0)],
            t1,
            &[Some(2.0), Some(4.0), Some(3.5)],
        );
        assert_eq!(each, vec![Some(0.5), Some(1.0), Some(0.25)]);
        assert_eq!(sum, Some(1.75));
        // One broker unreadable: no sum rather than a partial one.
        let (sum, _) = cores_between(t0, &[Some(1.0), None], t1, &[Some(2.0), Some(3.0)]);
        assert_eq!(sum, None);
        // (Two reads of this process's peak RSS may differ: other tests run alongside.)
        let (sum, each) = rss_each(&[std::process::id(), std::process::id()]);
        assert_eq!(sum, Some(each[0].unwrap() + each[1].unwrap()));
    }
}
