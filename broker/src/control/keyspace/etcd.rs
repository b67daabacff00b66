//! The etcd keyspace (`--etcd.address`): Gazette's layout under `--etcd.prefix`, mirrored
//! into [`Snapshot`]s, through `etcd-client`.
//!
//! Lives on: the control thread (tokio). Start-up ([`Etcd::connect`]) follows Gazette's
//! broker: grant a lease of `--etcd.lease`, announce this broker's `BrokerSpec` under
//! `<root>/members/<zone>#<suffix>` with a create-if-absent txn (retrying every 10 s while
//! another lease holds the key), then load the whole prefix at the announce revision.
//! [`Etcd::serve`] then watches the prefix from revision + 1, keeps the lease alive, runs
//! transactions for cores and revokes the lease at the shutdown's closing stage.
//!
//! A watch that etcd cancels because its start revision was compacted away (the watch had
//! to restart after a broken stream, and etcd compacted meanwhile) is answered as Gazette's
//! keyspace does: the whole prefix is loaded again at etcd's current revision, the snapshot
//! replaced (journals that did not change are served on, untouched), and a new watch
//! started past it; no exit.
//!
//! Revision rule (spec §11 item 3, Gazette's `keyspace.KeySpace`): the snapshot's
//! `revision` is the load revision at start, then the ModRevision of the last applied watch
//! event under the prefix. Progress notifications advance only the resume revision of the
//! watch, never the snapshot. `cluster_id`, `member_id` and `raft_term` come from etcd's
//! response headers.
//!
//! As in Gazette, applied watch responses are published to the cores after
//! `--broker.watch-delay` (30 ms by default), so a burst of events is published once; each
//! applied response still clones the key map.

use super::{
    Compare, KeyValue, Op, PutLease, Snapshot, TxnOutcome, decode_assignments, decode_items,
    decode_members,
};
use crate::control::ControlMsg;
use bytes::Bytes;
use etcd_client::{
    Client, Compare as EtcdCompare, CompareOp, ConnectOptions, EventType, GetOptions, PutOptions,
    Txn, TxnOp, TxnOpResponse, WatchOptions, WatchResponse, WatchStream,
};
use protocol::BrokerSpec;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Shortest lease renewal interval, however short the lease.
const MIN_KEEP_ALIVE: std::time::Duration = std::time::Duration::from_millis(200);
/// How long connecting to etcd may take.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// gRPC keep-alive pings to etcd: interval.
const GRPC_KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(10);
/// gRPC keep-alive pings to etcd: how long an unanswered ping may wait.
const GRPC_KEEP_ALIVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// Longest wait before retrying a failed keyspace operation (Gazette's wait).
const MAX_RETRY_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
/// How long revoking the lease at exit may take.
const REVOKE_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(250);
/// How long reopening a broken lease keep-alive stream may take, and the wait before the
/// next try (etcd's Go client waits the same).
const LEASE_RETRY: std::time::Duration = std::time::Duration::from_millis(500);

/// The latest instant our lease can still be alive, as this process sees it: etcd's own
/// Go client (and so Gazette's session) keeps the same deadline, extending it to the
/// time of each keep-alive answer plus the TTL it grants, and ends the session past it.
/// Past the deadline etcd may have expired the lease and handed this broker's
/// assignments to others, so the broker exits, as Gazette's does, even while etcd is
/// unreachable (a blackholed link answers nothing, not even that the lease expired).
#[derive(Debug, Clone, Copy)]
struct LeaseDeadline {
    expires: Instant,
}

impl LeaseDeadline {
    /// A lease granted at `at` with `ttl`.
    fn new(at: Instant, ttl: Duration) -> Self {
        LeaseDeadline { expires: at + ttl }
    }

    /// etcd answered a keep-alive at `at`, with `ttl_secs` left on the lease.
    fn renewed(&mut self, at: Instant, ttl_secs: i64) {
        if ttl_secs > 0 {
            self.expires = self.expires.max(at + Duration::from_secs(ttl_secs as u64));
        }
    }
}

/// Aborts its task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Keeps the lease alive, in a task of its own so that nothing else the control loop
/// waits on (a watch being re-established, a transaction) delays a renewal: renews every
/// third of the TTL, reopens a broken keep-alive stream every [`LEASE_RETRY`] (etcd
/// restarting refuses connections for a while), and exits the process, as Gazette's
/// broker does ("unable to keep member lease alive"), once the lease's deadline passes
/// unrenewed or etcd answers that the lease expired.
async fn keep_lease(mut client: Client, lease: i64, ttl: Duration, mut deadline: LeaseDeadline) {
    let mut tick = tokio::time::interval(keep_alive_interval(ttl));
    let mut open: Option<(etcd_client::LeaseKeeper, etcd_client::LeaseKeepAliveStream)> = None;
    loop {
        if Instant::now() >= deadline.expires {
            fatal(&format!(
                "unable to keep member lease alive: etcd answered no keep-alive of lease \
                 {lease:x} within its {ttl:?} TTL (is etcd reachable?); its member key and \
                 assignments may already be gone, so this broker stops"
            ));
        }
        let expires = tokio::time::Instant::from_std(deadline.expires);
        let Some((keeper, stream)) = open.as_mut() else {
            let reopen = tokio::time::timeout(LEASE_RETRY, client.lease_keep_alive(lease));
            match tokio::time::timeout_at(expires, reopen).await {
                Ok(Ok(Ok(mut pair))) => match pair.0.keep_alive().await {
                    Ok(()) => open = Some(pair),
                    Err(e) => tracing::warn!(%e, "etcd lease keep-alive failed"),
                },
                Ok(Ok(Err(e))) => {
                    tracing::warn!(%e, "reopening the etcd lease keep-alive (retrying)");
                    let _ = tokio::time::timeout_at(expires, tokio::time::sleep(LEASE_RETRY)).await;
                }
                Ok(Err(_)) => {
                    tracing::warn!("reopening the etcd lease keep-alive timed out (retrying)")
                }
                Err(_) => {} // The deadline: checked above.
            }
            continue;
        };
        tokio::select! {
            _ = tick.tick() => {
                if let Err(e) = keeper.keep_alive().await {
                    tracing::warn!(%e, "etcd lease keep-alive failed; reopening");
                    open = None;
                }
            }
            msg = stream.message() => match msg {
                Ok(Some(resp)) if resp.ttl() <= 0 => {
                    fatal(&format!("unable to keep member lease alive: etcd lease {lease:x} expired"));
                }
                Ok(Some(resp)) => deadline.renewed(Instant::now(), resp.ttl()),
                Ok(None) | Err(_) => {
                    tracing::warn!("etcd lease keep-alive stream ended; reopening");
                    open = None;
                }
            },
            _ = tokio::time::sleep_until(expires) => {}
        }
    }
}

/// How to reach etcd and what to announce.
pub struct Config {
    pub address: String,
    /// `--etcd.prefix`, e.g. `/gazette/cluster`.
    pub root: String,
    pub lease_ttl: Duration,
    /// This broker's announcement (process spec with endpoint, journal limit).
    pub member: BrokerSpec,
    /// `--broker.watch-delay`: how long watched changes wait before they are published to
    /// the cores, so that bursts of events are applied together (Gazette's
    /// `WatchApplyDelay`).
    pub watch_delay: Duration,
    /// `--etcd.cert-file`, `--etcd.cert-key-file`, `--etcd.trusted-ca-file`.
    pub tls: Box<EtcdTls>,
}

/// TLS to etcd, as Gazette's `--etcd.*-file` flags: a client certificate and key, and
/// the CA that etcd's certificate must chain to. Used when any is set, or when the
/// address is `https://`.
#[derive(Debug, Clone, Default)]
pub struct EtcdTls {
    pub cert_file: Option<std::path::PathBuf>,
    pub key_file: Option<std::path::PathBuf>,
    pub ca_file: Option<std::path::PathBuf>,
}

/// A DER certificate as PEM text (64-column base64).
fn der_to_pem(der: &[u8]) -> String {
    let b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, der);
    let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        pem.push_str(&String::from_utf8_lossy(line));
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    pem
}

impl EtcdTls {
    /// etcd-client's TLS options, or `None` for plain HTTP.
    pub fn options(&self, address: &str) -> Result<Option<etcd_client::TlsOptions>, String> {
        use etcd_client::{Certificate, Identity, TlsOptions};
        let any = self.cert_file.is_some() || self.key_file.is_some() || self.ca_file.is_some();
        if !any && !address.starts_with("https://") {
            return Ok(None);
        }
        if any && address.starts_with("http://") {
            return Err(format!(
                "--etcd.address {address} is http://, but etcd TLS files are set: use https://"
            ));
        }
        let read = |p: &std::path::PathBuf| {
            std::fs::read(p).map_err(|e| format!("reading {}: {e}", p.display()))
        };
        let mut tls = TlsOptions::new();
        match &self.ca_file {
            Some(ca) => tls = tls.ca_certificate(Certificate::from_pem(read(ca)?)),
            // As Gazette: without a CA file, etcd's certificate is verified against the
            // system CA pool.
            None => {
                for cert in rustls_native_certs::load_native_certs().certs {
                    tls = tls.ca_certificate(Certificate::from_pem(der_to_pem(&cert)));
                }
            }
        }
        match (&self.cert_file, &self.key_file) {
            (Some(c), Some(k)) => tls = tls.identity(Identity::from_pem(read(c)?, read(k)?)),
            (None, None) => {}
            _ => return Err("--etcd.cert-file and --etcd.cert-key-file go together".into()),
        }
        Ok(Some(tls))
    }
}

pub struct Etcd {
    client: Client,
    root: String,
    /// This broker's member key and announced spec (for `exiting`).
    member_key: String,
    member: BrokerSpec,
    lease: i64,
    lease_ttl: Duration,
    /// When the lease lapses at the latest, unless renewed (see [`LeaseDeadline`]).
    lease_deadline: LeaseDeadline,
    snapshot: Arc<Snapshot>,
    watch_delay: Duration,
    /// Where a restarted watch resumes: past the last event or progress notification.
    resume: i64,
}

/// How often Gazette's etcd session renews its lease: a third of the TTL.
fn keep_alive_interval(ttl: Duration) -> Duration {
    (ttl / 3).max(MIN_KEEP_ALIVE)
}

fn err(what: &str) -> impl Fn(etcd_client::Error) -> String + '_ {
    move |e| format!("etcd {what}: {e}")
}

impl Etcd {
    /// Connects, grants the lease, announces this broker and loads the keyspace.
    pub async fn connect(cfg: &Config) -> Result<Etcd, String> {
        let mut opts = ConnectOptions::new()
            .with_connect_timeout(CONNECT_TIMEOUT)
            .with_keep_alive(GRPC_KEEP_ALIVE, GRPC_KEEP_ALIVE_TIMEOUT)
            .with_require_leader(true);
        if let Some(tls) = cfg.tls.options(&cfg.address)? {
            opts = opts.with_tls(tls);
        }
        let mut client = Client::connect([cfg.address.as_str()], Some(opts))
            .await
            .map_err(|e| format!("connecting to etcd at {}: {e}", cfg.address))?;
        let ttl = cfg.lease_ttl.as_secs().max(1) as i64;
        let grant = client
            .lease_grant(ttl, None)
            .await
            .map_err(|e| format!("etcd lease grant at {}: {e}", cfg.address))?;
        let lease = grant.id();
        let mut lease_deadline = LeaseDeadline::new(
            Instant::now(),
            Duration::from_secs(grant.ttl().max(0) as u64),
        );
        let id = cfg
            .member
            .process_spec
            .as_ref()
            .and_then(|p| p.id.clone())
            .unwrap_or_default();
        let key = super::member_key(&cfg.root, &id.zone, &id.suffix);
        let value = prost::Message::encode_to_vec(&cfg.member);

        // Announce: create the member key under our lease only if it is absent (Gazette's
        // allocator.Announce). A key held by another lease is a previous process of this
        // broker (or a duplicate ID): wait for its lease to expire.
        let announce_rev = loop {
            let txn = Txn::new()
                .when([EtcdCompare::create_revision(
                    key.clone(),
                    CompareOp::Equal,
                    0,
                )])
                .and_then([TxnOp::put(
                    key.clone(),
                    value.clone(),
                    Some(PutOptions::new().with_lease(lease)),
                )])
                .or_else([TxnOp::get(key.clone(), None)]);
            let resp = client.txn(txn).await.map_err(err("announce txn"))?;
            let rev = resp.header().map_or(0, |h| h.revision());
            if resp.succeeded() {
                break rev;
            }
            let holder = resp.op_responses().into_iter().find_map(|op| match op {
                TxnOpResponse::Get(get) => get.kvs().first().map(|kv| kv.lease()),
                _ => None,
            });
            if holder == Some(lease) {
                break rev;
            }
            // Retry well within our own lease's TTL (Gazette waits 10 s, which would let a
            // short lease lapse), renewing it first.
            let wait = keep_alive_interval(cfg.lease_ttl).min(MAX_RETRY_WAIT);
            tracing::warn!(%key, ?holder, ?wait, "member key is held by another lease (a previous process?); retrying");
            let (mut keeper, mut responses) = client
                .lease_keep_alive(lease)
                .await
                .map_err(err("lease keep-alive"))?;
            keeper.keep_alive().await.map_err(err("lease keep-alive"))?;
            if let Ok(Some(resp)) = responses.message().await {
                lease_deadline.renewed(Instant::now(), resp.ttl());
            }
            tokio::time::sleep(wait).await;
        };

        let snapshot = load(&mut client, &cfg.root, Some(announce_rev)).await?;
        tracing::info!(
            %key, lease, revision = announce_rev, keys = snapshot.keys.len(),
            "announced to etcd and loaded the keyspace"
        );
        crate::shutdown::enable_exit_drain();
        Ok(Etcd {
            client,
            root: cfg.root.clone(),
            member_key: key.clone(),
            member: cfg.member.clone(),
            lease,
            lease_ttl: cfg.lease_ttl,
            lease_deadline,
            resume: announce_rev + 1,
            snapshot: Arc::new(snapshot),
            watch_delay: cfg.watch_delay,
        })
    }

    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.clone()
    }

    /// Applies `ops` if every compare (ModRevision equality, 0 = absent) holds. The outcome's
    /// revision is etcd's after the txn when it changed a key, else the snapshot's.
    pub async fn txn(&mut self, compares: &[Compare], ops: &[Op]) -> Result<TxnOutcome, String> {
        let cmps: Vec<EtcdCompare> = compares
            .iter()
            .map(|c| EtcdCompare::mod_revision(c.key.clone(), CompareOp::Equal, c.mod_revision))
            .collect();
        let txn_ops: Vec<TxnOp> = ops
            .iter()
            .map(|op| match op {
                Op::Put { key, value, lease } => {
                    let opts = match lease {
                        PutLease::None => None,
                        PutLease::Keep => Some(PutOptions::new().with_ignore_lease()),
                        PutLease::Id(id) => Some(PutOptions::new().with_lease(*id)),
                    };
                    TxnOp::put(key.clone(), value.to_vec(), opts)
                }
                Op::Delete { key } => TxnOp::delete(key.clone(), None),
            })
            .collect();
        let resp = self
            .client
            .txn(Txn::new().when(cmps).and_then(txn_ops))
            .await
            .map_err(err("txn"))?;
        let changed = resp.succeeded()
            && resp.op_responses().iter().any(|op| match op {
                TxnOpResponse::Put(_) => true,
                TxnOpResponse::Delete(d) => d.deleted() > 0,
                _ => false,
            });
        let revision = if changed {
            resp.header()
                .map_or(self.snapshot.revision, |h| h.revision())
        } else {
            self.snapshot.revision
        };
        Ok(TxnOutcome {
            succeeded: resp.succeeded(),
            revision,
        })
    }

    /// Rewrites this broker's member key with `exiting = true` (guarded by its revision),
    /// which tells the allocator to move its assignments away.
    async fn announce_exiting(&mut self) -> Result<(), String> {
        let Some(kv) = self.snapshot.keys.get(&self.member_key) else {
            return Err("our member key is gone".to_string());
        };
        let mut spec = self.member.clone();
        spec.exiting = true;
        let value = prost::Message::encode_to_vec(&spec);
        let txn = Txn::new()
            .when([EtcdCompare::mod_revision(
                self.member_key.clone(),
                CompareOp::Equal,
                kv.mod_revision,
            )])
            .and_then([TxnOp::put(
                self.member_key.clone(),
                value,
                Some(PutOptions::new().with_lease(self.lease)),
            )]);
        let resp = self.client.txn(txn).await.map_err(err("exiting txn"))?;
        if !resp.succeeded() {
            return Err("our member key changed concurrently".to_string());
        }
        Ok(())
    }

    /// Whether any assignment names this broker while another broker could take it over
    /// (with no other member that is not exiting, waiting would only delay the exit).
    fn holds_assignments(&self) -> bool {
        let id = self
            .member
            .process_spec
            .as_ref()
            .and_then(|p| p.id.as_ref());
        let Some(id) = id else { return false };
        let others = self.snapshot.members.iter().any(|((zone, suffix), m)| {
            (zone != &id.zone || suffix != &id.suffix)
                && !m.spec.exiting
                && m.spec.journal_limit > 0
        });
        others
            && self
                .snapshot
                .assignments
                .values()
                .flatten()
                .any(|a| a.zone == id.zone && a.suffix == id.suffix)
    }

    /// Loads the whole prefix again at etcd's current revision (after a compacted watch)
    /// and resumes watching past it. The revision never goes back: etcd's current one is
    /// past the compaction, which is past everything this broker applied.
    async fn reload(&mut self) -> Result<(), String> {
        let fresh = load(&mut self.client, &self.root, None).await?;
        if fresh.cluster_id != self.snapshot.cluster_id {
            return Err(format!(
                "etcd cluster id changed ({} vs {})",
                fresh.cluster_id, self.snapshot.cluster_id
            ));
        }
        if fresh.revision < self.snapshot.revision {
            return Err(format!(
                "etcd reload at revision {} is before the keyspace revision {}",
                fresh.revision, self.snapshot.revision
            ));
        }
        tracing::warn!(
            from = self.snapshot.revision,
            to = fresh.revision,
            keys = fresh.keys.len(),
            "reloaded the keyspace after etcd compacted the watch's revision"
        );
        self.resume = fresh.revision + 1;
        self.snapshot = Arc::new(fresh);
        Ok(())
    }

    async fn watch(&mut self) -> Result<WatchStream, String> {
        let opts = WatchOptions::new()
            .with_prefix()
            .with_start_revision(self.resume)
            .with_progress_notify();
        self.client
            .watch(self.root.clone(), Some(opts))
            .await
            .map_err(err("watch"))
    }

    /// Applies one watch response. Returns whether the snapshot changed.
    fn apply(&mut self, resp: &WatchResponse) -> Result<bool, String> {
        if resp.canceled() && resp.compact_revision() > 0 {
            return Err(COMPACTED.to_string());
        }
        if resp.canceled() {
            return Err(format!(
                "etcd cancelled the keyspace watch (compact revision {}): {}",
                resp.compact_revision(),
                resp.cancel_reason()
            ));
        }
        let events = resp.events();
        let Some(header) = resp.header() else {
            return Ok(false);
        };
        if header.cluster_id() != self.snapshot.cluster_id {
            return Err(format!(
                "etcd cluster id changed ({} vs {})",
                header.cluster_id(),
                self.snapshot.cluster_id
            ));
        }
        if events.is_empty() {
            // A progress notification (or the watch's creation): resume past it, but the
            // keyspace revision does not move.
            if !resp.created() {
                self.resume = self.resume.max(header.revision() + 1);
            }
            return Ok(false);
        }
        let cur = &self.snapshot;
        let mut keys = cur.keys.clone();
        let mut last = cur.revision;
        for event in events {
            let Some(kv) = event.kv() else { continue };
            if kv.mod_revision() <= cur.revision {
                return Err(format!(
                    "etcd watch event at ModRevision {} is not past the keyspace revision {}",
                    kv.mod_revision(),
                    cur.revision
                ));
            }
            last = last.max(kv.mod_revision());
            let Ok(name) = kv.key_str() else { continue };
            match event.event_type() {
                EventType::Put => {
                    keys.insert(name.to_string(), key_value(kv));
                }
                EventType::Delete => {
                    keys.remove(name);
                }
            }
        }
        self.resume = last + 1;
        self.snapshot = Arc::new(build(
            &self.root,
            keys,
            last,
            cur.cluster_id,
            header.member_id(),
            header.raft_term(),
        ));
        Ok(true)
    }

    /// Publishes the applied snapshot to the cores and answers the transactions it
    /// includes.
    fn publish(
        &self,
        watch_tx: &watch::Sender<Arc<Snapshot>>,
        exiting: bool,
        pending: &mut Vec<(TxnOutcome, Reply)>,
    ) {
        watch_tx.send_replace(self.snapshot());
        if exiting && !self.holds_assignments() {
            crate::shutdown::set_drained();
        }
        let rev = self.snapshot.revision;
        for (o, reply) in pending.extract_if(.., |(o, _)| o.revision <= rev) {
            let _ = reply.send(Ok(o));
        }
    }

    /// (Re)starts the keyspace watch after backing off for `attempt`, reloading the
    /// keyspace first when the watch's revision was compacted; `None` if that failed (the
    /// caller tries again).
    async fn rewatch(
        &mut self,
        attempt: &mut u32,
        reload: &mut bool,
        watch_tx: &watch::Sender<Arc<Snapshot>>,
        exiting: bool,
        pending: &mut Vec<(TxnOutcome, Reply)>,
    ) -> Option<WatchStream> {
        if *attempt > 0 {
            let backoff = Duration::from_millis(50 * 2u64.pow((*attempt).min(6)));
            tokio::time::sleep(backoff).await;
        }
        *attempt += 1;
        let attempt = *attempt;
        if *reload {
            if let Err(e) = self.reload().await {
                tracing::warn!(%e, attempt, "reloading the etcd keyspace failed (will retry)");
                return None;
            }
            *reload = false;
            // Every acknowledged txn is at or below etcd's current revision.
            self.publish(watch_tx, exiting, pending);
        }
        match self.watch().await {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(%e, attempt, "etcd watch failed (will retry)");
                None
            }
        }
    }

    /// The shutdown's exiting stage: announces this broker as exiting (the allocator then
    /// moves its assignments away), and is drained at once if it holds none.
    async fn exit(&mut self) {
        match self.announce_exiting().await {
            Ok(()) => tracing::info!("announced exiting to etcd"),
            Err(e) => tracing::warn!(%e, "announcing exiting to etcd"),
        }
        if !self.holds_assignments() {
            crate::shutdown::set_drained();
        }
    }

    /// Revokes this broker's lease, which deletes its member key (and any assignment under
    /// the lease), within [`REVOKE_TIMEOUT`].
    async fn revoke_lease(&mut self) {
        let revoke = self.client.lease_revoke(self.lease);
        match tokio::time::timeout(REVOKE_TIMEOUT, revoke).await {
            Ok(Ok(_)) => tracing::info!(lease = self.lease, "revoked the etcd lease"),
            Ok(Err(e)) => tracing::warn!(%e, "revoking the etcd lease"),
            Err(_) => tracing::warn!("revoking the etcd lease timed out"),
        }
    }

    /// The control loop in etcd mode: transactions from cores, the watch, the lease.
    /// A successful transaction is answered once the watch has applied its revision, so
    /// the requester's core can already see its own change (as in the embedded mode).
    pub async fn serve(
        mut self,
        rx: flume::Receiver<ControlMsg>,
        watch_tx: watch::Sender<Arc<Snapshot>>,
    ) {
        let mut pending: Vec<(TxnOutcome, Reply)> = Vec::new();
        let mut stream: Option<WatchStream> = None;
        let mut attempt = 0u32;
        // The watch's revision was compacted: load the keyspace again before re-watching.
        let mut reload = false;
        // Aborted when the lease is revoked or this loop ends (dropping the guard).
        let keeper = AbortOnDrop(tokio::spawn(keep_lease(
            self.client.clone(),
            self.lease,
            self.lease_ttl,
            self.lease_deadline,
        )));
        let mut stage = crate::shutdown::subscribe();
        let mut revoked = false;
        let mut exiting = false;
        let mut exit_stage = crate::shutdown::subscribe();
        // When applied watch changes are next published (`--broker.watch-delay`).
        let mut publish_at: Option<tokio::time::Instant> = None;

        loop {
            if stream.is_none() {
                stream = self
                    .rewatch(&mut attempt, &mut reload, &watch_tx, exiting, &mut pending)
                    .await;
                if stream.is_none() {
                    continue;
                }
            }
            let watching = stream.as_mut().expect("a watch stream");
            tokio::select! {
                msg = rx.recv_async() => match msg {
                    Ok(ControlMsg::Txn { compares, ops, reply }) => {
                        let out = self.txn(&compares, &ops).await;
                        match out {
                            Ok(o) if o.succeeded && o.revision > self.snapshot.revision => {
                                pending.push((o, reply));
                            }
                            _ => {
                                let _ = reply.send(out);
                            }
                        }
                    }
                    Err(_) => return,
                },
                resp = watching.message() => match resp {
                    Ok(Some(resp)) => match self.apply(&resp) {
                        Ok(true) => {
                            attempt = 0;
                            if self.watch_delay.is_zero() {
                                self.publish(&watch_tx, exiting, &mut pending);
                            } else {
                                publish_at.get_or_insert_with(|| {
                                    tokio::time::Instant::now() + self.watch_delay
                                });
                            }
                        }
                        Ok(false) => {}
                        Err(e) if e == COMPACTED => {
                            tracing::warn!(resume = self.resume, compacted = resp.compact_revision(),
                                "etcd compacted the keyspace watch's revision; reloading");
                            stream = None;
                            reload = true;
                        }
                        Err(e) => fatal(&e),
                    },
                    Ok(None) => {
                        tracing::warn!(attempt, "etcd watch stream ended (will restart)");
                        stream = None;
                    }
                    Err(e) => {
                        tracing::warn!(%e, attempt, "etcd watch stream failed (will restart)");
                        stream = None;
                    }
                },
                _ = async { tokio::time::sleep_until(publish_at.unwrap_or_else(tokio::time::Instant::now)).await }, if publish_at.is_some() => {
                    publish_at = None;
                    self.publish(&watch_tx, exiting, &mut pending);
                }
                _ = crate::shutdown::reached(&mut exit_stage, crate::shutdown::Stage::Exiting), if !exiting => {
                    exiting = true;
                    self.exit().await;
                }
                _ = crate::shutdown::reached(&mut stage, crate::shutdown::Stage::Closing), if !revoked => {
                    // Revoking deletes our member key (and any assignment under our lease).
                    revoked = true;
                    keeper.0.abort();
                    self.revoke_lease().await;
                }
            }
        }
    }
}

/// Where a transaction's outcome is answered.
type Reply = flume::Sender<Result<TxnOutcome, String>>;

/// [`Etcd::apply`]'s error for a watch cancelled by compaction (handled by a reload).
const COMPACTED: &str = "etcd compacted the watch's start revision";

/// Loads every key under `root`, at `revision` (None: etcd's current one).
async fn load(client: &mut Client, root: &str, revision: Option<i64>) -> Result<Snapshot, String> {
    let mut opts = GetOptions::new().with_prefix();
    if let Some(rev) = revision {
        opts = opts.with_revision(rev);
    }
    let resp = client
        .get(root.to_string(), Some(opts))
        .await
        .map_err(err("load"))?;
    let header = resp.header().ok_or("etcd load: response without header")?;
    let mut keys = BTreeMap::new();
    for kv in resp.kvs() {
        let Ok(name) = kv.key_str() else {
            tracing::warn!(key = ?kv.key(), "skipping a non-UTF-8 etcd key");
            continue;
        };
        keys.insert(name.to_string(), key_value(kv));
    }
    Ok(build(
        root,
        keys,
        revision.unwrap_or(header.revision()),
        header.cluster_id(),
        header.member_id(),
        header.raft_term(),
    ))
}

/// Losing the lease or the keyspace's consistency ends the process, as in Gazette.
fn fatal(msg: &str) -> ! {
    tracing::error!(%msg, "etcd keyspace failed");
    eprintln!("courant: {msg}");
    std::process::exit(1)
}

/// Our copy of an etcd key's value, revisions and lease.
fn key_value(kv: &etcd_client::KeyValue) -> KeyValue {
    KeyValue {
        value: Bytes::copy_from_slice(kv.value()),
        create_revision: kv.create_revision(),
        mod_revision: kv.mod_revision(),
        lease: kv.lease(),
    }
}

fn build(
    root: &str,
    keys: BTreeMap<String, KeyValue>,
    revision: i64,
    cluster_id: u64,
    member_id: u64,
    raft_term: u64,
) -> Snapshot {
    Snapshot {
        revision,
        cluster_id,
        member_id,
        raft_term,
        journals: decode_items(root, &keys),
        members: decode_members(root, &keys),
        assignments: decode_assignments(root, &keys),
        cluster: true,
        keys,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    #[test]
    fn lease_deadline_extends_from_each_renewal() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut d = LeaseDeadline::new(t0, 4 * s);
        assert_eq!(d.expires, t0 + 4 * s);
        d.renewed(t0 + s, 4);
        assert_eq!(d.expires, t0 + 5 * s);
        // A TTL of zero (expired) never extends, and the deadline never moves back.
        d.renewed(t0 + 3 * s, 0);
        assert_eq!(d.expires, t0 + 5 * s);
        d.renewed(t0 + 2 * s, 1);
        assert_eq!(d.expires, t0 + 5 * s);
        d.renewed(t0 + 3 * s, 4);
        assert_eq!(d.expires, t0 + 7 * s);
    }

    #[test]
    fn etcd_tls_options() {
        let none = EtcdTls::default();
        assert!(none.options("http://127.0.0.1:2379").unwrap().is_none());
        assert!(none.options("https://127.0.0.1:2379").unwrap().is_some());
        let ca_only = EtcdTls {
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..Default::default()
        };
        let err = ca_only.options("http://127.0.0.1:2379").unwrap_err();
        assert!(err.contains("use https://"), "{err}");
        let err = ca_only.options("https://127.0.0.1:2379").unwrap_err();
        assert!(err.contains("reading /nonexistent/ca.pem"), "{err}");
        let dir = std::env::temp_dir().join(format!("courant-etcd-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("c.pem"), "x").unwrap();
        let cert_only = EtcdTls {
            cert_file: Some(dir.join("c.pem")),
            ..Default::default()
        };
        let err = cert_only.options("https://127.0.0.1:2379").unwrap_err();
        assert!(err.contains("go together"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn der_certificates_round_trip_through_pem() {
        let der: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
        let pem = der_to_pem(&der);
        let back = CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
        assert_eq!(back.as_ref(), &der[..]);
    }
}
