//! Graceful shutdown on SIGTERM and SIGINT, in Gazette's order: in cluster mode first
//! announce `exiting` and keep serving until the allocator has moved every assignment away
//! (up to [`EXIT_DRAIN_LIMIT`]), then stop accepting, let in-flight appends finish (up to
//! [`APPEND_GRACE`]), end blocked reads with a clean EOF, revoke the etcd lease, exit 0.
//!
//! Lives on: a dedicated signal thread drives the stages; every core watches
//! [`subscribe`] and acts on its own state (its listener, its connections, its replicas).

use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How often the exit path checks that the keyspace drained.
const DRAIN_POLL: std::time::Duration = std::time::Duration::from_millis(50);
/// How often the exit path checks for appends still in flight.
const APPEND_POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// Longest wait for in-flight appends before blocked reads are ended and the process exits
/// (Gazette's graceful-stop timeout is 15 s; Kubernetes' default grace period is 30 s).
pub const APPEND_GRACE: Duration = Duration::from_secs(10);
/// Time given to connections to flush the final frames of ended reads.
const FLUSH_GRACE: Duration = Duration::from_millis(300);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    Running,
    /// Cluster mode: the member key says `exiting`; everything is still served while the
    /// allocator moves this broker's assignments to others.
    Exiting,
    /// Listeners are closed; HTTP/2 connections got GOAWAY; appends finish.
    Draining,
    /// Replicas are closed so blocked reads end with EOF.
    Closing,
}

/// Longest wait, in cluster mode, for the allocator to move this broker's assignments away
/// (it cannot when no other broker can take them, e.g. replication 3 on three brokers).
pub const EXIT_DRAIN_LIMIT: Duration = Duration::from_secs(60);

static STOPPING: AtomicBool = AtomicBool::new(false);
/// Set by the etcd keyspace: shutdown must first drain this broker's assignments.
static CLUSTER: AtomicBool = AtomicBool::new(false);
/// Set by the etcd keyspace once this broker holds no assignment (after `Exiting`).
static DRAINED: AtomicBool = AtomicBool::new(false);

/// Called by the etcd keyspace at start: shutdowns begin with the `Exiting` stage.
pub fn enable_exit_drain() {
    CLUSTER.store(true, Ordering::Relaxed);
}

/// Called by the etcd keyspace when, while exiting, no assignment names this broker.
pub fn set_drained() {
    DRAINED.store(true, Ordering::Relaxed);
}
static STAGE: LazyLock<watch::Sender<Stage>> = LazyLock::new(|| watch::channel(Stage::Running).0);

/// Whether shutdown has begun (new HTTP/1 responses then close their connections).
pub fn is_stopping() -> bool {
    STOPPING.load(Ordering::Relaxed)
}

pub fn subscribe() -> watch::Receiver<Stage> {
    STAGE.subscribe()
}

/// Resolves once the stage reaches `at_least`.
pub async fn reached(rx: &mut watch::Receiver<Stage>, at_least: Stage) {
    let _ = rx.wait_for(|s| *s >= at_least).await;
}

/// Installs the signal handlers and the thread that runs the shutdown stages.
pub fn install() -> Result<(), String> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT])
        .map_err(|e| format!("installing signal handlers: {e}"))?;
    std::thread::Builder::new()
        .name("courant-signals".into())
        .spawn(move || {
            let Some(signal) = signals.forever().next() else {
                return;
            };
            if CLUSTER.load(Ordering::Relaxed) {
                tracing::info!(
                    signal,
                    "exiting: waiting for the allocator to move assignments away"
                );
                STAGE.send_replace(Stage::Exiting);
                let deadline = Instant::now() + EXIT_DRAIN_LIMIT;
                while !DRAINED.load(Ordering::Relaxed) && Instant::now() < deadline {
                    std::thread::sleep(DRAIN_POLL);
                }
                if !DRAINED.load(Ordering::Relaxed) {
                    tracing::warn!(
                        limit = ?EXIT_DRAIN_LIMIT,
                        "exiting with assignments the allocator could not move"
                    );
                }
            }
            tracing::info!(signal, "shutting down: draining appends");
            STOPPING.store(true, Ordering::Relaxed);
            STAGE.send_replace(Stage::Draining);
            let deadline = Instant::now() + APPEND_GRACE;
            while crate::metrics::appends_in_flight() > 0 && Instant::now() < deadline {
                std::thread::sleep(APPEND_POLL);
            }
            let pending = crate::metrics::appends_in_flight();
            if pending > 0 {
                tracing::warn!(pending, "shutting down with appends still in flight");
            }
            STAGE.send_replace(Stage::Closing);
            std::thread::sleep(FLUSH_GRACE);
            tracing::info!("shut down");
            std::process::exit(0);
        })
        .map_err(|e| format!("starting the signal thread: {e}"))?;
    Ok(())
}
