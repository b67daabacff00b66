//! The allocator: assigns journals to brokers in cluster mode (Gazette's `allocator`).
//!
//! Lives on: one task (core 0 in the server). Every broker runs it; only the **leader** (the
//! member key with the smallest CreateRevision, ties by key order) acts. [`plan`] is pure: it
//! reads one keyspace [`Snapshot`] and returns guarded transactions that move the assignments
//! one safe step towards the goal; [`run`] applies them and plans again after every change.
//!
//! Rules (spec §6), per journal and in at most one change-group per plan:
//! - **Orphans**: assignments of a journal whose item key is gone are deleted (guarded by
//!   `item key absent`). An item key that exists but does not decode is left alone.
//! - **Additions**: a journal whose serving assignments (member present, not exiting,
//!   `journal_limit > 0`) number fewer than its desired replication R gets new ones on the
//!   least-loaded eligible members with room under their `journal_limit`, preferring zones
//!   the journal does not use yet (falling back to one zone rather than under-replicating).
//!   A consistent journal that uses one zone while another zone has room gets one extra
//!   replica there, so a later removal leaves it spread over two zones. A new assignment
//!   has an empty value, the member's lease, and the smallest free slot (slot 0 only for a
//!   journal without assignments); it is guarded by the member key's ModRevision and the
//!   assignment key's absence.
//! - **Removals** (assignments of missing members, then of exiting ones, then surplus ones,
//!   keeping zone spread and the primary when possible, busiest members first) happen only
//!   when the journal is consistent, and never leave fewer than R assignments: the safety
//!   rule that there are never fewer consistent replicas than desired. So an exiting
//!   broker's assignment goes only after its replacement has been added and synced by the
//!   primary. R = 0 (fully suspended journals) removes everything. Guarded by the item's and
//!   each assignment's ModRevision.
//! - **Promotion**: a journal left without a slot-0 assignment promotes one of the rest
//!   (serving members first, then those whose value matches the route, then the lowest
//!   primary load) by moving its key to slot 0, keeping value and lease.
//! - **Packing**: when nothing else changes for a consistent journal, one assignment moves
//!   down to make slots contiguous.
//! - **Rebalancing** (`balance.rs`): when nothing else changes for a consistent journal
//!   with exactly R serving assignments, one of them may move from a busier member S to a
//!   quieter member D that has room, if the move strictly improves the spread
//!   ([`balance::improves`]: with equal limits, S holds at least two more than D), keeps
//!   as many zones, and the surplus rule would then remove S, not D. The move is two safe
//!   steps: D is added (the journal has R+1 assignments), and once the primary has synced
//!   all of them the surplus removal drops S. Non-primary assignments move first; a
//!   primary moves only when no replica can, and then the promotion rule hands slot 0 to
//!   a synced replica in the same transaction. At most
//!   [`balance::MAX_MOVES_IN_FLIGHT`] journals are over-replicated at once, and loads
//!   count the surplus assignments already on their way out.
//!
//! Surplus serving assignments go in this order: first those whose zone keeps another
//! replica, then non-primaries, then the busiest members (load over limit); the primary
//! goes instead of a replica of its zone group when moving one assignment from the
//! primary's member to the replica's would improve the spread ([`balance::improves`]).
//!
//! A journal's changes are one group, applied atomically; a plan orders the groups as
//! orphan deletions, additions, promotions, removals, packing, and batches them into
//! transactions that also guard on the leader's own member key and hold at most
//! [`MAX_TXN_OPS`] compares and as many ops (etcd's default `--max-txn-ops`). Every compare
//! holds in the snapshot planned from, so a transaction fails only if the keyspace moved
//! on, and the next snapshot gets a fresh plan.
//!
//! Not Gazette's solver: there is no max-flow; placement is greedy (least load ratio
//! first) and balance comes from one-at-a-time moves, which spread assignments in
//! proportion to `journal_limit` as Gazette's fair shares do, when zones allow it. Members
//! whose load exceeds a lowered `journal_limit` are not drained below it as such; they
//! only shed what improves the spread. Followers only read the results, so a mixed
//! cluster stays compatible.

// Until the server starts it (`run`), only the tests use this module.

use crate::cluster::balance;
use crate::control::KeySpaceHandle;
use crate::control::keyspace::{
    Assignment, Compare, Op, PutLease, Snapshot, assign_key, item_key, member_key,
};
use protocol::JournalSpec;
use protocol::journal_spec::suspend::Level;
use protocol::route::equivalent;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::Duration;

/// A broker's (zone, suffix).
pub type MemberId = (String, String);

/// Most compares, and most ops, in one transaction (etcd's default `--max-txn-ops`).
pub const MAX_TXN_OPS: usize = 128;

/// Most additions or removals planned for one journal in one plan.
const MAX_GROUP_CHANGES: usize = 32;

/// How often the loop re-plans without a keyspace change.
const RECHECK: Duration = Duration::from_secs(5);

/// One guarded etcd transaction of a plan.
#[derive(Debug, Clone)]
pub struct Txn {
    pub compares: Vec<Compare>,
    pub ops: Vec<Op>,
}

/// Whether `me` leads the allocation: the member with the smallest CreateRevision, ties
/// broken by member key order.
pub fn is_leader(snap: &Snapshot, me: &MemberId) -> bool {
    snap.members
        .iter()
        .min_by(|(a, ma), (b, mb)| {
            ma.create_revision
                .cmp(&mb.create_revision)
                .then_with(|| key_order(a, b))
        })
        .is_some_and(|(id, _)| id == me)
}

/// Orders members as their keys `<root>/members/<zone>#<suffix>` sort.
fn key_order(a: &MemberId, b: &MemberId) -> Ordering {
    let ka = a.0.bytes().chain(std::iter::once(b'#')).chain(a.1.bytes());
    let kb = b.0.bytes().chain(std::iter::once(b'#')).chain(b.1.bytes());
    ka.cmp(kb)
}

/// Gazette's `JournalSpec.DesiredReplication`: 0 when fully suspended, 1 when partially
/// suspended, else the spec's replication; capped at `max_replication` (0: no cap).
pub fn desired_replication(spec: &JournalSpec, max_replication: u32) -> usize {
    let level = spec
        .suspend
        .as_ref()
        .map_or(Level::None as i32, |s| s.level);
    let r = if level == Level::Full as i32 {
        0
    } else if level == Level::Partial as i32 {
        1
    } else {
        usize::try_from(spec.replication).unwrap_or(0)
    };
    if max_replication == 0 {
        r
    } else {
        r.min(max_replication as usize)
    }
}

/// Whether every assignment of `journal` holds a Route equivalent to the one its
/// assignment keys imply (so the primary has synced all of them). True, vacuously, for a
/// journal without assignments.
pub fn is_consistent(snap: &Snapshot, journal: &str) -> bool {
    let route = snap.assigned_route(journal);
    let assignments = snap.assignments.get(journal).map_or(&[][..], Vec::as_slice);
    assignments.len() == route.members.len()
        && assignments.iter().all(|a| equivalent(&a.value, &route))
}

/// Computes the next guarded steps towards the desired assignments, or nothing if `me` is
/// not the leader (or nothing needs to change).
pub fn plan(snap: &Snapshot, root: &str, me: &MemberId, max_replication: u32) -> Vec<Txn> {
    if !is_leader(snap, me) {
        return Vec::new();
    }
    let Some(leader) = snap.members.get(me) else {
        return Vec::new();
    };
    let guard = Compare {
        key: member_key(root, &me.0, &me.1),
        mod_revision: leader.mod_revision,
    };
    let mut planner = Planner::new(snap, root, max_replication);
    let mut groups = Vec::new();
    for (journal, assignments) in &snap.assignments {
        if !snap.journals.contains_key(journal) {
            groups.extend(planner.orphan(journal, assignments));
        }
    }
    for journal in snap.journals.keys() {
        groups.extend(planner.journal(journal));
    }
    // Stable: journals keep their key order within a kind.
    groups.sort_by_key(|g| g.kind);
    batch(guard, groups)
}

/// Runs the allocator until the keyspace's watch ends. Timers are glommio's: run it as a
/// glommio task.
pub async fn run(keyspace: KeySpaceHandle, root: String, me: MemberId, max_replication: u32) {
    run_with_timer(keyspace, root, me, max_replication, glommio::timer::sleep).await
}

/// [`run`] with the given `sleep`, so that it works on any executor.
pub async fn run_with_timer<S, F>(
    keyspace: KeySpaceHandle,
    root: String,
    me: MemberId,
    max_replication: u32,
    sleep: S,
) where
    S: Fn(Duration) -> F,
    F: Future<Output = ()>,
{
    let mut watch = keyspace.subscribe();
    loop {
        let snap = watch.borrow_and_update().clone();
        let txns = plan(&snap, &root, &me, max_replication);
        if !txns.is_empty()
            && let Some(revision) = apply(&keyspace, txns, snap.revision).await
        {
            keyspace.wait_for(revision).await;
            continue;
        }
        let changed = futures_lite::future::or(async { watch.changed().await.is_ok() }, async {
            sleep(RECHECK).await;
            true
        })
        .await;
        if !changed {
            return;
        }
    }
}

/// Applies `txns` in order; the revision after the last, or None if one failed.
async fn apply(keyspace: &KeySpaceHandle, txns: Vec<Txn>, revision: i64) -> Option<i64> {
    let mut revision = revision;
    let count = txns.len();
    for (i, txn) in txns.into_iter().enumerate() {
        let ops = txn.ops.len();
        match keyspace.txn(txn.compares, txn.ops).await {
            Ok(out) if out.succeeded => revision = revision.max(out.revision),
            Ok(_) => {
                tracing::debug!(
                    txn = i,
                    of = count,
                    ops,
                    "allocator txn lost a race; re-planning"
                );
                return None;
            }
            Err(err) => {
                tracing::warn!(txn = i, of = count, ops, %err, "allocator txn failed");
                return None;
            }
        }
    }
    tracing::debug!(txns = count, revision, "allocator applied a plan");
    Some(revision)
}

/// Kinds of change-groups, in the order a plan applies them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Orphan,
    Add,
    Promote,
    Remove,
    Pack,
}

/// The changes to one journal, applied atomically within one transaction.
struct Group {
    kind: Kind,
    compares: Vec<Compare>,
    ops: Vec<Op>,
}

/// Packs change-groups into transactions of at most [`MAX_TXN_OPS`] compares and ops,
/// each also guarding on the leader's member key.
fn batch(guard: Compare, groups: Vec<Group>) -> Vec<Txn> {
    let fresh = || Txn {
        compares: vec![guard.clone()],
        ops: Vec::new(),
    };
    let mut out = Vec::new();
    let mut txn = fresh();
    for group in groups {
        let new_compares = |txn: &Txn| {
            let mut seen: Vec<&Compare> = Vec::new();
            for c in &group.compares {
                if !txn
                    .compares
                    .iter()
                    .chain(seen.iter().copied())
                    .any(|t| same(t, c))
                {
                    seen.push(c);
                }
            }
            seen.into_iter().cloned().collect::<Vec<_>>()
        };
        let mut add = new_compares(&txn);
        if !txn.ops.is_empty()
            && (txn.ops.len() + group.ops.len() > MAX_TXN_OPS
                || txn.compares.len() + add.len() > MAX_TXN_OPS)
        {
            out.push(std::mem::replace(&mut txn, fresh()));
            add = new_compares(&txn);
        }
        txn.compares.extend(add);
        txn.ops.extend(group.ops);
    }
    if !txn.ops.is_empty() {
        out.push(txn);
    }
    out
}

fn same(a: &Compare, b: &Compare) -> bool {
    a.key == b.key && a.mod_revision == b.mod_revision
}

/// Assignment counts per member: all of them, and primaries.
struct Loads {
    total: BTreeMap<MemberId, usize>,
    primary: BTreeMap<MemberId, usize>,
}

impl Loads {
    fn of(snap: &Snapshot) -> Loads {
        let mut loads = Loads {
            total: BTreeMap::new(),
            primary: BTreeMap::new(),
        };
        for a in snap.assignments.values().flatten() {
            *loads.total.entry(id(a)).or_default() += 1;
            if a.slot == 0 {
                *loads.primary.entry(id(a)).or_default() += 1;
            }
        }
        loads
    }

    fn total(&self, m: &MemberId) -> usize {
        self.total.get(m).copied().unwrap_or(0)
    }

    fn primary(&self, m: &MemberId) -> usize {
        self.primary.get(m).copied().unwrap_or(0)
    }
}

/// Deletes the assignments `removals` of `journal` (guarded on the journal's spec and each
/// assignment's revision).
fn push_removals(
    group: &mut Group,
    root: &str,
    journal: &str,
    spec_revision: i64,
    current: &[Assignment],
    keys: &[Option<String>],
    removals: &[usize],
) {
    if !removals.is_empty() {
        group.compares.push(Compare {
            key: item_key(root, journal),
            mod_revision: spec_revision,
        });
    }
    for &x in removals {
        let key = keys[x].clone().expect("removals have keys");
        group.compares.push(Compare {
            key: key.clone(),
            mod_revision: current[x].mod_revision,
        });
        group.ops.push(Op::Delete { key });
    }
}

fn id(a: &Assignment) -> MemberId {
    (a.zone.clone(), a.suffix.clone())
}

/// How a member takes part in allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Status {
    /// Announced and accepting assignments.
    Serving,
    /// `exiting`, or `journal_limit == 0` (how pre-v0.102 brokers exit): being drained.
    Exiting,
    /// No member key (its lease expired): its assignments should be gone too.
    Missing,
}

struct Planner<'a> {
    snap: &'a Snapshot,
    root: &'a str,
    max_replication: u32,
    loads: Loads,
    /// Surplus assignments per member, planned or waiting for their journal to sync.
    pending_out: BTreeMap<MemberId, usize>,
    /// How many more rebalancing moves this plan may start.
    moves_left: usize,
}

/// One assignment of a journal, as the surplus rule sees it.
#[derive(Clone)]
struct Cand {
    id: MemberId,
    slot: u32,
    /// Its key is exactly as in the keyspace (so a delete can succeed).
    removable: bool,
}

impl<'a> Planner<'a> {
    fn new(snap: &'a Snapshot, root: &'a str, max_replication: u32) -> Planner<'a> {
        let mut planner = Planner {
            snap,
            root,
            max_replication,
            loads: Loads::of(snap),
            pending_out: BTreeMap::new(),
            moves_left: 0,
        };
        // Journals with surplus serving assignments: moves (or shrinks) under way.
        let mut in_flight = 0;
        for (journal, item) in &snap.journals {
            let r = desired_replication(&item.spec, max_replication);
            let current = snap.assignments.get(journal).map_or(&[][..], Vec::as_slice);
            let cands = planner.cands(journal, current);
            let serving: Vec<usize> = (0..current.len())
                .filter(|&i| planner.status(&cands[i].id) == Status::Serving)
                .collect();
            if serving.len() <= r {
                continue;
            }
            in_flight += 1;
            let (_, surplus) =
                planner.split_surplus(&cands, serving, r, &|m| planner.loads.total(m));
            for x in surplus {
                *planner.pending_out.entry(cands[x].id.clone()).or_default() += 1;
            }
        }
        planner.moves_left = balance::MAX_MOVES_IN_FLIGHT.saturating_sub(in_flight);
        planner
    }

    fn cands(&self, journal: &str, current: &[Assignment]) -> Vec<Cand> {
        current
            .iter()
            .map(|a| Cand {
                id: id(a),
                slot: a.slot,
                removable: self.key_of(journal, a).is_some(),
            })
            .collect()
    }

    fn limit(&self, m: &MemberId) -> u32 {
        self.snap
            .members
            .get(m)
            .map_or(0, |item| item.spec.journal_limit)
    }

    /// Splits `serving` (indices into `cands`) into those kept and the surplus beyond
    /// `r`, dropping first those whose zone keeps another replica, then non-primaries
    /// (unless the primary's member is busier by a move), then the busiest (by `load`).
    fn split_surplus(
        &self,
        cands: &[Cand],
        serving: Vec<usize>,
        r: usize,
        load: &dyn Fn(&MemberId) -> usize,
    ) -> (Vec<usize>, Vec<usize>) {
        let mut kept = serving;
        let mut surplus = Vec::new();
        while kept.len() > r {
            let zone_count = |x: usize, kept: &[usize]| {
                kept.iter()
                    .filter(|&&y| cands[y].id.0 == cands[x].id.0)
                    .count()
            };
            let pick = kept
                .iter()
                .copied()
                .filter(|&x| cands[x].removable)
                .max_by(|&x, &y| {
                    let (mx, my) = (&cands[x].id, &cands[y].id);
                    (zone_count(x, &kept) > 1)
                        .cmp(&(zone_count(y, &kept) > 1))
                        .then((cands[x].slot != 0).cmp(&(cands[y].slot != 0)))
                        .then(
                            self.ratio(mx, load(mx))
                                .total_cmp(&self.ratio(my, load(my))),
                        )
                        .then(key_order(my, mx))
                });
            // The primary goes instead of a replica if moving one assignment from the
            // primary's member to the replica's would improve the spread.
            let pick = pick.map(|y| {
                let (my, crowded) = (&cands[y].id, zone_count(y, &kept) > 1);
                kept.iter()
                    .copied()
                    .find(|&x| {
                        let mx = &cands[x].id;
                        cands[y].slot != 0
                            && cands[x].slot == 0
                            && cands[x].removable
                            && (zone_count(x, &kept) > 1) == crowded
                            && balance::improves(
                                load(mx),
                                self.limit(mx),
                                load(my).saturating_sub(1),
                                self.limit(my),
                            )
                    })
                    .unwrap_or(y)
            });
            let Some(pick) = pick else { break };
            kept.retain(|&x| x != pick);
            surplus.push(pick);
        }
        (kept, surplus)
    }

    /// A move of one of `kept` (a consistent journal's R serving assignments) to a member
    /// that does not hold the journal: (from, to), if one improves the spread, keeps as
    /// many zones, and the surplus rule would then drop `from`.
    fn rebalance(&self, cands: &[Cand], kept: &[usize]) -> Option<(MemberId, MemberId)> {
        let effective = |m: &MemberId| {
            self.loads
                .total(m)
                .saturating_sub(self.pending_out.get(m).copied().unwrap_or(0))
        };
        let zones_before: BTreeSet<&str> = kept.iter().map(|&x| cands[x].id.0.as_str()).collect();
        let mut sources: Vec<usize> = kept
            .iter()
            .copied()
            .filter(|&x| cands[x].removable)
            .collect();
        // Non-primaries first, then the busiest.
        sources.sort_by(|&x, &y| {
            let (mx, my) = (&cands[x].id, &cands[y].id);
            (cands[x].slot == 0)
                .cmp(&(cands[y].slot == 0))
                .then(
                    self.ratio(my, effective(my))
                        .total_cmp(&self.ratio(mx, effective(mx))),
                )
                .then(key_order(mx, my))
        });
        for &s in &sources {
            let src = &cands[s].id;
            let src_load = effective(src);
            let mut dests: Vec<&MemberId> = self
                .snap
                .members
                .keys()
                .filter(|m| {
                    self.status(m) == Status::Serving
                        && !cands.iter().any(|c| &c.id == *m)
                        && balance::improves(
                            src_load,
                            self.limit(src),
                            self.loads.total(m),
                            self.limit(m),
                        )
                })
                .collect();
            // The source's zone first, then the quietest.
            dests.sort_by(|a, b| {
                (a.0 != src.0)
                    .cmp(&(b.0 != src.0))
                    .then(self.load_ratio(a).total_cmp(&self.load_ratio(b)))
                    .then(key_order(a, b))
            });
            for dst in dests {
                // The surplus rule below would refuse this too (it drops a crowded zone's
                // replica first); checked here because it is cheaper.
                let zones_after: BTreeSet<&str> = kept
                    .iter()
                    .filter(|&&x| x != s)
                    .map(|&x| cands[x].id.0.as_str())
                    .chain(std::iter::once(dst.0.as_str()))
                    .collect();
                if zones_after.len() < zones_before.len() {
                    continue;
                }
                // What the surplus rule will see once `dst` is added.
                let mut with = cands.to_vec();
                with.push(Cand {
                    id: dst.clone(),
                    slot: u32::MAX,
                    removable: true,
                });
                let mut serving = kept.to_vec();
                serving.push(with.len() - 1);
                let load = |m: &MemberId| {
                    if m == dst {
                        self.loads.total(m) + 1
                    } else if m == src {
                        src_load
                    } else {
                        self.loads.total(m)
                    }
                };
                let (_, surplus) = self.split_surplus(&with, serving, kept.len(), &load);
                if surplus == [s] {
                    return Some((src.clone(), dst.clone()));
                }
            }
        }
        None
    }

    fn status(&self, m: &MemberId) -> Status {
        match self.snap.members.get(m) {
            None => Status::Missing,
            Some(item) if item.spec.exiting || item.spec.journal_limit == 0 => Status::Exiting,
            Some(_) => Status::Serving,
        }
    }

    /// The member's load over its limit; infinite for a missing or zero-limit member.
    fn ratio(&self, m: &MemberId, load: usize) -> f64 {
        match self.snap.members.get(m) {
            Some(item) if item.spec.journal_limit > 0 => {
                load as f64 / f64::from(item.spec.journal_limit)
            }
            _ => f64::INFINITY,
        }
    }

    fn load_ratio(&self, m: &MemberId) -> f64 {
        self.ratio(m, self.loads.total(m))
    }

    fn primary_ratio(&self, m: &MemberId) -> f64 {
        self.ratio(m, self.loads.primary(m))
    }

    /// The key of `a` if it is exactly as in the keyspace (so that ops on it can succeed).
    fn key_of(&self, journal: &str, a: &Assignment) -> Option<String> {
        let key = assign_key(self.root, journal, &a.zone, &a.suffix, a.slot);
        self.snap
            .keys
            .get(&key)
            .is_some_and(|kv| kv.mod_revision == a.mod_revision)
            .then_some(key)
    }

    /// Deletes the assignments of a journal whose item key is gone.
    fn orphan(&self, journal: &str, assignments: &[Assignment]) -> Option<Group> {
        let item = item_key(self.root, journal);
        if self.snap.keys.contains_key(&item) {
            // The spec exists but does not decode: not ours to judge.
            return None;
        }
        let mut group = Group {
            kind: Kind::Orphan,
            compares: vec![Compare {
                key: item,
                mod_revision: 0,
            }],
            ops: Vec::new(),
        };
        for a in assignments {
            if group.ops.len() == MAX_TXN_OPS - 8 {
                break; // The rest go in the next round.
            }
            if let Some(key) = self.key_of(journal, a) {
                group.compares.push(Compare {
                    key: key.clone(),
                    mod_revision: a.mod_revision,
                });
                group.ops.push(Op::Delete { key });
            }
        }
        (!group.ops.is_empty()).then_some(group)
    }

    /// The next step for one journal with a spec.
    fn journal(&mut self, journal: &str) -> Option<Group> {
        let snap = self.snap;
        let item = &snap.journals[journal];
        let current = snap.assignments.get(journal).map_or(&[][..], Vec::as_slice);
        let r = desired_replication(&item.spec, self.max_replication);
        let route = snap.assigned_route(journal);
        let consistent = !current.is_empty() && is_consistent(snap, journal);
        let keys: Vec<Option<String>> = current.iter().map(|a| self.key_of(journal, a)).collect();
        let ids: Vec<MemberId> = current.iter().map(id).collect();

        let (serving, leaving): (Vec<usize>, Vec<usize>) =
            (0..current.len()).partition(|&i| self.status(&ids[i]) == Status::Serving);

        // Surplus serving assignments.
        let cands = self.cands(journal, current);
        let (kept, surplus) =
            self.split_surplus(&cands, serving.clone(), r, &|m| self.loads.total(m));

        // Removals: missing members, then exiting ones, then surplus; only while the
        // journal is consistent and keeps at least R assignments.
        let removals = self.removals(current, &ids, &keys, leaving, &surplus, r, consistent);

        // Additions: enough serving replicas for R, spread over zones.
        let steady = consistent && removals.is_empty() && current.len() == r && kept.len() == r;
        let mut adds = self.additions(journal, current, &ids, &kept, &cands, r, steady);
        if current.is_empty() && adds.len() > 1 {
            // The new journal's primary: the chosen member with the fewest primaries.
            let best = (0..adds.len())
                .min_by(|&x, &y| {
                    self.primary_ratio(&adds[x])
                        .total_cmp(&self.primary_ratio(&adds[y]))
                        .then(x.cmp(&y))
                })
                .unwrap_or(0);
            let primary = adds.remove(best);
            adds.insert(0, primary);
        }

        // Promotion: if no remaining assignment holds slot 0, promote the best one.
        let removed: BTreeSet<usize> = removals.iter().copied().collect();
        let remaining: Vec<usize> = (0..current.len())
            .filter(|x| !removed.contains(x))
            .collect();
        let promote = self.promotion(current, &keys, &ids, &route, &remaining);

        let mut group = Group {
            kind: if !adds.is_empty() {
                Kind::Add
            } else if promote.is_some() {
                Kind::Promote
            } else if !removals.is_empty() {
                Kind::Remove
            } else {
                Kind::Pack
            },
            compares: Vec::new(),
            ops: Vec::new(),
        };

        // Build the ops.
        self.push_adds(&mut group, journal, current, &adds);
        push_removals(
            &mut group,
            self.root,
            journal,
            item.mod_revision,
            current,
            &keys,
            &removals,
        );
        if let Some(x) = promote {
            self.move_op(&mut group, journal, &current[x], keys[x].as_deref(), 0);
            *self.loads.primary.entry(ids[x].clone()).or_default() += 1;
        } else if adds.is_empty() && removals.is_empty() && consistent {
            // Packing: one assignment moves down towards contiguous slots.
            self.pack(&mut group, journal, current, &keys, &ids, &remaining);
        }
        (!group.ops.is_empty()).then_some(group)
    }

    /// The assignments to remove: missing members, then exiting ones, then `surplus`; only
    /// while the journal is consistent and keeps at least `r` assignments.
    #[allow(clippy::too_many_arguments)]
    fn removals(
        &self,
        current: &[Assignment],
        ids: &[MemberId],
        keys: &[Option<String>],
        leaving: Vec<usize>,
        surplus: &[usize],
        r: usize,
        consistent: bool,
    ) -> Vec<usize> {
        let mut leaving: Vec<usize> = leaving.into_iter().filter(|&x| keys[x].is_some()).collect();
        leaving.sort_by(|&x, &y| {
            self.status(&ids[x])
                .cmp(&self.status(&ids[y]))
                .reverse()
                .then((current[x].slot == 0).cmp(&(current[y].slot == 0)))
                .then(
                    self.load_ratio(&ids[y])
                        .total_cmp(&self.load_ratio(&ids[x])),
                )
                .then(key_order(&ids[x], &ids[y]))
        });
        let allowed = if r == 0 {
            current.len()
        } else if consistent {
            current.len().saturating_sub(r)
        } else {
            0
        };
        leaving
            .into_iter()
            .chain(surplus.iter().copied())
            .take(allowed.min(MAX_GROUP_CHANGES))
            .collect()
    }

    /// The members to add to `journal`: enough serving replicas for `r`, spread over
    /// zones; and when the journal is `steady` (consistent, with `r` serving assignments and
    /// nothing to remove), one replica moved to another zone or to a quieter member.
    #[allow(clippy::too_many_arguments)]
    fn additions(
        &mut self,
        journal: &str,
        current: &[Assignment],
        ids: &[MemberId],
        kept: &[usize],
        cands: &[Cand],
        r: usize,
        steady: bool,
    ) -> Vec<MemberId> {
        let holders: BTreeSet<MemberId> = ids.iter().cloned().collect();
        let mut zones: BTreeSet<String> = kept.iter().map(|&x| current[x].zone.clone()).collect();
        let mut adds: Vec<MemberId> = Vec::new();
        let need = r.saturating_sub(kept.len()).min(MAX_GROUP_CHANGES);
        while adds.len() < need {
            let Some(m) = self.pick_member(&holders, &adds, &zones, false) else {
                break;
            };
            zones.insert(m.0.clone());
            adds.push(m);
        }
        // A consistent journal in one zone moves one replica to another zone with room:
        // first an extra replica there, then (once synced) a surplus removal in the
        // crowded zone.
        if need == 0
            && r >= 2
            && steady
            && zones.len() == 1
            && let Some(m) = self.pick_member(&holders, &adds, &zones, true)
        {
            adds.push(m);
        }
        // Rebalancing: a consistent journal with nothing else to do may move one
        // assignment to a quieter member (added now, the busier one removed once synced).
        if adds.is_empty()
            && need == 0
            && steady
            && self.moves_left > 0
            && current.iter().any(|a| a.slot == 0)
            && let Some((from, to)) = self.rebalance(cands, kept)
        {
            tracing::debug!(journal, ?from, ?to, "allocator moves an assignment");
            *self.pending_out.entry(from).or_default() += 1;
            self.moves_left -= 1;
            adds.push(to);
        }
        adds
    }

    /// The assignment to promote to primary (slot 0) when no remaining one holds it: the
    /// best serving one, preferring the current Route's members and fewer primaries.
    fn promotion(
        &self,
        current: &[Assignment],
        keys: &[Option<String>],
        ids: &[MemberId],
        route: &protocol::Route,
        remaining: &[usize],
    ) -> Option<usize> {
        if remaining.iter().any(|&x| current[x].slot == 0) {
            None
        } else {
            remaining
                .iter()
                .copied()
                .filter(|&x| keys[x].is_some())
                .min_by(|&x, &y| {
                    self.status(&ids[x])
                        .cmp(&self.status(&ids[y]))
                        .then(
                            equivalent(&current[y].value, route)
                                .cmp(&equivalent(&current[x].value, route)),
                        )
                        .then(
                            self.primary_ratio(&ids[x])
                                .total_cmp(&self.primary_ratio(&ids[y])),
                        )
                        .then(key_order(&ids[x], &ids[y]))
                })
        }
    }

    /// Puts the assignments of `adds` in free slots of `journal` (guarded on their members'
    /// keys and the new keys' absence), counting them in the members' loads.
    fn push_adds(
        &mut self,
        group: &mut Group,
        journal: &str,
        current: &[Assignment],
        adds: &[MemberId],
    ) {
        let snap = self.snap;
        let mut used: BTreeSet<u32> = current.iter().map(|a| a.slot).collect();
        let mut next_slot = if current.is_empty() { 0 } else { 1 };
        for m in adds {
            // A key that exists but did not decode (an invalid Route) takes its slot too.
            while used.contains(&next_slot)
                || snap
                    .keys
                    .contains_key(&assign_key(self.root, journal, &m.0, &m.1, next_slot))
            {
                next_slot += 1;
            }
            let slot = next_slot;
            used.insert(slot);
            let member = &snap.members[m];
            let key = assign_key(self.root, journal, &m.0, &m.1, slot);
            group.compares.push(Compare {
                key: member_key(self.root, &m.0, &m.1),
                mod_revision: member.mod_revision,
            });
            group.compares.push(Compare {
                key: key.clone(),
                mod_revision: 0,
            });
            group.ops.push(Op::Put {
                key,
                value: bytes::Bytes::new(),
                lease: PutLease::Id(member.lease),
            });
            *self.loads.total.entry(m.clone()).or_default() += 1;
            if slot == 0 {
                *self.loads.primary.entry(m.clone()).or_default() += 1;
            }
        }
    }

    /// Moves one remaining assignment of `journal` down towards contiguous slots.
    fn pack(
        &self,
        group: &mut Group,
        journal: &str,
        current: &[Assignment],
        keys: &[Option<String>],
        ids: &[MemberId],
        remaining: &[usize],
    ) {
        let mut sorted = remaining.to_vec();
        sorted.sort_by(|&x, &y| {
            current[x]
                .slot
                .cmp(&current[y].slot)
                .then(key_order(&ids[x], &ids[y]))
        });
        if let Some((i, &x)) = sorted
            .iter()
            .enumerate()
            .skip(1)
            .find(|&(i, &x)| current[x].slot as usize != i)
        {
            self.move_op(group, journal, &current[x], keys[x].as_deref(), i as u32);
        }
    }

    /// Moves an assignment to `slot`, keeping its value and lease (guarded on the old key's
    /// ModRevision and the new key's absence).
    fn move_op(
        &self,
        group: &mut Group,
        journal: &str,
        a: &Assignment,
        key: Option<&str>,
        slot: u32,
    ) {
        let Some(old) = key else { return };
        let new = assign_key(self.root, journal, &a.zone, &a.suffix, slot);
        let Some(kv) = self.snap.keys.get(old) else {
            return;
        };
        if self.snap.keys.contains_key(&new) {
            return; // A malformed keyspace (two slots of one member): leave it be.
        }
        group.compares.push(Compare {
            key: old.to_string(),
            mod_revision: a.mod_revision,
        });
        group.compares.push(Compare {
            key: new.clone(),
            mod_revision: 0,
        });
        group.ops.push(Op::Delete {
            key: old.to_string(),
        });
        group.ops.push(Op::Put {
            key: new,
            value: kv.value.clone(),
            lease: PutLease::Id(a.lease),
        });
    }

    /// The least-loaded serving member with room that does not hold the journal, in a zone
    /// outside `zones` if possible (only there if `new_zone`).
    fn pick_member(
        &self,
        holders: &BTreeSet<MemberId>,
        picked: &[MemberId],
        zones: &BTreeSet<String>,
        new_zone: bool,
    ) -> Option<MemberId> {
        self.snap
            .members
            .iter()
            .filter(|(m, item)| {
                self.status(m) == Status::Serving
                    && self.loads.total(m) < item.spec.journal_limit as usize
                    && !holders.contains(*m)
                    && !picked.contains(m)
                    && (!new_zone || !zones.contains(&m.0))
            })
            .min_by(|(a, _), (b, _)| {
                zones
                    .contains(&a.0)
                    .cmp(&zones.contains(&b.0))
                    .then(self.load_ratio(a).total_cmp(&self.load_ratio(b)))
                    .then(self.loads.total(a).cmp(&self.loads.total(b)))
                    .then(key_order(a, b))
            })
            .map(|(m, _)| m.clone())
    }
}

#[cfg(test)]
mod tests;
