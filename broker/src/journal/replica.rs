//! A Replica: the state of one journal on its owner core.
//!
//! Lives on: the journal's owner core (`!Send`). Holds the spool behind an async mutex (the
//! append in progress owns it across awaits), the fragment index behind a `RefCell` (only
//! ever borrowed between awaits), and the max-rate token bucket.

use crate::core::Core;
use crate::journal::flow::{TokenBucket, effective_max_rate};
use protocol::JournalSpec;
use protocol::grpc::RpcError;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;
use storage::index::Index;
use storage::spool::Spool;

use crate::control::stores::persist::{PersistJob, PersistOutcome};

pub struct Replica {
    pub journal: String,
    pub spool: tokio::sync::Mutex<Spool>,
    pub index: RefCell<Index>,
    bucket: RefCell<TokenBucket>,
    /// The replication pipeline of the last append as primary, kept for the next one
    /// while its Route holds (only the spool's holder takes or replaces it).
    pub pipeline: RefCell<Option<crate::journal::pipeline::Pipeline>>,
    /// The journal's commits proposed as primary whose acknowledgements are still awaited
    /// (pipelined appends); the spool's holder drains them before it rolls or syncs.
    pub awaiting: Rc<crate::journal::pipeline::Awaiting>,
    /// Whether this broker's data directory held the journal's spool before this open: an
    /// empty spool behind a listed write head is then this broker's own persisted history.
    pub wrote_before: bool,
}

impl Replica {
    /// Opens the journal's spool under `--data-dir`, recovering what an earlier process
    /// committed, and indexes the recovered fragments.
    pub async fn open(core: Rc<Core>, journal: String) -> Result<Rc<Replica>, RpcError> {
        let codec = core
            .keyspace
            .current()
            .journals
            .get(&journal)
            .and_then(|item| item.spec.fragment.as_ref())
            .and_then(|f| protocol::CompressionCodec::try_from(f.compression_codec).ok())
            .unwrap_or(protocol::CompressionCodec::None);
        let root = core.cfg.data_dir.join("spools");
        // A spool directory means this broker wrote the journal before (blocking stat, once
        // per journal assignment, as `Spool::open` itself does).
        let wrote_before = storage::spool::journal_dir(&root, &journal)
            .join("JOURNAL")
            .exists();
        let (mut spool, recovered) = Spool::open(&root, &journal, codec)
            .await
            .map_err(crate::errors::storage_err)?;
        // In a cluster, the recovered current fragment may end in commits that were never
        // acknowledged and that the journal's history has since overwritten (found by the
        // first simulator, seed 34 of its lease-expiry model: a restarted broker always
        // comes back after its lease expired, so the journal may have moved on without it):
        // its content is forgotten, as a Gazette broker forgets its spool with its process,
        // and the pipeline's sync rolls this replica forward to its peers. Fragments
        // completed before it were agreed by a sync. An empty current fragment (a roll's
        // durable begin) keeps its offset: the write head never goes back.
        let forget = !crate::mutation::active(crate::mutation::Mutation::KeepRecoveredSpool)
            && core.keyspace.current().cluster;
        if forget {
            if spool.fragment().end > spool.fragment().begin {
                tracing::info!(
                    journal = %journal,
                    begin = spool.fragment().begin,
                    end = spool.fragment().end,
                    "cluster mode: discarding the recovered spool's unconfirmed content"
                );
                spool.discard().await.map_err(crate::errors::storage_err)?;
            }
            // Kept or discarded, the recovered registers are of a journal that may have
            // moved on without this broker: its peers' agreement settles them (two spools
            // at one end, each keeping its own, would refuse each other's roll in place
            // forever: found by the simulator, seed 7409).
            spool.set_registers_unknown(true);
        }
        if let Some(batcher) = &core.syncs {
            spool.set_sync_gate(storage::spool::SyncGate::new(batcher));
        }
        let mut index = Index::new();
        for fragment in &recovered {
            index.add_local(fragment.clone());
        }
        let current = spool.fragment();
        if current.end > current.begin {
            index.add_local(storage::LocalFragment {
                fragment: current.clone(),
                file: spool.file(),
            });
        }
        let replica = Rc::new(Replica {
            journal,
            spool: tokio::sync::Mutex::new(spool),
            index: RefCell::new(index),
            bucket: RefCell::new(TokenBucket::new()),
            pipeline: RefCell::new(None),
            awaiting: Rc::default(),
            wrote_before,
        });
        glommio::spawn_local(refresh_loop(core.clone(), Rc::downgrade(&replica))).detach();
        for fragment in recovered {
            replica.persist(&core, fragment, None);
        }
        Ok(replica)
    }

    /// Hands a completed local fragment to the background uploader. When the store
    /// confirms it, the index marks it persisted and only then are its local files removed.
    /// The fragment stays indexed (and on disk) until then, however long that takes.
    /// `first_append` is the spool's first append (unknown for recovered fragments).
    pub fn persist(
        self: &Rc<Self>,
        core: &Rc<Core>,
        done: storage::LocalFragment,
        first_append: Option<std::time::SystemTime>,
    ) {
        let handle = core.stores.handle.clone();
        let replica = Rc::downgrade(self);
        glommio::spawn_local(async move {
            let job = PersistJob {
                fragment: done.fragment.clone(),
                file: done.file.path().to_path_buf(),
                first_append,
            };
            let persisted = match handle.persist(job).await {
                Ok(PersistOutcome::Persisted(f)) => f,
                Ok(PersistOutcome::Dropped) => return,
                Err(err) => {
                    // The control thread is gone: the process is exiting. The files stay,
                    // and the next start recovers and persists them.
                    tracing::warn!(%err, "persisting a fragment was abandoned");
                    return;
                }
            };
            if let Some(replica) = replica.upgrade() {
                replica.index.borrow_mut().mark_persisted(persisted);
            }
            if let Err(err) = done.file.remove().await {
                tracing::warn!(%err, "removing the local files of a persisted fragment");
            }
        })
        .detach();
    }

    /// How long a chunk of `n` bytes must wait under the journal's max append rate.
    pub fn max_rate_wait(&self, core: &Core, spec: &JournalSpec, n: usize) -> Option<Duration> {
        let rate = effective_max_rate(spec.max_append_rate, core.cfg.max_append_rate);
        self.bucket.borrow_mut().take(rate, n)
    }

    /// Records a commit of the spool in the index (waking blocked readers).
    pub fn on_commit(&self, spool: &Spool) {
        self.index.borrow_mut().add_local(storage::LocalFragment {
            fragment: spool.fragment().clone(),
            file: spool.file(),
        });
    }
}

/// Lists the journal's stores when the replica opens and every `refresh_interval` after
/// (failures retried sooner), replacing the index's remote fragments. Ends when the replica
/// is dropped or its index closed. Lives on: the journal's owner core.
async fn refresh_loop(core: Rc<Core>, replica: std::rc::Weak<Replica>) {
    loop {
        let Some(journal) = replica.upgrade().map(|r| r.journal.clone()) else {
            return;
        };
        let spec = core
            .keyspace
            .current()
            .journals
            .get(&journal)
            .map(|item| item.spec.clone());
        let Some(spec) = spec else {
            return; // The journal was deleted; `watch_keyspace` closes the replica.
        };
        let interval = spec
            .fragment
            .as_ref()
            .and_then(|f| f.refresh_interval)
            .map_or(300, |d| d.seconds.max(1)) as u64;
        let stores = core.stores.stores_of(&spec);
        let listed = core.stores.handle.list(journal.clone(), stores).await;
        let Some(replica) = replica.upgrade() else {
            return;
        };
        if replica.index.borrow().is_closed() {
            return;
        }
        let wait = match listed {
            Ok(fragments) => {
                replica.index.borrow_mut().replace_remote(fragments);
                interval
            }
            Err(err) => {
                tracing::warn!(journal = %journal, %err, "listing fragment stores (will retry)");
                interval.min(5)
            }
        };
        drop(replica);
        glommio::timer::sleep(Duration::from_secs(wait)).await;
    }
}

/// `--tpc.durable`: returns once everything `spool` committed is on the device (one sync,
/// shared with the commits made before it started and with other journals of this core;
/// see `storage::spool::durable`). A failed sync refuses the append (UNKNOWN, without
/// server paths) and leaves the spool poisoned: the content is never acknowledged nor
/// shown to readers. Without the flag there is no ticket and nothing to wait for.
pub async fn durable(spool: &Spool) -> Result<(), RpcError> {
    match spool.sync_ticket() {
        Some(ticket) => ticket.wait().await.map_err(crate::errors::storage_err),
        None => Ok(()),
    }
}
