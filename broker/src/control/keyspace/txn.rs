//! etcd's transaction semantics over keys held in memory: the one model that the embedded
//! keyspace, the simulator's etcd and the allocator's tests share. A transaction succeeds
//! when every compare holds (a key's ModRevision, 0 for an absent key); its ops then apply
//! together at one new revision, a put keeping the key's CreateRevision and, with
//! [`PutLease::Keep`], its lease. A transaction without ops changes nothing.
//!
//! Lives on: whoever holds the keys (the control thread in embedded mode, the simulator's
//! world); pure functions.

use super::{Compare, KeyValue, Op, PutLease, TxnOutcome};
use std::collections::BTreeMap;

/// Whether every compare holds over `keys`.
pub fn holds(keys: &BTreeMap<String, KeyValue>, compares: &[Compare]) -> bool {
    compares
        .iter()
        .all(|c| keys.get(&c.key).map_or(0, |kv| kv.mod_revision) == c.mod_revision)
}

/// Applies `ops` to `keys` at `revision`, as etcd does.
pub fn apply(keys: &mut BTreeMap<String, KeyValue>, revision: i64, ops: &[Op]) {
    for op in ops {
        match op {
            Op::Put { key, value, lease } => {
                let old = keys.get(key);
                let lease = match lease {
                    PutLease::None => 0,
                    PutLease::Keep => old.map_or(0, |kv| kv.lease),
                    PutLease::Id(id) => *id,
                };
                let create_revision = old.map_or(revision, |kv| kv.create_revision);
                keys.insert(
                    key.clone(),
                    KeyValue {
                        value: value.clone(),
                        create_revision,
                        mod_revision: revision,
                        lease,
                    },
                );
            }
            Op::Delete { key } => {
                keys.remove(key);
            }
        }
    }
}

/// etcd's transaction over `keys` at `revision`, which it advances when ops apply.
pub fn txn(
    keys: &mut BTreeMap<String, KeyValue>,
    revision: &mut i64,
    compares: &[Compare],
    ops: &[Op],
) -> TxnOutcome {
    let succeeded = holds(keys, compares);
    if succeeded && !ops.is_empty() {
        *revision += 1;
        apply(keys, *revision, ops);
    }
    TxnOutcome {
        succeeded,
        revision: *revision,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn put(key: &str, lease: PutLease) -> Op {
        Op::Put {
            key: key.into(),
            value: Bytes::from_static(b"v"),
            lease,
        }
    }

    #[test]
    fn a_transaction_applies_all_its_ops_at_one_revision_or_none() {
        let (mut keys, mut rev) = (BTreeMap::new(), 7);
        let absent = Compare {
            key: "a".into(),
            mod_revision: 0,
        };
        let out = txn(
            &mut keys,
            &mut rev,
            std::slice::from_ref(&absent),
            &[put("a", PutLease::Id(3)), put("b", PutLease::None)],
        );
        assert!(out.succeeded);
        assert_eq!(
            (out.revision, keys["a"].mod_revision, keys["b"].mod_revision),
            (8, 8, 8)
        );
        assert_eq!(keys["a"].lease, 3);
        // The compare no longer holds: nothing changes.
        let out = txn(
            &mut keys,
            &mut rev,
            &[absent],
            &[Op::Delete { key: "b".into() }],
        );
        assert_eq!((out.succeeded, out.revision), (false, 8));
        assert!(keys.contains_key("b"));
        // A put that keeps the lease keeps the create revision too.
        let now = Compare {
            key: "a".into(),
            mod_revision: 8,
        };
        let out = txn(&mut keys, &mut rev, &[now], &[put("a", PutLease::Keep)]);
        assert!(out.succeeded);
        assert_eq!(
            (
                keys["a"].create_revision,
                keys["a"].mod_revision,
                keys["a"].lease
            ),
            (8, 9, 3)
        );
        // No ops: nothing applies and the revision stays.
        assert_eq!(txn(&mut keys, &mut rev, &[], &[]).revision, 9);
    }
}
