//! The performance bars (Courant against Gazette v0.103.0), checked against the rows of one run: one line per bar with the
//! measured figure, the bar, and whether it was met. A bar whose rows did not run (or
//! failed) is "not measured", never met.
//!
//! Lives on: the harness's main thread, after the runs (pure functions of the results).

use crate::limits::Limits;
use crate::report::Scenario;
use crate::runs::Measurement;
use crate::target_rows::{DURABLE, GO_8X64, GO_OPEN50, GO_SINGLE, LOADGEN_OPEN50, R3_1, R3_8};
use std::fmt::Write as _;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Met,
    Missed,
    NotMeasured,
}

/// One bar and how the run measured against it.
#[derive(Debug, Clone)]
pub struct Bar {
    pub name: &'static str,
    pub measured: String,
    pub bar: &'static str,
    pub verdict: Verdict,
}

/// A successful measurement of `scenario`'s row `row` (by position), for Courant or Gazette.
fn get<'a>(
    scenarios: &'a [Scenario],
    scenario: &str,
    row: usize,
    courant: bool,
) -> Option<&'a Measurement> {
    let s = scenarios
        .iter()
        .find(|s| s.name == scenario && s.not_run.is_none())?;
    let r = s.rows.get(row)?;
    let m = if courant { &r.courant } else { &r.gazette };
    m.as_ref().filter(|m| m.failed.is_none())
}

fn f(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2} M", x / 1e6)
    } else if x >= 1e4 {
        format!("{:.0} k", x / 1e3)
    } else if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

fn verdict(ok: bool) -> Verdict {
    if ok { Verdict::Met } else { Verdict::Missed }
}

fn missing(name: &'static str, bar: &'static str) -> Bar {
    Bar {
        name,
        measured: "not measured".into(),
        bar,
        verdict: Verdict::NotMeasured,
    }
}

/// Courant's figure over Gazette's: met when the ratio is at least (`at_least`) or at most
/// `k`.
fn ratio(
    name: &'static str,
    bar: &'static str,
    pair: (Option<f64>, Option<f64>),
    unit: &str,
    k: f64,
    at_least: bool,
) -> Bar {
    match pair {
        (Some(c), Some(g)) if g > 0.0 => {
            let r = c / g;
            Bar {
                name,
                measured: format!("Courant {}{unit} / Gazette {}{unit} = {r:.2}×", f(c), f(g)),
                bar,
                verdict: verdict(if at_least { r >= k } else { r <= k }),
            }
        }
        _ => missing(name, bar),
    }
}

/// One figure against an absolute limit (`at_most`: met when at or under it).
fn absolute(
    name: &'static str,
    bar: &'static str,
    value: Option<f64>,
    unit: &str,
    limit: f64,
    at_most: bool,
) -> Bar {
    match value {
        Some(v) => Bar {
            name,
            measured: format!("{}{unit}", f(v)),
            bar,
            verdict: verdict(if at_most { v <= limit } else { v >= limit }),
        },
        None => missing(name, bar),
    }
}

fn p50(m: &Measurement) -> Option<f64> {
    m.latency.map(|l| l.p50)
}
fn p99(m: &Measurement) -> Option<f64> {
    m.latency.map(|l| l.p99)
}
fn p999(m: &Measurement) -> Option<f64> {
    m.latency.map(|l| l.p999)
}
fn records(m: &Measurement) -> Option<f64> {
    Some(m.records_per_s).filter(|r| *r > 0.0)
}
/// Append RPCs per second: the client's count, else records (one record per append).
fn appends(m: &Measurement) -> Option<f64> {
    m.cost.appends_per_s.or_else(|| records(m))
}

/// Every performance bar, in the order of the results table.
pub fn evaluate(scenarios: &[Scenario], limits: &Limits) -> Vec<Bar> {
    let c = |s: &str, row: usize, pick: fn(&Measurement) -> Option<f64>| {
        get(scenarios, s, row, true).and_then(pick)
    };
    let g = |s: &str, row: usize, pick: fn(&Measurement) -> Option<f64>| {
        get(scenarios, s, row, false).and_then(pick)
    };
    let both = |s: &str, row: usize, pick: fn(&Measurement) -> Option<f64>| {
        (c(s, row, pick), g(s, row, pick))
    };
    let ms = " ms";
    let rps = " rec/s";
    let aps = " appends/s";
    vec![
        ratio(
            "8x64 AppendService records/s",
            "≥ 2× Gazette",
            both(GO_8X64, 0, records),
            rps,
            2.0,
            true,
        ),
        ratio(
            "8x64 broker CPU per record",
            "≤ 1/4 of Gazette's",
            both(GO_8X64, 0, Measurement::cpu_us_per_record),
            " µs",
            0.25,
            false,
        ),
        absolute("8x64 p99", "≤ 1 ms", c(GO_8X64, 0, p99), ms, 1.0, true),
        ratio(
            "open50 AppendService p99",
            "≤ 1/4 of Gazette's",
            both(GO_OPEN50, 0, p99),
            ms,
            0.25,
            false,
        ),
        absolute(
            "single writer p50",
            "≤ 0.12 ms",
            c(GO_SINGLE, 0, p50),
            ms,
            0.12,
            true,
        ),
        absolute(
            "single writer p99",
            "≤ 0.3 ms",
            c(GO_SINGLE, 0, p99),
            ms,
            0.3,
            true,
        ),
        ratio(
            "r3, 1 in flight, appends/s",
            "≥ 2× Gazette",
            both(R3_1, 0, appends),
            aps,
            2.0,
            true,
        ),
        ratio(
            "r3, 8 in flight, appends/s",
            "≥ 2× Gazette",
            both(R3_8, 0, appends),
            aps,
            2.0,
            true,
        ),
        absolute(
            "r3, 1 in flight, p50",
            "≤ 0.25 ms",
            c(R3_1, 0, p50),
            ms,
            0.25,
            true,
        ),
        absolute(
            "loadgen open50 p99",
            "≤ 0.5 ms",
            c(LOADGEN_OPEN50, 0, p99),
            ms,
            0.5,
            true,
        ),
        absolute(
            "loadgen open50 p99.9",
            "≤ 1 ms",
            c(LOADGEN_OPEN50, 0, p999),
            ms,
            1.0,
            true,
        ),
        // cores: row 0 is 1 core, row 1 is 2 cores (Courant's figures).
        ratio(
            "2 cores vs 1 core records/s (Courant)",
            "≥ 1.5× 1 core",
            (c("cores", 1, records), c("cores", 0, records)),
            rps,
            1.5,
            true,
        )
        .relabel("2 cores", "1 core"),
        ratio(
            "CPU per record, 2 cores vs 1 core (Courant)",
            "≤ 1.15× 1 core",
            (
                c("cores", 1, Measurement::cpu_us_per_record),
                c("cores", 0, Measurement::cpu_us_per_record),
            ),
            " µs",
            1.15,
            false,
        )
        .relabel("2 cores", "1 core"),
        ratio(
            "max 100 B records/s",
            "≥ 3× Gazette",
            both("max-100b", 0, records),
            rps,
            3.0,
            true,
        ),
        ratio(
            "max 1 KiB records/s",
            "≥ 3× Gazette",
            both("max-1kib", 0, records),
            rps,
            3.0,
            true,
        ),
        absolute(
            "max 1 KiB share of loopback TCP",
            "≥ 50% of loopback TCP",
            c("max-1kib", 0, |m| Some(m.mb_per_s * 1e6))
                .filter(|_| limits.loopback.bytes_per_s > 0.0)
                .map(|b| 100.0 * b / limits.loopback.bytes_per_s),
            " %",
            50.0,
            false,
        ),
        absolute(
            "max 1 KiB broker CPU per byte",
            "≤ 1.0 ns/byte",
            c("max-1kib", 0, Measurement::cpu_s_per_gb),
            " ns/byte",
            1.0,
            true,
        ),
        ratio(
            "1,000 journals records/s",
            "≥ 2× Gazette",
            both("journals-1000", 0, records),
            rps,
            2.0,
            true,
        ),
        // durable-64: row 0 without --tpc.durable, row 1 with it (Courant both).
        ratio(
            "--tpc.durable vs not, 8x64 records/s",
            "≥ 80% of non-durable",
            (c(DURABLE, 1, records), c(DURABLE, 0, records)),
            rps,
            0.8,
            true,
        )
        .relabel("durable", "non-durable"),
    ]
}

impl Bar {
    /// Names the two sides of a ratio other than Courant / Gazette.
    fn relabel(mut self, a: &str, b: &str) -> Bar {
        self.measured = self
            .measured
            .replacen("Courant", a, 1)
            .replacen("Gazette", b, 1);
        self
    }
}

/// The "Performance bars" table.
pub fn table(bars: &[Bar]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "| Bar | Measured | Target | |\n|---|---|---|---|");
    for b in bars {
        let v = match b.verdict {
            Verdict::Met => "met",
            Verdict::Missed => "**missed**",
            Verdict::NotMeasured => "not measured",
        };
        let _ = writeln!(out, "| {} | {} | {} | {v} |", b.name, b.measured, b.bar);
    }
    let count = |v| bars.iter().filter(|b| b.verdict == v).count();
    let _ = writeln!(
        out,
        "\n{} met, {} missed, {} not measured in this run.",
        count(Verdict::Met),
        count(Verdict::Missed),
        count(Verdict::NotMeasured)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Row;
    use crate::report::tests::limits;
    use crate::runs::{Cost, Latency};

    fn m(records: f64, cores: f64, p50: f64, p99: f64) -> Measurement {
        Measurement {
            records_per_s: records,
            mb_per_s: records * 100.0 / 1e6,
            broker_cores: Some(cores),
            latency: Some(Latency {
                p50,
                p99,
                p999: 2.0 * p99,
                max: 4.0 * p99,
            }),
            ..Default::default()
        }
    }

    fn scenario(name: &'static str, rows: Vec<Row>) -> Scenario {
        Scenario {
            name,
            title: name.into(),
            params: String::new(),
            rows,
            not_run: None,
            plot: false,
            show_latency: true,
        }
    }

    fn row(c: Option<Measurement>, g: Option<Measurement>) -> Row {
        Row {
            label: "r".into(),
            courant: c,
            gazette: g,
        }
    }

    fn find<'a>(bars: &'a [Bar], name: &str) -> &'a Bar {
        bars.iter().find(|b| b.name == name).unwrap()
    }

    #[test]
    fn bars_are_met_missed_or_not_measured() {
        let mut failed = m(1.0, 1.0, 1.0, 1.0);
        failed.failed = Some("broker did not start".into());
        let scenarios = vec![
            // 2.5× Gazette's records/s at 0.2× its CPU per record (0.5/250k vs 1/100k).
            scenario(
                GO_8X64,
                vec![row(
                    Some(m(250e3, 0.5, 0.3, 0.9)),
                    Some(m(100e3, 1.0, 1.0, 3.0)),
                )],
            ),
            // p99 0.8 vs 2.0: 0.4×, over the 1/4 bar.
            scenario(
                GO_OPEN50,
                vec![row(
                    Some(m(50e3, 0.2, 0.2, 0.8)),
                    Some(m(50e3, 0.6, 0.9, 2.0)),
                )],
            ),
            scenario(
                GO_SINGLE,
                vec![row(
                    Some(m(9e3, 0.5, 0.1, 0.31)),
                    Some(m(3e3, 0.5, 0.3, 1.0)),
                )],
            ),
            // r3 with 1 in flight: the client's appends/s is used.
            scenario(
                R3_1,
                vec![row(
                    Some(Measurement {
                        cost: Cost {
                            appends_per_s: Some(4000.0),
                            ..Default::default()
                        },
                        ..m(4000.0, 1.0, 0.25, 0.6)
                    }),
                    Some(m(2100.0, 1.0, 0.5, 1.0)),
                )],
            ),
            scenario(R3_8, vec![row(Some(m(9e3, 1.0, 0.5, 1.0)), Some(failed))]),
            scenario(
                "cores",
                vec![
                    row(Some(m(1e6, 1.0, 1.0, 1.0)), None),
                    row(Some(m(1.6e6, 1.8, 1.0, 1.0)), None),
                ],
            ),
            scenario(
                "max-1kib",
                vec![row(
                    Some(Measurement {
                        mb_per_s: 1200.0,
                        broker_cores: Some(0.9),
                        ..m(1.17e6, 0.9, 1.0, 1.0)
                    }),
                    Some(m(0.3e6, 1.0, 1.0, 1.0)),
                )],
            ),
        ];
        let bars = evaluate(&scenarios, &limits());
        assert_eq!(bars.len(), 19);
        let v = |name: &str| find(&bars, name).verdict;
        assert_eq!(v("8x64 AppendService records/s"), Verdict::Met);
        assert_eq!(v("8x64 broker CPU per record"), Verdict::Met);
        assert_eq!(v("8x64 p99"), Verdict::Met);
        assert_eq!(v("open50 AppendService p99"), Verdict::Missed);
        assert_eq!(v("single writer p50"), Verdict::Met);
        assert_eq!(v("single writer p99"), Verdict::Missed);
        assert_eq!(v("r3, 1 in flight, appends/s"), Verdict::Missed); // 1.90×
        assert_eq!(v("r3, 1 in flight, p50"), Verdict::Met); // at the bar
        assert_eq!(v("r3, 8 in flight, appends/s"), Verdict::NotMeasured); // Gazette failed
        // 1.6× the records/s; CPU per record 1.8/1.6e6 vs 1/1e6 = 1.125×.
        assert_eq!(v("2 cores vs 1 core records/s (Courant)"), Verdict::Met);
        assert_eq!(
            v("CPU per record, 2 cores vs 1 core (Courant)"),
            Verdict::Met
        );
        assert_eq!(v("max 1 KiB records/s"), Verdict::Met); // 3.9×
        assert_eq!(v("max 1 KiB share of loopback TCP"), Verdict::Met); // 60%
        assert_eq!(v("max 1 KiB broker CPU per byte"), Verdict::Met); // 0.75 ns/byte
        assert_eq!(v("max 100 B records/s"), Verdict::NotMeasured);
        assert_eq!(v("loadgen open50 p99"), Verdict::NotMeasured);
        assert_eq!(
            v("--tpc.durable vs not, 8x64 records/s"),
            Verdict::NotMeasured
        );
        assert_eq!(
            find(&bars, "8x64 AppendService records/s").measured,
            "Courant 250 k rec/s / Gazette 100 k rec/s = 2.50×"
        );
        assert!(
            find(&bars, "2 cores vs 1 core records/s (Courant)")
                .measured
                .starts_with("2 cores 1.60 M rec/s / 1 core 1.00 M rec/s"),
            "{}",
            find(&bars, "2 cores vs 1 core records/s (Courant)").measured
        );
        let text = table(&bars);
        assert!(
            text.contains("| single writer p99 | 0.310 ms | ≤ 0.3 ms | **missed** |"),
            "{text}"
        );
        assert!(text.contains("10 met, 3 missed, 6 not measured"), "{text}");
    }

    #[test]
    fn a_scenario_not_run_measures_nothing() {
        let mut s = scenario(
            DURABLE,
            vec![
                row(Some(m(100e3, 1.0, 0.2, 0.5)), None),
                row(Some(m(90e3, 1.0, 0.2, 0.5)), None),
            ],
        );
        let bars = evaluate(std::slice::from_ref(&s), &limits());
        let d = find(&bars, "--tpc.durable vs not, 8x64 records/s");
        assert_eq!(d.verdict, Verdict::Met);
        assert!(d.measured.starts_with("durable 90 k"), "{}", d.measured);
        s.not_run = Some("no --tpc.durable".into());
        let bars = evaluate(std::slice::from_ref(&s), &limits());
        let d = find(&bars, "--tpc.durable vs not, 8x64 records/s");
        assert_eq!(d.verdict, Verdict::NotMeasured);
    }
}
