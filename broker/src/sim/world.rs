//! The simulated world around the brokers: the etcd keyspace (one shared key map with
//! revisions, leases and transactions; each broker sees the snapshots the driver has
//! propagated to it) and the fragment store (one shared in-memory store; persisting a
//! fragment is an event the driver completes when the seed says so).
//!
//! Each broker reaches them through the same channels as the control thread's
//! (`KeySpaceHandle`'s transactions, `StoreHandle`'s messages): the simulator serves them
//! with a task per broker incarnation, dropped when the broker crashes.
//!
//! Lives on: the simulation's one executor thread.

use crate::control::ControlMsg;
use crate::control::keyspace::{
    Compare, KeyValue, Op, Snapshot, TxnOutcome, decode_assignments, decode_items, decode_members,
};
use crate::control::stores::persist::{PersistJob, PersistOutcome, StoreMsg};
use bytes::Bytes;
use protocol::Fragment;
use sha1::{Digest, Sha1};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use tokio::sync::watch;

pub const ROOT: &str = "/sim";
/// The store every journal's spec names.
pub const STORE: &str = "file:///sim/";

/// The keyspace: keys with etcd's revisions, and every snapshot since the start.
pub struct KeySpace {
    keys: BTreeMap<String, KeyValue>,
    revision: i64,
    pub snapshots: Vec<Arc<Snapshot>>,
}

impl KeySpace {
    pub fn new() -> KeySpace {
        let mut ks = KeySpace {
            keys: BTreeMap::new(),
            revision: 1,
            snapshots: Vec::new(),
        };
        ks.publish();
        ks
    }

    fn publish(&mut self) {
        self.snapshots.push(Arc::new(Snapshot {
            revision: self.revision,
            cluster_id: 1,
            member_id: 1,
            raft_term: 1,
            journals: decode_items(ROOT, &self.keys),
            members: decode_members(ROOT, &self.keys),
            assignments: decode_assignments(ROOT, &self.keys),
            keys: self.keys.clone(),
            cluster: true,
        }));
    }

    pub fn latest(&self) -> Arc<Snapshot> {
        self.snapshots
            .last()
            .expect("one snapshot at least")
            .clone()
    }

    /// The first snapshot after revision `rev`, if any.
    pub fn after(&self, rev: i64) -> Option<Arc<Snapshot>> {
        self.snapshots.iter().find(|s| s.revision > rev).cloned()
    }

    /// etcd's transaction: every compare holds, then every op applies at one new revision.
    pub fn txn(&mut self, compares: &[Compare], ops: &[Op]) -> TxnOutcome {
        let before = self.revision;
        let out =
            crate::control::keyspace::txn::txn(&mut self.keys, &mut self.revision, compares, ops);
        if self.revision != before {
            self.publish();
        }
        out
    }

    /// etcd's lease expiry: every key under `lease` is deleted.
    pub fn expire(&mut self, lease: i64) {
        let ops: Vec<Op> = self
            .keys
            .iter()
            .filter(|(_, kv)| kv.lease == lease)
            .map(|(k, _)| Op::Delete { key: k.clone() })
            .collect();
        self.txn(&[], &ops);
    }
}

/// A persisted fragment and its bytes.
pub struct Stored {
    pub fragment: Fragment,
    pub bytes: Bytes,
}

/// A persist request waiting for the driver.
pub struct PendingPersist {
    pub broker: usize,
    pub incarnation: u64,
    pub job: PersistJob,
    pub reply: flume::Sender<PersistOutcome>,
}

#[derive(Default)]
pub struct Store {
    /// Fragments by journal and (begin, end, SHA-1).
    pub fragments: BTreeMap<String, BTreeMap<(i64, i64, String), Stored>>,
    pub pending: Vec<PendingPersist>,
    /// Errors found while persisting (a fragment whose bytes do not match its SHA-1).
    pub errors: Vec<String>,
    mod_time: i64,
}

impl Store {
    pub fn list(&self, journal: &str) -> Vec<Fragment> {
        self.fragments
            .get(journal)
            .map(|m| m.values().map(|s| s.fragment.clone()).collect())
            .unwrap_or_default()
    }

    /// Completes pending persist `i`: reads the file as the uploader does and stores it.
    /// Returns the stored fragment and its bytes.
    pub fn complete(&mut self, i: usize) -> Option<(Fragment, Bytes)> {
        let p = self.pending.remove(i);
        let f = &p.job.fragment;
        let len = (f.end - f.begin) as usize;
        let Ok(raw) = std::fs::read(&p.job.file) else {
            return None; // Removed meanwhile: the reply channel drops (upload abandoned).
        };
        let Some(bytes) = raw.get(..len) else {
            self.errors.push(format!(
                "broker-{}'s fragment [{}, {}) of {} has a file of {} bytes",
                p.broker,
                f.begin,
                f.end,
                f.journal,
                raw.len()
            ));
            return None;
        };
        let sum = protocol::sum::sum_from_bytes(&Sha1::digest(bytes).into());
        if f.sum != Some(sum) {
            self.errors.push(format!(
                "broker-{}'s fragment [{}, {}) of {} has the wrong SHA-1 for its bytes",
                p.broker, f.begin, f.end, f.journal
            ));
            return None;
        }
        self.mod_time += 1;
        let mut stored = f.clone();
        stored.backing_store = STORE.to_string();
        stored.mod_time = self.mod_time;
        let key = (f.begin, f.end, format!("{:?}", f.sum));
        let bytes = Bytes::copy_from_slice(bytes);
        self.fragments
            .entry(f.journal.clone())
            .or_default()
            .entry(key)
            .or_insert(Stored {
                fragment: stored.clone(),
                bytes: bytes.clone(),
            });
        let _ = p.reply.send(PersistOutcome::Persisted(stored.clone()));
        Some((stored, bytes))
    }
}

/// The keyspace and the store, shared by the driver and every broker's servers.
pub struct World {
    pub keyspace: RefCell<KeySpace>,
    pub store: RefCell<Store>,
    /// Each live broker's keyspace watch (what it has seen).
    pub views: RefCell<Vec<Option<watch::Sender<Arc<Snapshot>>>>>,
}

impl World {
    pub fn new(brokers: usize) -> Rc<World> {
        Rc::new(World {
            keyspace: RefCell::new(KeySpace::new()),
            store: RefCell::default(),
            views: RefCell::new((0..brokers).map(|_| None).collect()),
        })
    }

    /// Shows broker `b` the next snapshot it has not seen, or the latest one.
    pub fn propagate(&self, b: usize, all: bool) {
        let views = self.views.borrow();
        let Some(tx) = views[b].as_ref() else { return };
        let seen = tx.borrow().revision;
        let ks = self.keyspace.borrow();
        let next = if all {
            Some(ks.latest())
        } else {
            ks.after(seen)
        };
        if let Some(next) = next
            && next.revision > seen
        {
            tx.send_replace(next);
        }
    }

    pub fn lagging(&self) -> Vec<usize> {
        let latest = self.keyspace.borrow().latest().revision;
        self.views
            .borrow()
            .iter()
            .enumerate()
            .filter(|(_, v)| v.as_ref().is_some_and(|tx| tx.borrow().revision < latest))
            .map(|(b, _)| b)
            .collect()
    }
}

/// Serves broker `b`'s keyspace transactions (as etcd would); its own view sees the
/// result before the reply, as the embedded control loop publishes it.
pub async fn serve_keyspace(world: Rc<World>, b: usize, rx: flume::Receiver<ControlMsg>) {
    while let Ok(ControlMsg::Txn {
        compares,
        ops,
        reply,
    }) = rx.recv_async().await
    {
        let out = world.keyspace.borrow_mut().txn(&compares, &ops);
        if out.succeeded {
            world.propagate(b, true);
        }
        let _ = reply.send(Ok(out));
    }
}

/// Serves broker `b`'s store requests: health and listings at once, persists when the
/// driver completes them; the rest (reads of persisted fragments) are not simulated.
pub async fn serve_store(
    world: Rc<World>,
    b: usize,
    incarnation: u64,
    rx: flume::Receiver<StoreMsg>,
) {
    let (health_tx, health_rx) = watch::channel(crate::control::stores::Health {
        checks: 1,
        error: None,
        permanent: false,
    });
    while let Ok(msg) = rx.recv_async().await {
        match msg {
            StoreMsg::Health { reply, .. } => {
                let _ = reply.send(health_rx.clone());
            }
            StoreMsg::List { journal, reply, .. } => {
                let _ = reply.send(Ok(world.store.borrow().list(&journal)));
            }
            StoreMsg::Persist { job, reply } => {
                world.store.borrow_mut().pending.push(PendingPersist {
                    broker: b,
                    incarnation,
                    job,
                    reply,
                });
            }
            _ => {}
        }
    }
    drop(health_tx);
}
