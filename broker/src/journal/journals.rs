//! The journals this core owns: their replicas, opened on first use and closed when the
//! journal leaves the keyspace (or this broker's assignments), and the Appends' cached
//! resolutions. The journal RPCs reach a replica through [`Journals::replica`].
//!
//! Lives on: its core (`!Send`); each core has one, beside its [`Core`].

use crate::core::Core;
use crate::journal::replica::Replica;
use crate::journal::routing::resolver::Resolved;
use protocol::grpc::RpcError;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

pub struct Journals {
    /// The core's runtime: identity, keyspace and stores views, placement, peers.
    pub core: Rc<Core>,
    /// Replicas of journals owned by this core, opened on first use.
    replicas: RefCell<HashMap<String, Rc<tokio::sync::OnceCell<Rc<Replica>>>>>,
    /// Replicas of deleted journals (or, in a cluster, journals no longer assigned here),
    /// weakly: a re-created journal's replica opens the spool files only after the old one's
    /// last append has finished, and an old replica no call holds is dropped at once,
    /// closing its files (held strongly, each kept its descriptors until a re-creation).
    retired: RefCell<HashMap<String, std::rc::Weak<Replica>>>,
    /// The Appends' resolutions of the journals served here, for the current snapshot.
    pub resolved: Resolved,
}

impl Journals {
    /// No journal open yet on `core`.
    pub fn new(core: Rc<Core>) -> Self {
        Journals {
            core,
            replicas: RefCell::default(),
            retired: RefCell::default(),
            resolved: Resolved::default(),
        }
    }

    /// The replica of `journal` (which must be owned by this core), recovering its spool
    /// on first use. Concurrent first uses share one open.
    pub async fn replica(self: &Rc<Self>, journal: &str) -> Result<Rc<Replica>, RpcError> {
        // A call for a name outside the keyspace was routed by hash; if the journal was
        // created meanwhile, its replica opens only on the core it is placed on (so two
        // cores never open one spool), claiming it here if no call placed it yet.
        if self.core.owners.place(journal, self.core.index) != self.core.index {
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
                let journals = self.clone();
                let name = journal.to_string();
                async move {
                    let retired = journals
                        .retired
                        .borrow_mut()
                        .remove(&name)
                        .and_then(|old| old.upgrade());
                    if let Some(old) = retired {
                        // The journal was deleted and re-created: an append may still hold
                        // the old replica's spool, so open its files only once that is done.
                        drop(old.spool.lock().await);
                    }
                    Replica::open(journals.core.clone(), name).await
                }
            })
            .await?;
        Ok(replica.clone())
    }

    /// Closes replicas whose journals left the keyspace (or, in a cluster, this broker's
    /// assignments), so their blocked reads end with a clean EOF and a re-created journal
    /// starts from a fresh recovery.
    pub async fn watch_keyspace(self: Rc<Self>) {
        let mut watch = self.core.keyspace.subscribe();
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
                                .contains(&self.core.process_id))
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
                        .is_some_and(|p| *p == self.core.process_id);
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

    /// Closes every open replica's index, so that its blocked reads end with a clean EOF
    /// (as when a journal leaves the keyspace): the shutdown's closing stage.
    pub fn close_all(&self) {
        let replicas: Vec<_> = self.replicas.borrow().values().cloned().collect();
        for cell in replicas {
            if let Some(replica) = cell.get() {
                replica.index.borrow_mut().close();
            }
        }
    }

    /// `journal`'s replica if it is open (the simulator's checks read it).
    #[cfg(test)]
    pub fn open_replica(&self, journal: &str) -> Option<Rc<Replica>> {
        self.replicas
            .borrow()
            .get(journal)
            .and_then(|cell| cell.get().cloned())
    }

    /// The replicas open now (the simulator's checks walk them).
    #[cfg(test)]
    pub fn open_replicas(&self) -> Vec<Rc<Replica>> {
        self.replicas
            .borrow()
            .values()
            .filter_map(|cell| cell.get().cloned())
            .collect()
    }
}
