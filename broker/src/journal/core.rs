//! A Core: one glommio executor pinned to one CPU, owning the journals placed on it
//! ([`crate::journal::owners`]: those first called over its connections).
//!
//! Lives on: its own executor thread. `Core` is `!Send` (it holds `Rc`s and `RefCell`s).
//! Other cores reach it only through [`CoreMsg`]s on its bounded inbox.

use crate::config::ServeConfig;
use crate::control::KeySpaceHandle;
use crate::journal::call::{self, CallIn, CallOut};
use crate::journal::replica::Replica;
use futures_lite::future;
use http::HeaderValue;
use protocol::grpc::{Code, RpcError, ServerCall, decode_message};
use protocol::method::Method;
use protocol::process_spec::Id;
use protocol::{AppendRequest, FragmentsRequest, ReadRequest, ReplicateRequest};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// Depth of each core's inbox of forwarded calls.
pub const INBOX_DEPTH: usize = 1024;

/// The journal-scoped first request of a call, decoded once on the accepting core.
pub enum FirstRequest {
    Append(AppendRequest),
    Read(ReadRequest),
    Fragments(FragmentsRequest),
    Replicate(ReplicateRequest),
}

impl FirstRequest {
    /// The RPC's name, as metrics label it.
    pub fn operation(&self) -> &'static str {
        match self {
            FirstRequest::Append(_) => "Append",
            FirstRequest::Read(_) => "Read",
            FirstRequest::Fragments(_) => "ListFragments",
            FirstRequest::Replicate(_) => "Replicate",
        }
    }

    fn journal(&self) -> &str {
        let name = match self {
            FirstRequest::Append(r) => &r.journal,
            FirstRequest::Read(r) => &r.journal,
            FirstRequest::Fragments(r) => &r.journal,
            FirstRequest::Replicate(r) => match &r.proposal {
                Some(p) => &p.journal,
                None => &r.deprecated_journal,
            },
        };
        protocol::validate::strip_meta(name)
    }
}

/// Everything that crosses cores. Dropping a `Call` before it runs fails that one RPC
/// (its client sees `Internal: the journal's owner core dropped the call`).
pub enum CoreMsg {
    Call {
        first: FirstRequest,
        input: CallIn,
        output: CallOut,
        timeout: Option<Duration>,
    },
}

pub struct Core {
    pub index: usize,
    pub cores: usize,
    pub cfg: Arc<ServeConfig>,
    pub keyspace: KeySpaceHandle,
    pub process_id: Id,
    pub endpoint: String,
    pub peers: Vec<flume::Sender<CoreMsg>>,
    /// Verifies each call's authorization (`--broker.auth-keys`); off when no keys.
    pub auth: Arc<crate::auth::Auth>,
    /// Replicas of journals owned by this core, opened on first use.
    pub replicas: RefCell<HashMap<String, Rc<tokio::sync::OnceCell<Rc<Replica>>>>>,
    /// Replicas of deleted journals (or, in a cluster, journals no longer assigned here),
    /// weakly: a re-created journal's replica opens the spool files only after the old one's
    /// last append has finished, and an old replica no call holds is dropped at once,
    /// closing its files (held strongly, each kept its descriptors until a re-creation).
    pub retired: RefCell<HashMap<String, std::rc::Weak<Replica>>>,
    /// This core's view of the fragment stores (served by the control thread).
    pub stores: crate::control::stores::persist::CoreStores,
    /// This core's connections to other brokers.
    pub peer_channels: crate::journal::routing::peer::PeerChannels,
    /// `--tpc.durable`: this core's batcher of spool syncs (group commit); None when off.
    pub syncs: Option<Rc<storage::spool::SyncBatcher>>,
    /// Which core owns which journal (this core's cache of the broker's placements).
    pub owners: crate::journal::owners::CoreOwners,
    /// The Appends' resolutions of the journals served here, for the current snapshot.
    pub resolved: crate::journal::routing::resolver::Resolved,
}

/// This core's sync batcher when `cfg` asks for durable appends, counting its syncs in
/// the metrics, with the core's commit log (`<data-dir>/spools/wal/core-<core>.wal`,
/// prepared now in the background; see `storage::spool::wal`).
pub fn sync_batcher(cfg: &ServeConfig, core: usize) -> Option<Rc<storage::spool::SyncBatcher>> {
    use storage::spool::wal;
    cfg.durable.then(|| {
        let log = storage::spool::Wal::new(
            wal::path(&cfg.data_dir.join("spools"), core),
            wal::DEFAULT_SIZE,
            Some(Box::new(crate::metrics::commit_log)),
        );
        log.start();
        storage::spool::SyncBatcher::with_wal(Some(Box::new(crate::metrics::spool_syncs)), log)
    })
}

/// Replays the commit logs of durable mode into the spools under `data_dir` (blocking; at
/// start, before any spool opens). Logs of a run without `--tpc.durable` are replayed too.
pub fn replay_commit_logs(data_dir: &std::path::Path) -> Result<(), String> {
    storage::spool::wal::replay(&data_dir.join("spools"))
        .map(|_| ())
        .map_err(|e| format!("replaying the commit logs of durable mode: {e}"))
}

impl Core {
    /// The core that serves calls for `journal`, placing the journal on this core if this
    /// is its first call. Names outside the keyspace are not placed: their hash core
    /// answers them.
    pub fn owner_of(&self, journal: &str) -> usize {
        if let Some(core) = self.owners.get(journal) {
            return core;
        }
        if self.keyspace.current().journals.contains_key(journal) {
            self.owners.place(journal, self.index)
        } else {
            crate::journal::owners::hash_core(journal, self.cores)
        }
    }

    /// The replica of `journal` (which must be owned by this core), recovering its spool
    /// on first use. Concurrent first uses share one open.
    pub async fn replica(self: &Rc<Self>, journal: &str) -> Result<Rc<Replica>, RpcError> {
        // A call for a name outside the keyspace was routed by hash; if the journal was
        // created meanwhile, its replica opens only on the core it is placed on (so two
        // cores never open one spool), claiming it here if no call placed it yet.
        if self.owners.place(journal, self.index) != self.index {
            return Err(RpcError::unavailable(
                "the journal was created during this call and placed on another core; retry",
            ));
        }
        let cell = self
            .replicas
            .borrow_mut()
            .entry(journal.to_string())
            .or_default()
            .clone();
        let replica = cell
            .get_or_try_init(|| {
                let core = self.clone();
                let name = journal.to_string();
                async move {
                    let retired = core
                        .retired
                        .borrow_mut()
                        .remove(&name)
                        .and_then(|old| old.upgrade());
                    if let Some(old) = retired {
                        // The journal was deleted and re-created: an append may still hold
                        // the old replica's spool, so open its files only once that is done.
                        drop(old.spool.lock().await);
                    }
                    Replica::open(core, name).await
                }
            })
            .await?;
        Ok(replica.clone())
    }

    /// Closes replicas whose journals left the keyspace (or, in a cluster, this broker's
    /// assignments), so their blocked reads end with a clean EOF and a re-created journal
    /// starts from a fresh recovery.
    pub async fn watch_keyspace(self: Rc<Self>) {
        let mut watch = self.keyspace.subscribe();
        while watch.changed().await.is_ok() {
            let snapshot = watch.borrow_and_update().clone();
            // In a cluster, a journal this broker no longer serves is closed too (its blocked
            // reads end with EOF and clients retry at a member); if it is assigned here again,
            // a fresh replica recovers the spool and syncs with the pipeline.
            let gone: Vec<String> = self
                .replicas
                .borrow()
                .keys()
                .filter(|name| {
                    !snapshot.journals.contains_key(*name)
                        || (snapshot.cluster
                            && !snapshot
                                .assigned_route(name)
                                .members
                                .contains(&self.process_id))
                })
                .cloned()
                .collect();
            // A pipeline kept for a journal this broker no longer leads is closed now: its
            // replicas (Gazette's hold their spool until the stream ends) must be free to
            // follow the new primary. An append in flight drops its own on the Route change.
            if snapshot.cluster {
                for (name, cell) in self.replicas.borrow().iter() {
                    let Some(replica) = cell.get() else { continue };
                    let route = snapshot.assigned_route(name);
                    let leads = usize::try_from(route.primary)
                        .ok()
                        .and_then(|i| route.members.get(i))
                        .is_some_and(|p| *p == self.process_id);
                    let stale = replica
                        .pipeline
                        .borrow()
                        .as_ref()
                        .is_some_and(|p| !leads || !p.serves(&route));
                    if stale && let Some(pipeline) = replica.pipeline.borrow_mut().take() {
                        pipeline.close();
                    }
                }
            }
            for name in gone {
                let cell = self.replicas.borrow_mut().remove(&name);
                if let Some(replica) = cell.as_ref().and_then(|c| c.get()) {
                    replica.index.borrow_mut().close();
                    let mut retired = self.retired.borrow_mut();
                    retired.retain(|_, old| old.strong_count() > 0);
                    retired.insert(name, Rc::downgrade(replica));
                }
            }
        }
    }

    /// Serves the calls other cores forward to this one.
    pub async fn serve_inbox(self: Rc<Self>, inbox: flume::Receiver<CoreMsg>) {
        while let Ok(msg) = inbox.recv_async().await {
            match msg {
                CoreMsg::Call {
                    first,
                    input,
                    output,
                    timeout,
                } => {
                    call::spawn_call(run_journal_call(
                        self.clone(),
                        first,
                        input,
                        output,
                        timeout,
                    ));
                }
            }
        }
    }

    /// Starts a journal call on the journal's owner core for a front end other than gRPC
    /// (the HTTP gateway), returning the client's ends; `None` if the owner has stopped.
    pub async fn start_journal_call(
        &self,
        first: FirstRequest,
        timeout: Option<Duration>,
    ) -> Option<call::ChannelClient> {
        let owner = self.owner_of(first.journal());
        let (input, output, client) = call::channel_call();
        let msg = CoreMsg::Call {
            first,
            input,
            output,
            timeout,
        };
        self.peers[owner].send_async(msg).await.ok()?;
        Some(client)
    }

    /// Starts a List on this core for a front end other than gRPC (the HTTP `/v1/` routes),
    /// with already verified `claims`; returns the client's ends. Dropping them cancels it.
    pub async fn start_list_call(
        self: &Rc<Self>,
        req: protocol::ListRequest,
        claims: crate::auth::Claims,
        timeout: Option<Duration>,
    ) -> call::ChannelClient {
        let (mut input, mut output, client) = call::channel_call();
        // The handler reads its request from the call's input, as a gRPC List does.
        let _ = client
            .requests
            .send_async(Ok(bytes::Bytes::from(prost::Message::encode_to_vec(&req))))
            .await;
        let core = self.clone();
        glommio::spawn_local(async move {
            crate::metrics::rpc_started("List");
            let outcome = with_deadline(timeout, async {
                crate::journal::list::list(&core, &claims, &mut input, &mut output).await
            })
            .await;
            crate::metrics::rpc_completed("List", outcome.is_ok());
            output.finish(outcome);
        })
        .detach();
        client
    }

    /// Routes one incoming call to its handler, on this core or the journal's owner.
    pub async fn dispatch(self: Rc<Self>, mut call: ServerCall) {
        if let Err(err) = call.check_headers() {
            call.outbound.finish(Err(err));
            return;
        }
        call.outbound
            .insert_header("x-courant-core", HeaderValue::from(self.index));
        let Some(method) = Method::from_path(&call.path) else {
            let err = RpcError::new(Code::Unimplemented, format!("unknown method {}", call.path));
            call.outbound.finish(Err(err));
            return;
        };
        let claims = match self.auth.verify_call(method, &call.metadata) {
            Ok(claims) => claims,
            Err(err) => {
                call.outbound.finish(Err(err));
                return;
            }
        };
        // The call's deadline is at most its authorization's expiry.
        call.timeout = claims.bound(call.timeout);
        let timeout = call.timeout;
        let core = self.clone();
        match method {
            Method::List => {
                Box::pin(run_local("List", call, timeout, async move |input, out| {
                    crate::journal::list::list(&core, &claims, input, out).await
                }))
                .await
            }
            Method::Apply => {
                Box::pin(run_local(
                    "Apply",
                    call,
                    timeout,
                    async move |input, out| {
                        crate::journal::list::apply(&core, &claims, input, out).await
                    },
                ))
                .await
            }
            Method::FragmentStoreHealth => {
                Box::pin(run_local(
                    "FragmentStoreHealth",
                    call,
                    timeout,
                    async move |input, out| {
                        crate::journal::store_health::health_rpc(&core, input, out).await
                    },
                ))
                .await
            }
            Method::Append | Method::Read | Method::ListFragments | Method::Replicate => {
                self.route_journal_call(call, method, claims).await
            }
        }
    }

    async fn route_journal_call(
        self: Rc<Self>,
        mut call: ServerCall,
        method: Method,
        claims: crate::auth::Claims,
    ) {
        let first = match call.inbound.next_frame().await {
            Ok(Some(frame)) => frame,
            Ok(None) => {
                call.outbound.finish(Err(RpcError::unknown(format!(
                    "{}: stream ended before the first request",
                    method.name()
                ))));
                return;
            }
            Err(err) => {
                call.outbound.finish(Err(err));
                return;
            }
        };
        let first = match method {
            Method::Append => decode_message(first).map(FirstRequest::Append),
            Method::Read => decode_message(first).map(FirstRequest::Read),
            Method::Replicate => decode_message(first).map(FirstRequest::Replicate),
            _ => decode_message(first).map(FirstRequest::Fragments),
        };
        let first = match first {
            Ok(first) => first,
            Err(err) => {
                call.outbound.finish(Err(err));
                return;
            }
        };
        if !crate::journal::authorize::in_scope(&self, &claims, first.journal()) {
            Box::pin(crate::journal::authorize::answer_out_of_scope(
                &self,
                &first,
                call.outbound,
            ))
            .await;
            return;
        }
        let owner = self.owner_of(first.journal());
        call.outbound
            .insert_header("x-courant-owner-core", HeaderValue::from(owner));
        let timeout = call.timeout;
        if owner == self.index {
            let input = CallIn::H2(call.inbound);
            let output = CallOut::H2(call.outbound);
            run_journal_call(self, first, input, output, timeout).await;
            return;
        }
        let peer = self.peers[owner].clone();
        call::forward(call.inbound, call.outbound, async move |input, output| {
            crate::metrics::cross_core_message();
            peer.send_async(CoreMsg::Call {
                first,
                input,
                output,
                timeout,
            })
            .await
            .is_ok()
        })
        .await;
    }
}

/// Runs a handler not scoped to a journal on the accepting core.
async fn run_local(
    operation: &str,
    call: ServerCall,
    timeout: Option<Duration>,
    handler: impl AsyncFnOnce(&mut CallIn, &mut CallOut) -> Result<(), RpcError>,
) {
    crate::metrics::rpc_started(operation);
    let mut input = CallIn::H2(call.inbound);
    let mut output = CallOut::H2(call.outbound);
    let outcome = with_deadline(timeout, handler(&mut input, &mut output)).await;
    crate::metrics::rpc_completed(operation, outcome.is_ok());
    output.finish(outcome);
}

/// Runs a journal-scoped handler on the journal's owner core (this one).
async fn run_journal_call(
    core: Rc<Core>,
    first: FirstRequest,
    mut input: CallIn,
    mut output: CallOut,
    timeout: Option<Duration>,
) {
    let operation = first.operation();
    crate::metrics::rpc_started(operation);
    let outcome = with_deadline(timeout, async {
        match first {
            FirstRequest::Append(req) => {
                crate::journal::append::append(&core, req, &mut input, &mut output).await
            }
            // Boxed: a task's future is as large as its largest state, and every call's
            // task is moved (copied) when it is spawned, so rarer and larger handlers live
            // on the heap instead of inflating every Append's task.
            FirstRequest::Read(req) => {
                Box::pin(crate::journal::read::read(&core, req, &mut output)).await
            }
            FirstRequest::Fragments(req) => {
                Box::pin(crate::journal::read::list_fragments(
                    &core,
                    req,
                    &mut output,
                ))
                .await
            }
            FirstRequest::Replicate(req) => {
                Box::pin(crate::journal::replicate::replicate(
                    &core,
                    req,
                    &mut input,
                    &mut output,
                ))
                .await
            }
        }
    })
    .await;
    crate::metrics::rpc_completed(operation, outcome.is_ok());
    output.finish(outcome);
}

/// Bounds a handler by the client's `grpc-timeout`. A plain function returning the race
/// (not an `async fn`): the handler's future is then stored once, not once as the
/// argument and again in each branch's awaited state (every Append's task carried three
/// copies of its handler's state, moved several times at each spawn).
fn with_deadline(
    timeout: Option<Duration>,
    fut: impl Future<Output = Result<(), RpcError>>,
) -> impl Future<Output = Result<(), RpcError>> {
    future::or(fut, async move {
        match timeout {
            None => future::pending().await,
            Some(t) => {
                glommio::timer::sleep(t).await;
                Err(RpcError::new(
                    Code::DeadlineExceeded,
                    "context deadline exceeded",
                ))
            }
        }
    })
}
