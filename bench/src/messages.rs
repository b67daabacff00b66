//! `courant-bench messages`: Gazette's message layer against its Rust and Python
//! counterparts, side by side on one Courant broker (and the Go client on a real Gazette
//! broker, unless `--skip-gazette`).
//!
//! Each client is its own process (`bench/go/msgbench`, `courant-msgbench`,
//! `bench/python/msgbench.py`) with the same flags and JSON output: it publishes N committed
//! ~100-byte JSON messages round-robin over J journals, or reads them back read-committed to
//! the write head. A round runs every client's publish, then every client's read of the
//! journals it published; the order of the clients rotates each round, so drifting
//! background load hits them alike. Figures per run: messages/s and client CPU (the
//! client's own getrusage over its measured phase), and broker CPU (the broker's threads'
//! `schedstat`, sampled when the client prints its start line and its result line).
//!
//! Lives on: the harness's main thread; one reader thread per client run forwards its stdout.

use crate::brokers::{self, Bins, Broker, BrokerOptions, Etcd, Kind};
use crate::procs;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The parameters of `courant-bench messages`.
#[derive(clap::Args, Debug, Clone)]
pub struct MessagesArgs {
    /// Messages per publish run (each client publishes this many in every round).
    #[arg(long, default_value_t = 200_000)]
    pub messages: u64,
    /// Journals the messages are spread over (round-robin).
    #[arg(long, default_value_t = 4)]
    pub journals: usize,
    /// Rounds (each runs every client's publish and read once).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Framed bytes per message, newline included.
    #[arg(long, default_value_t = 100)]
    pub size: usize,
    /// Bound on each client run, in seconds.
    #[arg(long, default_value_t = 120)]
    pub run_limit_s: u64,
}

/// A client implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lang {
    Go,
    Rust,
    Python,
}

impl Lang {
    pub fn name(self) -> &'static str {
        match self {
            Lang::Go => "Go (Gazette message.Publisher / ReadCommittedIter)",
            Lang::Rust => "Rust (courant-client Publisher / ReadCommitted)",
            Lang::Python => "Python (courant package)",
        }
    }
    fn slug(self) -> &'static str {
        match self {
            Lang::Go => "go",
            Lang::Rust => "rust",
            Lang::Python => "python",
        }
    }
}

/// Publish or read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Publish,
    Read,
}

impl Phase {
    fn slug(self) -> &'static str {
        match self {
            Phase::Publish => "publish",
            Phase::Read => "read",
        }
    }
}

/// The client programs.
#[derive(Clone, Debug)]
pub struct Programs {
    pub go: PathBuf,
    pub rust: PathBuf,
    pub python: PathBuf,
}

/// One client run's figures.
#[derive(Clone, Debug)]
pub struct Run {
    pub broker: Kind,
    pub lang: Lang,
    pub phase: Phase,
    pub round: usize,
    pub messages: u64,
    pub seconds: f64,
    pub client_cpu_s: f64,
    pub broker_cpu_s: f64,
    pub load_average: String,
}

impl Run {
    pub fn rate(&self) -> f64 {
        self.messages as f64 / self.seconds
    }
    pub fn client_us(&self) -> f64 {
        self.client_cpu_s * 1e6 / self.messages as f64
    }
    pub fn broker_us(&self) -> f64 {
        self.broker_cpu_s * 1e6 / self.messages as f64
    }
}

/// What the run measured, and what it could not.
#[derive(Default)]
pub struct Outcome {
    pub runs: Vec<Run>,
    pub problems: Vec<String>,
    pub python_skipped: Option<String>,
    pub broker_commands: Vec<String>,
}

/// Why the Python client cannot run, or `None` when it can (`msgbench.py --check`).
pub fn python_unavailable(script: &Path) -> Option<String> {
    match procs::command("python3")
        .arg(script)
        .arg("--check")
        .output()
    {
        Err(e) => Some(format!("python3: {e}")),
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            )
            .trim()
            .to_string(),
        ),
    }
}

/// The command of one client run.
fn client_command(programs: &Programs, lang: Lang, flags: &[String]) -> Command {
    match lang {
        Lang::Go => {
            let mut cmd = procs::command(&programs.go.to_string_lossy());
            // Go's flag package takes `-name value`; the others take `--name value`.
            cmd.args(flags.iter().map(|f| f.strip_prefix('-').unwrap_or(f)));
            cmd
        }
        Lang::Rust => {
            let mut cmd = procs::command(&programs.rust.to_string_lossy());
            cmd.args(flags);
            cmd
        }
        Lang::Python => {
            let mut cmd = procs::command("python3");
            cmd.arg(&programs.python).args(flags);
            cmd
        }
    }
}

/// Runs `cmd` to its result line, sampling the broker's CPU at its start and result lines.
/// Returns the result JSON and the broker CPU seconds between the two lines.
fn measure(mut cmd: Command, broker_pid: u32, limit: Duration) -> Result<(Value, f64), String> {
    let what = procs::describe(&cmd);
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{what}: {e}"))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let cpu = broker_cpu_s(broker_pid);
            if tx.send((line, cpu)).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + limit;
    let (mut start_cpu, mut result) = (None, None);
    while result.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok((line, cpu)) = rx.recv_timeout(left) else {
            break;
        };
        match serde_json::from_str::<Value>(&line) {
            Ok(v) if v.get("event").and_then(Value::as_str) == Some("start") => start_cpu = cpu,
            Ok(v) if v.get("messages").is_some() => result = Some((v, cpu)),
            _ => {}
        }
    }
    let left = deadline.saturating_duration_since(Instant::now());
    let (status, killed) = procs::wait_timeout(&mut child, left.max(Duration::from_secs(1)));
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut stderr);
    }
    match (result, start_cpu, status) {
        (Some((v, Some(end))), Some(begin), Some(s)) if s.success() => Ok((v, end - begin)),
        _ => Err(format!(
            "{what}: {} ({}): {}",
            if killed {
                "killed at its time limit"
            } else {
                "failed"
            },
            status.map_or("no status".to_string(), |s| s.to_string()),
            stderr.trim()
        )),
    }
}

/// The broker's CPU seconds: its threads' `schedstat` (ns), else its `stat` ticks.
fn broker_cpu_s(pid: u32) -> Option<f64> {
    procs::cpu_ns(pid)
        .map(|ns| ns as f64 / 1e9)
        .or_else(|| procs::cpu_seconds(pid))
}

/// The shared flags of every client run of one journal set.
fn flags(broker: &str, prefix: &str, m: &MessagesArgs, phase: Phase) -> Vec<String> {
    vec![
        "--broker".into(),
        broker.into(),
        "--prefix".into(),
        prefix.into(),
        "--journals".into(),
        m.journals.to_string(),
        "--messages".into(),
        m.messages.to_string(),
        "--size".into(),
        m.size.to_string(),
        "--mode".into(),
        phase.slug().into(),
    ]
}

/// Runs every round against one broker.
fn rounds_on(
    broker: &mut Broker,
    langs: &[Lang],
    p: &Programs,
    m: &MessagesArgs,
    out: &mut Outcome,
) {
    let limit = Duration::from_secs(m.run_limit_s);
    let address = broker.address();
    for round in 0..m.rounds {
        let mut order = langs.to_vec();
        order.rotate_left(round % langs.len());
        let prefix = |lang: Lang| format!("msgbench/r{round}-{}/", lang.slug());
        for phase in [Phase::Publish, Phase::Read] {
            for &lang in &order {
                if phase == Phase::Publish {
                    let mut create =
                        client_command(p, Lang::Go, &flags(&address, &prefix(lang), m, phase));
                    create.args(["-mode", "create"]);
                    if let Err(e) = crate::run_quiet(&mut create) {
                        out.problems.push(format!(
                            "{} round {round}: creating journals: {e}",
                            broker.kind.name()
                        ));
                        continue;
                    }
                }
                let cmd = client_command(p, lang, &flags(&address, &prefix(lang), m, phase));
                let load_average = procs::load_average();
                eprintln!(
                    "courant-bench: messages: {} {} round {round} {}",
                    broker.kind.name(),
                    lang.slug(),
                    phase.slug()
                );
                match measure(cmd, broker.pid(), limit) {
                    Ok((v, broker_cpu_s)) => out.runs.push(Run {
                        broker: broker.kind,
                        lang,
                        phase,
                        round,
                        messages: v["messages"].as_u64().unwrap_or(0),
                        seconds: v["seconds"].as_f64().unwrap_or(f64::NAN),
                        client_cpu_s: v["cpuSeconds"].as_f64().unwrap_or(f64::NAN),
                        broker_cpu_s,
                        load_average,
                    }),
                    Err(e) => out
                        .problems
                        .push(format!("{} round {round}: {e}", broker.kind.name())),
                }
            }
        }
        if !broker.alive() {
            out.problems.push(format!(
                "{} exited during round {round}: {}",
                broker.kind.name(),
                broker.log_tail()
            ));
            return;
        }
    }
}

/// Starts each broker in turn (fresh data) and runs the rounds against it.
pub fn run_all(
    bins: &Bins,
    scratch: &Path,
    programs: &Programs,
    m: &MessagesArgs,
    gazette: Option<(&Etcd, &[(String, String)])>,
) -> Outcome {
    let mut out = Outcome {
        python_skipped: python_unavailable(&programs.python),
        ..Default::default()
    };
    let mut langs = vec![Lang::Go, Lang::Rust];
    match &out.python_skipped {
        None => langs.push(Lang::Python),
        Some(why) => eprintln!("courant-bench: messages: Python client skipped: {why}"),
    }
    let opts = BrokerOptions::default();
    match brokers::start_courant(bins, scratch, &opts) {
        Ok(mut broker) => {
            out.broker_commands.push(broker.command.clone());
            rounds_on(&mut broker, &langs, programs, m, &mut out);
            broker.stop();
        }
        Err(e) => out.problems.push(format!("starting Courant: {e}")),
    }
    if let Some((etcd, env)) = gazette {
        match brokers::start_gazette(bins, scratch, etcd, &opts, env) {
            Ok(mut broker) => {
                out.broker_commands.push(broker.command.clone());
                rounds_on(&mut broker, &[Lang::Go], programs, m, &mut out);
                broker.stop();
            }
            Err(e) => out.problems.push(format!("starting Gazette: {e}")),
        }
    }
    out
}

/// The median and range of `values` (NaN-free).
pub fn median_range(mut values: Vec<f64>) -> Option<(f64, f64, f64)> {
    values.retain(|v| v.is_finite());
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    let median = if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    };
    Some((median, values[0], values[n - 1]))
}

/// The runs of one broker, client and phase.
fn select(runs: &[Run], broker: Kind, lang: Lang, phase: Phase) -> Vec<&Run> {
    runs.iter()
        .filter(|r| r.broker == broker && r.lang == lang && r.phase == phase)
        .collect()
}

/// Median messages/s of one broker, client and phase.
pub fn median_rate(runs: &[Run], broker: Kind, lang: Lang, phase: Phase) -> Option<f64> {
    median_range(
        select(runs, broker, lang, phase)
            .iter()
            .map(|r| r.rate())
            .collect(),
    )
    .map(|m| m.0)
}

/// The summary table: one row per broker, client and phase.
pub fn summary_table(runs: &[Run]) -> String {
    let mut s = String::from(
        "| Broker | Client | Phase | Rounds | messages/s (median) | range | client CPU µs/msg (median) | broker CPU µs/msg (median) | vs Go on the same broker |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for broker in [Kind::Courant, Kind::Gazette] {
        for phase in [Phase::Publish, Phase::Read] {
            for lang in [Lang::Go, Lang::Rust, Lang::Python] {
                let sel = select(runs, broker, lang, phase);
                let Some((med, lo, hi)) = median_range(sel.iter().map(|r| r.rate()).collect())
                else {
                    continue;
                };
                let client = median_range(sel.iter().map(|r| r.client_us()).collect())
                    .map_or(f64::NAN, |m| m.0);
                let brk = median_range(sel.iter().map(|r| r.broker_us()).collect())
                    .map_or(f64::NAN, |m| m.0);
                let ratio = median_rate(runs, broker, Lang::Go, phase)
                    .map_or("–".to_string(), |go| format!("{:.2}×", med / go));
                s += &format!(
                    "| {} | {} | {} | {} | {:.0} | {:.0}–{:.0} | {:.2} | {:.2} | {} |\n",
                    broker.name(),
                    lang.name(),
                    phase.slug(),
                    sel.len(),
                    med,
                    lo,
                    hi,
                    client,
                    brk,
                    ratio
                );
            }
        }
    }
    s
}

/// Every run, in the order it ran.
pub fn runs_table(runs: &[Run]) -> String {
    let mut s = String::from(
        "| Broker | Round | Client | Phase | messages | seconds | messages/s | client CPU µs/msg | broker CPU µs/msg | load average before |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in runs {
        s += &format!(
            "| {} | {} | {} | {} | {} | {:.3} | {:.0} | {:.2} | {:.2} | {} |\n",
            r.broker.name(),
            r.round,
            r.lang.slug(),
            r.phase.slug(),
            r.messages,
            r.seconds,
            r.rate(),
            r.client_us(),
            r.broker_us(),
            r.load_average
        );
    }
    s
}

/// The bars: Rust ≥ 2× Go's messages/s, Python ≥ 0.5×, publishing and reading, on Courant.
pub fn bars_table(runs: &[Run], python_skipped: Option<&str>) -> String {
    let mut s = String::from("| Bar | Measured | Verdict |\n|---|---|---|\n");
    for phase in [Phase::Publish, Phase::Read] {
        for (lang, bar) in [(Lang::Rust, 2.0), (Lang::Python, 0.5)] {
            let go = median_rate(runs, Kind::Courant, Lang::Go, phase);
            let it = median_rate(runs, Kind::Courant, lang, phase);
            let (measured, verdict) = match (go, it) {
                (Some(go), Some(it)) => {
                    let ratio = it / go;
                    (
                        format!("{ratio:.2}× ({it:.0} against {go:.0} messages/s)"),
                        if ratio >= bar { "met" } else { "missed" }.to_string(),
                    )
                }
                _ if lang == Lang::Python && python_skipped.is_some() => (
                    "–".into(),
                    format!("not measured: {}", python_skipped.unwrap_or("")),
                ),
                _ => ("–".into(), "not measured (runs failed)".into()),
            };
            s += &format!(
                "| {} {} ≥ {bar}× Go's messages/s | {measured} | {verdict} |\n",
                lang.slug(),
                phase.slug()
            );
        }
    }
    s
}

/// Builds what `courant-bench messages` runs beyond the harness's own build: the Rust
/// client program (release) and the Go one.
pub fn build(root: &Path, programs: &Programs) -> Result<(), String> {
    eprintln!("courant-bench: building courant-msgbench (release) and bench/go/msgbench");
    crate::run_quiet(procs::command("cargo").current_dir(root).args([
        "build",
        "--release",
        "-p",
        "courant-bench",
        "--bin",
        "courant-msgbench",
    ]))?;
    crate::run_quiet(
        procs::command("go")
            .current_dir(root.join("bench/go"))
            .arg("build")
            .arg("-o")
            .arg(&programs.go)
            .arg("./msgbench"),
    )
}

/// The client programs of a checkout.
pub fn programs(root: &Path) -> Programs {
    Programs {
        go: root.join("target/bench/go-bin/msgbench"),
        rust: crate::target_dir(root).join("release/courant-msgbench"),
        python: root.join("bench/python/msgbench.py"),
    }
}

/// The results file of a run.
pub fn markdown(head: &[(String, String)], m: &MessagesArgs, out: &Outcome) -> String {
    let mut md = String::from("# courant-bench results: messages\n\n");
    for (k, v) in head {
        md += &format!("- **{k}**: {v}\n");
    }
    md += &format!(
        "- **parameters**: {} messages of {} bytes (JSON lines, newline included) per publish \
         run, round-robin over {} journals (`application/x-ndjson`, replication 1, no stores); \
         {} rounds; each round publishes with every client (fresh journals per client and \
         round), then reads each client's journals back with the same client, read-committed, \
         from offset 0 to the write head; the clients' order rotates each round\n",
        m.messages, m.size, m.journals, m.rounds
    );
    for c in &out.broker_commands {
        md += &format!("- **broker**: `{c}`\n");
    }
    md += &format!(
        "- **Python client**: {}\n\n",
        out.python_skipped
            .as_deref()
            .map_or("run".to_string(), |why| format!("skipped: {why}"))
    );
    md += "messages/s = messages / the client's measured phase (publish: first publish to the \
           last append acknowledged; read: first read to the last message); client CPU = the \
           client process's own user + system CPU (getrusage) over that phase; broker CPU = \
           the broker's threads' CPU (`/proc/PID/task/*/schedstat`) between the client's start \
           and result lines. All per message. The machine is shared: compare rows of one run, \
           with the load averages below.\n\n## Summary\n\n";
    md += &summary_table(&out.runs);
    md += "\n## Bars (Courant, against Go's client on the same broker)\n\n";
    md += &bars_table(&out.runs, out.python_skipped.as_deref());
    if !out.problems.is_empty() {
        md += "\n## Problems\n\n";
        for p in &out.problems {
            md += &format!("- {}\n", p.replace('\n', " / "));
        }
    }
    md += "\n## Every run\n\n";
    md += &runs_table(&out.runs);
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(lang: Lang, phase: Phase, messages: u64, seconds: f64) -> Run {
        Run {
            broker: Kind::Courant,
            lang,
            phase,
            round: 0,
            messages,
            seconds,
            client_cpu_s: 1.0,
            broker_cpu_s: 0.5,
            load_average: String::new(),
        }
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median_range(vec![3.0, 1.0, 2.0]), Some((2.0, 1.0, 3.0)));
        assert_eq!(
            median_range(vec![4.0, 1.0, 2.0, 3.0]),
            Some((2.5, 1.0, 4.0))
        );
        assert_eq!(median_range(vec![f64::NAN]), None);
    }

    #[test]
    fn bars_compare_medians_with_go() {
        let runs = vec![
            run(Lang::Go, Phase::Publish, 100, 1.0),
            run(Lang::Rust, Phase::Publish, 300, 1.0),
            run(Lang::Go, Phase::Read, 100, 1.0),
            run(Lang::Rust, Phase::Read, 150, 1.0),
        ];
        let t = bars_table(&runs, Some("no courant module"));
        assert!(t.contains(
            "| rust publish ≥ 2× Go's messages/s | 3.00× (300 against 100 messages/s) | met |"
        ));
        assert!(t.contains(
            "| rust read ≥ 2× Go's messages/s | 1.50× (150 against 100 messages/s) | missed |"
        ));
        assert!(t.contains("not measured: no courant module"));
    }

    #[test]
    fn per_message_figures() {
        let r = run(Lang::Go, Phase::Publish, 1000, 2.0);
        assert_eq!(r.rate(), 500.0);
        assert_eq!(r.client_us(), 1000.0);
        assert_eq!(r.broker_us(), 500.0);
    }
}
