//! Which core owns which journal: the core of the connection that first calls it.
//!
//! A journal is placed the first time a call for it arrives, on the core that received
//! the call (the core owning the client's connection), or, in a cluster, on its hash core
//! ([`hash_core`]) when this broker pulses it before any call (a pulse waits a second for
//! such a call first: `journal::pulse`'s `PLACE_GRACE`). So a journal's writer,
//! which usually holds one connection, has its appends served on its own core with no
//! hop between cores; journals spread over the cores as their clients' connections do
//! (the kernel spreads connections over the cores' listeners). A placement never changes
//! while the process runs (a deleted journal keeps its place, so a re-created one opens
//! its spool on the core that retired the old replica).
//!
//! Only journals of the keyspace are placed: a call for an unknown name is served by its
//! hash core ([`hash_core`]) and leaves nothing behind, so hostile names cost no memory.
//!
//! Lives on: shared by every core (`Arc`): the one structure cores share besides the
//! keyspace snapshot. It is consulted only when a core's own cache ([`CoreOwners`]) has
//! no entry, at most once per journal and core, so the hot path reads core-local state.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The core a journal's name hashes to: stable on every core and every restart. Serves
/// calls for names outside the keyspace, and places a cluster's pulsed journals.
pub fn hash_core(journal: &str, cores: usize) -> usize {
    (crc32c::crc32c(journal.as_bytes()) as usize) % cores.max(1)
}

/// Every core's placements (one per broker process).
pub struct Owners {
    owner: Mutex<HashMap<String, usize>>,
    cores: usize,
}

impl Owners {
    pub fn new(cores: usize) -> Arc<Owners> {
        Arc::new(Owners {
            owner: Mutex::new(HashMap::new()),
            cores: cores.max(1),
        })
    }

    /// The owner of `journal`, placing it on `core` if it has none.
    pub fn place(&self, journal: &str, core: usize) -> usize {
        let mut owner = self.owner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&placed) = owner.get(journal) {
            return placed;
        }
        let core = core.min(self.cores - 1);
        owner.insert(journal.to_string(), core);
        core
    }

    /// The owner of `journal`, if it was placed.
    pub fn get(&self, journal: &str) -> Option<usize> {
        let owner = self.owner.lock().unwrap_or_else(|e| e.into_inner());
        owner.get(journal).copied()
    }
}

/// One core's view of [`Owners`]: a cache of placements it has looked up (placements
/// never change, so a cached one is never stale).
pub struct CoreOwners {
    shared: Arc<Owners>,
    cached: RefCell<HashMap<String, usize>>,
}

impl CoreOwners {
    pub fn new(shared: Arc<Owners>) -> CoreOwners {
        CoreOwners {
            shared,
            cached: RefCell::new(HashMap::new()),
        }
    }

    /// The owner of `journal`, placing it on `core` if it has none yet.
    pub fn place(&self, journal: &str, core: usize) -> usize {
        if let Some(&core) = self.cached.borrow().get(journal) {
            return core;
        }
        let core = self.shared.place(journal, core);
        self.cached.borrow_mut().insert(journal.to_string(), core);
        core
    }

    /// The owner of `journal` if it was placed (by any core).
    pub fn get(&self, journal: &str) -> Option<usize> {
        if let Some(&core) = self.cached.borrow().get(journal) {
            return Some(core);
        }
        let core = self.shared.get(journal)?;
        self.cached.borrow_mut().insert(journal.to_string(), core);
        Some(core)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_journal_lives_where_it_was_first_called_and_stays() {
        let owners = Owners::new(2);
        assert_eq!(owners.place("a", 1), 1);
        assert_eq!(owners.place("a", 0), 1);
        assert_eq!(owners.get("a"), Some(1));
        assert_eq!(owners.get("unknown"), None);
        assert_eq!(owners.place("b", 0), 0);
        // An out-of-range core is clamped, never a panic.
        assert_eq!(owners.place("c", 99), 1);
    }

    #[test]
    fn a_core_cache_agrees_with_the_table() {
        let shared = Owners::new(3);
        let (c0, c2) = (
            CoreOwners::new(shared.clone()),
            CoreOwners::new(shared.clone()),
        );
        assert_eq!(c2.place("x", 2), 2);
        assert_eq!(c0.get("x"), Some(2));
        assert_eq!(c0.place("x", 0), 2);
        assert_eq!(c0.get("y"), None);
        assert_eq!(Owners::new(0).place("z", 5), 0, "zero cores act as one");
    }

    #[test]
    fn hash_core_spreads_names_that_differ_in_a_few_characters() {
        for cores in [2, 3, 4] {
            let mut counts = vec![0usize; cores];
            for i in 0..1000 {
                counts[hash_core(&format!("lg/{i:04}"), cores)] += 1;
            }
            let fair = 1000 / cores;
            assert!(
                counts
                    .iter()
                    .all(|&n| n > fair * 7 / 10 && n < fair * 13 / 10),
                "{cores} cores: {counts:?}"
            );
        }
    }

    #[test]
    fn hash_core_is_stable_and_in_range() {
        for cores in 1..5 {
            for name in ["a", "b/c", ""] {
                let h = hash_core(name, cores);
                assert!(h < cores);
                assert_eq!(h, hash_core(name, cores));
            }
        }
        assert_eq!(hash_core("a", 0), 0);
    }
}
