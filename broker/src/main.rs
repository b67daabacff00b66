//! `courant`: the Courant broker binary.

use clap::{Parser, Subcommand};

mod append;
mod call;
mod config;
mod control;
mod core;
mod flow;
mod keyspace;
mod list;
mod read;
mod replica;
mod resolver;
mod server;

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
}

fn main() {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(cfg) => {
            init_logging(&cfg.log_level);
            if let Err(err) = server::run(*cfg) {
                eprintln!("courant serve: {err}");
                std::process::exit(1);
            }
        }
    }
}

fn init_logging(level: &str) {
    let level = match level.to_ascii_lowercase().as_str() {
        "trace" => tracing::Level::TRACE,
        "debug" => tracing::Level::DEBUG,
        "info" => tracing::Level::INFO,
        "error" | "fatal" | "panic" => tracing::Level::ERROR,
        _ => tracing::Level::WARN,
    };
    tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
}
