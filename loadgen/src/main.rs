//! `courant-loadgen`: an open-loop load generator for any broker that speaks
//! `protocol.Journal` (Courant or Gazette), through Courant's own client.
//!
//! What it measures and how (see `loadgen/README.md` for the flags):
//! - **Throughput**: records and bytes acknowledged by the broker inside the measurement
//!   window (after warm-up), per second.
//! - **Append (publish) latency**, per record, from the record's *intended* send time to
//!   the acknowledgement of the append that carried it. In open-loop mode (`--rate`) the
//!   intended times follow a fixed schedule ([`schedule`]), so time a record spent queued
//!   behind a slow broker counts (no coordinated omission). In max-rate mode the intended
//!   time is the actual send time.
//! - **End-to-end latency** (`--readers`), per record, from its intended send time to the
//!   moment a tailing reader received it, using the timestamp embedded in the record
//!   ([`record`]).
//! - **Send lag**: how far behind schedule the generator itself dispatched (OMB's publish
//!   delay), so a saturated generator is visible rather than silently flattering the broker.
//!
//! The run: connect (`--connections` HTTP/2 connections, `TCP_NODELAY`), resolve or create
//! the journals, wait until each accepts appends, note each write head, start the tailing
//! readers, then the writers ([`writer`]); warm-up, measure, drain; report. A hard deadline
//! of warm-up + duration + 10 s ends the run whatever the broker does, and a watchdog thread
//! exits the process if even that fails.
//!
//! Module map: [`cli`] flags; [`client`] RPCs; [`clock`] the shared epoch; [`pacer`]
//! precise sleeps; [`schedule`] intended times; [`record`] record layout and append
//! encoding; [`writer`] and [`reader`] the tasks; [`stats`] histograms and counters;
//! [`report`] text and JSON output.

mod cli;
mod client;
mod clock;
mod pacer;
mod reader;
mod record;
mod report;
mod schedule;
mod stats;
mod writer;

use clap::Parser;
use cli::{Args, Rate};
use clock::{instant_at, now_ns};
use protocol::grpc::Channel;
use report::{IntervalSample, Machine, Percentiles, Report};
use stats::{Stats, Totals, Window};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use tokio::task::JoinSet;

/// Setup (connecting, creating journals, probing heads) may take this long on top of
/// `--ready-timeout`.
const SETUP_SLACK: Duration = Duration::from_secs(30);
/// Time from the end of setup to the first scheduled record, so every task is running.
const START_LEAD: Duration = Duration::from_millis(20);
/// Upper bounds that keep every run finite and its histograms meaningful.
const MAX_WARMUP: Duration = Duration::from_secs(3_600);
const MAX_DURATION: Duration = Duration::from_secs(24 * 3_600);

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(msg) = args.validate().and_then(|()| check_bounds(&args)) {
        eprintln!("courant-loadgen: {msg}");
        return ExitCode::from(2);
    }
    clock::epoch();
    start_watchdog(setup_limit(&args) + args.run_limit() + Duration::from_secs(5));

    let threads = args.threads.unwrap_or_else(report::cores);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("loadgen-worker")
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("courant-loadgen: starting the tokio runtime: {e}");
            return ExitCode::from(1);
        }
    };
    if args.create_only {
        let outcome = rt.block_on(async {
            let limit = setup_limit(&args);
            tokio::time::timeout(limit, create_only(&args))
                .await
                .map_err(|_| format!("creating the journals did not finish within {limit:?}"))?
        });
        rt.shutdown_timeout(Duration::from_millis(500));
        return match outcome {
            Ok(n) => {
                if !args.quiet {
                    eprintln!("courant-loadgen: {n} journals created, each with a primary");
                }
                ExitCode::SUCCESS
            }
            Err(msg) => {
                eprintln!("courant-loadgen: {msg}");
                ExitCode::from(1)
            }
        };
    }
    let outcome = rt.block_on(run(args.clone()));
    // Appends or reads still outstanding at the deadline are simply dropped.
    rt.shutdown_timeout(Duration::from_millis(500));

    match outcome {
        Ok(report) => {
            print!("{}", report::format_text(&report));
            if let Some(path) = &args.json {
                let json = report::to_json(&report);
                let text = serde_json::to_string_pretty(&json).expect("JSON values serialize");
                if let Err(e) = std::fs::write(path, text + "\n") {
                    eprintln!("courant-loadgen: writing {}: {e}", path.display());
                    return ExitCode::from(1);
                }
            }
            if report.counts.acked_records == 0 {
                eprintln!("courant-loadgen: no append was acknowledged inside the window");
                return ExitCode::from(1);
            }
            ExitCode::SUCCESS
        }
        Err(msg) => {
            eprintln!("courant-loadgen: {msg}");
            ExitCode::from(1)
        }
    }
}

fn check_bounds(args: &Args) -> Result<(), String> {
    if args.warmup > MAX_WARMUP {
        return Err(format!("--warmup is limited to {MAX_WARMUP:?}"));
    }
    if args.duration > MAX_DURATION {
        return Err(format!("--duration is limited to {MAX_DURATION:?}"));
    }
    if args.ready_timeout > MAX_WARMUP {
        return Err(format!("--ready-timeout is limited to {MAX_WARMUP:?}"));
    }
    Ok(())
}

fn setup_limit(args: &Args) -> Duration {
    args.ready_timeout + SETUP_SLACK
}

/// Exits the process if it is still running after `limit`, whatever state it is in.
fn start_watchdog(limit: Duration) {
    let _ = std::thread::Builder::new()
        .name("loadgen-watchdog".into())
        .spawn(move || {
            std::thread::sleep(limit);
            eprintln!("courant-loadgen: watchdog: still running after {limit:?}; exiting");
            std::process::exit(3);
        });
}

/// Connections and journals, ready for load.
struct Setup {
    writer_channels: Vec<Channel>,
    /// The channel each journal's appends go to (its primary's, in a cluster).
    journal_channels: Vec<Channel>,
    reader_channels: Vec<Channel>,
    journals: Vec<String>,
    /// Write head of each journal before the run (only probed with `--readers`).
    heads: Vec<i64>,
}

async fn run(args: Args) -> Result<Report, String> {
    let limit = setup_limit(&args);
    let setup = tokio::time::timeout(limit, setup(&args))
        .await
        .map_err(|_| format!("setup did not finish within {limit:?}"))??;
    Ok(measure(&args, setup).await)
}

/// `--create-only`: Apply the journals, then List until each has a primary (or the
/// ready timeout passes). Returns how many journals were created.
async fn create_only(args: &Args) -> Result<usize, String> {
    let control = client::control_client(&args.broker_address)?;
    let journals = args.journal_names(args.journals.unwrap_or(1));
    client::create_journals(&control, &journals, &args.template()).await?;
    let deadline = Instant::now() + args.ready_timeout;
    loop {
        let missing = client::without_primary(&control, &journals).await?;
        match missing.first() {
            None => return Ok(journals.len()),
            Some(j) if Instant::now() >= deadline => {
                return Err(format!(
                    "{} of {} journals (e.g. {j}) have no primary after --ready-timeout",
                    missing.len(),
                    journals.len()
                ));
            }
            Some(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// How long setup waits for List to show every journal's primary before probing.
const LIST_ROUTES_FOR: Duration = Duration::from_secs(2);

/// Each journal's primary endpoint as List shows it (clusters only), polling briefly while
/// some journal has no primary yet: journals just created are assigned within milliseconds.
async fn listed_primaries(
    control: &courant_client::Client,
    journals: &[String],
    deadline: Instant,
) -> Result<std::collections::HashMap<String, String>, String> {
    let until = deadline.min(Instant::now() + LIST_ROUTES_FOR);
    loop {
        let led = client::primary_endpoints(control, journals).await?;
        if led.len() == journals.len() || Instant::now() >= until {
            return Ok(led
                .into_iter()
                .filter_map(|(name, endpoint)| Some((name, endpoint?)))
                .collect());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A connection to `primary` for journal number `j`, dialing the primary on first use.
async fn primary_channel(
    primaries: &mut std::collections::HashMap<String, Vec<Channel>>,
    primary: &str,
    j: usize,
    args: &Args,
) -> Result<Channel, String> {
    if !primaries.contains_key(primary) {
        let endpoint = client::parse_endpoint(primary)?;
        primaries.insert(
            primary.to_string(),
            connect_all(&[endpoint], args.connections).await?,
        );
    }
    let channels = &primaries[primary];
    Ok(channels[j % channels.len()].clone())
}

async fn connect_all(endpoints: &[client::Endpoint], count: usize) -> Result<Vec<Channel>, String> {
    let mut channels = Vec::with_capacity(count);
    for i in 0..count {
        channels.push(client::connect(&endpoints[i % endpoints.len()]).await?);
    }
    Ok(channels)
}

async fn setup(args: &Args) -> Result<Setup, String> {
    let endpoints = args
        .broker_address
        .iter()
        .map(|a| client::parse_endpoint(a))
        .collect::<Result<Vec<_>, _>>()?;
    let writer_channels = connect_all(&endpoints, args.connections).await?;
    let reader_channels = if args.readers {
        connect_all(
            &endpoints,
            args.reader_connections.unwrap_or(args.connections),
        )
        .await?
    } else {
        Vec::new()
    };
    let control = &client::control_client(&args.broker_address)?;

    let journals = match &args.selector {
        Some(selector) => {
            let mut names = client::list_journals(control, selector).await?;
            if names.is_empty() {
                return Err(format!("no journal matches --selector {selector:?}"));
            }
            if let Some(n) = args.journals {
                if names.len() < n {
                    return Err(format!(
                        "--journals {n}: only {} journals match --selector {selector:?}",
                        names.len()
                    ));
                }
                names.truncate(n);
            }
            names
        }
        None => args.journal_names(args.journals.unwrap_or(1)),
    };
    if args.create {
        client::create_journals(control, &journals, &args.template()).await?;
    }

    if !args.quiet {
        eprintln!(
            "courant-loadgen: {} journals; waiting for them to accept appends",
            journals.len()
        );
    }
    let deadline = Instant::now() + args.ready_timeout;
    let mut journal_channels: Vec<Channel> = (0..journals.len())
        .map(|j| writer_channels[j % writer_channels.len()].clone())
        .collect();
    // In a cluster, each journal's appends go straight to its primary, as Gazette's
    // clients with a route cache send them (instead of being proxied by the broker dialed).
    let mut primaries: std::collections::HashMap<String, Vec<Channel>> = Default::default();
    if !args.no_route {
        // Routes known from List before the first call: the readiness probe then goes over
        // the connection the journal's appends will use, as a route-cached client's first
        // append does.
        let listed = listed_primaries(control, &journals, deadline).await?;
        for (j, primary) in journals
            .iter()
            .enumerate()
            .filter_map(|(j, name)| Some((j, listed.get(name)?)))
        {
            journal_channels[j] = primary_channel(&mut primaries, primary, j, args).await?;
        }
    }
    let mut probes = JoinSet::new();
    for (j, journal) in journals.iter().enumerate() {
        let channel = journal_channels[j].clone();
        let journal = journal.clone();
        probes.spawn(async move { (j, client::wait_writable(&channel, &journal, deadline).await) });
    }
    while let Some(res) = probes.join_next().await {
        let (j, primary) = res.map_err(|e| format!("readiness probe: {e}"))?;
        let Some(primary) = primary? else { continue };
        if args.no_route {
            continue;
        }
        journal_channels[j] = primary_channel(&mut primaries, &primary, j, args).await?;
    }

    let mut heads = vec![0; journals.len()];
    if args.readers {
        let mut probes = JoinSet::new();
        for (j, journal) in journals.iter().enumerate() {
            let channel = reader_channels[j % reader_channels.len()].clone();
            let journal = journal.clone();
            probes.spawn(async move { (j, client::write_head(&channel, &journal).await) });
        }
        while let Some(res) = probes.join_next().await {
            let (j, head) = res.map_err(|e| format!("write-head probe: {e}"))?;
            heads[j] = head?;
        }
    }
    Ok(Setup {
        writer_channels,
        journal_channels,
        reader_channels,
        journals,
        heads,
    })
}

async fn measure(args: &Args, setup: Setup) -> Report {
    let start_ns = now_ns() + START_LEAD.as_nanos() as u64;
    let window_start = start_ns + args.warmup.as_nanos() as u64;
    let window = Window {
        start_ns: window_start,
        end_ns: window_start + args.duration.as_nanos() as u64,
    };
    let hard_deadline = instant_at(start_ns + args.run_limit().as_nanos() as u64);
    let shards = setup.writer_channels.len().max(setup.reader_channels.len());
    let stats = Arc::new(Stats::new(window, shards));
    let journals = setup.journals.len();
    let records_per_append = match (args.rate, args.linger) {
        (Rate::PerSecond(rate), Some(linger)) => schedule::batch_for_linger(
            rate,
            journals,
            args.records_per_append,
            linger.as_nanos() as u64,
        ),
        _ => args.records_per_append,
    };
    let acked_ends: Vec<Arc<AtomicI64>> = setup
        .heads
        .iter()
        .map(|&h| Arc::new(AtomicI64::new(h)))
        .collect();

    // Readers first: their Reads start at the probed heads, so nothing is missed even if
    // a writer's first append lands before a Read reaches the broker.
    let mut readers = JoinSet::new();
    let mut positions = Vec::new();
    for (j, journal) in setup.journals.iter().enumerate().filter(|_| args.readers) {
        let position = Arc::new(AtomicI64::new(setup.heads[j]));
        positions.push((position.clone(), acked_ends[j].clone()));
        let reader = reader::TailReader {
            journal: journal.clone(),
            channel: setup.reader_channels[j % setup.reader_channels.len()].clone(),
            shard: j % shards,
            start_offset: setup.heads[j],
            framing: args.framing,
            fixed_size: args.record_size.fixed(),
            stats: stats.clone(),
            position,
        };
        readers.spawn(reader.run());
    }

    let cfg = Arc::new(writer::WriterConfig {
        records_per_append,
        sizes: args.record_size,
        layout: record::AppendLayout {
            chunk_size: args.chunk_size as usize,
            framing: args.framing,
        },
        in_flight: args.in_flight,
        rate: match args.rate {
            Rate::Max => None,
            Rate::PerSecond(r) => Some(r),
        },
        journals,
        start_ns,
        stats: stats.clone(),
        filler: record::filler(args.record_size.max).into(),
        seed: args.seed,
    });
    let mut writers = JoinSet::new();
    for (j, journal) in setup.journals.iter().enumerate() {
        let w = writer::JournalWriter {
            index: j,
            journal: journal.clone(),
            channel: setup.journal_channels[j].clone(),
            shard: j % shards,
            acked_end: acked_ends[j].clone(),
        };
        writers.spawn(w.run(cfg.clone()));
    }

    // The generator's own CPU over the window, to show how much of the machine it took.
    let self_cpu = tokio::spawn(async move {
        tokio::time::sleep_until(instant_at(window.start_ns).into()).await;
        let begin = report::process_cpu_s();
        tokio::time::sleep_until(instant_at(window.end_ns).into()).await;
        report::process_cpu_s() - begin
    });

    let (stop_progress, stopped) = oneshot::channel();
    let progress = tokio::spawn(progress(
        stats.clone(),
        start_ns,
        args.quiet,
        args.readers,
        stopped,
    ));

    // Writers stop scheduling at the end of the window and then drain, bounded by the
    // hard deadline.
    let drained = tokio::time::timeout_at(hard_deadline.into(), async {
        while writers.join_next().await.is_some() {}
    })
    .await
    .is_ok();
    if !drained {
        writers.abort_all();
    }
    // Readers run until they have seen every acknowledged append, or the deadline.
    while !readers.is_empty() {
        let caught_up = positions
            .iter()
            .all(|(pos, end)| pos.load(Relaxed) >= end.load(Relaxed));
        if caught_up || Instant::now() >= hard_deadline {
            readers.abort_all();
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = stop_progress.send(());
    let series = progress.await.unwrap_or_default();
    // Finished unless the run was cut short, which cannot happen before the window ends.
    let loadgen_cpu_s = if self_cpu.is_finished() {
        self_cpu.await.ok()
    } else {
        self_cpu.abort();
        None
    };

    let hists = stats.final_hists();
    let counts = stats.window_counts();
    let publish = Percentiles::of(&hists.publish);
    let due = match args.rate {
        Rate::PerSecond(rate) => (0..journals)
            .map(|j| {
                schedule::Schedule::for_journal(start_ns, rate, journals, j, records_per_append)
                    .count_between(window.start_ns, window.end_ns)
            })
            .sum(),
        Rate::Max => stats.window_dispatched(),
    };
    let unacked_records = due
        .saturating_sub(hists.publish.len())
        .saturating_sub(counts.failed_records);
    Report {
        workload: args.workload.clone(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        machine: Machine::current(),
        params: {
            let mut p = args.params();
            if records_per_append != args.records_per_append {
                p.push((
                    "effective-records-per-append",
                    records_per_append.to_string(),
                ));
            }
            p
        },
        journals: setup.journals.clone(),
        mean_record_size: args.record_size.mean(),
        readers: args.readers,
        target_rate: match args.rate {
            Rate::Max => None,
            Rate::PerSecond(r) => Some(r),
        },
        warmup_s: args.warmup.as_secs_f64(),
        window_s: window.seconds(),
        counts,
        unacked_records,
        publish,
        rpc: Percentiles::of(&hists.rpc),
        delay: Percentiles::of(&hists.delay),
        e2e: Percentiles::of(&hists.e2e),
        errors: stats.errors(),
        series,
        loadgen_cpu_s,
    }
}

/// Prints a line per second and collects the per-second series of the window.
async fn progress(
    stats: Arc<Stats>,
    start_ns: u64,
    quiet: bool,
    readers: bool,
    mut stop: oneshot::Receiver<()>,
) -> Vec<IntervalSample> {
    let window = stats.window;
    let mut series = Vec::new();
    let mut last = Totals::default();
    let mut last_ns = start_ns;
    for tick in 1u64.. {
        let tick_ns = start_ns + tick * 1_000_000_000;
        tokio::select! {
            _ = tokio::time::sleep_until(instant_at(tick_ns).into()) => {}
            _ = &mut stop => break,
        }
        let now = now_ns();
        let dt = (now - last_ns) as f64 / 1e9;
        let totals = stats.totals();
        let iv = stats.take_interval();
        let records_per_s = (totals.acked_records - last.acked_records) as f64 / dt;
        let mb_per_s = (totals.acked_bytes - last.acked_bytes) as f64 / 1e6 / dt;
        let failed_per_s = (totals.failed_appends - last.failed_appends) as f64 / dt;
        let read_per_s = (totals.read_records - last.read_records) as f64 / dt;
        let (publish, delay, e2e) = (
            Percentiles::of(&iv.publish),
            Percentiles::of(&iv.delay),
            Percentiles::of(&iv.e2e),
        );
        let phase = if tick_ns <= window.start_ns {
            "warm-up"
        } else if tick_ns <= window.end_ns {
            "measure"
        } else {
            "drain"
        };
        if !quiet {
            let p99 = |p: &Option<Percentiles>| {
                p.map(|p| format!("{:.3}", report::ms(p.p99)))
                    .unwrap_or_else(|| "-".into())
            };
            let mut line = format!(
                "[{tick:>4}s {phase:<7}] {:>12} rec/s {:>9.1} MB/s  append p99 {} ms",
                report::group(records_per_s.round() as u64),
                mb_per_s,
                p99(&publish),
            );
            if readers {
                line += &format!("  e2e p99 {} ms", p99(&e2e));
            }
            line += &format!(
                "  lag p99 {} ms  in-flight {}  failed/s {:.0}",
                p99(&delay),
                stats.in_flight(),
                failed_per_s
            );
            eprintln!("{line}");
        }
        if tick_ns > window.start_ns && tick_ns <= window.end_ns {
            series.push(IntervalSample {
                t_s: (tick_ns - window.start_ns) as f64 / 1e9,
                records_per_s,
                mb_per_s,
                failed_appends_per_s: failed_per_s,
                read_records_per_s: read_per_s,
                backlog: if readers {
                    totals.acked_records as i64 - totals.read_records as i64
                } else {
                    0
                },
                publish,
                delay,
                e2e,
            });
        }
        last = totals;
        last_ns = now;
    }
    series
}
