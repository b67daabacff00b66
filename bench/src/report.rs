//! The results file (`bench/results/<date>-<commit>.md`): machine and limits, a summary,
//! one table per scenario with the exact commands beside the figures, and the latency
//! plot (an SVG written by hand: latency percentiles against offered rate).
//!
//! Lives on: the harness's main thread, after the runs (pure functions of the results).

use crate::limits::Limits;
use crate::runs::Measurement;
use std::fmt::Write as _;

/// One line of a scenario: the same load against both brokers.
#[derive(Debug, Clone)]
pub struct Row {
    pub label: String,
    pub courant: Option<Measurement>,
    pub gazette: Option<Measurement>,
}

#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: &'static str,
    pub title: String,
    pub params: String,
    pub rows: Vec<Row>,
    /// Set when the scenario was not run, with the reason.
    pub not_run: Option<String>,
    /// Draw the rows as a latency-against-offered-rate plot.
    pub plot: bool,
    /// The summary shows records/s, latency and CPU per record (the latency rows of the performance bars).
    pub show_latency: bool,
}

#[derive(Debug, Clone)]
pub struct Context {
    pub title: String,
    pub commit: String,
    pub dirty: String,
    pub date: String,
    pub machine: Vec<(String, String)>,
    pub harness_command: String,
    pub network: String,
    pub limits: Limits,
    pub svg_name: Option<String>,
    pub gazette_note: String,
}

pub fn rate(r: f64) -> String {
    if r >= 1e6 {
        format!("{:.2} M", r / 1e6)
    } else if r >= 1e3 {
        format!("{:.0} k", r / 1e3)
    } else {
        format!("{r:.0}")
    }
}

fn num(x: f64) -> String {
    if !x.is_finite() {
        "–".into()
    } else if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else if x >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

fn ratio(c: f64, g: f64) -> String {
    if c.is_finite() && g.is_finite() && g > 0.0 && c > 0.0 {
        let r = c / g;
        if r < 0.1 {
            format!("{r:.4}×")
        } else {
            format!("{r:.2}×")
        }
    } else {
        "–".into()
    }
}

fn ok(m: &Option<Measurement>) -> Option<&Measurement> {
    m.as_ref().filter(|m| m.failed.is_none())
}

fn cell(m: &Option<Measurement>, f: impl Fn(&Measurement) -> Option<f64>) -> String {
    match m {
        None => "not run".into(),
        Some(m) if m.failed.is_some() => "failed".into(),
        Some(m) => f(m).map(num).unwrap_or_else(|| "–".into()),
    }
}

fn pair_ratio(row: &Row, f: impl Fn(&Measurement) -> Option<f64>) -> String {
    match (ok(&row.courant).and_then(&f), ok(&row.gazette).and_then(&f)) {
        (Some(c), Some(g)) => ratio(c, g),
        _ => "–".into(),
    }
}

fn lat(m: &Measurement) -> Option<(f64, f64, f64)> {
    m.latency.map(|l| (l.p50, l.p99, l.p999))
}

fn latency_cell(m: &Option<Measurement>) -> String {
    match m {
        None => "not run".into(),
        Some(m) if m.failed.is_some() => "failed".into(),
        Some(m) => lat(m)
            .map(|(a, b, c)| format!("{} / {} / {}", num(a), num(b), num(c)))
            .unwrap_or_else(|| "–".into()),
    }
}

/// "18% of loopback TCP · 20% of one core's SHA-1 · 40% of disk".
pub fn versus_machine(bytes_per_s: f64, limits: &Limits) -> String {
    let pct = |l: f64| format!("{:.0}%", 100.0 * bytes_per_s / l);
    format!(
        "{} of loopback TCP · {} of one core's SHA-1 · {} of disk write",
        pct(limits.loopback.bytes_per_s),
        pct(limits.sha1.bytes_per_s),
        pct(limits.disk.bytes_per_s)
    )
}

fn problems(m: &Option<Measurement>) -> String {
    match m {
        None => "not run".into(),
        Some(m) => match &m.failed {
            Some(e) => format!("FAILED: {e}"),
            None if m.problems.is_empty() => "none".into(),
            None => m.problems.join("; "),
        },
    }
}

/// The metric-per-line table of a one-row scenario.
fn single_table(out: &mut String, row: &Row, limits: &Limits) {
    let c = &row.courant;
    let g = &row.gazette;
    let _ = writeln!(
        out,
        "| | Courant | Gazette | Courant / Gazette | Courant vs machine |\n|---|---|---|---|---|"
    );
    let vs = ok(c)
        .map(|m| versus_machine(m.mb_per_s * 1e6, limits))
        .unwrap_or_default();
    let rows: [(&str, String, String, String, String); 7] = [
        (
            "records/s acknowledged",
            ok(c)
                .map(|m| rate(m.records_per_s))
                .unwrap_or_else(|| cell(c, |_| None)),
            ok(g)
                .map(|m| rate(m.records_per_s))
                .unwrap_or_else(|| cell(g, |_| None)),
            pair_ratio(row, |m| Some(m.records_per_s)),
            String::new(),
        ),
        (
            "MB/s (10^6 B of records)",
            cell(c, |m| Some(m.mb_per_s)),
            cell(g, |m| Some(m.mb_per_s)),
            pair_ratio(row, |m| Some(m.mb_per_s)),
            vs,
        ),
        (
            "append latency p50 / p99 / p99.9 (ms)",
            latency_cell(c),
            latency_cell(g),
            pair_ratio(row, |m| lat(m).map(|l| l.1)).replace('×', "× at p99"),
            String::new(),
        ),
        (
            "broker CPU (cores busy in the window)",
            cell(c, |m| m.broker_cores),
            cell(g, |m| m.broker_cores),
            pair_ratio(row, |m| m.broker_cores),
            String::new(),
        ),
        (
            "broker CPU-s per GB ingested (= ns per byte)",
            cell(c, |m| m.cpu_s_per_gb()),
            cell(g, |m| m.cpu_s_per_gb()),
            pair_ratio(row, |m| m.cpu_s_per_gb()),
            String::new(),
        ),
        (
            "broker peak RSS (MiB, VmHWM)",
            cell(c, |m| m.peak_rss_bytes.map(|b| b as f64 / 1048576.0)),
            cell(g, |m| m.peak_rss_bytes.map(|b| b as f64 / 1048576.0)),
            pair_ratio(row, |m| m.peak_rss_bytes.map(|b| b as f64)),
            String::new(),
        ),
        (
            "client CPU (cores)",
            cell(c, |m| m.loadgen_cores),
            cell(g, |m| m.loadgen_cores),
            String::new(),
            String::new(),
        ),
    ];
    for (name, a, b, r, v) in rows {
        let _ = writeln!(out, "| {name} | {a} | {b} | {r} | {v} |");
    }
    let _ = writeln!(
        out,
        "| errors, warnings | {} | {} | | |",
        problems(c),
        problems(g)
    );
}

/// One line per row and broker, for scenarios with several rows.
fn multi_table(out: &mut String, rows: &[Row], limits: &Limits) {
    let _ = writeln!(
        out,
        "| | broker | records/s | MB/s | p50 / p99 / p99.9 (ms) | max (ms) | CPU cores | CPU-s/GB | peak RSS MiB | errors, warnings |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    for row in rows {
        for (name, m) in [("Courant", &row.courant), ("Gazette", &row.gazette)] {
            let records = ok(m)
                .map(|m| rate(m.records_per_s))
                .unwrap_or_else(|| cell(m, |_| None));
            let _ = writeln!(
                out,
                "| {} | {name} | {records} | {} | {} | {} | {} | {} | {} | {} |",
                row.label,
                cell(m, |m| Some(m.mb_per_s)),
                latency_cell(m),
                cell(m, |m| m.latency.map(|l| l.max)),
                cell(m, |m| m.broker_cores),
                cell(m, |m| m.cpu_s_per_gb()),
                cell(m, |m| m.peak_rss_bytes.map(|b| b as f64 / 1048576.0)),
                problems(m),
            );
        }
    }
    let _ = writeln!(
        out,
        "\n| | Courant / Gazette records/s | p99 Courant / Gazette | p99.9 Courant / Gazette | CPU-s/GB Courant / Gazette | Courant vs machine |\n|---|---|---|---|---|---|"
    );
    for row in rows {
        let vs = ok(&row.courant)
            .map(|m| versus_machine(m.mb_per_s * 1e6, limits))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {vs} |",
            row.label,
            pair_ratio(row, |m| Some(m.records_per_s)),
            pair_ratio(row, |m| lat(m).map(|l| l.1)),
            pair_ratio(row, |m| lat(m).map(|l| l.2)),
            pair_ratio(row, |m| m.cpu_s_per_gb()),
        );
    }
}

fn commands(out: &mut String, rows: &[Row]) {
    let _ = writeln!(
        out,
        "\n<details><summary>Exact commands and load averages</summary>\n"
    );
    for row in rows {
        for (name, m) in [("Courant", &row.courant), ("Gazette", &row.gazette)] {
            let Some(m) = m else { continue };
            let json = m
                .json
                .as_ref()
                .and_then(|p| p.file_name())
                .map(|f| format!(", JSON `{}`", f.to_string_lossy()))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "- {} / {name} (load average {}{json}):",
                row.label, m.load_average
            );
            for (i, b) in m.broker_commands.iter().enumerate() {
                // Each broker of a cluster with its own share of the figures.
                let figures = m
                    .per_broker
                    .get(i)
                    .map(|(cores, rss)| {
                        format!(
                            " — {} cores in the window, peak RSS {} MiB",
                            cores.map(num).unwrap_or_else(|| "–".into()),
                            rss.map(|b| num(b as f64 / 1048576.0))
                                .unwrap_or_else(|| "–".into())
                        )
                    })
                    .unwrap_or_default();
                let _ = writeln!(out, "  - broker: `{b}`{figures}");
            }
            if !m.primaries.is_empty() {
                let _ = writeln!(
                    out,
                    "  - journals per primary (etcd assignments after the run): {}",
                    m.primaries
                );
            }
            let _ = writeln!(out, "  - client: `{}`", m.command);
        }
    }
    let _ = writeln!(out, "\n</details>");
}

/// The headline table: one line per scenario, its main figure.
pub fn summary(scenarios: &[Scenario], limits: &Limits) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| Scenario | Courant | Gazette | Courant / Gazette | Courant vs machine |\n|---|---|---|---|---|"
    );
    for s in scenarios {
        if let Some(reason) = &s.not_run {
            let _ = writeln!(out, "| {} | not run: {reason} | | | |", s.title);
            continue;
        }
        for row in &s.rows {
            let label = if s.rows.len() > 1 {
                format!("{}: {}", s.title, row.label)
            } else {
                s.title.clone()
            };
            let show = |m: &Option<Measurement>| match ok(m) {
                Some(m) if s.show_latency => format!(
                    "{} rec/s, p50 / p99 / p99.9 {} ms, {} µs CPU/record",
                    rate(m.records_per_s),
                    m.latency
                        .map(|l| format!("{} / {} / {}", num(l.p50), num(l.p99), num(l.p999)))
                        .unwrap_or_else(|| "–".into()),
                    m.cpu_us_per_record().map(num).unwrap_or_else(|| "–".into())
                ),
                Some(m) if s.plot => m
                    .latency
                    .map(|l| {
                        format!(
                            "{} rec/s, p99 {} ms, p99.9 {} ms",
                            rate(m.records_per_s),
                            num(l.p99),
                            num(l.p999)
                        )
                    })
                    .unwrap_or_else(|| "–".into()),
                Some(m) => format!(
                    "{} rec/s, {} MB/s, {} CPU-s/GB",
                    rate(m.records_per_s),
                    num(m.mb_per_s),
                    m.cpu_s_per_gb().map(num).unwrap_or_else(|| "–".into())
                ),
                None => cell(m, |_| None),
            };
            let r = if s.show_latency {
                format!(
                    "{} rec/s, p99 {}",
                    pair_ratio(row, |m| Some(m.records_per_s)),
                    pair_ratio(row, |m| lat(m).map(|l| l.1))
                )
            } else if s.plot {
                format!("p99 {}", pair_ratio(row, |m| lat(m).map(|l| l.1)))
            } else {
                pair_ratio(row, |m| Some(m.records_per_s))
            };
            let vs = ok(&row.courant)
                .filter(|_| !s.plot && !s.show_latency)
                .map(|m| {
                    format!(
                        "{:.0}% of loopback TCP",
                        100.0 * m.mb_per_s * 1e6 / limits.loopback.bytes_per_s
                    )
                })
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "| {label} | {} | {} | {r} | {vs} |",
                show(&row.courant),
                show(&row.gazette)
            );
        }
    }
    out
}

pub fn markdown(ctx: &Context, scenarios: &[Scenario]) -> String {
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(w, "# {}\n", ctx.title);
    let _ = writeln!(
        w,
        "Commit `{}`{} · {} · `{}`\n",
        ctx.commit, ctx.dirty, ctx.date, ctx.harness_command
    );
    let _ = writeln!(w, "## Machine\n\n| | |\n|---|---|");
    for (k, v) in &ctx.machine {
        let _ = writeln!(w, "| {k} | {v} |");
    }
    let _ = writeln!(w, "| network | {} |", ctx.network);
    let _ = writeln!(w, "| Gazette | {} |", ctx.gazette_note);
    let _ = writeln!(
        w,
        "\n## Machine limits (measured in this run)\n\n| Limit | GB/s | How |\n|---|---|---|"
    );
    for (name, l) in [
        ("loopback TCP, one connection", &ctx.limits.loopback),
        ("SHA-1, one core", &ctx.limits.sha1),
        ("sequential disk write + fdatasync", &ctx.limits.disk),
    ] {
        let _ = writeln!(w, "| {name} | {:.2} | {} |", l.bytes_per_s / 1e9, l.method);
    }
    let _ = writeln!(w, "\n## Summary\n\n{}", summary(scenarios, &ctx.limits));
    let _ = writeln!(
        w,
        "Ratios are Courant / Gazette: above 1 is better for rates, below 1 is better for \
         latency, CPU and memory. Latency is per record from its intended send time \
         (courant-loadgen, no coordinated omission); at max rate, from the actual send.\n"
    );
    for s in scenarios {
        let _ = writeln!(w, "## {} (`{}`)\n", s.title, s.name);
        if let Some(reason) = &s.not_run {
            let _ = writeln!(w, "Not run: {reason}.\n");
            continue;
        }
        let _ = writeln!(w, "{}\n", s.params);
        if s.rows.len() == 1 {
            single_table(w, &s.rows[0], &ctx.limits);
        } else {
            multi_table(w, &s.rows, &ctx.limits);
        }
        if s.plot
            && let Some(svg) = &ctx.svg_name
        {
            let _ = writeln!(w, "\n![append latency against offered rate]({svg})");
        }
        cost_table(w, &s.rows);
        commands(w, &s.rows);
        let _ = writeln!(w);
    }
    out
}

/// The per-append cost of every run of a scenario: broker CPU per Append RPC and per record,
/// context switches and cross-core messages per append, io-wq threads seen.
fn cost_table(out: &mut String, rows: &[Row]) {
    let _ = writeln!(
        out,
        "\nPer-append cost (brokers summed; context switches of live threads; cross-core \
         messages from Courant's `courant_cross_core_messages_total`; `–`: not measured, or \
         the client chose its own appends):\n\n\
         | | broker | appends/s | CPU µs / append | CPU µs / record | context switches / append | cross-core messages / append | io-wq threads seen |\n\
         |---|---|---|---|---|---|---|---|"
    );
    for row in rows {
        for (name, m) in [("Courant", &row.courant), ("Gazette", &row.gazette)] {
            let _ = writeln!(
                out,
                "| {} | {name} | {} | {} | {} | {} | {} | {} |",
                row.label,
                cell(m, |m| m.cost.appends_per_s),
                cell(m, |m| m.cpu_us_per_append()),
                cell(m, |m| m.cpu_us_per_record()),
                cell(m, |m| m.cost.ctx_per_append()),
                cell(m, |m| m.cost.cross_core_per_append()),
                cell(m, |m| m.cost.io_wq_threads.map(|n| n as f64)),
            );
        }
    }
}

/// A round tick step (1, 2 or 5 × 10^k) giving at most 6 steps up to at least `max`,
/// and the axis end.
fn nice_axis(max: f64) -> (f64, f64) {
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * mag);
    (step, (max / step).ceil() * step)
}

/// Append latency percentiles (log scale) against offered rate, both brokers.
pub fn svg(scenario: &Scenario) -> String {
    const W: f64 = 820.0;
    const H: f64 = 500.0;
    let (left, right, top, bottom) = (80.0, 200.0, 40.0, 60.0);
    // (name, colour, dash pattern, points)
    type Series = (String, &'static str, &'static str, Vec<(f64, f64)>);
    let series: Vec<Series> = {
        let mut v = Vec::new();
        for (broker, color, pick) in [
            ("Courant", "#1f77b4", 0usize),
            ("Gazette", "#ff7f0e", 1usize),
        ] {
            for (pname, dash, idx) in [("p50", "", 0usize), ("p99", "6,4", 1), ("p99.9", "2,3", 2)]
            {
                let pts: Vec<(f64, f64)> = scenario
                    .rows
                    .iter()
                    .filter_map(|r| {
                        let m = ok(if pick == 0 { &r.courant } else { &r.gazette })?;
                        let (a, b, c) = lat(m)?;
                        let y = [a, b, c][idx];
                        Some((m.offered_rate?, y))
                    })
                    .filter(|&(_, y)| y > 0.0)
                    .collect();
                v.push((format!("{broker} {pname}"), color, dash, pts));
            }
        }
        v
    };
    let all: Vec<(f64, f64)> = series.iter().flat_map(|s| s.3.iter().copied()).collect();
    let (xstep, xmax) = nice_axis(all.iter().map(|p| p.0).fold(1.0, f64::max));
    let ymin_log = all
        .iter()
        .map(|p| p.1.log10().floor())
        .fold(f64::INFINITY, f64::min)
        .clamp(-3.0, 0.0);
    let ymax_log = all
        .iter()
        .map(|p| p.1.log10().ceil())
        .fold(f64::NEG_INFINITY, f64::max)
        .max(ymin_log + 1.0);
    let px = |x: f64| left + (W - left - right) * x / xmax;
    let py = |y: f64| {
        let t = (y.log10() - ymin_log) / (ymax_log - ymin_log);
        H - bottom - (H - top - bottom) * t
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" font-size="15" text-anchor="middle">Append latency against offered rate (100-byte records, log scale)</text>"#,
        (W - right + left) / 2.0
    );
    // Axes and grid.
    let (x0, x1, y0, y1) = (left, W - right, top, H - bottom);
    let _ = writeln!(
        s,
        r#"<rect x="{x0}" y="{y0}" width="{}" height="{}" fill="none" stroke="black"/>"#,
        x1 - x0,
        y1 - y0
    );
    let mut e = ymin_log as i32;
    while e <= ymax_log as i32 {
        let v = 10f64.powi(e);
        let y = py(v);
        let label = if e >= 0 {
            format!("{v:.0}")
        } else {
            format!("{v}")
        };
        let _ = writeln!(
            s,
            r##"<line x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{label}</text>"##,
            x0 - 6.0,
            y + 4.0
        );
        e += 1;
    }
    let ticks = (xmax / xstep).round() as usize;
    for i in 0..=ticks {
        let v = xstep * i as f64;
        let x = px(v);
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" y1="{y0}" x2="{x:.1}" y2="{y1}" stroke="#eee"/><text x="{x:.1}" y="{}" text-anchor="middle">{:.2}</text>"##,
            y1 + 18.0,
            v / 1e6
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">offered rate (million records/s)</text>"#,
        (x0 + x1) / 2.0,
        H - 18.0
    );
    let _ = writeln!(
        s,
        r#"<text x="20" y="{}" text-anchor="middle" transform="rotate(-90 20 {})">append latency (ms)</text>"#,
        (y0 + y1) / 2.0,
        (y0 + y1) / 2.0
    );
    // Series and legend.
    for (i, (name, color, dash, pts)) in series.iter().enumerate() {
        let ly = top + 10.0 + 22.0 * i as f64;
        let lx = W - right + 15.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2" stroke-dasharray="{dash}"/><text x="{}" y="{}">{name}</text>"#,
            lx + 30.0,
            lx + 36.0,
            ly + 4.0
        );
        if pts.is_empty() {
            continue;
        }
        let path: Vec<String> = pts
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2" stroke-dasharray="{dash}"/>"#,
            path.join(" ")
        );
        for &(x, y) in pts {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"><title>{name}: {} rec/s offered, {} ms</title></circle>"#,
                px(x),
                py(y),
                rate(x),
                num(y)
            );
        }
    }
    let _ = writeln!(s, "</svg>");
    s
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::limits::Limit;
    use crate::runs::Latency;

    /// Machine limits for tests (shared with `bars`' tests).
    pub(crate) fn limits() -> Limits {
        let l = |b: f64| Limit {
            bytes_per_s: b,
            method: "test".into(),
        };
        Limits {
            loopback: l(2e9),
            sha1: l(1e9),
            disk: l(1e9),
        }
    }

    fn m(rate: f64, p99: f64) -> Measurement {
        Measurement {
            offered_rate: Some(rate),
            records_per_s: rate,
            mb_per_s: rate * 100.0 / 1e6,
            latency: Some(Latency {
                p50: p99 / 4.0,
                p99,
                p999: p99 * 2.0,
                ..Default::default()
            }),
            broker_cores: Some(0.5),
            ..Default::default()
        }
    }

    fn sweep() -> Scenario {
        Scenario {
            name: "sweep",
            title: "Rate sweep".into(),
            params: "p".into(),
            rows: vec![
                Row {
                    label: "25%".into(),
                    courant: Some(m(1e6, 1.0)),
                    gazette: Some(m(1e6, 10.0)),
                },
                Row {
                    label: "50%".into(),
                    courant: Some(m(2e6, 2.0)),
                    gazette: None,
                },
            ],
            not_run: None,
            plot: true,
            show_latency: false,
        }
    }

    #[test]
    fn machine_fractions_and_ratios() {
        assert_eq!(
            versus_machine(1e9, &limits()),
            "50% of loopback TCP · 100% of one core's SHA-1 · 100% of disk write"
        );
        assert_eq!(ratio(3.0, 1.5), "2.00×");
        assert_eq!(ratio(3.0, 0.0), "–");
        assert_eq!(ratio(5.42, 1316.0), "0.0041×");
        assert_eq!(rate(4_312_500.0), "4.31 M");
        assert_eq!(rate(812_000.0), "812 k");
    }

    #[test]
    fn tables_show_both_brokers_and_missing_runs() {
        let s = sweep();
        let text = summary(std::slice::from_ref(&s), &limits());
        assert!(text.contains("Rate sweep: 25%"), "{text}");
        assert!(text.contains("p99 0.10×"), "{text}");
        assert!(text.contains("not run"), "{text}");
        let mut out = String::new();
        multi_table(&mut out, &s.rows, &limits());
        assert!(out.contains("| 25% | Gazette | 1.00 M |"), "{out}");
    }

    #[test]
    fn axis_steps_are_round() {
        assert_eq!(nice_axis(3.47e6), (1e6, 4e6));
        assert_eq!(nice_axis(9e5), (2e5, 1e6));
        let (step, end) = nice_axis(123.0);
        assert_eq!((step, end), (25.0, 125.0));
    }

    #[test]
    fn svg_has_a_line_per_series_with_points() {
        let svg = svg(&sweep());
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 6);
        assert!(svg.contains("Courant p99.9"));
    }
}
