//! `courant-msgbench`: the Rust counterpart of `bench/go/msgbench` (same flags, same
//! messages, same JSON on stdout), measuring courant-client's message layer against a
//! broker.
//!
//! - `--mode publish`: one [`Publisher`] over one [`AppendService`] publishes `--messages`
//!   committed (OUTSIDE_TXN) JSON messages of `--size` bytes (newline included), round-robin
//!   over the journals, then flushes (waits until every append is acknowledged).
//! - `--mode read`: per journal in turn, a [`ReadCommitted`] over a non-blocking
//!   [`RetryReader`] from offset 0 to the write head; counts the messages delivered.
//!
//! Journals are `<prefix>part-NNN`, created by the Go program's `-mode create`. Before the
//! measured phase it prints `{"event":"start"}` (the harness samples the broker's CPU
//! there); the result line has messages, seconds and cpuSeconds (this process's user +
//! system CPU over the phase, from getrusage).
//!
//! Lives on: a tokio runtime of `--threads` workers (default: one per CPU, as Go's
//! GOMAXPROCS); the AppendService's per-journal tasks run there too.

use clap::Parser;
use courant_client::message::framing::CONTENT_TYPE_JSON_LINES;
use courant_client::message::{Framing, FramingOptions, Message, Publisher, ReadCommitted};
use courant_client::{AppendService, Client, Error, RetryReader};
use serde_json::{Map, Value};
use std::process::ExitCode;
use std::time::Instant;

#[derive(Parser, Debug)]
#[command(name = "courant-msgbench")]
struct Args {
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    broker: String,
    /// Journal name prefix: `<prefix>part-000`, ...
    #[arg(long, default_value = "msgbench/")]
    prefix: String,
    #[arg(long, default_value_t = 4)]
    journals: usize,
    /// Publish mode: messages to publish.
    #[arg(long, default_value_t = 100_000)]
    messages: u64,
    /// Publish mode: framed bytes per message, newline included.
    #[arg(long, default_value_t = 100)]
    size: usize,
    /// `publish` or `read`.
    #[arg(long, default_value = "publish")]
    mode: String,
    /// Tokio worker threads (0: one per CPU).
    #[arg(long, default_value_t = 0)]
    threads: usize,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if args.threads > 0 {
        rt.worker_threads(args.threads);
    }
    let rt = match rt.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("courant-msgbench: tokio runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match rt.block_on(run(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("courant-msgbench: {e}");
            ExitCode::from(2)
        }
    }
}

async fn run(args: &Args) -> Result<(), String> {
    if args.journals == 0 || args.messages == 0 || args.messages >= 1_000_000_000 {
        return Err(format!(
            "--journals must be ≥ 1 and --messages in [1, 1e9), got {} and {}",
            args.journals, args.messages
        ));
    }
    if fixed_len(args.messages) > args.size {
        return Err(format!(
            "--size {} is below the smallest message ({} bytes)",
            args.size,
            fixed_len(args.messages)
        ));
    }
    let names: Vec<String> = (0..args.journals)
        .map(|i| format!("{}part-{i:03}", args.prefix))
        .collect();
    let client = Client::new(&[args.broker.as_str()]).map_err(|e| e.to_string())?;
    match args.mode.as_str() {
        "publish" => publish(&client, &names, args.messages, args.size).await,
        "read" => read(&client, &names).await,
        other => Err(format!("unknown --mode {other:?} (want publish or read)")),
    }
}

/// The framed length of a message with a 36-character UUID, a 10-character ID, `value` and
/// an empty Pad: `{"UUID":"<36>","ID":"<10>","Value":<digits>,"Pad":""}` and a newline.
fn fixed_len(value: u64) -> usize {
    r#"{"UUID":""#.len()
        + 36
        + r#"","ID":""#.len()
        + 10
        + r#"","Value":"#.len()
        + value.to_string().len()
        + r#","Pad":""}"#.len()
        + 1
}

/// The i-th message (0-based) of `size` framed bytes, without its UUID.
fn bench_message(i: u64, size: usize, pad: &str) -> Message {
    let value = i + 1;
    let mut doc = Map::new();
    doc.insert("ID".to_string(), Value::String(format!("m-{i:08}")));
    doc.insert("Value".to_string(), Value::from(value));
    let pad_len = size - fixed_len(value);
    doc.insert("Pad".to_string(), Value::String(pad[..pad_len].to_string()));
    Message::Json(Value::Object(doc))
}

async fn publish(
    client: &Client,
    names: &[String],
    messages: u64,
    size: usize,
) -> Result<(), String> {
    let framing = Framing::for_content_type(
        &names[0],
        CONTENT_TYPE_JSON_LINES,
        &FramingOptions::default(),
    )
    .map_err(|e| e.to_string())?;
    let mut publisher = Publisher::new(AppendService::new(client));
    let pad = "x".repeat(size);
    let (start, cpu0) = begin();
    for i in 0..messages {
        let journal = &names[(i % names.len() as u64) as usize];
        let mut message = bench_message(i, size, &pad);
        publisher
            .publish_committed(journal, &framing, &mut message)
            .await
            .map_err(|e| format!("publishing message {i}: {e}"))?;
    }
    publisher
        .flush()
        .await
        .map_err(|e| format!("an append failed: {e}"))?;
    finish(start, cpu0, messages, None);
    Ok(())
}

async fn read(client: &Client, names: &[String]) -> Result<(), String> {
    let (start, cpu0) = begin();
    let mut count = 0u64;
    let mut bytes = 0i64;
    for journal in names {
        let framing =
            Framing::for_content_type(journal, CONTENT_TYPE_JSON_LINES, &FramingOptions::default())
                .map_err(|e| e.to_string())?;
        let source = RetryReader::new(client, journal, 0, false).map_err(|e| e.to_string())?;
        let mut reader = ReadCommitted::new(journal, framing, source);
        let mut last_end = 0;
        while let Some(env) = reader.next().await.map_err(|e: Error| e.to_string())? {
            last_end = env.end;
            count += 1;
        }
        bytes += last_end;
    }
    finish(start, cpu0, count, Some(bytes));
    Ok(())
}

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}

fn begin() -> (Instant, f64) {
    println!(r#"{{"event":"start"}}"#);
    (Instant::now(), cpu_seconds())
}

fn finish(start: Instant, cpu0: f64, messages: u64, bytes: Option<i64>) {
    let mut out = serde_json::json!({
        "messages": messages,
        "seconds": start.elapsed().as_secs_f64(),
        "cpuSeconds": cpu_seconds() - cpu0,
    });
    if let Some(b) = bytes {
        out["bytes"] = Value::from(b);
    }
    println!("{out}");
}
