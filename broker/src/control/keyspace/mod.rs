//! The KeySpace: Courant's mirror of the etcd keyspace (journal specs, members, assignments).
//!
//! Lives on: written by the control thread only; every core reads an immutable
//! [`Snapshot`] (`Arc`) that the control thread swaps on each change and publishes through a
//! `tokio::sync::watch` channel (a runtime-free primitive, safe to await on glommio).
//!
//! Two backends speak etcd's data model (keys with create/mod revisions, a revision counter,
//! and transactions that compare mod revisions before applying puts and deletes): the
//! embedded single-node keyspace ([`embedded::Embedded`], persisted under `--data-dir`,
//! synchronous, behind [`Backend`]) and etcd itself ([`etcd::Etcd`], async, with
//! `--etcd.address`). The control thread owns one of them (`crate::control::KeySpaceBackend`);
//! cores see only snapshots and `KeySpaceHandle::txn`, whichever it is.

pub mod embedded;
pub mod etcd;
pub mod txn;

use bytes::Bytes;
use protocol::{BrokerSpec, JournalSpec, Route};
use std::collections::BTreeMap;
use std::sync::Arc;

/// One key of the keyspace with its etcd-style revisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    pub value: Bytes,
    pub create_revision: i64,
    pub mod_revision: i64,
    /// The etcd lease the key is attached to (0: none; always 0 in the embedded mode).
    pub lease: i64,
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
    /// Cluster mode (etcd): Routes come from `assign/` keys and endpoints from `members/`.
    /// False in the embedded mode, where every journal is assigned to this broker.
    pub cluster: bool,
    /// Brokers by (zone, suffix), decoded from `members/` keys (etcd mode only).
    pub members: BTreeMap<(String, String), MemberItem>,
    /// Assignments by journal, in etcd key order, i.e. by (zone, suffix) (etcd mode only).
    pub assignments: BTreeMap<String, Vec<Assignment>>,
}

/// A broker announced under `<root>/members/<zone>#<suffix>`. The revisions are for the
/// allocator (leader = smallest CreateRevision; txns guard on ModRevision); assignments to
/// the broker are created under its `lease`.
#[derive(Debug, Clone)]
pub struct MemberItem {
    pub spec: BrokerSpec,
    pub create_revision: i64,
    pub mod_revision: i64,
    pub lease: i64,
}

/// An assignment `<root>/assign/<journal>#<zone>#<suffix>#<slot>` (slot 0 = primary).
#[derive(Debug, Clone, PartialEq)]
pub struct Assignment {
    pub zone: String,
    pub suffix: String,
    pub slot: u32,
    /// The Route its primary last advertised (empty when the allocator created it).
    pub value: Route,
    pub mod_revision: i64,
    /// The lease of the assigned broker, kept when the allocator moves the key.
    pub lease: i64,
}

impl Snapshot {
    /// The Route of `journal` from its assignments (Gazette's `Route.Init` and
    /// `AttachEndpoints`): members in (zone, suffix) order, primary = the slot-0 holder or
    /// -1, each endpoint from the member's key ("" if it has none).
    pub fn assigned_route(&self, journal: &str) -> Route {
        let mut route = Route {
            primary: -1,
            ..Default::default()
        };
        let Some(assignments) = self.assignments.get(journal) else {
            return route;
        };
        let mut sorted: Vec<&Assignment> = assignments.iter().collect();
        sorted.sort_by(|a, b| (&a.zone, &a.suffix).cmp(&(&b.zone, &b.suffix)));
        for a in sorted {
            if a.slot == 0 {
                route.primary = route.members.len() as i32;
            }
            route.members.push(protocol::process_spec::Id {
                zone: a.zone.clone(),
                suffix: a.suffix.clone(),
            });
            let endpoint = self
                .members
                .get(&(a.zone.clone(), a.suffix.clone()))
                .and_then(|m| m.spec.process_spec.as_ref())
                .map(|p| p.endpoint.clone())
                .unwrap_or_default();
            route.endpoints.push(endpoint);
        }
        route
    }

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
    Put {
        key: String,
        value: Bytes,
        lease: PutLease,
    },
    Delete {
        key: String,
    },
}

/// The lease a Put attaches to its key (etcd semantics; the embedded keyspace has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutLease {
    /// No lease: the key lives until deleted (journal specs).
    None,
    /// Keep whatever lease the key has (etcd's `ignore_lease`): primaries advertising
    /// Routes into assignment values.
    Keep,
    /// Attach this lease (assignments, created under the assigned broker's lease).
    Id(i64),
}

impl Op {
    /// A Put with no lease.
    pub fn put(key: String, value: impl Into<Bytes>) -> Op {
        Op::Put {
            key,
            value: value.into(),
            lease: PutLease::None,
        }
    }
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

/// Key of a broker's announcement under the root prefix.
pub fn member_key(root: &str, zone: &str, suffix: &str) -> String {
    format!("{root}/members/{zone}#{suffix}")
}

/// Key of an assignment of `journal` to a broker's `slot`.
pub fn assign_key(root: &str, journal: &str, zone: &str, suffix: &str, slot: u32) -> String {
    format!("{root}/assign/{journal}#{zone}#{suffix}#{slot}")
}

/// Decodes the member keys of `keys`. A BrokerSpec that fails to decode or validate, or
/// whose ID differs from its key, is logged and skipped, as Gazette's brokers do.
pub fn decode_members(
    root: &str,
    keys: &BTreeMap<String, KeyValue>,
) -> BTreeMap<(String, String), MemberItem> {
    use prost::Message;
    use protocol::validate::Validate;
    let prefix = format!("{root}/members/");
    let mut out = BTreeMap::new();
    for (key, kv) in keys.range(prefix.clone()..) {
        let Some(rest) = key.strip_prefix(&prefix) else {
            break;
        };
        let Some((zone, suffix)) = rest.split_once('#') else {
            tracing::warn!(%key, "skipping a member key without zone#suffix");
            continue;
        };
        let spec = match BrokerSpec::decode(kv.value.clone()) {
            Ok(spec) => spec,
            Err(err) => {
                tracing::warn!(%key, %err, "skipping undecodable broker spec");
                continue;
            }
        };
        if let Err(err) = spec.validate() {
            tracing::warn!(%key, %err, "skipping invalid broker spec");
            continue;
        }
        let id = spec.process_spec.as_ref().and_then(|p| p.id.as_ref());
        if id.is_none_or(|id| id.zone != zone || id.suffix != suffix) {
            tracing::warn!(%key, "skipping a broker spec whose ID differs from its key");
            continue;
        }
        out.insert(
            (zone.to_string(), suffix.to_string()),
            MemberItem {
                spec,
                create_revision: kv.create_revision,
                mod_revision: kv.mod_revision,
                lease: kv.lease,
            },
        );
    }
    out
}

/// Decodes the assignment keys of `keys`, grouped by journal in key order. Keys that do not
/// parse, and values that are neither empty nor a valid Route, are logged and skipped.
pub fn decode_assignments(
    root: &str,
    keys: &BTreeMap<String, KeyValue>,
) -> BTreeMap<String, Vec<Assignment>> {
    use prost::Message;
    use protocol::validate::Validate;
    let prefix = format!("{root}/assign/");
    let mut out: BTreeMap<String, Vec<Assignment>> = BTreeMap::new();
    for (key, kv) in keys.range(prefix.clone()..) {
        let Some(rest) = key.strip_prefix(&prefix) else {
            break;
        };
        // Journal names may not hold '#', but split from the right all the same.
        let mut parts = rest.rsplitn(4, '#');
        let (Some(slot), Some(suffix), Some(zone), Some(journal)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            tracing::warn!(%key, "skipping a malformed assignment key");
            continue;
        };
        let Ok(slot) = slot.parse::<u32>() else {
            tracing::warn!(%key, "skipping an assignment key with a bad slot");
            continue;
        };
        let value = if kv.value.is_empty() {
            Route::default()
        } else {
            match Route::decode(kv.value.clone()) {
                Ok(route) if route.validate().is_ok() => route,
                _ => {
                    tracing::warn!(%key, "skipping an assignment with an invalid Route value");
                    continue;
                }
            }
        };
        out.entry(journal.to_string())
            .or_default()
            .push(Assignment {
                zone: zone.to_string(),
                suffix: suffix.to_string(),
                slot,
                value,
                mod_revision: kv.mod_revision,
                lease: kv.lease,
            });
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use protocol::process_spec::Id;
    use protocol::{BrokerSpec, ProcessSpec};

    fn kv(value: Vec<u8>, rev: i64) -> KeyValue {
        KeyValue {
            value: value.into(),
            create_revision: rev,
            mod_revision: rev,
            lease: 0,
        }
    }

    fn member(zone: &str, suffix: &str) -> Vec<u8> {
        BrokerSpec {
            process_spec: Some(ProcessSpec {
                id: Some(Id {
                    zone: zone.into(),
                    suffix: suffix.into(),
                }),
                endpoint: format!("http://{suffix}:8080"),
            }),
            journal_limit: 10,
            exiting: false,
        }
        .encode_to_vec()
    }

    #[test]
    fn routes_come_from_assignments_and_member_endpoints() {
        let root = "/gazette/cluster";
        let mut keys = BTreeMap::new();
        keys.insert(member_key(root, "b", "bbbb"), kv(member("b", "bbbb"), 2));
        keys.insert(member_key(root, "a", "aaaa"), kv(member("a", "aaaa"), 3));
        // A member whose spec names another broker is skipped.
        keys.insert(member_key(root, "a", "zzzz"), kv(member("a", "yyyy"), 4));
        keys.insert(assign_key(root, "a/j", "b", "bbbb", 0), kv(vec![], 5));
        keys.insert(assign_key(root, "a/j", "a", "aaaa", 1), kv(vec![], 6));
        keys.insert(assign_key(root, "a/j", "c", "cccc", 2), kv(vec![], 7));
        keys.insert(format!("{root}/assign/bad"), kv(vec![], 8));
        keys.insert(assign_key(root, "a/k", "a", "aaaa", 1), kv(vec![], 9));
        let snap = Snapshot {
            members: decode_members(root, &keys),
            assignments: decode_assignments(root, &keys),
            cluster: true,
            keys,
            ..Default::default()
        };
        assert_eq!(snap.members.len(), 2);
        let route = snap.assigned_route("a/j");
        let ids: Vec<_> = route.members.iter().map(|m| m.suffix.as_str()).collect();
        assert_eq!(ids, ["aaaa", "bbbb", "cccc"]);
        assert_eq!(route.primary, 1);
        assert_eq!(
            route.endpoints,
            ["http://aaaa:8080", "http://bbbb:8080", ""]
        );
        assert_eq!(snap.assigned_route("a/k").primary, -1);
        assert!(snap.assigned_route("a/none").members.is_empty());
    }
}
