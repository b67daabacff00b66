//! Deliberately broken variants of the append path, for proving the simulator's checker:
//! each names one rule of the real code that a test switches off, expecting the simulator
//! to report a violation within a bounded number of seeds (`crate::sim`'s
//! `checker_catches_*` tests). Hooks: `AckBeforeReplicas` in `pipeline::Turn::gather_ok`,
//! `PublishBeforeAcks` in the append's commit proposal (`append::commit::propose`),
//! `SkipRollForward` in `pipeline::decide_sync`, `KeepRecoveredSpool` in `Replica::open`,
//! `SkipRegisterCheck` in the append FSM's validation.
//!
//! Lives on: a thread-local of the thread that runs the simulation, in test builds only. In
//! every other build [`active`] is a constant `false`, so production pays nothing.

/// One rule of the append path that a test may break on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// The primary acknowledges a commit without waiting for every replica's answer.
    AckBeforeReplicas,
    /// The primary ignores a peer that holds a larger offset instead of rolling forward.
    SkipRollForward,
    /// A restarted cluster broker keeps its recovered spool's unconfirmed content instead
    /// of discarding it (`Replica::open`).
    KeepRecoveredSpool,
    /// The append skips its `check_registers` precondition (hooked in the append FSM's
    /// validation; caught by the simulator's invariant 6).
    #[allow(dead_code)]
    SkipRegisterCheck,
    /// The primary shows a commit to readers as soon as it proposed it, before its peers
    /// acknowledged it.
    PublishBeforeAcks,
}

#[cfg(test)]
thread_local! {
    static ACTIVE: std::cell::Cell<Option<Mutation>> = const { std::cell::Cell::new(None) };
}

/// Whether `m` is switched on for this thread (always `false` outside tests).
#[cfg(test)]
#[inline]
pub fn active(m: Mutation) -> bool {
    ACTIVE.with(|a| a.get() == Some(m))
}

/// Whether `m` is switched on for this thread (always `false` outside tests).
#[cfg(not(test))]
#[inline(always)]
pub fn active(_m: Mutation) -> bool {
    false
}

/// Switches `m` on for this thread (or every mutation off with `None`).
#[cfg(test)]
pub fn set(m: Option<Mutation>) {
    ACTIVE.with(|a| a.set(m));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_are_per_thread_and_off_by_default() {
        assert!(!active(Mutation::AckBeforeReplicas));
        set(Some(Mutation::AckBeforeReplicas));
        assert!(active(Mutation::AckBeforeReplicas));
        assert!(!active(Mutation::SkipRollForward));
        std::thread::spawn(|| assert!(!active(Mutation::AckBeforeReplicas)))
            .join()
            .unwrap();
        set(None);
        assert!(!active(Mutation::AckBeforeReplicas));
    }
}
