//! A Replica: the state of one journal on its owner core.
//!
//! Lives on: the journal's owner core (`!Send`). Holds the spool behind an async mutex (the
//! append in progress owns it across awaits), the fragment index behind a `RefCell` (only
//! ever borrowed between awaits), and the max-rate token bucket.

use crate::core::Core;
use crate::flow::{TokenBucket, effective_max_rate};
use protocol::JournalSpec;
use protocol::grpc::RpcError;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;
use storage::index::Index;
use storage::spool::Spool;

pub struct Replica {
    #[allow(dead_code)] // For logs and metrics.
    pub journal: String,
    pub spool: tokio::sync::Mutex<Spool>,
    pub index: RefCell<Index>,
    bucket: RefCell<TokenBucket>,
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
        let (spool, recovered) = Spool::open(&root, &journal, codec)
            .await
            .map_err(|e| RpcError::unknown(format!("opening the spool of {journal}: {e}")))?;
        let mut index = Index::new();
        for fragment in recovered {
            index.add_local(fragment);
        }
        let current = spool.fragment();
        if current.end > current.begin {
            index.add_local(storage::LocalFragment {
                fragment: current.clone(),
                file: spool.file(),
            });
        }
        Ok(Rc::new(Replica {
            journal,
            spool: tokio::sync::Mutex::new(spool),
            index: RefCell::new(index),
            bucket: RefCell::new(TokenBucket::new()),
        }))
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
