//! A Core: one glommio executor pinned to one CPU, and the per-core runtime that every
//! layer above it shares: its identity, its views of the keyspace and the fragment stores,
//! which core owns which journal ([`owners`]), the calls that cross cores ([`msg`],
//! [`call`]) and its connections to other brokers ([`peer`]). Journals, their replicas and
//! their RPCs live above it (`crate::journal`); dispatch by method lives in `crate::front`.
//!
//! Lives on: its own executor thread. `Core` is `!Send` (it holds `Rc`s and `RefCell`s).
//! Other cores reach it only through [`msg::CoreMsg`]s on its bounded inbox.

pub mod call;
pub mod msg;
pub mod owners;
pub mod peer;

use crate::config::ServeConfig;
use crate::control::KeySpaceHandle;
use protocol::process_spec::Id;
use std::rc::Rc;
use std::sync::Arc;

pub struct Core {
    pub index: usize,
    pub cores: usize,
    pub cfg: Arc<ServeConfig>,
    pub keyspace: KeySpaceHandle,
    pub process_id: Id,
    pub endpoint: String,
    pub peers: Vec<flume::Sender<msg::CoreMsg>>,
    /// Verifies each call's authorization (`--broker.auth-keys`), and signs this broker's
    /// calls to its peers; off when no keys.
    pub auth: Arc<crate::auth::Auth>,
    /// This core's view of the fragment stores (served by the control thread).
    pub stores: crate::control::stores::persist::CoreStores,
    /// This core's connections to other brokers.
    pub peer_channels: peer::PeerChannels,
    /// `--tpc.durable`: this core's batcher of spool syncs (group commit); None when off.
    pub syncs: Option<Rc<storage::spool::SyncBatcher>>,
    /// Which core owns which journal (this core's cache of the broker's placements).
    pub owners: owners::CoreOwners,
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
            owners::hash_core(journal, self.cores)
        }
    }
}
