//! Unit tests of `cluster/allocator/mod.rs`.
//!
//! Lives on: the test thread.

use super::*;
use crate::control::keyspace::{KeyValue, decode_assignments, decode_items, decode_members};
use bytes::Bytes;
use prost::Message;
use protocol::process_spec::Id;
use protocol::{BrokerSpec, ProcessSpec, Route, journal_spec};

const ROOT: &str = "/gazette/cluster";

fn mid(zone: &str, suffix: &str) -> MemberId {
    (zone.to_string(), suffix.to_string())
}

fn spec(name: &str, replication: i32) -> JournalSpec {
    JournalSpec {
        name: name.into(),
        replication,
        fragment: Some(journal_spec::Fragment {
            length: 1 << 20,
            compression_codec: 1,
            refresh_interval: Some(prost_types::Duration {
                seconds: 60,
                nanos: 0,
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn broker(zone: &str, suffix: &str, limit: u32, exiting: bool) -> BrokerSpec {
    BrokerSpec {
        process_spec: Some(ProcessSpec {
            id: Some(Id {
                zone: zone.into(),
                suffix: suffix.into(),
            }),
            endpoint: format!("http://{suffix}:8080"),
        }),
        journal_limit: limit,
        exiting,
    }
}

/// A simulated etcd keyspace: revisions, leases and transactions, decoded into
/// snapshots as the broker does.
struct Sim {
    keys: BTreeMap<String, KeyValue>,
    revision: i64,
}

impl Sim {
    fn new() -> Sim {
        Sim {
            keys: BTreeMap::new(),
            revision: 1,
        }
    }

    fn put(&mut self, key: String, value: Vec<u8>, lease: i64) {
        self.revision += 1;
        let create = self
            .keys
            .get(&key)
            .map_or(self.revision, |kv| kv.create_revision);
        self.keys.insert(
            key,
            KeyValue {
                value: value.into(),
                create_revision: create,
                mod_revision: self.revision,
                lease,
            },
        );
    }

    fn delete(&mut self, key: &str) {
        self.revision += 1;
        self.keys.remove(key);
    }

    /// Announces a member under a lease of its own.
    fn member(&mut self, zone: &str, suffix: &str, limit: u32) {
        let lease = 1000 + self.revision;
        self.put(
            member_key(ROOT, zone, suffix),
            broker(zone, suffix, limit, false).encode_to_vec(),
            lease,
        );
    }

    fn lease_of(&self, zone: &str, suffix: &str) -> i64 {
        self.keys[&member_key(ROOT, zone, suffix)].lease
    }

    fn set_member(&mut self, zone: &str, suffix: &str, limit: u32, exiting: bool) {
        let lease = self.lease_of(zone, suffix);
        self.put(
            member_key(ROOT, zone, suffix),
            broker(zone, suffix, limit, exiting).encode_to_vec(),
            lease,
        );
    }

    fn journal(&mut self, name: &str, replication: i32) {
        self.put(
            item_key(ROOT, name),
            spec(name, replication).encode_to_vec(),
            0,
        );
    }

    /// Writes an assignment directly (value: a Route, or empty).
    fn assign(
        &mut self,
        journal: &str,
        zone: &str,
        suffix: &str,
        slot: u32,
        value: Option<&Route>,
    ) {
        let lease = self
            .keys
            .get(&member_key(ROOT, zone, suffix))
            .map_or(7, |kv| kv.lease);
        let value = value.map(Message::encode_to_vec).unwrap_or_default();
        self.put(assign_key(ROOT, journal, zone, suffix, slot), value, lease);
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot {
            revision: self.revision,
            journals: decode_items(ROOT, &self.keys),
            members: decode_members(ROOT, &self.keys),
            assignments: decode_assignments(ROOT, &self.keys),
            cluster: true,
            keys: self.keys.clone(),
            ..Default::default()
        }
    }

    /// Applies a transaction as etcd would: all compares hold, then all ops at one
    /// new revision.
    fn apply(&mut self, txn: &Txn) -> bool {
        let keyspace = &mut self.keys;
        crate::control::keyspace::txn::txn(keyspace, &mut self.revision, &txn.compares, &txn.ops)
            .succeeded
    }

    /// What each journal's primary does once it has synced its pipeline: writes the
    /// Route into every assignment (ignore-lease puts). A primary can sync only if all
    /// members of its route are alive. Returns whether anything changed.
    fn sync_primaries(&mut self) -> bool {
        let snap = self.snapshot();
        let mut ops = Vec::new();
        for (journal, assignments) in &snap.assignments {
            let route = snap.assigned_route(journal);
            if route.primary < 0
                || is_consistent(&snap, journal)
                || route
                    .members
                    .iter()
                    .any(|m| !snap.members.contains_key(&mid(&m.zone, &m.suffix)))
            {
                continue;
            }
            let value = Bytes::from(route.encode_to_vec());
            for a in assignments {
                ops.push(Op::Put {
                    key: assign_key(ROOT, journal, &a.zone, &a.suffix, a.slot),
                    value: value.clone(),
                    lease: PutLease::Keep,
                });
            }
        }
        if ops.is_empty() {
            return false;
        }
        assert!(self.apply(&Txn {
            compares: Vec::new(),
            ops
        }));
        true
    }

    /// The Route the keys imply, as the primary would write it.
    fn route(&self, journal: &str) -> Route {
        self.snapshot().assigned_route(journal)
    }
}

/// Members holding `journal`, with their slots.
fn holders(snap: &Snapshot, journal: &str) -> Vec<(MemberId, u32)> {
    snap.assignments
        .get(journal)
        .map(|v| v.iter().map(|a| (id(a), a.slot)).collect())
        .unwrap_or_default()
}

/// Assignments whose member has been part of a synced pipeline (its value is a Route
/// naming it).
fn synced(snap: &Snapshot, journal: &str) -> usize {
    snap.assignments.get(journal).map_or(0, |v| {
        v.iter()
            .filter(|a| {
                a.value
                    .members
                    .iter()
                    .any(|m| m.zone == a.zone && m.suffix == a.suffix)
            })
            .count()
    })
}

fn check_txn(txn: &Txn, guard: &Compare) {
    assert!(txn.ops.len() <= MAX_TXN_OPS, "{} ops", txn.ops.len());
    assert!(txn.compares.len() <= MAX_TXN_OPS);
    assert!(!txn.ops.is_empty());
    assert!(
        txn.compares.iter().any(|c| same(c, guard)),
        "missing leader guard"
    );
}

fn leader_guard(snap: &Snapshot, me: &MemberId) -> Compare {
    Compare {
        key: member_key(ROOT, &me.0, &me.1),
        mod_revision: snap.members[me].mod_revision,
    }
}

/// Runs plan/apply rounds until nothing changes, with the primaries syncing every
/// `sync_every` rounds. After every transaction: once a journal had R synced replicas
/// it keeps R, its primary (if any) is synced, and no member is over its limit.
fn converge(sim: &mut Sim, me: &MemberId, sync_every: usize, max_rounds: usize) -> usize {
    converge_stats(sim, me, sync_every, max_rounds, false).rounds
}

/// What a [`converge_stats`] run did.
#[derive(Debug, Default)]
struct Stats {
    rounds: usize,
    /// Assignments created (new keys with an empty value).
    added: usize,
    /// Assignments deleted and not re-created under another slot.
    removed: usize,
    /// Most journals with more serving assignments than desired, at once.
    max_in_flight: usize,
}

/// [`converge`], counting what happened; with `zones`, also checking after every
/// transaction that a journal whose synced replicas spanned two zones keeps two.
fn converge_stats(
    sim: &mut Sim,
    me: &MemberId,
    sync_every: usize,
    max_rounds: usize,
    keep_zones: bool,
) -> Stats {
    let mut stats = Stats::default();
    let mut reached: BTreeSet<String> = BTreeSet::new();
    let mut spread: BTreeSet<String> = BTreeSet::new();
    let mut check = |snap: &Snapshot, reached: &mut BTreeSet<String>, stats: &mut Stats| {
        let mut in_flight = 0;
        for (journal, item) in &snap.journals {
            let r = desired_replication(&item.spec, 0);
            let n = synced(snap, journal);
            let serving = snap.assignments.get(journal).map_or(0, |v| {
                v.iter()
                    .filter(|a| {
                        snap.members
                            .get(&id(a))
                            .is_some_and(|m| !m.spec.exiting && m.spec.journal_limit > 0)
                    })
                    .count()
            });
            if serving > r {
                in_flight += 1;
            }
            let zones: BTreeSet<&str> =
                snap.assignments.get(journal).map_or(BTreeSet::new(), |v| {
                    v.iter()
                        .filter(|a| {
                            a.value
                                .members
                                .iter()
                                .any(|m| m.zone == a.zone && m.suffix == a.suffix)
                        })
                        .map(|a| a.zone.as_str())
                        .collect()
                });
            if keep_zones && spread.contains(journal) {
                assert!(zones.len() >= 2, "{journal}: synced replicas in {zones:?}");
            } else if zones.len() >= 2 {
                spread.insert(journal.clone());
            }
            if reached.contains(journal) {
                assert!(n >= r, "{journal}: {n} synced replicas < {r}");
                let route = snap.assigned_route(journal);
                if route.primary >= 0 {
                    let p = &route.members[route.primary as usize];
                    let a = snap.assignments[journal]
                        .iter()
                        .find(|a| a.zone == p.zone && a.suffix == p.suffix)
                        .unwrap();
                    assert!(
                        a.value.members.contains(p),
                        "{journal}: unsynced primary {p:?}"
                    );
                }
            } else if r > 0 && n >= r {
                reached.insert(journal.clone());
            }
        }
        for (m, item) in &snap.members {
            let load = Loads::of(snap).total(m);
            assert!(
                load <= item.spec.journal_limit as usize || item.spec.journal_limit == 0,
                "{m:?} holds {load} > {}",
                item.spec.journal_limit
            );
        }
        stats.max_in_flight = stats.max_in_flight.max(in_flight);
    };
    check(&sim.snapshot(), &mut reached, &mut stats);
    for round in 0..max_rounds {
        let snap = sim.snapshot();
        let txns = plan(&snap, ROOT, me, 0);
        let guard = leader_guard(&snap, me);
        for txn in &txns {
            check_txn(txn, &guard);
            assert!(sim.apply(txn), "round {round}: txn failed: {txn:?}");
            for op in &txn.ops {
                match op {
                    Op::Put { value, key, .. } if value.is_empty() => {
                        if std::env::var("ALLOC_DEBUG").is_ok() {
                            eprintln!("round {round}: add {key}");
                        }
                        stats.added += 1
                    }
                    Op::Put { .. } => stats.removed -= 1, // A move: delete + put.
                    Op::Delete { key } => {
                        if std::env::var("ALLOC_DEBUG").is_ok() {
                            eprintln!("round {round}: delete {key}");
                        }
                        stats.removed += 1
                    }
                }
            }
            check(&sim.snapshot(), &mut reached, &mut stats);
        }
        if (txns.is_empty() || (round + 1) % sync_every == 0) && sim.sync_primaries() {
            check(&sim.snapshot(), &mut reached, &mut stats);
        } else if txns.is_empty() {
            stats.rounds = round;
            return stats;
        }
    }
    panic!("no convergence in {max_rounds} rounds");
}

/// The converged state: every journal has R assignments (if members allow), is
/// consistent, has one primary, contiguous slots, and spans two zones when R >= 2.
fn assert_converged(snap: &Snapshot) {
    for (journal, item) in &snap.journals {
        let r = desired_replication(&item.spec, 0);
        let held = holders(snap, journal);
        assert_eq!(held.len(), r, "{journal}: {held:?}");
        if r == 0 {
            continue;
        }
        assert!(is_consistent(snap, journal), "{journal}");
        let mut slots: Vec<u32> = held.iter().map(|(_, s)| *s).collect();
        slots.sort();
        assert_eq!(slots, (0..r as u32).collect::<Vec<_>>(), "{journal}");
        let zones: BTreeSet<&str> = held.iter().map(|(m, _)| m.0.as_str()).collect();
        if r >= 2 {
            assert!(zones.len() >= 2, "{journal}: {held:?}");
        }
        for (m, slot) in &held {
            assert_eq!(
                snap.keys[&assign_key(ROOT, journal, &m.0, &m.1, *slot)].lease,
                snap.keys[&member_key(ROOT, &m.0, &m.1)].lease,
                "{journal}: {m:?} assignment not under the member's lease"
            );
        }
    }
    for journal in snap.assignments.keys() {
        assert!(snap.journals.contains_key(journal), "orphan {journal}");
    }
}

fn three_members() -> (Sim, MemberId) {
    let mut sim = Sim::new();
    sim.member("a", "m001", 10);
    sim.member("a", "m002", 10);
    sim.member("b", "m003", 10);
    (sim, mid("a", "m001"))
}

#[test]
fn leader_is_the_oldest_member() {
    let (mut sim, me) = three_members();
    let snap = sim.snapshot();
    assert!(is_leader(&snap, &me));
    assert!(!is_leader(&snap, &mid("b", "m003")));
    assert!(!is_leader(&snap, &mid("z", "none")));
    // Equal create revisions: key order decides.
    let mut snap = sim.snapshot();
    for m in snap.members.values_mut() {
        m.create_revision = 5;
    }
    assert!(is_leader(&snap, &mid("a", "m001")));
    // Re-announcing does not change the create revision.
    sim.set_member("a", "m001", 10, false);
    assert!(is_leader(&sim.snapshot(), &me));
    // The leader's departure hands over to the next oldest.
    sim.delete(&member_key(ROOT, "a", "m001"));
    assert!(is_leader(&sim.snapshot(), &mid("a", "m002")));
    assert!(!is_leader(&Snapshot::default(), &me));
}

#[test]
fn desired_replication_follows_suspension_and_cap() {
    let mut s = spec("ns/j", 3);
    assert_eq!(desired_replication(&s, 0), 3);
    assert_eq!(desired_replication(&s, 2), 2);
    s.suspend = Some(journal_spec::Suspend {
        level: Level::Partial as i32,
        offset: 0,
    });
    assert_eq!(desired_replication(&s, 0), 1);
    s.suspend = Some(journal_spec::Suspend {
        level: Level::Full as i32,
        offset: 0,
    });
    assert_eq!(desired_replication(&s, 0), 0);
}

#[test]
fn consistency_compares_routes_without_endpoints() {
    let (mut sim, _) = three_members();
    sim.journal("ns/j", 2);
    assert!(is_consistent(&sim.snapshot(), "ns/j"));
    sim.assign("ns/j", "a", "m001", 0, None);
    sim.assign("ns/j", "b", "m003", 1, None);
    assert!(!is_consistent(&sim.snapshot(), "ns/j"));
    let mut route = sim.route("ns/j");
    route.endpoints.clear();
    sim.assign("ns/j", "a", "m001", 0, Some(&route));
    assert!(!is_consistent(&sim.snapshot(), "ns/j"));
    sim.assign("ns/j", "b", "m003", 1, Some(&route));
    assert!(is_consistent(&sim.snapshot(), "ns/j"));
    // Another primary is another Route.
    route.primary = 1;
    sim.assign("ns/j", "b", "m003", 1, Some(&route));
    assert!(!is_consistent(&sim.snapshot(), "ns/j"));
}

#[test]
fn assigns_three_replicas_across_zones() {
    let (mut sim, me) = three_members();
    sim.journal("ns/j", 3);
    let snap = sim.snapshot();
    let txns = plan(&snap, ROOT, &me, 0);
    assert_eq!(txns.len(), 1);
    let guard = leader_guard(&snap, &me);
    check_txn(&txns[0], &guard);
    // Each add guards on its member key and the assignment's absence.
    for op in &txns[0].ops {
        let Op::Put { key, value, lease } = op else {
            panic!("{op:?}")
        };
        assert!(value.is_empty());
        assert!(matches!(lease, PutLease::Id(id) if *id >= 1000));
        assert!(
            txns[0]
                .compares
                .iter()
                .any(|c| &c.key == key && c.mod_revision == 0)
        );
    }
    for m in snap.members.keys() {
        let key = member_key(ROOT, &m.0, &m.1);
        assert!(txns[0].compares.iter().any(|c| c.key == key));
    }
    assert!(sim.apply(&txns[0]));
    let snap = sim.snapshot();
    let held = holders(&snap, "ns/j");
    assert_eq!(held.len(), 3);
    assert_eq!(held.iter().filter(|(_, s)| *s == 0).count(), 1);
    let zones: BTreeSet<_> = held.iter().map(|(m, _)| m.0.clone()).collect();
    assert_eq!(zones.len(), 2);
    // Each assignment lives under its member's lease.
    for a in &snap.assignments["ns/j"] {
        assert_eq!(a.lease, sim.lease_of(&a.zone, &a.suffix));
    }
    // Nothing to do until the primary has synced; then nothing at all.
    assert!(plan(&snap, ROOT, &me, 0).is_empty());
    assert!(sim.sync_primaries());
    assert!(plan(&sim.snapshot(), ROOT, &me, 0).is_empty());
    assert_converged(&sim.snapshot());
}

#[test]
fn two_replicas_use_two_zones() {
    let (mut sim, me) = three_members();
    sim.journal("ns/j", 2);
    converge(&mut sim, &me, 1, 10);
    let snap = sim.snapshot();
    let held = holders(&snap, "ns/j");
    assert_eq!(held.len(), 2);
    assert_ne!(held[0].0.0, held[1].0.0, "{held:?}");
    assert_converged(&snap);
}

#[test]
fn one_zone_is_used_rather_than_under_replicating() {
    let mut sim = Sim::new();
    sim.member("a", "m001", 10);
    sim.member("a", "m002", 10);
    sim.member("a", "m003", 10);
    sim.journal("ns/j", 3);
    let me = mid("a", "m001");
    converge(&mut sim, &me, 1, 10);
    assert_eq!(holders(&sim.snapshot(), "ns/j").len(), 3);
    // A second zone appears: one replica moves there, never dropping below R.
    sim.member("b", "m004", 10);
    converge(&mut sim, &me, 2, 20);
    let snap = sim.snapshot();
    let held = holders(&snap, "ns/j");
    assert_eq!(held.len(), 3);
    assert!(held.iter().any(|(m, _)| m.0 == "b"), "{held:?}");
    assert_converged(&snap);
}

#[test]
fn dead_members_assignments_are_removed_only_safely() {
    let (mut sim, me) = three_members();
    sim.member("b", "m004", 10);
    sim.journal("ns/j", 2);
    sim.assign("ns/j", "a", "m001", 0, None);
    sim.assign("ns/j", "b", "m003", 1, None);
    sim.delete(&member_key(ROOT, "b", "m003"));
    // Inconsistent: a replacement is added, nothing removed.
    let snap = sim.snapshot();
    let txns = plan(&snap, ROOT, &me, 0);
    assert_eq!(txns.len(), 1);
    assert!(txns[0].ops.iter().all(|op| matches!(op, Op::Put { .. })));
    assert_eq!(txns[0].ops.len(), 1);
    assert!(sim.apply(&txns[0]));
    // It cannot become consistent through the dead member: no removal, no panic.
    assert!(!sim.sync_primaries());
    assert!(plan(&sim.snapshot(), ROOT, &me, 0).is_empty());

    // Were it consistent, the dead member's assignment goes first.
    let route = sim.route("ns/j");
    for (m, slot) in holders(&sim.snapshot(), "ns/j") {
        sim.assign("ns/j", &m.0, &m.1, slot, Some(&route));
    }
    let txns = plan(&sim.snapshot(), ROOT, &me, 0);
    assert_eq!(txns.len(), 1);
    let deletes: Vec<_> = txns[0]
        .ops
        .iter()
        .filter_map(|op| match op {
            Op::Delete { key } => Some(key.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(deletes, [assign_key(ROOT, "ns/j", "b", "m003", 1)]);

    // Consistent but without a replacement: R would not hold, so nothing goes.
    let (mut sim, me) = three_members();
    sim.journal("ns/j", 2);
    sim.assign("ns/j", "a", "m001", 0, None);
    sim.assign("ns/j", "b", "m003", 1, None);
    let route = sim.route("ns/j");
    sim.assign("ns/j", "a", "m001", 0, Some(&route));
    sim.assign("ns/j", "b", "m003", 1, Some(&route));
    sim.set_member("a", "m002", 0, false);
    sim.delete(&member_key(ROOT, "b", "m003"));
    assert!(plan(&sim.snapshot(), ROOT, &me, 0).is_empty());
}

#[test]
fn promotes_a_consistent_replica() {
    let (mut sim, me) = three_members();
    sim.journal("ns/j", 2);
    sim.journal("ns/other", 1);
    // m002 has fewer primaries, but only m003 holds the current Route.
    sim.assign("ns/other", "b", "m003", 0, None);
    sim.assign("ns/j", "a", "m002", 1, None);
    sim.assign("ns/j", "b", "m003", 2, None);
    let route = sim.route("ns/j");
    assert_eq!(route.primary, -1);
    sim.assign("ns/j", "b", "m003", 2, Some(&route));
    let snap = sim.snapshot();
    let old = assign_key(ROOT, "ns/j", "b", "m003", 2);
    let old_rev = snap.keys[&old].mod_revision;
    let txns = plan(&snap, ROOT, &me, 0);
    assert_eq!(txns.len(), 1);
    let new = assign_key(ROOT, "ns/j", "b", "m003", 0);
    assert!(matches!(&txns[0].ops[0], Op::Delete { key } if *key == old));
    match &txns[0].ops[1] {
        Op::Put { key, value, lease } => {
            assert_eq!(*key, new);
            assert_eq!(*value, Bytes::from(route.encode_to_vec()));
            assert_eq!(*lease, PutLease::Id(sim.lease_of("b", "m003")));
        }
        op => panic!("{op:?}"),
    }
    assert!(
        txns[0]
            .compares
            .iter()
            .any(|c| c.key == old && c.mod_revision == old_rev)
    );
    assert!(
        txns[0]
            .compares
            .iter()
            .any(|c| c.key == new && c.mod_revision == 0)
    );

    // With no consistent replica, the lower primary load wins.
    sim.assign("ns/j", "b", "m003", 2, None);
    let txns = plan(&sim.snapshot(), ROOT, &me, 0);
    assert!(txns[0].ops.iter().any(|op| matches!(op,
        Op::Put { key, .. } if *key == assign_key(ROOT, "ns/j", "a", "m002", 0))));
    assert!(sim.apply(&txns[0]));
    converge(&mut sim, &me, 1, 10);
    assert_converged(&sim.snapshot());
}

#[test]
fn over_replicated_consistent_journal_loses_one() {
    let (mut sim, me) = three_members();
    sim.journal("ns/j", 3);
    converge(&mut sim, &me, 1, 10);
    let before = holders(&sim.snapshot(), "ns/j");
    let primary = before.iter().find(|(_, s)| *s == 0).unwrap().0.clone();
    sim.journal("ns/j", 2);
    let snap = sim.snapshot();
    let txns = plan(&snap, ROOT, &me, 0);
    assert_eq!(txns.len(), 1);
    let deletes: Vec<&String> = txns[0]
        .ops
        .iter()
        .filter_map(|op| match op {
            Op::Delete { key } => Some(key),
            _ => None,
        })
        .collect();
    assert_eq!(deletes.len(), 1);
    assert_eq!(txns[0].ops.len(), 1);
    // Guarded by the item and the assignment.
    let item = item_key(ROOT, "ns/j");
    assert!(
        txns[0]
            .compares
            .iter()
            .any(|c| c.key == item && c.mod_revision == snap.keys[&item].mod_revision)
    );
    assert!(
        txns[0]
            .compares
            .iter()
            .any(|c| &c.key == deletes[0] && c.mod_revision == snap.keys[deletes[0]].mod_revision)
    );
    assert!(sim.apply(&txns[0]));
    let after = holders(&sim.snapshot(), "ns/j");
    assert_eq!(after.len(), 2);
    assert!(
        after.iter().any(|(m, s)| *m == primary && *s == 0),
        "{after:?}"
    );
    let zones: BTreeSet<_> = after.iter().map(|(m, _)| m.0.clone()).collect();
    assert_eq!(zones.len(), 2);
    converge(&mut sim, &me, 1, 10);
    assert_converged(&sim.snapshot());
}

#[test]
fn over_replicated_inconsistent_journal_keeps_all() {
    let (mut sim, me) = three_members();
    sim.journal("ns/j", 2);
    sim.assign("ns/j", "a", "m001", 0, None);
    sim.assign("ns/j", "a", "m002", 1, None);
    sim.assign("ns/j", "b", "m003", 2, None);
    assert!(plan(&sim.snapshot(), ROOT, &me, 0).is_empty());
    // Partly synced is still inconsistent.
    let route = sim.route("ns/j");
    sim.assign("ns/j", "a", "m001", 0, Some(&route));
    sim.assign("ns/j", "a", "m002", 1, Some(&route));
    assert!(plan(&sim.snapshot(), ROOT, &me, 0).is_empty());
}

#[test]
fn exiting_member_is_drained_after_its_replacement_syncs() {
    let mut sim = Sim::new();
    sim.member("a", "m001", 10);
    sim.member("a", "m002", 10);
    sim.member("b", "m003", 10);
    sim.member("b", "m004", 10);
    let me = mid("a", "m001");
    sim.journal("ns/j", 2);
    sim.assign("ns/j", "b", "m003", 0, None);
    sim.assign("ns/j", "a", "m002", 1, None);
    assert!(sim.sync_primaries());
    // The primary's broker exits.
    sim.set_member("b", "m003", 10, true);
    let txns = plan(&sim.snapshot(), ROOT, &me, 0);
    assert_eq!(txns.len(), 1);
    assert!(txns[0].ops.iter().all(|op| matches!(op, Op::Put { .. })));
    assert!(sim.apply(&txns[0]));
    let held = holders(&sim.snapshot(), "ns/j");
    assert_eq!(held.len(), 3);
    // The replacement is in the exiting member's zone (the other replica is in "a").
    assert!(held.contains(&(mid("b", "m004"), 2)), "{held:?}");
    // Not synced yet: the exiting primary stays.
    assert!(plan(&sim.snapshot(), ROOT, &me, 0).is_empty());
    assert!(sim.sync_primaries());
    converge(&mut sim, &me, 2, 20);
    let snap = sim.snapshot();
    assert!(
        holders(&snap, "ns/j")
            .iter()
            .all(|(m, _)| *m != mid("b", "m003"))
    );
    assert_converged(&snap);

    // Pre-v0.102 exit (journal_limit 0) drains the same way.
    sim.set_member("b", "m004", 0, false);
    converge(&mut sim, &me, 3, 20);
    let snap = sim.snapshot();
    assert!(
        holders(&snap, "ns/j")
            .iter()
            .all(|(m, _)| m.1 != "m004" && m.1 != "m003")
    );
    assert_eq!(holders(&snap, "ns/j").len(), 2);
}

#[test]
fn exiting_member_without_replacement_keeps_its_assignments() {
    let (mut sim, me) = three_members();
    sim.journal("ns/j", 3);
    converge(&mut sim, &me, 1, 10);
    sim.set_member("b", "m003", 10, true);
    assert!(plan(&sim.snapshot(), ROOT, &me, 0).is_empty());
    assert_eq!(holders(&sim.snapshot(), "ns/j").len(), 3);
}

#[test]
fn journal_limit_is_honoured() {
    let mut sim = Sim::new();
    sim.member("a", "m001", 1);
    sim.member("b", "m002", 1);
    sim.member("b", "m003", 1);
    sim.member("c", "m004", 0);
    let me = mid("a", "m001");
    sim.journal("ns/j1", 2);
    sim.journal("ns/j2", 2);
    converge(&mut sim, &me, 1, 10);
    let snap = sim.snapshot();
    let loads = Loads::of(&snap);
    for m in snap.members.keys() {
        let limit = snap.members[m].spec.journal_limit as usize;
        assert!(loads.total(m) <= limit, "{m:?}");
    }
    assert_eq!(loads.total(&mid("c", "m004")), 0);
    assert_eq!(snap.assignments.values().map(Vec::len).sum::<usize>(), 3);
    // More room: the under-replicated journal catches up.
    sim.set_member("c", "m004", 5, false);
    converge(&mut sim, &me, 1, 10);
    assert_converged(&sim.snapshot());
}

#[test]
fn deleted_items_lose_their_assignments() {
    let (mut sim, me) = three_members();
    sim.journal("ns/gone", 2);
    converge(&mut sim, &me, 1, 10);
    sim.delete(&item_key(ROOT, "ns/gone"));
    // An item key that does not decode is not a deletion.
    sim.put(item_key(ROOT, "ns/bad"), b"garbage".to_vec(), 0);
    sim.assign("ns/bad", "a", "m002", 0, None);
    let snap = sim.snapshot();
    let txns = plan(&snap, ROOT, &me, 0);
    assert_eq!(txns.len(), 1);
    assert_eq!(txns[0].ops.len(), 2);
    assert!(txns[0].ops.iter().all(|op| matches!(op,
        Op::Delete { key } if key.starts_with(&format!("{ROOT}/assign/ns/gone#")))));
    let item = item_key(ROOT, "ns/gone");
    assert!(
        txns[0]
            .compares
            .iter()
            .any(|c| c.key == item && c.mod_revision == 0)
    );
    assert!(sim.apply(&txns[0]));
    let snap = sim.snapshot();
    assert!(!snap.assignments.contains_key("ns/gone"));
    assert!(snap.assignments.contains_key("ns/bad"));
    assert!(plan(&snap, ROOT, &me, 0).is_empty());
}

#[test]
fn undecodable_assignment_keys_do_not_wedge_the_plan() {
    let mut sim = Sim::new();
    sim.member("a", "m001", 10);
    sim.member("b", "m003", 10);
    let me = mid("a", "m001");
    sim.journal("ns/j", 2);
    sim.assign("ns/j", "a", "m001", 0, None);
    // Not a Route: skipped by the decoder, but its key is taken.
    let lease = sim.lease_of("b", "m003");
    sim.put(
        assign_key(ROOT, "ns/j", "b", "m003", 1),
        b"x".to_vec(),
        lease,
    );
    let txns = plan(&sim.snapshot(), ROOT, &me, 0);
    assert_eq!(txns.len(), 1);
    assert!(sim.apply(&txns[0]));
    assert!(holders(&sim.snapshot(), "ns/j").contains(&(mid("b", "m003"), 2)));
}

#[test]
fn fully_suspended_journal_loses_all_assignments() {
    let (mut sim, me) = three_members();
    sim.journal("ns/j", 2);
    converge(&mut sim, &me, 1, 10);
    let mut s = spec("ns/j", 2);
    s.suspend = Some(journal_spec::Suspend {
        level: Level::Full as i32,
        offset: 0,
    });
    sim.put(item_key(ROOT, "ns/j"), s.encode_to_vec(), 0);
    converge(&mut sim, &me, 1, 10);
    assert!(holders(&sim.snapshot(), "ns/j").is_empty());
}

#[test]
fn non_leader_plans_nothing() {
    let (mut sim, _) = three_members();
    sim.journal("ns/j", 2);
    let snap = sim.snapshot();
    assert!(plan(&snap, ROOT, &mid("a", "m002"), 0).is_empty());
    assert!(plan(&snap, ROOT, &mid("z", "none"), 0).is_empty());
    assert!(!plan(&snap, ROOT, &mid("a", "m001"), 0).is_empty());
}

#[test]
fn every_txn_guards_on_the_leader_and_fits_etcd_limits() {
    let mut sim = Sim::new();
    for i in 0..6 {
        let zone = ["a", "b", "c"][i % 3];
        sim.member(zone, &format!("m{i:03}"), 1000);
    }
    let me = mid("a", "m000");
    for j in 0..300 {
        sim.journal(&format!("ns/j{j:03}"), 1 + (j % 3));
    }
    let snap = sim.snapshot();
    let txns = plan(&snap, ROOT, &me, 0);
    assert!(txns.len() > 1);
    let guard = leader_guard(&snap, &me);
    for txn in &txns {
        check_txn(txn, &guard);
    }
    // A changed leader key fails the txn.
    let mut stale = txns[0].clone();
    sim.set_member("a", "m000", 1000, false);
    assert!(!sim.apply(&stale));
    stale.compares.retain(|c| !same(c, &guard));
    assert!(sim.apply(&stale));
}

#[test]
fn converges_safely_through_cluster_changes() {
    let mut sim = Sim::new();
    for i in 0..5 {
        let zone = ["a", "b", "c"][i % 3];
        sim.member(zone, &format!("m{i:03}"), 40);
    }
    let me = mid("a", "m000");
    for j in 0..40 {
        sim.journal(&format!("ns/j{j:03}"), 1 + (j % 3));
    }
    let rounds = converge(&mut sim, &me, 2, 30);
    assert!(rounds < 30);
    assert_converged(&sim.snapshot());
    let loads = Loads::of(&sim.snapshot());
    assert!(loads.total.values().all(|&n| n <= 40));

    // Two members exit (one is the leader's neighbour), a journal is deleted, another
    // shrinks, another grows, and a new member joins.
    sim.set_member("b", "m001", 40, true);
    sim.set_member("c", "m002", 40, true);
    sim.delete(&item_key(ROOT, "ns/j000"));
    sim.journal("ns/j001", 1);
    sim.journal("ns/j003", 3);
    sim.member("b", "m005", 40);
    sim.member("c", "m006", 40);
    converge(&mut sim, &me, 3, 60);
    let snap = sim.snapshot();
    assert_converged(&snap);
    let loads = Loads::of(&snap);
    assert_eq!(loads.total(&mid("b", "m001")), 0);
    assert_eq!(loads.total(&mid("c", "m002")), 0);

    // Members whose leases expire take their keys with them; the rest recovers.
    let lease = sim.lease_of("b", "m005");
    for (key, kv) in sim.keys.clone() {
        if kv.lease == lease {
            sim.delete(&key);
        }
    }
    converge(&mut sim, &me, 1, 60);
    assert_converged(&sim.snapshot());
}

/// Per member: (assignments, primaries).
fn counts(sim: &Sim) -> BTreeMap<MemberId, (usize, usize)> {
    let snap = sim.snapshot();
    let loads = Loads::of(&snap);
    snap.members
        .keys()
        .map(|m| (m.clone(), (loads.total(m), loads.primary(m))))
        .collect()
}

fn loads_of(sim: &Sim) -> BTreeMap<MemberId, usize> {
    counts(sim).into_iter().map(|(m, (n, _))| (m, n)).collect()
}

fn primaries_of(sim: &Sim) -> BTreeMap<MemberId, usize> {
    counts(sim).into_iter().map(|(m, (_, p))| (m, p)).collect()
}

/// A converged cluster of `members` (zone, suffix, limit) holding `journals`
/// journals of replication `r`, led by the first member.
fn loaded(members: &[(&str, &str, u32)], journals: usize, r: i32) -> (Sim, MemberId) {
    let mut sim = Sim::new();
    for (zone, suffix, limit) in members {
        sim.member(zone, suffix, *limit);
    }
    let me = mid(members[0].0, members[0].1);
    for j in 0..journals {
        sim.journal(&format!("ns/j{j:03}"), r);
    }
    converge(&mut sim, &me, 1, 20);
    assert_converged(&sim.snapshot());
    (sim, me)
}

#[test]
fn two_joining_brokers_take_a_fair_share() {
    let (mut sim, me) = loaded(&[("a", "m001", 1024), ("b", "m002", 1024)], 40, 2);
    assert_eq!(
        loads_of(&sim).values().copied().collect::<Vec<_>>(),
        [40, 40]
    );
    // Two brokers join: nothing is lost while assignments move.
    sim.member("a", "m003", 1024);
    sim.member("b", "m004", 1024);
    let stats = converge_stats(&mut sim, &me, 2, 200, true);
    let snap = sim.snapshot();
    assert_converged(&snap);
    let loads = loads_of(&sim);
    assert!(loads.values().all(|&n| n == 20), "{loads:?}");
    // Exactly the moves needed: 40 assignments in, 40 out.
    assert_eq!((stats.added, stats.removed), (40, 40), "{stats:?}");
    assert!(
        stats.max_in_flight <= balance::MAX_MOVES_IN_FLIGHT,
        "{stats:?}"
    );
    assert!(stats.max_in_flight > 1, "{stats:?}");
    let primaries = primaries_of(&sim);
    // Replicas move first (were primaries preferred, all 40 moves would be): the old
    // members keep most of their primaries.
    assert_eq!(primaries.values().sum::<usize>(), 40);
    assert!(primaries[&mid("a", "m001")] >= 15, "{primaries:?}");
    assert!(primaries[&mid("b", "m002")] >= 15, "{primaries:?}");
    // Balanced: nothing more to do.
    assert!(plan(&snap, ROOT, &me, 0).is_empty());
}

#[test]
fn rebalancing_keeps_zone_spread() {
    // Zone b has one member, so it holds every journal.
    let members = [("a", "m001", 100), ("a", "m002", 100), ("b", "m003", 100)];
    let (mut sim, me) = loaded(&members, 12, 2);
    assert_eq!(loads_of(&sim)[&mid("b", "m003")], 12);
    // Another member in zone a: zone b's member cannot shed a journal without
    // leaving it in one zone, so only zone a evens out.
    sim.member("a", "m004", 100);
    converge_stats(&mut sim, &me, 1, 100, true);
    assert_converged(&sim.snapshot());
    let loads = loads_of(&sim);
    assert_eq!(loads[&mid("b", "m003")], 12, "{loads:?}");
    let a: Vec<usize> = ["m001", "m002", "m004"]
        .iter()
        .map(|s| loads[&mid("a", s)])
        .collect();
    assert_eq!(a.iter().sum::<usize>(), 12);
    assert!(a.iter().all(|&n| n == 4), "{loads:?}");
    // A second member in zone b takes half of zone b's load, from within the zone.
    sim.member("b", "m005", 100);
    let stats = converge_stats(&mut sim, &me, 1, 100, true);
    assert_converged(&sim.snapshot());
    let loads = loads_of(&sim);
    assert_eq!(loads[&mid("b", "m003")], 6, "{loads:?}");
    assert_eq!(loads[&mid("b", "m005")], 6, "{loads:?}");
    assert_eq!(stats.added, 6, "{stats:?}");
}

#[test]
fn rebalancing_respects_journal_limits() {
    // Members full to their limits; a joiner's limit weighs its share: the small one
    // takes what improves the spread weighted by limits, never more than its limit.
    let (mut sim, me) = loaded(&[("a", "m001", 10), ("b", "m002", 10)], 10, 2);
    sim.member("a", "m003", 2);
    sim.member("c", "m004", 10);
    converge_stats(&mut sim, &me, 1, 100, true);
    assert_converged(&sim.snapshot());
    let loads = loads_of(&sim);
    assert!((1..=2).contains(&loads[&mid("a", "m003")]), "{loads:?}");
    let big: Vec<usize> = [mid("a", "m001"), mid("b", "m002"), mid("c", "m004")]
        .iter()
        .map(|m| loads[m])
        .collect();
    let (lo, hi) = (big.iter().min().unwrap(), big.iter().max().unwrap());
    assert!(hi - lo <= 1, "{loads:?}");
    // With limits of 100, a member limited to 2 is not worth a move.
    let (mut sim, me) = loaded(&[("a", "m001", 100), ("b", "m002", 100)], 10, 2);
    sim.member("b", "m003", 2);
    let stats = converge_stats(&mut sim, &me, 1, 100, true);
    assert_eq!(loads_of(&sim)[&mid("b", "m003")], 0);
    assert_eq!(stats.added, 0);
    // A full member (limit 1) receives nothing more.
    sim.set_member("a", "m001", 10, false);
    sim.set_member("b", "m002", 10, false);
    sim.set_member("b", "m003", 1, false);
    converge_stats(&mut sim, &me, 1, 100, true);
    assert_converged(&sim.snapshot());
    assert_eq!(loads_of(&sim)[&mid("b", "m003")], 1);
}

#[test]
fn replication_one_moves_primaries_once_synced() {
    // Replication 1: every assignment is a primary, so balance moves primaries; each
    // move adds the new member first, and hands slot 0 over once it is synced.
    let (mut sim, me) = loaded(&[("a", "m001", 100)], 6, 1);
    sim.member("a", "m002", 100);
    let stats = converge_stats(&mut sim, &me, 1, 100, true);
    assert_converged(&sim.snapshot());
    assert_eq!(loads_of(&sim)[&mid("a", "m002")], 3);
    assert_eq!(primaries_of(&sim)[&mid("a", "m002")], 3);
    assert_eq!((stats.added, stats.removed), (3, 3), "{stats:?}");
}

#[test]
fn rebalancing_waits_for_sync_and_busy_journals() {
    let (mut sim, me) = loaded(&[("a", "m001", 100), ("b", "m002", 100)], 2, 2);
    sim.member("a", "m003", 100);
    sim.member("b", "m004", 100);
    // One plan: each journal gets one new replica (never a removal first).
    let txns = plan(&sim.snapshot(), ROOT, &me, 0);
    assert_eq!(txns.len(), 1);
    assert!(txns[0].ops.iter().all(|op| matches!(op, Op::Put { .. })));
    assert_eq!(txns[0].ops.len(), 2);
    assert!(sim.apply(&txns[0]));
    assert_eq!(holders(&sim.snapshot(), "ns/j000").len(), 3);
    // Until the primaries sync, nothing is removed and nothing more is added.
    assert!(plan(&sim.snapshot(), ROOT, &me, 0).is_empty());
    assert!(sim.sync_primaries());
    let txns = plan(&sim.snapshot(), ROOT, &me, 0);
    assert!(txns[0].ops.iter().all(|op| matches!(op, Op::Delete { .. })));
    assert!(sim.apply(&txns[0]));
    let loads = loads_of(&sim);
    assert!(loads.values().all(|&n| n == 1), "{loads:?}");
    // An inconsistent journal does not move.
    let (mut sim, me) = three_members();
    sim.journal("ns/j", 1);
    sim.journal("ns/k", 1);
    sim.journal("ns/l", 1);
    sim.assign("ns/j", "a", "m001", 0, None);
    sim.assign("ns/k", "a", "m001", 0, None);
    sim.assign("ns/l", "a", "m001", 0, None);
    assert!(plan(&sim.snapshot(), ROOT, &me, 0).is_empty());
}

/// A Backend over a [`Sim`], for `run` on the real control thread.
struct SimBackend(Sim);

impl crate::control::keyspace::Backend for SimBackend {
    fn snapshot(&self) -> std::sync::Arc<Snapshot> {
        std::sync::Arc::new(self.0.snapshot())
    }

    fn txn(
        &mut self,
        compares: &[Compare],
        ops: &[Op],
    ) -> Result<crate::control::keyspace::TxnOutcome, String> {
        let succeeded = self.0.apply(&Txn {
            compares: compares.to_vec(),
            ops: ops.to_vec(),
        });
        Ok(crate::control::keyspace::TxnOutcome {
            succeeded,
            revision: self.0.revision,
        })
    }
}

#[test]
fn run_converges_against_the_control_thread() {
    let (mut sim, me) = three_members();
    sim.journal("ns/j1", 3);
    sim.journal("ns/j2", 2);
    sim.journal("ns/j3", 1);
    let dir = tempfile::tempdir().unwrap();
    let stores = crate::control::stores::StoresConfig {
        file_root: dir.path().join("fragments"),
        file_only: true,
        default_store: "file:///".into(),
        max_uploads: 1,
        staging_dir: dir.path().join("uploads"),
    };
    let backend = crate::control::KeySpaceBackend::Embedded(Box::new(SimBackend(sim)));
    let (keyspace, store_handle) = crate::control::start(backend, stores).unwrap();
    drop(store_handle);
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let allocator = run_with_timer(keyspace.clone(), ROOT.into(), me.clone(), 0, |_| {
            std::future::pending::<()>()
        });
        // The primaries: advertise Routes whenever the assignments change.
        let primaries = async {
            let mut watch = keyspace.subscribe();
            loop {
                let snap = watch.borrow_and_update().clone();
                let converged = snap.journals.keys().all(|j| {
                    is_consistent(&snap, j)
                        && holders(&snap, j).len() == desired_replication(&snap.journals[j].spec, 0)
                }) && plan(&snap, ROOT, &me, 0).is_empty();
                if converged {
                    return snap;
                }
                for (journal, assignments) in &snap.assignments {
                    let route = snap.assigned_route(journal);
                    if route.primary < 0 || is_consistent(&snap, journal) {
                        continue;
                    }
                    let value = Bytes::from(route.encode_to_vec());
                    let mut compares = Vec::new();
                    let mut ops = Vec::new();
                    for a in assignments {
                        let key = assign_key(ROOT, journal, &a.zone, &a.suffix, a.slot);
                        compares.push(Compare {
                            key: key.clone(),
                            mod_revision: a.mod_revision,
                        });
                        ops.push(Op::Put {
                            key,
                            value: value.clone(),
                            lease: PutLease::Keep,
                        });
                    }
                    let _ = keyspace.txn(compares, ops).await;
                }
                if watch.changed().await.is_err() {
                    panic!("keyspace closed");
                }
            }
        };
        let out = futures_lite::future::block_on(futures_lite::future::or(
            async {
                allocator.await;
                None
            },
            async { Some(primaries.await) },
        ));
        let _ = done_tx.send(out);
    });
    let snap = done_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("allocator did not converge")
        .expect("allocator ended early");
    assert_converged(&snap);
}
