//! The control thread: the one place where blocking calls and tokio crates live.
//!
//! Lives on: its own OS thread running a current-thread tokio runtime. Executor cores never
//! block on it: they send owned [`ControlMsg`]s over a bounded channel and await a reply
//! channel, and they read keyspace [`Snapshot`]s through a `tokio::sync::watch` channel,
//! whose futures need no runtime. The fragment-store service (`crate::control::stores::persist`:
//! uploads, listings, object reads, health checks) runs on the same runtime as tasks beside
//! the keyspace loop. The keyspace is the embedded store or, with `--etcd.address`, etcd
//! (`crate::control::keyspace::etcd`: its client, watch and lease all live here).

pub mod keyspace;
pub mod stores;

use crate::control::keyspace::etcd::{self, Etcd};
use crate::control::keyspace::{Backend, Compare, Op, Snapshot, TxnOutcome};
use crate::errors::BrokerError;
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
    /// A handle over another keyspace server than the control thread: the simulator serves
    /// `tx`'s transactions and publishes each broker's snapshots itself.
    #[cfg(test)]
    pub fn from_parts(
        tx: flume::Sender<ControlMsg>,
        watch: watch::Receiver<Arc<Snapshot>>,
    ) -> KeySpaceHandle {
        KeySpaceHandle { tx, watch }
    }

    /// The latest snapshot published to this core.
    pub fn current(&self) -> Arc<Snapshot> {
        self.watch.borrow().clone()
    }

    /// A receiver that resolves on every published change.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.watch.clone()
    }

    /// Runs a transaction on the control thread.
    pub async fn txn(
        &self,
        compares: Vec<Compare>,
        ops: Vec<Op>,
    ) -> Result<TxnOutcome, BrokerError> {
        let (reply, rx) = flume::bounded(1);
        self.tx
            .send_async(ControlMsg::Txn {
                compares,
                ops,
                reply,
            })
            .await
            .map_err(|_| BrokerError::ControlStopped)?;
        rx.recv_async()
            .await
            .map_err(|_| BrokerError::ControlDropped("keyspace transaction"))?
            .map_err(BrokerError::Control)
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

/// The keyspace the control thread owns: the embedded store (synchronous, behind
/// [`Backend`]) or etcd (async; connected on the control thread's runtime).
pub enum KeySpaceBackend {
    Embedded(Box<dyn Backend + Send>),
    Etcd(etcd::Config),
}

/// A backend ready to serve, on the control thread.
enum Loaded {
    Embedded(Box<dyn Backend + Send>),
    Etcd(Box<Etcd>),
}

/// Starts the control thread around `backend` and the fragment-store service, and returns
/// the handles cores use once the keyspace is loaded (with etcd: connected, announced and
/// loaded; an error if that fails).
pub fn start(
    backend: KeySpaceBackend,
    stores: crate::control::stores::StoresConfig,
) -> Result<(KeySpaceHandle, crate::control::stores::persist::StoreHandle), String> {
    let (tx, rx) = flume::bounded::<ControlMsg>(1024);
    let (store_handle, store_inbox) = crate::control::stores::persist::channel();
    let (init_tx, init_rx) = std::sync::mpsc::channel::<Result<watch::Receiver<_>, String>>();
    std::thread::Builder::new()
        .name("courant-control".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("building the control thread's tokio runtime");
            rt.block_on(async move {
                let backend = match backend {
                    KeySpaceBackend::Embedded(b) => Loaded::Embedded(b),
                    KeySpaceBackend::Etcd(cfg) => match Etcd::connect(&cfg).await {
                        Ok(etcd) => Loaded::Etcd(Box::new(etcd)),
                        Err(e) => {
                            let _ = init_tx.send(Err(e));
                            return;
                        }
                    },
                };
                let initial = match &backend {
                    Loaded::Embedded(embedded) => embedded.snapshot(),
                    Loaded::Etcd(etcd) => etcd.snapshot(),
                };
                let (watch_tx, watch_rx) = watch::channel(initial);
                tokio::spawn(crate::control::stores::persist::serve(
                    stores,
                    watch_rx.clone(),
                    store_inbox,
                ));
                let _ = init_tx.send(Ok(watch_rx));
                match backend {
                    Loaded::Embedded(embedded) => serve_embedded(embedded, rx, watch_tx).await,
                    Loaded::Etcd(etcd) => etcd.serve(rx, watch_tx).await,
                }
            });
        })
        .expect("spawning the control thread");
    let watch_rx = init_rx
        .recv()
        .map_err(|_| "the control thread stopped while loading the keyspace".to_string())??;
    let keyspace = KeySpaceHandle {
        tx,
        watch: watch_rx,
    };
    Ok((keyspace, store_handle))
}

/// The control loop in the embedded mode: transactions run synchronously (fdatasync on
/// this thread, never on an executor).
async fn serve_embedded(
    mut backend: Box<dyn Backend + Send>,
    rx: flume::Receiver<ControlMsg>,
    watch_tx: watch::Sender<Arc<Snapshot>>,
) {
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
}
