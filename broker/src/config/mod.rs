//! Flags of `courant serve`. Gazette's names (and env vars) where Gazette has the knob;
//! Courant's own knobs live in the `--tpc.*` group and `--data-dir`.
//!
//! Lives on: parsed once on the main thread before start-up, then shared read-only
//! (`Arc<ServeConfig>`) by every core and the control thread.

pub mod ini;

use clap::Args;
use std::path::PathBuf;

/// Shortest etcd lease `--etcd.lease` accepts (as its help says).
const MIN_LEASE: std::time::Duration = std::time::Duration::from_secs(1);

#[derive(Args, Debug, Clone)]
pub struct ServeConfig {
    /// Zone of this broker's ProcessSpec.ID.
    #[arg(long = "broker.zone", env = "BROKER_ZONE", default_value = "local")]
    pub zone: String,
    /// Unique suffix of this broker's ProcessSpec.ID (default: "courant-" + hostname).
    #[arg(long = "broker.id", env = "BROKER_ID")]
    pub id: Option<String>,
    /// Host advertised in this broker's endpoint (default: the OS hostname).
    #[arg(long = "broker.host", env = "BROKER_HOST")]
    pub host: Option<String>,
    /// Port to serve on. 8080 is where gazctl looks by default.
    #[arg(long = "broker.port", env = "BROKER_PORT", default_value_t = 8080)]
    pub port: u16,
    /// Address to bind (Courant; Gazette binds all interfaces).
    #[arg(long = "broker.bind", env = "BROKER_BIND", default_value = "0.0.0.0")]
    pub bind: String,
    /// Largest gRPC message accepted from a client, in bytes.
    #[arg(
        long = "broker.max-grpc-recv-size",
        env = "BROKER_MAX_GRPC_RECV_SIZE",
        default_value_t = 4 << 20
    )]
    pub max_grpc_recv_size: usize,
    /// Maximum number of journals this broker may be assigned.
    #[arg(long = "broker.limit", env = "BROKER_LIMIT", default_value_t = 1024)]
    pub limit: u32,
    /// Global cap on a journal's append rate in bytes/s (0 = none).
    #[arg(
        long = "broker.max-append-rate",
        env = "BROKER_MAX_APPEND_RATE",
        default_value_t = 0
    )]
    pub max_append_rate: i64,
    /// Minimum rate, in bytes/s, at which a client must stream an append (0 = none).
    #[arg(
        long = "broker.min-append-rate",
        env = "BROKER_MIN_APPEND_RATE",
        default_value_t = 65536
    )]
    pub min_append_rate: i64,
    /// Cap on the effective replication of any journal.
    #[arg(
        long = "broker.max-replication",
        env = "BROKER_MAX_REPLICATION",
        default_value_t = 9
    )]
    pub max_replication: i32,
    /// Etcd endpoint (e.g. http://127.0.0.1:2379): cluster mode. Unset: the embedded
    /// single-node keyspace under `--data-dir`.
    #[arg(long = "etcd.address", env = "ETCD_ADDRESS")]
    pub etcd_address: Option<String>,
    /// Time-to-live of this broker's etcd lease (its member and assignment keys), as a Go
    /// duration (`20s`, `1m`), at least 1s.
    #[arg(long = "etcd.lease", env = "ETCD_LEASE_TTL", default_value = "20s",
          value_parser = parse_lease)]
    pub etcd_lease: std::time::Duration,
    /// Root prefix of the keyspace (Gazette's etcd layout; also used by the embedded keyspace).
    #[arg(
        long = "etcd.prefix",
        env = "ETCD_PREFIX",
        default_value = "/gazette/cluster"
    )]
    pub etcd_prefix: String,
    /// Logging level: trace, debug, info, warn, error (Gazette's fatal and panic mean error).
    /// At info (the default) the broker says where it serves and when it stops.
    #[arg(long = "log.level", env = "LOG_LEVEL", default_value = "info", ignore_case = true,
          value_parser = ["trace", "debug", "info", "warn", "warning", "error", "fatal", "panic"])]
    pub log_level: String,
    /// Logging output format: text or json ("color" is accepted as text).
    #[arg(long = "log.format", env = "LOG_FORMAT", default_value = "text",
          value_parser = ["text", "json", "color"])]
    pub log_format: String,
    /// Whitespace or comma separated base64 keys verifying (and, the first, signing)
    /// authorization tokens. `AA==` also admits requests without a token. Empty: no auth.
    #[arg(
        long = "broker.auth-keys",
        env = "BROKER_AUTH_KEYS",
        default_value = ""
    )]
    pub auth_keys: String,
    /// PEM certificate (chain) of this broker's TLS server; enables TLS (and `https://`).
    #[arg(long = "broker.server-cert-file", env = "BROKER_SERVER_CERT_FILE")]
    pub server_cert_file: Option<PathBuf>,
    /// PEM private key of `--broker.server-cert-file` (Gazette's name;
    /// `--broker.server-key-file` is Courant's older alias).
    #[arg(
        long = "broker.server-cert-key-file",
        alias = "broker.server-key-file",
        env = "BROKER_SERVER_CERT_KEY_FILE"
    )]
    pub server_key_file: Option<PathBuf>,
    /// PEM CA certificates: when set, clients must present a certificate signed by one.
    #[arg(long = "broker.server-ca-file", env = "BROKER_SERVER_CA_FILE")]
    pub server_ca_file: Option<PathBuf>,
    /// Origin allowed in CORS contexts of the `/v1/` JSON routes (repeatable, or comma
    /// separated, as `print-config` prints several).
    #[arg(
        long = "broker.allow-origin",
        env = "BROKER_ALLOW_ORIGIN",
        value_delimiter = ','
    )]
    pub allow_origin: Vec<String>,
    /// Also serve `/debug/ready` and `/debug/metrics` on this separate port (HTTP/1.1).
    #[arg(long = "debug.port", env = "DEBUG_PORT")]
    pub debug_port: Option<u16>,
    /// Don't serve `/debug/*` on the main port (only on `--debug.port`, if set).
    #[arg(long = "debug.private", env = "DEBUG_PRIVATE")]
    pub debug_private: bool,
    /// Directory for spools and the embedded keyspace.
    #[arg(
        long = "data-dir",
        env = "COURANT_DATA_DIR",
        default_value = "courant-data"
    )]
    pub data_dir: PathBuf,
    /// Root directory of `file://` fragment stores (default: `<data-dir>/fragments`, which
    /// also holds the fragments of journals whose spec names no store).
    #[arg(long = "broker.file-root", env = "BROKER_FILE_ROOT")]
    pub file_root: Option<PathBuf>,
    /// Map every fragment store to a `file://` store at `--broker.file-root`, prefix `/`.
    #[arg(long = "broker.file-only", env = "BROKER_FILE_ONLY")]
    pub file_only: bool,
    /// Fragment uploads in flight at once (each holds at most ~15 MiB of memory).
    #[arg(
        long = "store.max-uploads",
        env = "COURANT_STORE_MAX_UPLOADS",
        default_value_t = 8
    )]
    pub max_uploads: usize,
    /// Store for journals whose spec names none (zero-configuration persistence under
    /// `--broker.file-root`). Empty: such journals are never persisted, as in Gazette.
    #[arg(
        long = "store.default",
        env = "COURANT_STORE_DEFAULT",
        default_value = "file:///"
    )]
    pub default_store: String,
    /// Executor cores (threads pinned one per CPU). Default: every available CPU.
    #[arg(long = "tpc.cores", env = "COURANT_TPC_CORES")]
    pub cores: Option<usize>,
    /// io_uring registered-buffer memory per core, in bytes.
    #[arg(long = "tpc.io-memory", env = "COURANT_TPC_IO_MEMORY", default_value_t = 2 << 20)]
    pub io_memory: usize,
    /// Durable mode (Courant): acknowledge an append only once it is on the device, on the
    /// primary and on every replica, so that a node survives power loss, not only `kill -9`.
    /// Each core copies its commits into a preallocated commit log
    /// (`<data-dir>/spools/wal/core-<n>.wal`) and one durable write of it covers all of them
    /// (group commit); start-up replays the logs. Off: appends are acknowledged once in the
    /// page cache, as Gazette does.
    #[arg(long = "tpc.durable", env = "COURANT_TPC_DURABLE")]
    pub durable: bool,

    // ---- Gazette's TLS, watch and suspension flags (see SECURITY.md) ----
    /// PEM client certificate this broker presents to its peers (Gazette's
    /// `--broker.peer-cert-file`).
    #[arg(long = "broker.peer-cert-file", env = "BROKER_PEER_CERT_FILE")]
    pub peer_cert_file: Option<PathBuf>,
    /// PEM private key of `--broker.peer-cert-file`.
    #[arg(long = "broker.peer-cert-key-file", env = "BROKER_PEER_CERT_KEY_FILE")]
    pub peer_cert_key_file: Option<PathBuf>,
    /// PEM CA certificates that peers' server certificates must chain to (`https://` peer
    /// endpoints). When absent, the system CA pool is used, as Gazette does.
    #[arg(long = "broker.peer-ca-file", env = "BROKER_PEER_CA_FILE")]
    pub peer_ca_file: Option<PathBuf>,
    /// PEM client certificate presented to etcd.
    #[arg(long = "etcd.cert-file", env = "ETCD_CERT_FILE")]
    pub etcd_cert_file: Option<PathBuf>,
    /// PEM private key of `--etcd.cert-file`.
    #[arg(long = "etcd.cert-key-file", env = "ETCD_CERT_KEY_FILE")]
    pub etcd_cert_key_file: Option<PathBuf>,
    /// PEM CA certificates that etcd's server certificate must chain to.
    #[arg(long = "etcd.trusted-ca-file", env = "ETCD_TRUSTED_CA_FILE")]
    pub etcd_trusted_ca_file: Option<PathBuf>,
    /// Delay applied to watched etcd events before they are applied, amortizing
    /// fast-changing keys (Gazette's `--broker.watch-delay`, a Go duration).
    #[arg(long = "broker.watch-delay", env = "BROKER_WATCH_DELAY", default_value = "30ms",
          value_parser = parse_watch_delay)]
    pub watch_delay: std::time::Duration,
    /// Automatically suspend journals which have persisted all fragments (Gazette's
    /// `--broker.auto-suspend`).
    #[arg(long = "broker.auto-suspend", env = "BROKER_AUTO_SUSPEND")]
    pub auto_suspend: bool,
    /// An HTTP/2 connection with no call in flight for this long is sent GOAWAY and
    /// closed (clients reconnect on their next call), so connections that send nothing do
    /// not hold memory and descriptors forever (Courant; a Go duration).
    #[arg(long = "tpc.h2-idle-timeout", env = "COURANT_TPC_H2_IDLE_TIMEOUT",
          default_value = crate::idle::DEFAULT_H2_IDLE_TIMEOUT, value_parser = parse_duration)]
    pub h2_idle_timeout: std::time::Duration,
}

/// `--broker.watch-delay`: a Go duration, zero allowed (`0`, `0s`).
fn parse_watch_delay(text: &str) -> Result<std::time::Duration, String> {
    if text.trim() == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    parse_duration(text)
}

/// Parses a Go-style duration made of `<number><unit>` parts (`h`, `m`, `s`, `ms`),
/// e.g. `20s`, `1m30s`, `1.5s`.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let bad = || format!("invalid duration {text:?} (e.g. 20s, 1m30s)");
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let num: f64 = rest[..num_len].parse().map_err(|_| bad())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            _ => return Err(bad()),
        };
        total += num * scale;
        rest = &rest[unit_len..];
    }
    std::time::Duration::try_from_secs_f64(total).map_err(|_| bad())
}

/// `--etcd.lease`: a Go duration of at least one second (etcd's lease granularity).
pub fn parse_lease(text: &str) -> Result<std::time::Duration, String> {
    let lease = parse_duration(text)?;
    if lease < MIN_LEASE {
        return Err(format!("{text:?} is shorter than the 1s minimum"));
    }
    Ok(lease)
}

impl ServeConfig {
    pub fn cores(&self) -> usize {
        self.cores
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .max(1)
    }

    pub fn host(&self) -> String {
        self.host.clone().unwrap_or_else(hostname)
    }

    pub fn broker_id(&self) -> String {
        self.id.clone().unwrap_or_else(|| {
            let host: String = hostname()
                .chars()
                .map(|c| {
                    if c.is_alphanumeric() || "-_.".contains(c) {
                        c
                    } else {
                        '-'
                    }
                })
                .collect();
            format!("courant-{host}")
        })
    }

    pub fn endpoint(&self) -> String {
        // With TLS, Gazette's clients choose it from the endpoint's scheme.
        let scheme = if self.server_cert_file.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}:{}", self.host(), self.port)
    }
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates on success.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::{parse_duration, parse_lease};
    use std::time::Duration;

    #[test]
    fn go_durations() {
        assert_eq!(parse_duration("20s"), Ok(Duration::from_secs(20)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        for bad in ["", "20", "s", "20x", "1..2s", "-1s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    /// `print-config` prints several origins comma separated; they must read back as
    /// several (through the env var an INI value becomes, split as a flag's value is).
    #[test]
    fn origins_split_on_commas() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            serve: super::ServeConfig,
        }
        let cli = Cli::try_parse_from(["t", "--broker.allow-origin", "http://a,http://b"]).unwrap();
        assert_eq!(cli.serve.allow_origin, ["http://a", "http://b"]);
    }

    #[test]
    fn leases_are_at_least_a_second() {
        assert_eq!(parse_lease("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_lease("20s"), Ok(Duration::from_secs(20)));
        for bad in ["0s", "999ms", "0.5s", "x"] {
            assert!(parse_lease(bad).is_err(), "{bad:?}");
        }
    }
}
