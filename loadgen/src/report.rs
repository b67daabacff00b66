//! The final report: plain text for people (stdout) and JSON in OpenMessaging Benchmark
//! field names for tools (`--json`).
//!
//! OMB conventions kept in the JSON: publish and end-to-end latencies in milliseconds,
//! publish *delay* (our send lag) in microseconds, rates in records ("messages") per second,
//! per-interval series as arrays (`publishRate`, `publishLatency99pct`, ...) and
//! whole-run figures as `aggregated*`. Courant's own additions (p90, MB/s, errors, the
//! exact parameters, the machine) live under `"courant"` so OMB tooling ignores them.
//!
//! Lives on: the main task, after the run (pure functions of a [`Report`]).

use crate::stats::{ErrorCount, WindowCounts};
use hdrhistogram::Histogram;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Latency percentiles of one histogram, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Percentiles {
    pub count: u64,
    pub mean_ns: f64,
    pub p50: u64,
    pub p75: u64,
    pub p90: u64,
    pub p95: u64,
    pub p99: u64,
    pub p999: u64,
    pub p9999: u64,
    pub p99999: u64,
    pub max: u64,
}

impl Percentiles {
    /// `None` for an empty histogram (nothing was measured).
    pub fn of(h: &Histogram<u64>) -> Option<Percentiles> {
        if h.is_empty() {
            return None;
        }
        let q = |q: f64| h.value_at_quantile(q);
        Some(Percentiles {
            count: h.len(),
            mean_ns: h.mean(),
            p50: q(0.5),
            p75: q(0.75),
            p90: q(0.9),
            p95: q(0.95),
            p99: q(0.99),
            p999: q(0.999),
            p9999: q(0.9999),
            p99999: q(0.99999),
            max: h.max(),
        })
    }
}

/// One progress interval inside the measurement window.
#[derive(Debug, Clone, PartialEq)]
pub struct IntervalSample {
    /// End of the interval, seconds since the window started.
    pub t_s: f64,
    pub records_per_s: f64,
    pub mb_per_s: f64,
    pub failed_appends_per_s: f64,
    pub read_records_per_s: f64,
    /// Records acknowledged but not yet seen by the readers (OMB's `backlog`).
    pub backlog: i64,
    pub publish: Option<Percentiles>,
    pub delay: Option<Percentiles>,
    pub e2e: Option<Percentiles>,
}

/// Where the run happened.
#[derive(Debug, Clone, PartialEq)]
pub struct Machine {
    pub cores: usize,
    pub kernel: String,
    pub hostname: String,
}

impl Machine {
    pub fn current() -> Machine {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unknown".into())
        };
        Machine {
            cores: cores(),
            kernel: read("/proc/sys/kernel/osrelease"),
            hostname: read("/proc/sys/kernel/hostname"),
        }
    }
}

/// CPU seconds (user + system) this process has used so far.
pub fn process_cpu_s() -> f64 {
    // SAFETY: getrusage only writes the struct we pass; zeroed is a valid rusage.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    if rc != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// Cores available to this process.
pub fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub workload: String,
    pub command: String,
    pub machine: Machine,
    pub params: Vec<(&'static str, String)>,
    pub journals: Vec<String>,
    pub mean_record_size: f64,
    pub readers: bool,
    /// Open-loop target (records/s); `None` in max-rate mode.
    pub target_rate: Option<f64>,
    pub warmup_s: f64,
    pub window_s: f64,
    pub counts: WindowCounts,
    /// Records intended in the window that were neither acknowledged nor failed when the
    /// run ended (the broker fell behind the offered rate); not in the latency figures.
    pub unacked_records: u64,
    pub publish: Option<Percentiles>,
    /// Per append: acknowledgement − actual send.
    pub rpc: Option<Percentiles>,
    pub delay: Option<Percentiles>,
    pub e2e: Option<Percentiles>,
    pub errors: BTreeMap<String, ErrorCount>,
    pub series: Vec<IntervalSample>,
    /// CPU seconds (user + system) the load generator used during the window.
    pub loadgen_cpu_s: Option<f64>,
}

impl Report {
    pub fn records_per_s(&self) -> f64 {
        self.counts.acked_records as f64 / self.window_s
    }
    pub fn mb_per_s(&self) -> f64 {
        self.counts.acked_bytes as f64 / 1e6 / self.window_s
    }
    pub fn appends_per_s(&self) -> f64 {
        self.counts.acked_appends as f64 / self.window_s
    }
    pub fn read_records_per_s(&self) -> f64 {
        self.counts.read_records as f64 / self.window_s
    }
    /// Cores the load generator kept busy during the window.
    pub fn loadgen_cores(&self) -> Option<f64> {
        self.loadgen_cpu_s.map(|s| s / self.window_s)
    }
    /// Load-generator CPU per acknowledged record, in nanoseconds.
    pub fn loadgen_ns_per_record(&self) -> Option<f64> {
        let records = self.counts.acked_records.max(1) as f64;
        self.loadgen_cpu_s.map(|s| s * 1e9 / records)
    }
}

/// Milliseconds with microsecond precision.
pub fn ms(ns: u64) -> f64 {
    (ns as f64 / 1e3).round() / 1e3
}

/// Groups digits in threes: 1234567 → "1,234,567".
pub fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn latency_row(out: &mut String, name: &str, p: &Option<Percentiles>) {
    match p {
        None => {
            let _ = writeln!(out, "  {name:<16} {:>11}  (nothing measured)", 0);
        }
        Some(p) => {
            let _ = writeln!(
                out,
                "  {name:<16} {:>11} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
                group(p.count),
                ms(p.p50),
                ms(p.p90),
                ms(p.p99),
                ms(p.p999),
                ms(p.p9999),
                ms(p.max),
                p.mean_ns / 1e6,
            );
        }
    }
}

/// The report as people read it.
pub fn format_text(r: &Report) -> String {
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(w, "courant-loadgen report: {}", r.workload);
    let _ = writeln!(w, "  command   {}", r.command);
    let _ = writeln!(
        w,
        "  machine   {} cores, Linux {}, host {}",
        r.machine.cores, r.machine.kernel, r.machine.hostname
    );
    let params: Vec<String> = r.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let _ = writeln!(w, "  params    {}", params.join(" "));
    let journals = match (r.journals.first(), r.journals.last()) {
        (Some(a), Some(b)) if r.journals.len() > 1 => format!("{a} .. {b}"),
        (Some(a), _) => a.clone(),
        _ => "none".into(),
    };
    let _ = writeln!(w, "  journals  {} ({journals})", r.journals.len());
    let mode = match r.target_rate {
        Some(rate) => format!("open loop, target {} records/s", group(rate.round() as u64)),
        None => "max rate, latency from the actual send".into(),
    };
    let _ = writeln!(
        w,
        "  window    {:.1} s measured after {:.1} s warm-up ({mode})",
        r.window_s, r.warmup_s
    );
    let _ = writeln!(w);
    let _ = writeln!(w, "throughput (acknowledged inside the window)");
    let _ = writeln!(
        w,
        "  records/s   {:>14}",
        group(r.records_per_s().round() as u64)
    );
    let _ = writeln!(
        w,
        "  MB/s        {:>14.1}   (10^6 bytes of records, mean record {:.0} B)",
        r.mb_per_s(),
        r.mean_record_size
    );
    let _ = writeln!(
        w,
        "  appends/s   {:>14}",
        group(r.appends_per_s().round() as u64)
    );
    if let (Some(cores), Some(ns)) = (r.loadgen_cores(), r.loadgen_ns_per_record()) {
        let _ = writeln!(
            w,
            "  loadgen CPU {cores:>14.2}   cores ({ns:.0} ns per acknowledged record)"
        );
    }
    if r.readers {
        let _ = writeln!(
            w,
            "  read rec/s  {:>14}   (tailing readers)",
            group(r.read_records_per_s().round() as u64)
        );
    }
    let _ = writeln!(w);
    let _ = writeln!(
        w,
        "latency (ms)           count       p50       p90       p99     p99.9    p99.99       max      mean"
    );
    latency_row(w, "append", &r.publish);
    latency_row(w, "append rpc", &r.rpc);
    if r.readers {
        latency_row(w, "end-to-end", &r.e2e);
    }
    if r.target_rate.is_some() {
        latency_row(w, "send lag", &r.delay);
        let _ = writeln!(
            w,
            "  (append and end-to-end: per record from its intended send time; append rpc: per\n   append from its actual send; send lag: how far behind schedule appends were sent)"
        );
    } else {
        let _ = writeln!(
            w,
            "  (max rate: each record's intended send time is the moment its append was sent;\n   append rpc counts appends rather than records)"
        );
    }
    let _ = writeln!(w);
    if r.errors.is_empty() {
        let _ = writeln!(w, "errors: none");
    } else {
        let _ = writeln!(w, "errors:");
        for (kind, e) in &r.errors {
            let _ = writeln!(
                w,
                "  {kind:<44} {:>9} times {:>12} records   e.g. {}",
                group(e.count),
                group(e.records),
                e.example
            );
        }
    }
    if r.counts.failed_records > 0 {
        let _ = writeln!(
            w,
            "failed: {} records intended in the window were in failed appends",
            group(r.counts.failed_records)
        );
    }
    if r.unacked_records > 0 {
        let _ = writeln!(
            w,
            "WARNING: {} records intended in the window were not acknowledged when the run \
             ended;\n  the broker did not keep up with the offered rate and the latency figures \
             above exclude them.",
            group(r.unacked_records)
        );
    }
    out
}

fn pct_ms(p: &Option<Percentiles>, f: impl Fn(&Percentiles) -> f64) -> Value {
    p.as_ref().map(|p| json!(f(p))).unwrap_or(Value::Null)
}

/// Inserts OMB's per-interval lists (`<prefix>Avg`, `<prefix>50pct`, ...) and the
/// aggregated figures (`aggregated<Prefix>Avg`, ...). `scale` converts nanoseconds to the
/// unit OMB uses for that family; `integer` rounds (OMB's delay figures are longs).
fn latency_family(
    obj: &mut Map<String, Value>,
    prefix: &str,
    series: &[Option<Percentiles>],
    total: &Option<Percentiles>,
    scale: f64,
    integer: bool,
) {
    let conv = |ns: f64| -> Value {
        let v = ns / scale;
        if integer {
            json!(v.round() as u64)
        } else {
            json!((v * 1e3).round() / 1e3)
        }
    };
    type Field = (&'static str, fn(&Percentiles) -> f64);
    let fields: [Field; 10] = [
        ("Avg", |p| p.mean_ns),
        ("50pct", |p| p.p50 as f64),
        ("75pct", |p| p.p75 as f64),
        ("90pct", |p| p.p90 as f64),
        ("95pct", |p| p.p95 as f64),
        ("99pct", |p| p.p99 as f64),
        ("999pct", |p| p.p999 as f64),
        ("9999pct", |p| p.p9999 as f64),
        ("99999pct", |p| p.p99999 as f64),
        ("Max", |p| p.max as f64),
    ];
    let mut cap = prefix.to_string();
    cap[..1].make_ascii_uppercase();
    for (suffix, f) in fields {
        let list: Vec<Value> = series
            .iter()
            .map(|p| p.as_ref().map(|p| conv(f(p))).unwrap_or(Value::Null))
            .collect();
        obj.insert(format!("{prefix}{suffix}"), Value::Array(list));
        obj.insert(
            format!("aggregated{cap}{suffix}"),
            total.as_ref().map(|p| conv(f(p))).unwrap_or(Value::Null),
        );
    }
    let quantiles: Map<String, Value> = match total {
        None => Map::new(),
        Some(p) => [
            ("50.0", p.p50),
            ("75.0", p.p75),
            ("90.0", p.p90),
            ("95.0", p.p95),
            ("99.0", p.p99),
            ("99.9", p.p999),
            ("99.99", p.p9999),
            ("99.999", p.p99999),
            ("100.0", p.max),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), conv(v as f64)))
        .collect(),
    };
    obj.insert(
        format!("aggregated{cap}Quantiles"),
        Value::Object(quantiles),
    );
}

/// The report in OpenMessaging Benchmark field names, plus `"courant"` extras.
pub fn to_json(r: &Report) -> Value {
    let mut obj = Map::new();
    obj.insert("workload".into(), json!(r.workload));
    obj.insert("driver".into(), json!("courant-loadgen"));
    obj.insert(
        "messageSize".into(),
        json!(r.mean_record_size.round() as u64),
    );
    obj.insert("topics".into(), json!(r.journals.len()));
    obj.insert("partitions".into(), json!(1));
    obj.insert("producersPerTopic".into(), json!(1));
    obj.insert("consumersPerTopic".into(), json!(u8::from(r.readers)));
    let series = |f: fn(&IntervalSample) -> Value| -> Value {
        Value::Array(r.series.iter().map(f).collect())
    };
    obj.insert("publishRate".into(), series(|s| json!(s.records_per_s)));
    obj.insert(
        "publishErrorRate".into(),
        series(|s| json!(s.failed_appends_per_s)),
    );
    obj.insert(
        "consumeRate".into(),
        series(|s| json!(s.read_records_per_s)),
    );
    obj.insert("backlog".into(), series(|s| json!(s.backlog)));

    let publish: Vec<_> = r.series.iter().map(|s| s.publish).collect();
    let delay: Vec<_> = r.series.iter().map(|s| s.delay).collect();
    let e2e: Vec<_> = r.series.iter().map(|s| s.e2e).collect();
    latency_family(&mut obj, "publishLatency", &publish, &r.publish, 1e6, false);
    latency_family(&mut obj, "publishDelayLatency", &delay, &r.delay, 1e3, true);
    latency_family(&mut obj, "endToEndLatency", &e2e, &r.e2e, 1e6, false);

    let params: Map<String, Value> = r
        .params
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    let errors: Map<String, Value> = r
        .errors
        .iter()
        .map(|(k, e)| {
            (
                k.clone(),
                json!({"count": e.count, "records": e.records, "example": e.example}),
            )
        })
        .collect();
    obj.insert(
        "courant".into(),
        json!({
            "command": r.command,
            "machine": {
                "cores": r.machine.cores,
                "kernel": r.machine.kernel,
                "hostname": r.machine.hostname,
            },
            "params": params,
            "journals": r.journals.len(),
            "targetRate": r.target_rate,
            "warmupSeconds": r.warmup_s,
            "measuredSeconds": r.window_s,
            "reportingIntervalSeconds": 1,
            "recordsPerSecond": r.records_per_s(),
            "mbPerSecond": r.mb_per_s(),
            "appendsPerSecond": r.appends_per_s(),
            "readRecordsPerSecond": r.read_records_per_s(),
            "ackedRecords": r.counts.acked_records,
            "ackedBytes": r.counts.acked_bytes,
            "failedRecords": r.counts.failed_records,
            "unackedRecords": r.unacked_records,
            "publishLatency90pctMs": pct_ms(&r.publish, |p| ms(p.p90)),
            "appendRpcLatencyMs": r.rpc.map(|p| json!({
                "count": p.count,
                "avg": (p.mean_ns / 1e3).round() / 1e3,
                "50pct": ms(p.p50),
                "90pct": ms(p.p90),
                "99pct": ms(p.p99),
                "999pct": ms(p.p999),
                "9999pct": ms(p.p9999),
                "max": ms(p.max),
            })),
            "endToEndLatency90pctMs": pct_ms(&r.e2e, |p| ms(p.p90)),
            "errors": errors,
            "loadgenCpuCores": r.loadgen_cores(),
            "loadgenCpuNsPerRecord": r.loadgen_ns_per_record(),
            "mbPerSecondSeries": series(|s| json!(s.mb_per_s)),
        }),
    );
    Value::Object(obj)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::new_histogram;

    fn percentiles_of(values: &[u64]) -> Percentiles {
        let mut h = new_histogram();
        for &v in values {
            h.record(v).unwrap();
        }
        Percentiles::of(&h).unwrap()
    }

    fn sample_report() -> Report {
        let publish = percentiles_of(&(1..=1000).map(|i| i * 1_000).collect::<Vec<_>>());
        let mut errors = BTreeMap::new();
        errors.insert(
            "append status NO_JOURNAL_PRIMARY_BROKER".to_string(),
            ErrorCount {
                count: 3,
                records: 900,
                example: "no primary".into(),
            },
        );
        Report {
            workload: "smoke".into(),
            command: "courant-loadgen --journals 4".into(),
            machine: Machine {
                cores: 2,
                kernel: "6.18.0".into(),
                hostname: "box".into(),
            },
            params: vec![("journals", "4".into()), ("rate", "max".into())],
            journals: vec!["loadgen/0000".into(), "loadgen/0003".into()],
            mean_record_size: 100.0,
            readers: false,
            target_rate: None,
            warmup_s: 1.0,
            window_s: 2.0,
            counts: WindowCounts {
                acked_records: 2_000_000,
                acked_bytes: 200_000_000,
                acked_appends: 6_667,
                ..Default::default()
            },
            unacked_records: 0,
            publish: Some(publish),
            rpc: Some(publish),
            delay: None,
            e2e: None,
            errors,
            series: vec![IntervalSample {
                t_s: 1.0,
                records_per_s: 1e6,
                mb_per_s: 100.0,
                failed_appends_per_s: 0.0,
                read_records_per_s: 0.0,
                backlog: 0,
                publish: Some(publish),
                delay: None,
                e2e: None,
            }],
            loadgen_cpu_s: Some(0.5),
        }
    }

    #[test]
    fn percentiles_come_from_the_histogram() {
        let p = percentiles_of(&(1..=1000).map(|i| i * 1_000).collect::<Vec<_>>());
        assert_eq!(p.count, 1000);
        // 3 significant digits: values are exact to within 0.1%.
        assert!((p.p50 as f64 - 500_000.0).abs() <= 500.0, "{}", p.p50);
        assert!((p.p99 as f64 - 990_000.0).abs() <= 1_000.0, "{}", p.p99);
        assert!((p.max as f64 - 1_000_000.0).abs() <= 1_000.0);
        assert!(Percentiles::of(&new_histogram()).is_none());
    }

    #[test]
    fn numbers_are_grouped_and_converted() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1_000), "1,000");
        assert_eq!(group(1_234_567), "1,234,567");
        assert_eq!(ms(1_234_567), 1.235);
        assert_eq!(ms(999), 0.001);
    }

    #[test]
    fn text_report_shows_rates_latency_params_and_errors() {
        let text = format_text(&sample_report());
        assert!(text.contains("records/s        1,000,000"), "{text}");
        assert!(text.contains("MB/s                 100.0"), "{text}");
        assert!(text.contains("journals=4 rate=max"), "{text}");
        assert!(text.contains("loadgen/0000 .. loadgen/0003"), "{text}");
        assert!(text.contains("max rate"), "{text}");
        assert!(
            text.contains("0.25   cores (250 ns per acknowledged record)"),
            "{text}"
        );
        let row = text
            .lines()
            .find(|l| l.trim_start().starts_with("append "))
            .unwrap();
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols[1], "1,000");
        assert_eq!(cols[2], "0.500"); // p50 in ms
        assert!(
            text.contains("append status NO_JOURNAL_PRIMARY_BROKER"),
            "{text}"
        );
        assert!(text.contains("e.g. no primary"), "{text}");
        assert!(!text.contains("WARNING"));
        let mut r = sample_report();
        r.unacked_records = 5;
        assert!(format_text(&r).contains("WARNING: 5 records"));
    }

    #[test]
    fn json_uses_omb_field_names_and_units() {
        let v = to_json(&sample_report());
        assert_eq!(v["driver"], "courant-loadgen");
        assert_eq!(v["messageSize"], 100);
        assert_eq!(v["topics"], 2);
        assert_eq!(v["publishRate"][0], 1e6);
        // Publish latency in ms.
        let p50 = v["aggregatedPublishLatency50pct"].as_f64().unwrap();
        assert!((p50 - 0.5).abs() < 0.001, "{p50}");
        assert!(v["publishLatency99pct"][0].as_f64().unwrap() > 0.98);
        assert!(v["aggregatedPublishLatency9999pct"].is_number());
        assert!(v["aggregatedPublishLatencyMax"].is_number());
        assert_eq!(
            v["aggregatedPublishLatencyQuantiles"]["50.0"],
            v["aggregatedPublishLatency50pct"]
        );
        // Nothing measured: null, not a misleading zero.
        assert!(v["aggregatedEndToEndLatency99pct"].is_null());
        assert!(v["aggregatedPublishDelayLatency50pct"].is_null());
        assert_eq!(v["courant"]["recordsPerSecond"], 1e6);
        assert_eq!(v["courant"]["appendRpcLatencyMs"]["count"], 1000);
        assert_eq!(v["courant"]["loadgenCpuCores"], 0.25);
        assert!(process_cpu_s() > 0.0);
        assert_eq!(v["courant"]["params"]["rate"], "max");
        assert_eq!(
            v["courant"]["errors"]["append status NO_JOURNAL_PRIMARY_BROKER"]["count"],
            3
        );
    }
}
