//! The KeySpace: Courant's mirror of the etcd keyspace (journal specs, members, assignments).
//!
//! Lives on: written by the control thread only; every core reads an immutable
//! [`Snapshot`] (`Arc`) that the control thread swaps on each change and publishes through a
//! `tokio::sync::watch` channel (a runtime-free primitive, safe to await on glommio).
//!
//! Two backends sit behind one interface, [`Backend`]: the embedded single-node keyspace
//! ([`embedded::Embedded`], persisted under `--data-dir`) and, later, etcd. Both speak etcd's
//! data model: keys with create/mod revisions, a revision counter, and transactions that
//! compare mod revisions before applying puts and deletes.

pub mod embedded;

use bytes::Bytes;
use protocol::JournalSpec;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One key of the keyspace with its etcd-style revisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    pub value: Bytes,
    pub create_revision: i64,
    pub mod_revision: i64,
}

/// A journal spec item decoded from `<root>/items/<name>`.
#[derive(Debug, Clone)]
pub struct JournalItem {
    pub spec: JournalSpec,
    pub create_revision: i64,
    pub mod_revision: i64,
}

/// An immutable view of the keyspace at one revision. Lives on: any core (shared via `Arc`).
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The keyspace revision (Gazette's notion: the ModRevision of the last applied change).
    pub revision: i64,
    pub cluster_id: u64,
    pub member_id: u64,
    pub raft_term: u64,
    /// Raw keys, for transactions' compares.
    pub keys: BTreeMap<String, KeyValue>,
    /// Journal specs by name, decoded from `items/` keys (invalid ones are skipped).
    pub journals: BTreeMap<String, JournalItem>,
}

impl Snapshot {
    pub fn etcd_header(&self) -> protocol::header::Etcd {
        protocol::header::Etcd {
            cluster_id: self.cluster_id,
            member_id: self.member_id,
            revision: self.revision,
            raft_term: self.raft_term,
        }
    }
}

/// A comparison guarding a transaction: the key's mod revision must equal `mod_revision`
/// (0 means "the key must not exist").
#[derive(Debug, Clone)]
pub struct Compare {
    pub key: String,
    pub mod_revision: i64,
}

#[derive(Debug, Clone)]
pub enum Op {
    Put { key: String, value: Bytes },
    Delete { key: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnOutcome {
    pub succeeded: bool,
    /// The revision after the transaction (unchanged if it failed or had no effect).
    pub revision: i64,
}

/// A keyspace backend, owned by the control thread.
pub trait Backend {
    /// The current snapshot.
    fn snapshot(&self) -> Arc<Snapshot>;
    /// Applies `ops` atomically if every compare holds.
    fn txn(&mut self, compares: &[Compare], ops: &[Op]) -> Result<TxnOutcome, String>;
}

/// Key of a journal spec under the root prefix, as in Gazette's etcd layout.
pub fn item_key(root: &str, journal: &str) -> String {
    format!("{root}/items/{journal}")
}

/// Decodes the journal items of `keys` into `journals`. Specs that fail to decode or
/// validate are logged and skipped, as Gazette's brokers do.
pub fn decode_items(
    root: &str,
    keys: &BTreeMap<String, KeyValue>,
) -> BTreeMap<String, JournalItem> {
    use prost::Message;
    use protocol::validate::Validate;
    let prefix = format!("{root}/items/");
    let mut out = BTreeMap::new();
    for (key, kv) in keys.range(prefix.clone()..) {
        let Some(name) = key.strip_prefix(&prefix) else {
            break;
        };
        let spec = match JournalSpec::decode(kv.value.clone()) {
            Ok(spec) => spec,
            Err(err) => {
                tracing::warn!(%key, %err, "skipping undecodable journal spec");
                continue;
            }
        };
        if let Err(err) = spec.validate() {
            tracing::warn!(%key, %err, "skipping invalid journal spec");
            continue;
        }
        if spec.name != name {
            tracing::warn!(%key, name = %spec.name, "skipping journal spec whose name differs from its key");
            continue;
        }
        out.insert(
            name.to_string(),
            JournalItem {
                spec,
                create_revision: kv.create_revision,
                mod_revision: kv.mod_revision,
            },
        );
    }
    out
}
