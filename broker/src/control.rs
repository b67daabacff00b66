//! The control thread: the one place where blocking calls and tokio crates live.
//!
//! Lives on: its own OS thread running a current-thread tokio runtime. Executor cores never
//! block on it: they send owned [`ControlMsg`]s over a bounded channel and await a reply
//! channel, and they read keyspace [`Snapshot`]s through a `tokio::sync::watch` channel,
//! whose futures need no runtime. The fragment-store service (`crate::stores::persist`:
//! uploads, listings, object reads, health checks) runs on the same runtime as tasks beside
//! the keyspace loop.

use crate::keyspace::{Backend, Compare, Op, Snapshot, TxnOutcome};
use std::sync::Arc;
use tokio::sync::watch;

/// Work for the control thread. Dropping one before it runs costs nothing but the request:
/// the requester sees its reply channel closed and reports an error.
pub enum ControlMsg {
    Txn {
        compares: Vec<Compare>,
        ops: Vec<Op>,
        reply: flume::Sender<Result<TxnOutcome, String>>,
    },
}

/// A cheap, `Send` handle to the keyspace. Lives on: any core (each holds a clone).
#[derive(Clone)]
pub struct KeySpaceHandle {
    tx: flume::Sender<ControlMsg>,
    watch: watch::Receiver<Arc<Snapshot>>,
}

impl KeySpaceHandle {
    /// The latest snapshot published to this core.
    pub fn current(&self) -> Arc<Snapshot> {
        self.watch.borrow().clone()
    }

    /// A receiver that resolves on every published change.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.watch.clone()
    }

    /// Runs a transaction on the control thread.
    pub async fn txn(&self, compares: Vec<Compare>, ops: Vec<Op>) -> Result<TxnOutcome, String> {
        let (reply, rx) = flume::bounded(1);
        self.tx
            .send_async(ControlMsg::Txn {
                compares,
                ops,
                reply,
            })
            .await
            .map_err(|_| "the control thread has stopped".to_string())?;
        rx.recv_async()
            .await
            .map_err(|_| "the control thread dropped a keyspace transaction".to_string())?
    }

    /// Waits until this core has observed a snapshot at `revision` or later.
    pub async fn wait_for(&self, revision: i64) -> Arc<Snapshot> {
        let mut rx = self.watch.clone();
        loop {
            let snap = rx.borrow_and_update().clone();
            if snap.revision >= revision {
                return snap;
            }
            if rx.changed().await.is_err() {
                return snap;
            }
        }
    }
}

/// Starts the control thread around `backend` and the fragment-store service, and returns
/// the handles cores use.
pub fn start(
    mut backend: Box<dyn Backend + Send>,
    stores: crate::stores::StoresConfig,
) -> (KeySpaceHandle, crate::stores::persist::StoreHandle) {
    let (tx, rx) = flume::bounded::<ControlMsg>(1024);
    let (watch_tx, watch_rx) = watch::channel(backend.snapshot());
    let (store_handle, store_inbox) = crate::stores::persist::channel();
    let store_watch = watch_rx.clone();
    std::thread::Builder::new()
        .name("courant-control".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("building the control thread's tokio runtime");
            rt.block_on(async move {
                tokio::spawn(crate::stores::persist::serve(
                    stores,
                    store_watch,
                    store_inbox,
                ));
                while let Ok(msg) = rx.recv_async().await {
                    match msg {
                        ControlMsg::Txn {
                            compares,
                            ops,
                            reply,
                        } => {
                            let out = backend.txn(&compares, &ops);
                            if matches!(
                                out,
                                Ok(TxnOutcome {
                                    succeeded: true,
                                    ..
                                })
                            ) {
                                // Publish before replying, so the requester's core can
                                // already see its own change.
                                watch_tx.send_replace(backend.snapshot());
                            }
                            let _ = reply.send(out);
                        }
                    }
                }
            });
        })
        .expect("spawning the control thread");
    let keyspace = KeySpaceHandle {
        tx,
        watch: watch_rx,
    };
    (keyspace, store_handle)
}
