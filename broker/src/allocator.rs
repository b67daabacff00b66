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

use crate::balance;
use crate::control::KeySpaceHandle;
use crate::keyspace::{
    Assignment, Compare, Op, PutLease, Snapshot, assign_key, item_key, member_key,
};
use protocol::journal_spec::suspend::Level;
use protocol::{JournalSpec, Route};
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

/// Gazette's `Route.Equivalent`: same members and primary; endpoints are not compared.
fn equivalent(a: &Route, b: &Route) -> bool {
    a.primary == b.primary && a.members == b.members
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
        let removals: Vec<usize> = leaving
            .into_iter()
            .chain(surplus.iter().copied())
            .take(allowed.min(MAX_GROUP_CHANGES))
            .collect();

        // Additions: enough serving replicas for R, spread over zones.
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
            && consistent
            && removals.is_empty()
            && current.len() == r
            && kept.len() == r
            && zones.len() == 1
            && let Some(m) = self.pick_member(&holders, &adds, &zones, true)
        {
            adds.push(m);
        }
        // Rebalancing: a consistent journal with nothing else to do may move one
        // assignment to a quieter member (added now, the busier one removed once synced).
        if adds.is_empty()
            && need == 0
            && consistent
            && removals.is_empty()
            && current.len() == r
            && kept.len() == r
            && self.moves_left > 0
            && current.iter().any(|a| a.slot == 0)
            && let Some((from, to)) = self.rebalance(&cands, &kept)
        {
            tracing::debug!(journal, ?from, ?to, "allocator moves an assignment");
            *self.pending_out.entry(from).or_default() += 1;
            self.moves_left -= 1;
            adds.push(to);
        }
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
        let promote = if remaining.iter().any(|&x| current[x].slot == 0) {
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
                            equivalent(&current[y].value, &route)
                                .cmp(&equivalent(&current[x].value, &route)),
                        )
                        .then(
                            self.primary_ratio(&ids[x])
                                .total_cmp(&self.primary_ratio(&ids[y])),
                        )
                        .then(key_order(&ids[x], &ids[y]))
                })
        };

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
        let mut used: BTreeSet<u32> = current.iter().map(|a| a.slot).collect();
        let mut next_slot = if current.is_empty() { 0 } else { 1 };
        for m in &adds {
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
        if !removals.is_empty() {
            group.compares.push(Compare {
                key: item_key(self.root, journal),
                mod_revision: item.mod_revision,
            });
        }
        for &x in &removals {
            let key = keys[x].clone().expect("removals have keys");
            group.compares.push(Compare {
                key: key.clone(),
                mod_revision: current[x].mod_revision,
            });
            group.ops.push(Op::Delete { key });
        }
        if let Some(x) = promote {
            self.move_op(&mut group, journal, &current[x], keys[x].as_deref(), 0);
            *self.loads.primary.entry(ids[x].clone()).or_default() += 1;
        } else if adds.is_empty() && removals.is_empty() && consistent {
            // Packing: one assignment moves down towards contiguous slots.
            let mut sorted = remaining.clone();
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
                self.move_op(
                    &mut group,
                    journal,
                    &current[x],
                    keys[x].as_deref(),
                    i as u32,
                );
            }
        }
        (!group.ops.is_empty()).then_some(group)
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
mod tests {
    use super::*;
    use crate::keyspace::{KeyValue, decode_assignments, decode_items, decode_members};
    use bytes::Bytes;
    use prost::Message;
    use protocol::process_spec::Id;
    use protocol::{BrokerSpec, ProcessSpec, journal_spec};

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
            for c in &txn.compares {
                let rev = self.keys.get(&c.key).map_or(0, |kv| kv.mod_revision);
                if rev != c.mod_revision {
                    return false;
                }
            }
            self.revision += 1;
            for op in &txn.ops {
                match op {
                    Op::Put { key, value, lease } => {
                        let old = self.keys.get(key);
                        let lease = match lease {
                            PutLease::None => 0,
                            PutLease::Keep => old.map_or(0, |kv| kv.lease),
                            PutLease::Id(id) => *id,
                        };
                        let create = old.map_or(self.revision, |kv| kv.create_revision);
                        self.keys.insert(
                            key.clone(),
                            KeyValue {
                                value: value.clone(),
                                create_revision: create,
                                mod_revision: self.revision,
                                lease,
                            },
                        );
                    }
                    Op::Delete { key } => {
                        self.keys.remove(key);
                    }
                }
            }
            true
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
                .any(|c| &c.key == deletes[0]
                    && c.mod_revision == snap.keys[deletes[0]].mod_revision)
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

    impl crate::keyspace::Backend for SimBackend {
        fn snapshot(&self) -> std::sync::Arc<Snapshot> {
            std::sync::Arc::new(self.0.snapshot())
        }

        fn txn(
            &mut self,
            compares: &[Compare],
            ops: &[Op],
        ) -> Result<crate::keyspace::TxnOutcome, String> {
            let succeeded = self.0.apply(&Txn {
                compares: compares.to_vec(),
                ops: ops.to_vec(),
            });
            Ok(crate::keyspace::TxnOutcome {
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
        let stores = crate::stores::StoresConfig {
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
                            && holders(&snap, j).len()
                                == desired_replication(&snap.journals[j].spec, 0)
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
}
