//! `courant`: the Courant broker binary.
//!
//! Lives on: the main thread, which parses the command line and hands over to
//! `start::run`.

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use courant_broker::config::{self, ini};
use courant_broker::start;

#[derive(Parser)]
#[command(
    name = "courant",
    version,
    about = "A Gazette-compatible journal broker"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve as a broker (single node on embedded defaults unless etcd is configured).
    Serve(Box<config::ServeConfig>),
    /// Print the configuration `serve` would run with (flags, env vars and defaults
    /// merged) as INI, and exit.
    PrintConfig(Box<config::ServeConfig>),
}

/// mimalloc instead of glibc's malloc: the append path allocates and frees small buffers
/// (h2 frames, messages, futures) on every call, and glibc's bins cost 11-13 % of a busy
/// core (`_int_malloc`, `malloc_consolidate`, `unlink_chunk`). Measured in ARCHITECTURE.md.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    // The INI file (if any) is exported as env vars first: file < env < flags.
    let ini = match Cli::command().find_subcommand("serve").map(ini::apply) {
        Some(Err(err)) => {
            eprintln!("courant: config file {err}");
            std::process::exit(1);
        }
        Some(Ok(applied)) => applied,
        None => None,
    };
    let matches = Cli::command().try_get_matches().unwrap_or_else(|err| {
        if let Some(applied) = &ini
            && err.use_stderr()
        {
            let args: Vec<String> = std::env::args().collect();
            eprintln!("courant: {}", applied.blame(&err, &args));
        }
        err.exit()
    });
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    match cli.command {
        Command::PrintConfig(_) => {
            if let Some(sub) = matches.subcommand_matches("print-config") {
                // A closed pipe (`| head`) is not worth a panic.
                let _ =
                    std::io::Write::write_all(&mut std::io::stdout(), print_config(sub).as_bytes());
            }
        }
        Command::Serve(cfg) => {
            init_logging(&cfg.log_level, &cfg.log_format);
            if let Err(err) = start::run(*cfg) {
                eprintln!("courant serve: {err}");
                std::process::exit(1);
            }
        }
    }
}

/// Renders the merged configuration as INI: one section per flag group (the part of the
/// flag's name before its first dot), `name = value` lines, in flag order.
fn print_config(matches: &clap::ArgMatches) -> String {
    let cmd = Cli::command();
    let Some(sub) = cmd.find_subcommand("print-config") else {
        return String::new();
    };
    let mut sections: Vec<(String, Vec<String>)> = Vec::new();
    for arg in sub.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        let (section, key) = long.split_once('.').unwrap_or(("courant", long));
        let value = matches
            .get_raw(arg.get_id().as_str())
            .map(|vals| {
                vals.map(|v| v.to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default();
        let line = format!("{key} = {value}");
        match sections.iter_mut().find(|(s, _)| s == section) {
            Some((_, lines)) => lines.push(line),
            None => sections.push((section.to_string(), vec![line])),
        }
    }
    let mut out = String::new();
    for (section, lines) in sections {
        out.push_str(&format!("[{section}]\n"));
        for line in lines {
            out.push_str(&line);
            out.push('\n');
        }
        out.push('\n');
    }
    out
}

/// stderr for log lines, dropping what cannot be written (a full disk under a redirected
/// stderr): a failed log write never takes the broker down (tracing-subscriber would report
/// it with `eprintln!`, which panics when stderr fails too).
struct LossyStderr;

impl std::io::Write for LossyStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

fn init_logging(level: &str, format: &str) {
    let level = match level.to_ascii_lowercase().as_str() {
        "trace" => tracing::Level::TRACE,
        "debug" => tracing::Level::DEBUG,
        "info" => tracing::Level::INFO,
        "error" | "fatal" | "panic" => tracing::Level::ERROR,
        _ => tracing::Level::WARN,
    };
    let builder = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(|| LossyStderr)
        .with_ansi(false);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}
