//! Starting and stopping the systems under test: Courant (single node, embedded keyspace,
//! or a cluster on etcd) and Gazette with its etcd, alone or as a cluster of several
//! brokers sharing one etcd prefix. Every server listens on 127.0.0.1 (Gazette binds all
//! interfaces; see `main.rs` for the network namespace that confines it to loopback).
//!
//! Lives on: the harness's main thread.

use crate::procs;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Courant,
    Gazette,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Courant => "Courant",
            Kind::Gazette => "Gazette",
        }
    }
    pub fn slug(self) -> &'static str {
        match self {
            Kind::Courant => "courant",
            Kind::Gazette => "gazette",
        }
    }
}

/// Paths of the programs under test.
#[derive(Debug, Clone)]
pub struct Bins {
    pub courant: PathBuf,
    pub loadgen: PathBuf,
    pub gazette: PathBuf,
    pub etcd: PathBuf,
    pub etcdctl: PathBuf,
    pub appendsvc: PathBuf,
}

/// How a broker is started, beyond its kind.
#[derive(Debug, Clone, Default)]
pub struct BrokerOptions {
    /// Courant: `--tpc.cores`. Gazette: `GOMAXPROCS`.
    pub cores: Option<usize>,
    /// Set for a member of a cluster (both kinds then use the run's etcd).
    pub member: Option<Member>,
    /// Courant: `--tpc.durable` (fdatasync before acknowledging). Gazette: not applicable.
    pub durable: bool,
}

/// A broker's place in a cluster: etcd prefix, zone and ID suffix (Gazette's
/// `ProcessSpec.ID`).
#[derive(Debug, Clone)]
pub struct Member {
    pub etcd_address: String,
    pub prefix: String,
    pub zone: String,
    pub id: String,
}

/// What a client run needs from the brokers under test: one broker or a cluster.
pub trait Target {
    fn kind(&self) -> Kind;
    /// The address the client dials.
    fn address(&self) -> String;
    /// The broker processes, for CPU and memory.
    fn pids(&self) -> Vec<u32>;
    /// Whether every broker is still running.
    fn alive(&mut self) -> bool;
    /// The exact command(s), one line per broker.
    fn commands(&self) -> Vec<String>;
    /// The last lines of the logs, for error messages.
    fn log_tail(&self) -> String;
}

impl Target for Broker {
    fn kind(&self) -> Kind {
        self.kind
    }
    fn address(&self) -> String {
        Broker::address(self)
    }
    fn pids(&self) -> Vec<u32> {
        vec![self.pid()]
    }
    fn alive(&mut self) -> bool {
        Broker::alive(self)
    }
    fn commands(&self) -> Vec<String> {
        vec![self.command.clone()]
    }
    fn log_tail(&self) -> String {
        Broker::log_tail(self)
    }
}

/// A running broker.
pub struct Broker {
    pub kind: Kind,
    pub port: u16,
    pub command: String,
    child: Child,
    data_dir: PathBuf,
    log: PathBuf,
}

impl Broker {
    pub fn address(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
    /// The last lines of the broker's log, for error messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Stops the broker and removes its data. Gazette's broker, on SIGTERM, waits to hand
    /// its journals to a peer that a single-broker cluster does not have, so it gets a
    /// short grace before SIGKILL; Courant gets ten seconds.
    pub fn stop(mut self) {
        let grace = match self.kind {
            Kind::Courant => Duration::from_secs(10),
            Kind::Gazette => Duration::from_secs(2),
        };
        let killed = procs::stop(&mut self.child, grace);
        if killed && self.kind == Kind::Courant {
            eprintln!("courant-bench: Courant needed SIGKILL to stop");
        }
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

/// Starts Courant on a free port with a fresh data dir under `scratch`.
pub fn start_courant(bins: &Bins, scratch: &Path, opts: &BrokerOptions) -> Result<Broker, String> {
    let port = procs::free_port().map_err(|e| format!("free port: {e}"))?;
    let data_dir = scratch.join(format!("courant-{port}"));
    std::fs::create_dir_all(&data_dir).map_err(|e| format!("{}: {e}", data_dir.display()))?;
    let mut cmd = procs::command(&bins.courant.to_string_lossy());
    cmd.args([
        "serve",
        "--broker.bind",
        "127.0.0.1",
        "--broker.host",
        "127.0.0.1",
    ])
    .args(["--broker.port", &port.to_string()])
    .arg("--data-dir")
    .arg(&data_dir)
    .args(["--log.level", "warn"])
    // Same semantics as Gazette for the store-less specs the scenarios use: nothing is
    // persisted (Courant's zero-configuration default store would add an upload of every
    // completed fragment, which Gazette does not do).
    .args(["--store.default", ""]);
    if let Some(m) = &opts.member {
        cmd.args(["--etcd.address", &m.etcd_address])
            .args(["--etcd.prefix", &m.prefix])
            .args(["--broker.zone", &m.zone])
            .args(["--broker.id", &m.id]);
    }
    if let Some(cores) = opts.cores {
        cmd.args(["--tpc.cores", &cores.to_string()]);
    }
    if opts.durable {
        cmd.arg("--tpc.durable");
    }
    spawn(Kind::Courant, cmd, port, data_dir)
}

/// Whether Courant's `serve` accepts `flag` (it is listed in `courant serve --help`).
pub fn courant_accepts(bins: &Bins, flag: &str) -> bool {
    procs::command(&bins.courant.to_string_lossy())
        .args(["serve", "--help"])
        .output()
        .map(|o| help_lists(&String::from_utf8_lossy(&o.stdout), flag))
        .unwrap_or(false)
}

/// Whether a `--help` text lists `flag` as an option of its own (not as a prefix of another).
pub fn help_lists(help: &str, flag: &str) -> bool {
    help.split(|c: char| c.is_whitespace() || c == ',' || c == '=' || c == '[')
        .any(|w| w == flag)
}

/// Starts a Gazette broker against the run's etcd, under its own etcd prefix (so every
/// broker starts from an empty cluster), with a fresh file root and TMPDIR (where its
/// spools live) under `scratch`.
pub fn start_gazette(
    bins: &Bins,
    scratch: &Path,
    etcd: &Etcd,
    opts: &BrokerOptions,
    env: &[(String, String)],
) -> Result<Broker, String> {
    let port = procs::free_port().map_err(|e| format!("free port: {e}"))?;
    let data_dir = scratch.join(format!("gazette-{port}"));
    std::fs::create_dir_all(&data_dir).map_err(|e| format!("{}: {e}", data_dir.display()))?;
    let mut cmd = procs::command(&bins.gazette.to_string_lossy());
    cmd.arg("serve")
        .args([
            "--broker.port",
            &port.to_string(),
            "--broker.host",
            "127.0.0.1",
        ])
        .args(["--etcd.address", &etcd.address()]);
    match &opts.member {
        Some(m) => cmd
            .args(["--etcd.prefix", &m.prefix])
            .args(["--broker.zone", &m.zone])
            .args(["--broker.id", &m.id]),
        None => cmd.args(["--etcd.prefix", &format!("/gazette/bench-{port}")]),
    };
    cmd.arg("--broker.file-root")
        .arg(&data_dir)
        .args(["--log.level", "warn"])
        .env("TMPDIR", &data_dir);
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    if let Some(cores) = opts.cores {
        cmd.env("GOMAXPROCS", cores.to_string());
    }
    spawn(Kind::Gazette, cmd, port, data_dir)
}

fn spawn(
    kind: Kind,
    mut cmd: std::process::Command,
    port: u16,
    data_dir: PathBuf,
) -> Result<Broker, String> {
    let log = data_dir.with_extension("log");
    let out = File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    cmd.stdout(out).stderr(err);
    let command = procs::describe(&cmd);
    let child = cmd
        .spawn()
        .map_err(|e| format!("starting {}: {e}", kind.name()))?;
    let mut broker = Broker {
        kind,
        port,
        command,
        child,
        data_dir,
        log,
    };
    if let Err(e) = procs::wait_listening(&mut broker.child, port, Duration::from_secs(30)) {
        let tail = broker.log_tail();
        broker.stop();
        return Err(format!("{} {e}\n{tail}", kind.name()));
    }
    Ok(broker)
}

/// Several brokers of one kind sharing one etcd prefix.
pub struct Cluster {
    pub kind: Kind,
    pub brokers: Vec<Broker>,
    pub prefix: String,
}

impl Target for Cluster {
    fn kind(&self) -> Kind {
        self.kind
    }
    /// The client dials the first broker (it routes each journal's appends to the
    /// journal's primary itself).
    fn address(&self) -> String {
        self.brokers[0].address()
    }
    fn pids(&self) -> Vec<u32> {
        self.brokers.iter().map(Broker::pid).collect()
    }
    fn alive(&mut self) -> bool {
        self.brokers.iter_mut().all(Broker::alive)
    }
    fn commands(&self) -> Vec<String> {
        self.brokers.iter().map(|b| b.command.clone()).collect()
    }
    fn log_tail(&self) -> String {
        self.brokers
            .iter()
            .map(|b| format!("[{}] {}", b.port, b.log_tail()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Cluster {
    /// Starts one broker per entry of `zones` (same kind, same etcd prefix
    /// `/<kind>/<tag>-<port of the first>`), then waits until etcd lists all of them as
    /// members.
    pub fn start(
        kind: Kind,
        zones: &[&str],
        tag: &str,
        etcd: &Etcd,
        start: &dyn Fn(&BrokerOptions) -> Result<Broker, String>,
        opts: &BrokerOptions,
    ) -> Result<Cluster, String> {
        let first = procs::free_port().map_err(|e| format!("free port: {e}"))?;
        let prefix = format!("/{}/{tag}-{first}", kind.slug());
        let mut cluster = Cluster {
            kind,
            brokers: Vec::new(),
            prefix: prefix.clone(),
        };
        for (i, zone) in zones.iter().enumerate() {
            let member = Member {
                etcd_address: etcd.address(),
                prefix: prefix.clone(),
                zone: zone.to_string(),
                // Gazette wants ID suffixes of at least 4 characters.
                id: format!("{tag}-{}", i + 1),
            };
            let opts = BrokerOptions {
                member: Some(member),
                ..opts.clone()
            };
            match start(&opts) {
                Ok(b) => cluster.brokers.push(b),
                Err(e) => {
                    cluster.stop();
                    return Err(format!("broker {} of {}: {e}", i + 1, zones.len()));
                }
            }
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let members = etcd.count_keys(&format!("{prefix}/members/"));
            if members == Some(zones.len()) {
                return Ok(cluster);
            }
            if !cluster.alive() || std::time::Instant::now() > deadline {
                let tail = cluster.log_tail();
                cluster.stop();
                return Err(format!(
                    "{} of {} brokers announced under {prefix}/members/ after 30 s\n{tail}",
                    members.map_or("?".into(), |m| m.to_string()),
                    zones.len()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGTERM to every broker at once, then one shared grace (Courant 15 s, Gazette 3 s:
    /// when all of them exit together none can take over the others' journals), then
    /// SIGKILL; data removed. Returns how many needed SIGKILL.
    pub fn stop(self) -> usize {
        let grace = match self.kind {
            Kind::Courant => Duration::from_secs(15),
            Kind::Gazette => Duration::from_secs(3),
        };
        let mut brokers = self.brokers;
        for b in brokers.iter_mut() {
            procs::terminate(&mut b.child);
        }
        let deadline = std::time::Instant::now() + grace;
        let mut killed = 0;
        for mut b in brokers {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if procs::wait_timeout(&mut b.child, left).1 {
                killed += 1;
            }
            let _ = std::fs::remove_dir_all(&b.data_dir);
        }
        if killed > 0 && self.kind == Kind::Courant {
            eprintln!("courant-bench: {killed} Courant broker(s) of the cluster needed SIGKILL");
        }
        killed
    }
}

/// etcd for Gazette, and for Courant's cluster runs, on 127.0.0.1:23790 (client) and 23800 (peer).
pub struct Etcd {
    child: Child,
    dir: PathBuf,
    etcdctl: PathBuf,
    pub command: String,
}

pub const ETCD_CLIENT_PORT: u16 = 23790;
pub const ETCD_PEER_PORT: u16 = 23800;

impl Etcd {
    pub fn start(bins: &Bins, scratch: &Path) -> Result<Etcd, String> {
        let dir = scratch.join("etcd");
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let client = format!("http://127.0.0.1:{ETCD_CLIENT_PORT}");
        let peer = format!("http://127.0.0.1:{ETCD_PEER_PORT}");
        let mut cmd = procs::command(&bins.etcd.to_string_lossy());
        cmd.args(["--name", "bench"])
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("bench={peer}")])
            .args(["--initial-cluster-state", "new", "--logger", "zap"])
            .arg("--log-outputs")
            .arg(dir.join("etcd.log"));
        let out = File::create(dir.join("stdout.log")).map_err(|e| e.to_string())?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        cmd.stdout(out).stderr(err);
        let command = procs::describe(&cmd);
        let child = cmd.spawn().map_err(|e| format!("starting etcd: {e}"))?;
        let mut etcd = Etcd {
            child,
            dir,
            etcdctl: bins.etcdctl.clone(),
            command,
        };
        procs::wait_listening(&mut etcd.child, ETCD_CLIENT_PORT, Duration::from_secs(20))
            .map_err(|e| format!("etcd {e}"))?;
        // Listening is not yet serving: wait for a healthy endpoint.
        for _ in 0..100 {
            let mut check = procs::command(&bins.etcdctl.to_string_lossy());
            check
                .args(["--endpoints", &client, "endpoint", "health"])
                .env("ETCDCTL_API", "3")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null());
            if let Ok(mut c) = check.spawn()
                && let (Some(status), _) = procs::wait_timeout(&mut c, Duration::from_secs(5))
                && status.success()
            {
                return Ok(etcd);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err("etcd did not become healthy in 10 s".into())
    }

    pub fn address(&self) -> String {
        format!("http://127.0.0.1:{ETCD_CLIENT_PORT}")
    }

    /// How many keys start with `prefix`.
    pub fn count_keys(&self, prefix: &str) -> Option<usize> {
        self.keys(prefix).map(|k| k.len())
    }

    /// The keys that start with `prefix` (`etcdctl get --prefix --keys-only`).
    pub fn keys(&self, prefix: &str) -> Option<Vec<String>> {
        let mut cmd = procs::command(&self.etcdctl.to_string_lossy());
        cmd.args([
            "--endpoints",
            &self.address(),
            "get",
            "--prefix",
            "--keys-only",
        ])
        .arg(prefix)
        .env("ETCDCTL_API", "3")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
        let out = cmd.output().ok()?;
        out.status.success().then(|| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(String::from)
                .collect()
        })
    }

    pub fn stop(mut self) {
        procs::stop(&mut self.child, Duration::from_secs(5));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_lists_whole_flags_only() {
        let help = "      --tpc.cores <CORES>\n          Executor cores\n      \
                    --tpc.durable-ish\n      --tpc.durable=<B>, -d\n";
        assert!(help_lists(help, "--tpc.cores"));
        assert!(help_lists(help, "--tpc.durable"));
        assert!(!help_lists("      --tpc.durable-ish\n", "--tpc.durable"));
        assert!(!help_lists("--tpc.cores <CORES>", "--tpc.durable"));
    }
}
