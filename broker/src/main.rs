//! `courant`: the Courant broker binary.

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

mod allocator;
mod append;
mod auth;
mod balance;
mod call;
mod config;
mod control;
mod core;
mod flow;
mod http;
mod ini;
mod io;
mod jwt;
mod keyspace;
mod list;
mod metrics;
mod mutation;
mod peer;
mod pipeline;
mod proxy;
mod pulse;
mod read;
mod replica;
mod replicate;
mod resolver;
mod server;
mod shutdown;
#[cfg(test)]
mod sim;
mod stores;
mod tls;

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

fn main() {
    // The INI file (if any) is exported as env vars first: file < env < flags.
    if let Some(serve) = Cli::command().find_subcommand("serve")
        && let Err(err) = ini::apply(serve)
    {
        eprintln!("courant: config file: {err}");
        std::process::exit(1);
    }
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    match cli.command {
        Command::PrintConfig(_) => {
            if let Some(sub) = matches.subcommand_matches("print-config") {
                print!("{}", print_config(sub));
            }
        }
        Command::Serve(cfg) => {
            init_logging(&cfg.log_level, &cfg.log_format);
            if let Err(err) = server::run(*cfg) {
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
        .with_writer(std::io::stderr)
        .with_ansi(false);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}
