//! Healing and checking: the simulation's end (every fault ends, then every journal must
//! accept an append), running the executor to quiescence, and the checks over what every
//! broker and the store hold (invariants 1, 2, 4, 7; see `checker`).
//!
//! Lives on: the simulation's one executor thread.

use super::checker::{self, Readable};
use super::{HEAL_ATTEMPTS, HEAL_EVENTS, Sim, Violation, journal_name, settle};
use crate::control::keyspace::Snapshot;
use bytes::Bytes;

impl Sim {
    /// Ends every fault, then requires an acknowledged append on every journal.
    pub(super) async fn heal(&mut self) -> Result<(), Violation> {
        self.log("heal: every fault ends".into());
        self.net.state.borrow_mut().partitions.clear();
        self.partitions.clear();
        for b in 0..self.brokers.len() {
            if self.brokers[b].core.is_none() {
                self.restart(b);
            }
        }
        let mut healed = Vec::with_capacity(self.cfg.journals);
        for j in 0..self.cfg.journals {
            healed.push(self.heal_journal(j).await?);
        }
        // A Route that changed after its journal's healing append (the allocator adding a
        // member meanwhile) is pulsed in a broker, a zero-byte append that rolls every
        // member forward and hands the completed fragment to the store: an append here
        // does the same, until the Routes settle.
        for _ in 0..HEAL_ATTEMPTS {
            self.quiesce().await?;
            let snap = self.world.keyspace.borrow().latest();
            let moved: Vec<usize> = (0..self.cfg.journals)
                .filter(|&j| self.route(&snap, j) != healed[j])
                .collect();
            if moved.is_empty() {
                break;
            }
            for j in moved {
                healed[j] = self.heal_journal(j).await?;
            }
        }
        self.quiesce().await
    }

    /// Appends to journal `j` until one append is acknowledged (invariant 5); returns the
    /// Route it was acknowledged through.
    pub(super) async fn heal_journal(
        &mut self,
        j: usize,
    ) -> Result<(Vec<usize>, Option<usize>), Violation> {
        for attempt in 0..HEAL_ATTEMPTS {
            self.quiesce().await?;
            let acked = |sim: &Self| sim.checker.acks.iter().filter(|a| a.journal == j).count();
            // Another journal's append, still in flight, may be acknowledged meanwhile.
            let before = acked(self);
            let snap = self.world.keyspace.borrow().latest();
            let route = self.route(&snap, j);
            self.start_append(Some(j));
            for _ in 0..HEAL_EVENTS {
                self.quiesce_step().await;
                self.collect()?;
                if self.appends.is_empty() {
                    break;
                }
            }
            if acked(self) > before {
                return Ok(route);
            }
            // Hung or failed: reset every stream (as connections would time out).
            self.log(format!(
                "heal: attempt {attempt} on journal-{j} did not commit"
            ));
            for id in self.net.links() {
                self.net.break_link(id);
            }
            settle().await;
            self.collect()?;
            self.appends.clear();
        }
        self.fail(format!(
            "invariant 5: journal-{j} accepts no append after healing"
        ))
    }

    /// One event of the healed world: propagate, allocate, persist, or deliver.
    pub(super) async fn quiesce_step(&mut self) -> bool {
        for b in 0..self.brokers.len() {
            self.world.propagate(b, true);
        }
        self.allocate(false);
        let items = self.net.deliverable();
        let pending = self.world.store.borrow().pending.len();
        let did = if !items.is_empty() {
            let item = self.rng.pick(&items);
            self.net.deliver(item);
            true
        } else if pending > 0 {
            self.persist(0);
            true
        } else {
            false
        };
        settle().await;
        self.stats.events += 1;
        did
    }

    /// Runs the healed world until nothing is left to deliver or persist.
    pub(super) async fn quiesce(&mut self) -> Result<(), Violation> {
        for _ in 0..HEAL_EVENTS {
            if !self.quiesce_step().await {
                break;
            }
            self.collect()?;
        }
        settle().await;
        self.collect()
    }

    /// What live broker `b` holds locally of journal `j`, recorded for invariant 2.
    pub(super) async fn read_local(&mut self, b: usize, j: usize) -> Result<Readable, Violation> {
        let mut out = Readable::default();
        let Some(core) = self.brokers[b].core.clone() else {
            return Ok(out);
        };
        let replica = core.open_replica(&journal_name(j));
        let Some(replica) = replica else {
            return Ok(out);
        };
        let fragments = replica.index.borrow().fragments();
        for (fragment, file) in fragments {
            let Some(file) = file else { continue };
            let len = (fragment.end - fragment.begin) as usize;
            let mut bytes = Vec::with_capacity(len);
            while bytes.len() < len {
                let at = fragment.begin + bytes.len() as i64;
                match file.read_at(at, len - bytes.len()).await {
                    Ok(chunk) if !chunk.is_empty() => bytes.extend_from_slice(&chunk),
                    Ok(_) => break,
                    Err(e) => return self.fail(format!("broker-{b} reading its fragment: {e}")),
                }
            }
            if bytes.len() < len {
                return self.fail(format!(
                    "broker-{b}'s indexed fragment [{}, {}) of journal-{j} has {} bytes",
                    fragment.begin,
                    fragment.end,
                    bytes.len()
                ));
            }
            let source = checker::broker_source(b);
            if let Err(e) = self.checker.record(j, fragment.begin, &bytes, &source) {
                return self.fail(e);
            }
            out.ranges.push((fragment.begin, Bytes::from(bytes)));
        }
        Ok(out)
    }

    /// Counts a step after which a journal's primary awaits acknowledgements of two or more
    /// commits at once.
    pub(super) fn count_pipelined(&mut self) {
        let pipelined = self
            .brokers
            .iter()
            .filter_map(|b| b.core.as_ref())
            .any(|core| core.open_replicas().iter().any(|r| r.awaiting.count() >= 2));
        if pipelined {
            self.stats.pipelined += 1;
        }
    }

    /// Invariant 2 over every live broker's files and the store's errors (invariant 4);
    /// what the primaries show to readers is recorded for invariant 7.
    pub(super) async fn check_local(&mut self) -> Result<(), Violation> {
        let errors = std::mem::take(&mut self.world.store.borrow_mut().errors);
        if let Some(e) = errors.into_iter().next() {
            return self.fail(e);
        }
        let snap = self.world.keyspace.borrow().latest();
        for j in 0..self.cfg.journals {
            let mut local = Vec::with_capacity(self.brokers.len());
            for b in 0..self.brokers.len() {
                local.push(self.read_local(b, j).await?);
            }
            let (members, primary) = self.route(&snap, j);
            let Some(b) = primary.filter(|&b| self.leads(b, j, &snap)) else {
                continue;
            };
            // Each range readers see is held by every member, except where it is an
            // acknowledged append whose holder lost its copy since (its lease expired):
            // that member may be back on the Route, rolled forward past it, holding none
            // of it (as in Gazette: it is then held by the others until the store has it).
            for (at, bytes) in &local[b].ranges {
                let end = *at + bytes.len() as i64;
                for ((from, to), acked) in self.checker.split_by_acks(j, *at, end) {
                    let holders = members
                        .iter()
                        .copied()
                        .filter(|m| acked.as_ref().is_none_or(|h| h.contains(m)))
                        .collect();
                    let seen = checker::Seen {
                        journal: j,
                        broker: b,
                        step: self.step,
                        holders,
                    };
                    let piece = bytes.slice((from - at) as usize..(to - at) as usize);
                    let range = checker::Readable {
                        ranges: vec![(from, piece)],
                    };
                    if let Err(e) = self.checker.seen(seen, &range) {
                        return self.fail(e);
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether broker `b` acts as journal `j`'s primary on its latest Route: it keeps a
    /// pipeline (synchronized: every member of the Route agreed on its fragment) that serves
    /// it. Only then does what its readers see follow invariant 7 (a replica shows what its
    /// primary proposed before the other replicas acknowledged it, as in Gazette).
    pub(super) fn leads(&self, b: usize, j: usize, snap: &Snapshot) -> bool {
        let Some(core) = self.brokers[b].core.as_ref() else {
            return false;
        };
        let route = snap.assigned_route(&journal_name(j));
        let replica = core.open_replica(&journal_name(j));
        replica.is_some_and(|r| {
            r.pipeline
                .borrow()
                .as_ref()
                .is_some_and(|p| p.serves(&route))
        })
    }

    /// Invariant 1, after healing: every acknowledged append reads back from every member
    /// of its journal's Route (its files, or the store).
    pub(super) async fn check_final(&mut self) -> Result<(), Violation> {
        self.check_local().await?;
        let snap = self.world.keyspace.borrow().latest();
        for j in 0..self.cfg.journals {
            let (members, _) = self.route(&snap, j);
            let mut stored = Readable::default();
            if let Some(fragments) = self.world.store.borrow().fragments.get(&journal_name(j)) {
                for s in fragments.values() {
                    stored.ranges.push((s.fragment.begin, s.bytes.clone()));
                }
            }
            for &m in &members {
                let local = self.read_local(m, j).await?;
                for ack in self.checker.acks.iter().filter(|a| a.journal == j) {
                    let len = ack.bytes.len();
                    let found = local
                        .read(ack.begin, len)
                        .or_else(|| stored.read(ack.begin, len));
                    if found != Some(&ack.bytes[..]) {
                        let what = format!(
                            "invariant 1: journal-{j} [{}, {}) acknowledged at step {} is {} \
                             on broker-{m} and the store",
                            ack.begin,
                            ack.begin + len as i64,
                            ack.step,
                            match found {
                                None => "missing".to_string(),
                                Some(f) => format!("{:?}", String::from_utf8_lossy(f)),
                            }
                        );
                        return self.fail(what);
                    }
                }
            }
        }
        Ok(())
    }
}
