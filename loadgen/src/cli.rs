//! The command line: flags, their parsers, validation, and the parameter echo that goes
//! into every report.
//!
//! Flags that mean the same as a Gazette flag keep Gazette's name (`--broker.address`,
//! env `BROKER_ADDRESS`); the rest are the load generator's own.

use crate::record::{Framing, MAX_RECORD_SIZE, MIN_RECORD_SIZE, SizeRange};
use clap::Parser;
use protocol::CompressionCodec;
use std::path::PathBuf;
use std::time::Duration;

/// Grace period after warm-up + duration for in-flight appends and readers to finish;
/// the run is cut off hard when it ends.
pub const GRACE: Duration = Duration::from_secs(10);

#[derive(Parser, Debug, Clone)]
#[command(
    name = "courant-loadgen",
    version,
    about = "Open-loop load generator for any broker that speaks protocol.Journal (Courant or Gazette).",
    long_about = "Open-loop load generator for any broker that speaks protocol.Journal (Courant or \
                  Gazette). Appends batches of records to journals at a target rate (or as fast \
                  as the in-flight limit allows), measures append latency from each record's \
                  intended send time and, with --readers, end-to-end latency through tailing \
                  reads. Prints a progress line per second to stderr and a report to stdout."
)]
pub struct Args {
    /// Broker endpoint(s): http://host:port or host:port. Repeat or comma-separate;
    /// connections are spread round-robin over them.
    #[arg(
        long = "broker.address",
        env = "BROKER_ADDRESS",
        value_delimiter = ',',
        default_value = "http://localhost:8080"
    )]
    pub broker_address: Vec<String>,

    /// Number of journals to write (default 1; with --selector, all that match).
    #[arg(long)]
    pub journals: Option<usize>,

    /// Journal name prefix: journals are <prefix>0000, <prefix>0001, ...
    #[arg(long, default_value = "loadgen/")]
    pub prefix: String,

    /// Write to existing journals matching this label selector instead of the prefix
    /// ("name=value,other=value", "name" for any value, "name:prefix=value").
    #[arg(long, conflicts_with = "create")]
    pub selector: Option<String>,

    /// Create (upsert) the journals with Apply before starting.
    #[arg(long)]
    pub create: bool,

    /// Only create the journals (Apply), wait until List shows each with a primary, and
    /// exit: no append and no read, so the journals' first calls come from another
    /// client (on Courant, a journal lives on the core of the connection that first
    /// calls it).
    #[arg(long = "create-only", requires = "create")]
    pub create_only: bool,

    /// Replication of created journals (1..5).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(i32).range(1..=5))]
    pub replication: i32,

    /// Compression codec of created journals: none, gzip, zstandard, snappy,
    /// gzip-offload-decompression.
    #[arg(long, default_value = "none", value_parser = parse_codec)]
    pub codec: CompressionCodec,

    /// Fragment length of created journals (e.g. 512MiB, 16MiB, 1073741824).
    #[arg(long = "fragment-length", default_value = "512MiB", value_parser = parse_bytes)]
    pub fragment_length: u64,

    /// Fragment store URL(s) of created journals (none: fragments are never persisted).
    #[arg(long = "fragment-store")]
    pub fragment_stores: Vec<String>,

    /// Record size in bytes, fixed ("100") or a uniform range ("100-1000"); at least 16.
    #[arg(long = "record-size", default_value = "100", value_parser = parse_size_range)]
    pub record_size: SizeRange,

    /// Record framing: newline (each record ends with '\n') or none.
    #[arg(long, value_enum, default_value = "newline")]
    pub framing: Framing,

    /// Records packed into each append (batching).
    #[arg(long = "records-per-append", default_value_t = 300)]
    pub records_per_append: usize,

    /// Open loop only: the longest a record may wait for its batch to fill. Batches then
    /// hold min(--records-per-append, 1 + linger × per-journal rate) records.
    #[arg(long, value_parser = parse_duration)]
    pub linger: Option<Duration>,

    /// Largest content message of an append; records are never split across messages.
    #[arg(long = "chunk-size", default_value = "64KiB", value_parser = parse_bytes)]
    pub chunk_size: u64,

    /// Appends in flight per journal.
    #[arg(long = "in-flight", default_value_t = 4)]
    pub in_flight: usize,

    /// TCP connections (HTTP/2) for appends; journals are spread over them.
    #[arg(long, default_value_t = 1)]
    pub connections: usize,

    /// Target rate in records/s over all journals ("250000", "250k", "5M"), or "max" to
    /// append as fast as --in-flight allows (latency then counts from the actual send).
    #[arg(long, default_value = "max", value_parser = parse_rate)]
    pub rate: Rate,

    /// Warm-up before measuring (load is applied, nothing is recorded).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub warmup: Duration,

    /// Measured duration.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub duration: Duration,

    /// Run one tailing reader per journal and measure end-to-end latency.
    #[arg(long)]
    pub readers: bool,

    /// TCP connections for the readers (default: --connections).
    #[arg(long = "reader-connections")]
    pub reader_connections: Option<usize>,

    /// How long to wait for journals to accept appends before starting.
    #[arg(long = "ready-timeout", default_value = "30s", value_parser = parse_duration)]
    pub ready_timeout: Duration,

    /// tokio worker threads (default: available cores).
    #[arg(long)]
    pub threads: Option<usize>,

    /// Send every append to the broker dialed, even in a cluster (by default each
    /// journal's appends go to its primary, as Gazette's route-caching clients do).
    #[arg(long)]
    pub no_route: bool,

    /// Write the report as JSON (OpenMessaging Benchmark field names) to this path.
    #[arg(long)]
    pub json: Option<PathBuf>,

    /// Workload name recorded in the report.
    #[arg(long, default_value = "courant-loadgen")]
    pub workload: String,

    /// Seed for record sizes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// No progress line.
    #[arg(long, short)]
    pub quiet: bool,
}

/// The offered load.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rate {
    /// As fast as the in-flight limit allows (closed loop).
    Max,
    /// Open loop: this many records per second over all journals.
    PerSecond(f64),
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rate::Max => write!(f, "max"),
            Rate::PerSecond(r) => write!(f, "{r}"),
        }
    }
}

impl Args {
    /// Checks what clap cannot; the message names the flag to fix.
    pub fn validate(&self) -> Result<(), String> {
        let rs = self.record_size;
        if rs.min < MIN_RECORD_SIZE {
            return Err(format!(
                "--record-size: records must be at least {MIN_RECORD_SIZE} bytes (an 8-byte timestamp, filler and the newline)"
            ));
        }
        if rs.max > MAX_RECORD_SIZE {
            return Err(format!(
                "--record-size: records must be at most {MAX_RECORD_SIZE} bytes (one content message)"
            ));
        }
        if self.readers && self.framing == Framing::None && rs.fixed().is_none() {
            return Err(
                "--readers with --framing none needs a fixed --record-size to find records".into(),
            );
        }
        if self.chunk_size < MIN_RECORD_SIZE as u64 || self.chunk_size > MAX_RECORD_SIZE as u64 {
            return Err(format!(
                "--chunk-size must be between {MIN_RECORD_SIZE} and {MAX_RECORD_SIZE} bytes"
            ));
        }
        for (flag, v) in [
            ("--records-per-append", self.records_per_append),
            ("--in-flight", self.in_flight),
            ("--connections", self.connections),
            ("--reader-connections", self.reader_connections.unwrap_or(1)),
            ("--threads", self.threads.unwrap_or(1)),
        ] {
            if v == 0 {
                return Err(format!("{flag} must be at least 1"));
            }
        }
        if self.journals == Some(0) {
            return Err("--journals must be at least 1".into());
        }
        if self.duration.is_zero() {
            return Err("--duration must be positive".into());
        }
        if let Rate::PerSecond(r) = self.rate
            && !(r > 0.0 && r.is_finite())
        {
            return Err("--rate must be positive".into());
        }
        if self.linger.is_some() && self.rate == Rate::Max {
            return Err("--linger applies only to an open-loop --rate".into());
        }
        if self.broker_address.is_empty() {
            return Err("--broker.address: at least one broker is needed".into());
        }
        if self.selector.is_none() {
            let last = self.journal_names(self.journals.unwrap_or(1));
            let longest = last.last().map(String::len).unwrap_or(0);
            if self.prefix.contains(';') || longest > 512 {
                return Err(
                    "--prefix: journal names must be valid (no ';', at most 512 bytes)".into(),
                );
            }
        }
        Ok(())
    }

    /// The spec of journals `--create` makes.
    pub fn template(&self) -> crate::client::JournalTemplate {
        crate::client::JournalTemplate {
            replication: self.replication,
            codec: self.codec,
            fragment_length: self.fragment_length,
            stores: self.fragment_stores.clone(),
        }
    }

    /// Journal names from the prefix: `<prefix>0000`, `<prefix>0001`, ...
    pub fn journal_names(&self, count: usize) -> Vec<String> {
        let width = count.saturating_sub(1).to_string().len().max(4);
        (0..count)
            .map(|i| format!("{}{:0width$}", self.prefix, i))
            .collect()
    }

    /// The warm-up, the measured duration and the grace period: the run's hard limit.
    pub fn run_limit(&self) -> Duration {
        self.warmup + self.duration + GRACE
    }

    /// The parameters as (name, value) pairs, in flag order, for the report.
    pub fn params(&self) -> Vec<(&'static str, String)> {
        let journals = match (&self.selector, self.journals) {
            (Some(_), None) => "all matching".to_string(),
            (_, n) => n.unwrap_or(1).to_string(),
        };
        let mut p = vec![
            ("broker.address", self.broker_address.join(",")),
            ("journals", journals),
        ];
        match &self.selector {
            Some(s) => p.push(("selector", s.clone())),
            None => p.push(("prefix", self.prefix.clone())),
        }
        p.push(("create", self.create.to_string()));
        if self.create {
            p.push(("replication", self.replication.to_string()));
            p.push(("codec", self.codec.as_str_name().to_string()));
            p.push(("fragment-length", self.fragment_length.to_string()));
            p.push(("fragment-store", self.fragment_stores.join(",")));
        }
        p.extend([
            ("record-size", self.record_size.to_string()),
            ("framing", format!("{:?}", self.framing).to_lowercase()),
            ("records-per-append", self.records_per_append.to_string()),
            (
                "linger",
                self.linger
                    .map(|d| format!("{d:?}"))
                    .unwrap_or_else(|| "none".into()),
            ),
            ("chunk-size", self.chunk_size.to_string()),
            ("in-flight", self.in_flight.to_string()),
            ("connections", self.connections.to_string()),
            ("rate", self.rate.to_string()),
            ("warmup", format!("{:?}", self.warmup)),
            ("duration", format!("{:?}", self.duration)),
            ("readers", self.readers.to_string()),
        ]);
        if self.readers {
            p.push((
                "reader-connections",
                self.reader_connections
                    .unwrap_or(self.connections)
                    .to_string(),
            ));
        }
        p.push((
            "threads",
            self.threads
                .map(|t| t.to_string())
                .unwrap_or_else(|| format!("{} (cores)", crate::report::cores())),
        ));
        p.push(("seed", self.seed.to_string()));
        p
    }
}

/// Parses "5s", "500ms", "2m", "1h", "250us", "1.5s", or a plain number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("invalid duration {s:?} (try 30s, 500ms, 2m)"))?;
    let secs = match unit.trim() {
        "" | "s" => n,
        "ms" => n / 1e3,
        "us" | "µs" => n / 1e6,
        "ns" => n / 1e9,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        other => return Err(format!("invalid duration unit {other:?} in {s:?}")),
    };
    if !(0.0..=1e9).contains(&secs) {
        return Err(format!("duration {s:?} out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parses a byte count: "100", "64KiB", "512MiB", "1GiB", or decimal "64kB", "1MB", "1GB".
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("invalid size {s:?} (try 100, 64KiB, 512MiB)"))?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "Ki" | "K" => 1 << 10,
        "MiB" | "Mi" | "M" => 1 << 20,
        "GiB" | "Gi" | "G" => 1 << 30,
        "kB" | "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        other => return Err(format!("invalid size unit {other:?} in {s:?}")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("size {s:?} too large"))
}

/// Parses "100" or "100-1000" (also "100..1000"); each side accepts size units.
pub fn parse_size_range(s: &str) -> Result<SizeRange, String> {
    let (lo, hi) = match s.split_once("..").or_else(|| s.split_once('-')) {
        Some((lo, hi)) => (parse_bytes(lo)?, parse_bytes(hi)?),
        None => {
            let n = parse_bytes(s)?;
            (n, n)
        }
    };
    if lo > hi {
        return Err(format!("record size range {s:?} is empty"));
    }
    Ok(SizeRange {
        min: lo as usize,
        max: hi as usize,
    })
}

/// Parses "max", "250000", "250k", "1.5M" (records per second).
pub fn parse_rate(s: &str) -> Result<Rate, String> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("max") {
        return Ok(Rate::Max);
    }
    let (num, mult) = match s.as_bytes().last() {
        Some(b'k' | b'K') => (&s[..s.len() - 1], 1e3),
        Some(b'M') => (&s[..s.len() - 1], 1e6),
        Some(b'G') => (&s[..s.len() - 1], 1e9),
        _ => (s, 1.0),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("invalid rate {s:?} (records/s, e.g. 250k, 5M, or max)"))?;
    let r = n * mult;
    if !(r > 0.0 && r.is_finite()) {
        return Err(format!("rate {s:?} must be positive"));
    }
    Ok(Rate::PerSecond(r))
}

/// Parses a codec name as gazctl spells it (case-insensitive, '-' or '_').
pub fn parse_codec(s: &str) -> Result<CompressionCodec, String> {
    let norm = s.trim().to_ascii_uppercase().replace('-', "_");
    match norm.as_str() {
        "NONE" => Ok(CompressionCodec::None),
        "GZIP" => Ok(CompressionCodec::Gzip),
        "ZSTANDARD" | "ZSTD" => Ok(CompressionCodec::Zstandard),
        "SNAPPY" => Ok(CompressionCodec::Snappy),
        "GZIP_OFFLOAD_DECOMPRESSION" | "GZIP_OFFLOAD" => {
            Ok(CompressionCodec::GzipOffloadDecompression)
        }
        _ => Err(format!(
            "unknown codec {s:?} (none, gzip, zstandard, snappy, gzip-offload-decompression)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Args {
        let mut argv = vec!["courant-loadgen"];
        argv.extend_from_slice(extra);
        Args::try_parse_from(argv).unwrap()
    }

    #[test]
    fn create_only_needs_create() {
        let err = Args::try_parse_from(["courant-loadgen", "--create-only"]).unwrap_err();
        assert!(err.to_string().contains("--create"), "{err}");
        let a = args(&["--create", "--create-only", "--journals", "3"]);
        assert!(a.create_only);
        assert_eq!(a.journal_names(3).len(), 3);
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn sizes_and_ranges_parse() {
        assert_eq!(parse_bytes("100").unwrap(), 100);
        assert_eq!(parse_bytes("64KiB").unwrap(), 65536);
        assert_eq!(parse_bytes("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_bytes("1MB").unwrap(), 1_000_000);
        assert!(parse_bytes("12 furlongs").is_err());
        assert_eq!(
            parse_size_range("100-1000").unwrap(),
            SizeRange {
                min: 100,
                max: 1000
            }
        );
        assert_eq!(
            parse_size_range("16..1KiB").unwrap(),
            SizeRange { min: 16, max: 1024 }
        );
        assert_eq!(parse_size_range("100").unwrap().fixed(), Some(100));
        assert!(parse_size_range("1000-100").is_err());
    }

    #[test]
    fn rates_and_codecs_parse() {
        assert_eq!(parse_rate("max").unwrap(), Rate::Max);
        assert_eq!(parse_rate("250k").unwrap(), Rate::PerSecond(250_000.0));
        assert_eq!(parse_rate("1.5M").unwrap(), Rate::PerSecond(1_500_000.0));
        assert!(parse_rate("0").is_err());
        assert!(parse_rate("fast").is_err());
        assert_eq!(parse_codec("zstd").unwrap(), CompressionCodec::Zstandard);
        assert_eq!(
            parse_codec("gzip-offload-decompression").unwrap(),
            CompressionCodec::GzipOffloadDecompression
        );
        assert!(parse_codec("lz4").is_err());
    }

    #[test]
    fn defaults_validate_and_names_are_padded() {
        let a = args(&["--journals", "3"]);
        a.validate().unwrap();
        assert_eq!(
            a.journal_names(3),
            vec!["loadgen/0000", "loadgen/0001", "loadgen/0002"]
        );
        assert_eq!(a.journal_names(12_000)[11_999], "loadgen/11999");
        assert_eq!(a.rate, Rate::Max);
        assert_eq!(a.run_limit(), Duration::from_secs(45));
    }

    #[test]
    fn bad_combinations_are_rejected() {
        assert!(args(&["--record-size", "8"]).validate().is_err());
        assert!(
            args(&["--readers", "--framing", "none", "--record-size", "20-40"])
                .validate()
                .is_err()
        );
        args(&["--readers", "--framing", "none", "--record-size", "40"])
            .validate()
            .unwrap();
        assert!(args(&["--in-flight", "0"]).validate().is_err());
        assert!(args(&["--linger", "1ms"]).validate().is_err());
        args(&["--linger", "1ms", "--rate", "10k"])
            .validate()
            .unwrap();
        assert!(Args::try_parse_from(["x", "--create", "--selector", "a=b"]).is_err());
        assert!(Args::try_parse_from(["x", "--replication", "6"]).is_err());
    }

    #[test]
    fn broker_addresses_split_on_commas() {
        let a = args(&["--broker.address", "127.0.0.1:1,http://127.0.0.1:2"]);
        assert_eq!(a.broker_address, vec!["127.0.0.1:1", "http://127.0.0.1:2"]);
    }
}
