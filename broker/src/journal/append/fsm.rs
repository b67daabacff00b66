//! The Append RPC's state machine (Gazette's `appendFSM`), without I/O: the named states,
//! the plain outcome of each state's action (an [`Event`]), and a pure [`transition`] that
//! decides the next state and what becomes of the spool and the pipeline the append holds
//! (an [`Effect`]). The driver in `mod.rs` performs each state's action and feeds the
//! outcome back, so every transition is tested here without sockets or a `Core`.
//!
//! The main path (`*` repeats; any state may also fail, and the spool's holder releases):
//!
//! ```text
//! Resolve ─▶ [ResumeSuspended] ─▶ AcquirePipeline ─▶ StartPipeline
//!   ─▶ [OpenPipeline ─▶ SyncPipeline*] ─▶ UpdateAssignments ─▶ AwaitDesiredReplicas{primary}
//!   ─▶ AwaitIndex ─▶ ValidatePreconditions ─▶ [UpdateSuspend] ─▶ RollSpool ─▶ StreamContent
//!   ─▶ AwaitCommit ═▶ AwaitAcks ─▶ Respond ─▶ Done           (with peers: pipelined)
//!   ─▶ UpdateRegisters ─▶ Respond ─▶ Done                     (no peers)
//! Resolve ─▶ AwaitDesiredReplicas{not primary} ─▶ Proxy
//! back to Resolve: the primacy moved (AcquirePipeline), a peer's later Route
//!   (SyncPipeline), written assignments, too many members (AwaitDesiredReplicas)
//! early replies: a resolution's status, too few members, an unhealthy store, a failed
//!   precondition, SuspendFully, refused content, an empty append
//! AwaitCommit failed ─▶ KeepProposed ─▶ Failed
//! ```
//!
//! A kept pipeline that serves the Route was synchronized by the append that kept it (as in
//! Gazette), so it goes on to UpdateAssignments without a sync round. `═▶` lets go of the
//! spool and the pipeline: AwaitCommit sends the commit proposal, commits the content to
//! this broker's spool (not yet shown to readers) and takes its turn in the pipeline's read
//! barrier; the next append may then stream and propose while AwaitAcks waits for its turn,
//! reads its peers' acknowledgements, and shows the commit to readers.
//!
//! Lives on: the journal's owner core, as plain values owned by one append's driver.

use super::validate::{self, Plan, Preconditions, Verdict};
use crate::journal::pipeline::{MAX_SYNC_ROUNDS, Synced};
use protocol::grpc::RpcError;
use protocol::journal_spec::suspend::Level;
use protocol::{LabelSet, Status};
use std::cmp::Ordering;

/// Where an append stands. Each non-terminal state names one action of the driver.
#[derive(Debug, Clone, PartialEq)]
pub enum State {
    /// Wait for the keyspace to reach `read_through` (when > 0), then resolve the journal.
    Resolve { read_through: i64 },
    /// The journal is suspended and the append resumes it: clear the suspension at its
    /// offset, then resolve again (once).
    ResumeSuspended { read_through: i64 },
    /// Compare the Route with the journal's desired replication (Gazette's
    /// awaitDesiredReplicas), as its primary holding the spool or before proxying.
    AwaitDesiredReplicas { primary: bool },
    /// Take the journal's replica, lock its spool (rolling back what an abandoned append
    /// left) and resolve again; a lost primacy retries from `read_through`.
    AcquirePipeline { read_through: i64 },
    /// Take the pipeline the replica kept from its last append, if any.
    StartPipeline,
    /// Open a new pipeline to the Route's peers (closing a stale kept one).
    OpenPipeline,
    /// One sync round: propose the spool's fragment, or a roll to `roll_to`, with
    /// `registers` (`None`: the spool's own) to this broker's spool and every peer.
    SyncPipeline {
        round: usize,
        roll_to: Option<i64>,
        registers: Option<LabelSet>,
    },
    /// Advertise the synchronized Route in the journal's assignments.
    UpdateAssignments,
    /// Wait for the journal's first store to be healthy and its index to be listed once.
    AwaitIndex,
    /// Gather the preconditions' facts; [`validate::preconditions`] decides.
    ValidatePreconditions,
    /// Write the journal's suspension (`level` at `offset`), then go on with `plan`.
    UpdateSuspend {
        level: Level,
        offset: i64,
        plan: Plan,
    },
    /// Suspend the journal fully at `offset`, resolve again, answer the new status.
    SuspendFully { offset: i64 },
    /// Roll the spool (and the peers') when the plan or the spool's fragment calls for it.
    RollSpool { plan: Plan },
    /// Stream the client's content to the spool and the peers until the commit chunk.
    StreamContent { final_status: Status },
    /// Propose the commit to the peers, commit it to this broker's spool (not yet shown to
    /// readers) and take a turn in the read barrier; then let go of the spool.
    AwaitCommit { final_status: Status },
    /// Without the spool: wait for the turn, gather the peers' acknowledgements of the
    /// commit, and show it to readers.
    AwaitAcks { final_status: Status },
    /// A commit round failed: keep the proposed content on this broker's spool, then fail.
    KeepProposed { error: RpcError },
    /// Commit the content with the registers' update to the spool, atomically.
    UpdateRegisters { final_status: Status },
    /// Send the reply.
    Respond(Reply),
    /// Terminal: another broker is primary; the driver proxies the call to it.
    Proxy,
    /// Terminal: the reply was sent.
    Done,
    /// Terminal: the call fails with this error.
    Failed(RpcError),
}

impl State {
    /// Whether the state's action runs only while the append holds the journal's spool.
    /// ([`State::Respond`] runs either way; [`State::AcquirePipeline`] takes the spool.)
    pub fn holds_spool(&self) -> bool {
        matches!(
            self,
            State::StartPipeline
                | State::OpenPipeline
                | State::SyncPipeline { .. }
                | State::UpdateAssignments
                | State::AwaitDesiredReplicas { primary: true }
                | State::AwaitIndex
                | State::ValidatePreconditions
                | State::UpdateSuspend { .. }
                | State::SuspendFully { .. }
                | State::RollSpool { .. }
                | State::StreamContent { .. }
                | State::AwaitCommit { .. }
                | State::KeepProposed { .. }
                | State::UpdateRegisters { .. }
        )
    }

    pub fn is_terminal(&self) -> bool {
        matches!(self, State::Proxy | State::Done | State::Failed(_))
    }
}

/// What the append answers the client.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A status (with the journal's registers for REGISTER_MISMATCH).
    Status {
        status: Status,
        registers: Option<LabelSet>,
    },
    /// FRAGMENT_STORE_UNHEALTHY with the store's health error.
    StoreUnhealthy(String),
    /// The commit of the streamed content (the driver keeps its figures).
    Committed { status: Status },
}

impl Reply {
    pub fn status(status: Status) -> Reply {
        Reply::Status {
            status,
            registers: None,
        }
    }
}

/// The facts of a resolution that the machine decides on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Resolved {
    pub status: Status,
    /// This broker is the journal's primary (else, with OK, it proxies).
    pub local: bool,
    /// The keyspace revision of the resolution.
    pub revision: i64,
    /// The request resumes a suspended journal (SUSPEND_RESUME).
    pub resumes: bool,
}

/// The pipeline the replica kept from its last append.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KeptPipeline {
    None,
    /// Built for the resolved Route: reused.
    Serves,
    /// Built for another Route: closed, and a new one opened.
    Stale,
}

/// The facts of a finished content stream.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Streamed {
    /// A content chunk came for a journal (or a suspension control) that takes none.
    pub not_allowed: bool,
    /// Bytes of content received.
    pub appended: i64,
    /// The request unions or subtracts registers.
    pub modifies_registers: bool,
    /// The pipeline has peers (else the commit is local only).
    pub has_peers: bool,
}

/// The outcome of a state's action.
#[derive(Debug, PartialEq)]
pub enum Event {
    /// The action finished (for states with nothing more to report).
    Done,
    Resolved(Resolved),
    Gap {
        gap: Ordering,
        revision: i64,
    },
    Kept(KeptPipeline),
    Synced(Synced),
    /// `Some(revision)` to resolve again at after writing assignments; `None` when they
    /// already advertised the Route.
    Assignments(Option<i64>),
    StoreUnhealthy(String),
    IndexClosed,
    Facts(Box<Preconditions>),
    Streamed(Streamed),
    Failed(RpcError),
}

/// What becomes of the spool and the pipeline the append holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Effect {
    None,
    /// Discard the spool's uncommitted content and keep holding it.
    RollbackSpool,
    /// Let go of the spool; the pipeline meets `Fate`.
    Release(Fate),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fate {
    /// Kept for the journal's next append if this broker still leads it on the same Route.
    Keep,
    /// Dropped (its streams reset, so replicas roll back what they did not commit).
    Drop,
    /// The spool's uncommitted content rolled back, and the pipeline dropped.
    Rollback,
}

fn go(next: State) -> (State, Effect) {
    (next, Effect::None)
}

fn fail(error: RpcError, fate: Fate) -> (State, Effect) {
    (State::Failed(error), Effect::Release(fate))
}

fn sync_start() -> State {
    State::SyncPipeline {
        round: 0,
        roll_to: None,
        registers: None,
    }
}

/// The next state after `state`'s action reported `event`, and what becomes of what the
/// append holds. Terminal states stay as they are.
pub fn transition(state: State, event: Event) -> (State, Effect) {
    use Event as E;
    use State as S;
    match (state, event) {
        (s @ (S::Proxy | S::Done | S::Failed(_)), _) => (s, Effect::None),
        (S::Resolve { read_through }, E::Resolved(r)) => on_resolved(read_through, r, true),
        (S::ResumeSuspended { read_through }, E::Resolved(r)) => {
            on_resolved(read_through, r, false)
        }
        (S::AwaitDesiredReplicas { primary }, E::Gap { gap, revision }) => {
            on_gap(primary, gap, revision)
        }
        (S::AcquirePipeline { read_through }, E::Resolved(r)) => {
            if r.status == Status::Ok && r.local {
                go(S::StartPipeline)
            } else {
                // The keyspace moved while the spool was awaited: start over.
                (S::Resolve { read_through }, Effect::Release(Fate::Drop))
            }
        }
        (S::StartPipeline, E::Kept(KeptPipeline::Serves)) => go(S::UpdateAssignments),
        (S::StartPipeline, E::Kept(_)) => go(S::OpenPipeline),
        (S::OpenPipeline, E::Done) => go(sync_start()),
        (
            S::SyncPipeline {
                round, registers, ..
            },
            E::Synced(synced),
        ) => on_synced(round, registers, synced),
        (S::UpdateAssignments, E::Assignments(Some(revision))) => (
            S::Resolve {
                read_through: revision,
            },
            Effect::Release(Fate::Keep),
        ),
        (S::UpdateAssignments, E::Assignments(None)) => {
            go(S::AwaitDesiredReplicas { primary: true })
        }
        (S::AwaitIndex, E::Done) => go(S::ValidatePreconditions),
        (S::AwaitIndex, E::StoreUnhealthy(e)) => go(S::Respond(Reply::StoreUnhealthy(e))),
        (S::AwaitIndex, E::IndexClosed) => fail(
            RpcError::unknown("journal replica closed before its first listing"),
            Fate::Rollback,
        ),
        (S::ValidatePreconditions, E::Facts(facts)) => on_verdict(validate::preconditions(&facts)),
        (S::UpdateSuspend { plan, .. }, E::Done) => go(S::RollSpool { plan }),
        (S::SuspendFully { .. }, E::Resolved(r)) => go(S::Respond(Reply::status(r.status))),
        (S::RollSpool { plan }, E::Done) => go(S::StreamContent {
            final_status: plan.final_status,
        }),
        (S::StreamContent { final_status }, E::Streamed(s)) => on_streamed(final_status, s),
        (S::AwaitCommit { final_status }, E::Done) => {
            (S::AwaitAcks { final_status }, Effect::Release(Fate::Keep))
        }
        (S::AwaitAcks { final_status }, E::Done) => go(S::Respond(Reply::Committed {
            status: final_status,
        })),
        (S::KeepProposed { error }, E::Done) => fail(error, Fate::Rollback),
        (S::UpdateRegisters { final_status }, E::Done) => go(S::Respond(Reply::Committed {
            status: final_status,
        })),
        (S::Respond(_), E::Done) => (S::Done, Effect::Release(Fate::Keep)),
        (state, E::Failed(error)) => on_failure(state, error),
        (state, event) => fail(
            RpcError::internal(format!("append: unexpected {event:?} in state {state:?}")),
            Fate::Rollback,
        ),
    }
}

/// After a resolution: resume a suspended journal (once), answer a non-OK status, or go on
/// as the primary or towards a proxy.
fn on_resolved(read_through: i64, r: Resolved, may_resume: bool) -> (State, Effect) {
    if may_resume && r.status == Status::Suspended && r.resumes {
        return go(State::ResumeSuspended { read_through });
    }
    if r.status != Status::Ok {
        return go(State::Respond(Reply::status(r.status)));
    }
    if r.local {
        go(State::AcquirePipeline { read_through })
    } else {
        go(State::AwaitDesiredReplicas { primary: false })
    }
}

/// Too many members: the allocator is about to remove one, wait for it; too few: fail;
/// as many as desired: validate as the primary, or proxy.
fn on_gap(primary: bool, gap: Ordering, revision: i64) -> (State, Effect) {
    let keep = Effect::Release(Fate::Keep);
    match gap {
        Ordering::Greater => (
            State::Resolve {
                read_through: revision + 1,
            },
            keep,
        ),
        Ordering::Less => (
            State::Respond(Reply::status(Status::InsufficientJournalBrokers)),
            keep,
        ),
        Ordering::Equal if primary => go(State::AwaitIndex),
        Ordering::Equal => (State::Proxy, keep),
    }
}

/// After a sync round: go on, resolve again at a peer's later revision, or roll everyone
/// forward (adopting a peer's registers) for at most [`MAX_SYNC_ROUNDS`] rounds.
fn on_synced(round: usize, registers: Option<LabelSet>, synced: Synced) -> (State, Effect) {
    match synced {
        Synced::Ok => go(State::UpdateAssignments),
        Synced::ReadThrough(revision) => (
            State::Resolve {
                read_through: revision,
            },
            Effect::Release(Fate::Drop),
        ),
        Synced::RollTo {
            end,
            registers: theirs,
        } if round + 1 < MAX_SYNC_ROUNDS => go(State::SyncPipeline {
            round: round + 1,
            roll_to: Some(end),
            registers: theirs.or(registers),
        }),
        Synced::RollTo { .. } => fail(
            RpcError::unknown(format!(
                "gatherSync: replicas did not agree on a fragment after {MAX_SYNC_ROUNDS} proposals"
            )),
            Fate::Rollback,
        ),
    }
}

fn on_verdict(verdict: Verdict) -> (State, Effect) {
    match verdict {
        Verdict::Reject { status, registers } => {
            go(State::Respond(Reply::Status { status, registers }))
        }
        Verdict::SuspendFully { offset } => go(State::SuspendFully { offset }),
        Verdict::Proceed {
            suspend: Some((level, offset)),
            plan,
        } => go(State::UpdateSuspend {
            level,
            offset,
            plan,
        }),
        Verdict::Proceed {
            suspend: None,
            plan,
        } => go(State::RollSpool { plan }),
    }
}

fn on_streamed(final_status: Status, s: Streamed) -> (State, Effect) {
    if s.not_allowed {
        return (
            State::Respond(Reply::status(Status::NotAllowed)),
            Effect::RollbackSpool,
        );
    }
    if s.appended == 0 && s.modifies_registers {
        return fail(
            RpcError::unknown("append stream: register modification requires non-empty Append"),
            Fate::Rollback,
        );
    }
    if s.appended == 0 {
        go(State::Respond(Reply::Committed {
            status: final_status,
        }))
    } else if s.has_peers {
        go(State::AwaitCommit { final_status })
    } else {
        go(State::UpdateRegisters { final_status })
    }
}

/// A failed action: until the pipeline is synchronized the spool is let go as it is; from
/// then on its uncommitted content is rolled back. A failed commit round keeps the
/// proposed content first (the keep_proposed rule).
fn on_failure(state: State, error: RpcError) -> (State, Effect) {
    match state {
        State::SyncPipeline { .. } => fail(
            RpcError::unknown(format!("gatherSync: {}", error.message)),
            Fate::Rollback,
        ),
        State::AwaitCommit { .. } => go(State::KeepProposed { error }),
        // Nothing is held: the turn dropped by the driver broke the pipeline.
        State::AwaitAcks { .. } => (State::Failed(error), Effect::None),
        State::Resolve { .. }
        | State::ResumeSuspended { .. }
        | State::AwaitDesiredReplicas { .. }
        | State::AcquirePipeline { .. }
        | State::StartPipeline
        | State::OpenPipeline
        | State::UpdateAssignments => fail(error, Fate::Drop),
        _ => fail(error, Fate::Rollback),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::grpc::Code;

    fn resolved(status: Status, local: bool) -> Event {
        Event::Resolved(Resolved {
            status,
            local,
            revision: 7,
            resumes: false,
        })
    }

    fn plan(roll_to: Option<i64>, final_status: Status) -> Plan {
        Plan {
            roll_to,
            final_status,
        }
    }

    fn regs(v: &str) -> LabelSet {
        LabelSet {
            labels: vec![protocol::Label {
                name: "k".into(),
                value: v.into(),
                prefix: false,
            }],
        }
    }

    fn err(msg: &str) -> RpcError {
        RpcError::unknown(msg)
    }

    fn streamed(appended: i64, modifies_registers: bool, has_peers: bool) -> Event {
        Event::Streamed(Streamed {
            not_allowed: false,
            appended,
            modifies_registers,
            has_peers,
        })
    }

    // --- Resolve ---

    #[test]
    fn resolve_ok_local_acquires_the_pipeline_keeping_the_read_through() {
        let next = transition(
            State::Resolve { read_through: 5 },
            resolved(Status::Ok, true),
        );
        assert_eq!(next, go(State::AcquirePipeline { read_through: 5 }));
    }

    #[test]
    fn resolve_ok_remote_checks_replication_before_proxying() {
        let next = transition(
            State::Resolve { read_through: 0 },
            resolved(Status::Ok, false),
        );
        assert_eq!(next, go(State::AwaitDesiredReplicas { primary: false }));
    }

    #[test]
    fn resolve_not_ok_answers_the_status() {
        for status in [
            Status::JournalNotFound,
            Status::NoJournalPrimaryBroker,
            Status::Suspended,
        ] {
            let next = transition(State::Resolve { read_through: 0 }, resolved(status, true));
            assert_eq!(next, go(State::Respond(Reply::status(status))));
        }
    }

    #[test]
    fn resolve_suspended_with_resume_clears_the_suspension() {
        let event = Event::Resolved(Resolved {
            status: Status::Suspended,
            local: true,
            revision: 3,
            resumes: true,
        });
        let next = transition(State::Resolve { read_through: 9 }, event);
        assert_eq!(next, go(State::ResumeSuspended { read_through: 9 }));
    }

    #[test]
    fn resume_resolves_once_then_answers_a_still_suspended_journal() {
        let suspended = Event::Resolved(Resolved {
            status: Status::Suspended,
            local: true,
            revision: 3,
            resumes: true,
        });
        let next = transition(State::ResumeSuspended { read_through: 0 }, suspended);
        assert_eq!(next, go(State::Respond(Reply::status(Status::Suspended))));
        let next = transition(
            State::ResumeSuspended { read_through: 4 },
            resolved(Status::Ok, true),
        );
        assert_eq!(next, go(State::AcquirePipeline { read_through: 4 }));
        let next = transition(
            State::ResumeSuspended { read_through: 4 },
            resolved(Status::Ok, false),
        );
        assert_eq!(next, go(State::AwaitDesiredReplicas { primary: false }));
    }

    // --- AwaitDesiredReplicas ---

    #[test]
    fn too_many_members_wait_for_the_next_revision_keeping_the_pipeline() {
        for primary in [true, false] {
            let event = Event::Gap {
                gap: Ordering::Greater,
                revision: 10,
            };
            let next = transition(State::AwaitDesiredReplicas { primary }, event);
            assert_eq!(
                next,
                (
                    State::Resolve { read_through: 11 },
                    Effect::Release(Fate::Keep)
                )
            );
        }
    }

    #[test]
    fn too_few_members_answer_insufficient_brokers_keeping_the_pipeline() {
        for primary in [true, false] {
            let event = Event::Gap {
                gap: Ordering::Less,
                revision: 10,
            };
            let next = transition(State::AwaitDesiredReplicas { primary }, event);
            let reply = Reply::status(Status::InsufficientJournalBrokers);
            assert_eq!(next, (State::Respond(reply), Effect::Release(Fate::Keep)));
        }
    }

    #[test]
    fn desired_members_validate_as_primary_or_proxy() {
        let gap = |primary| {
            let event = Event::Gap {
                gap: Ordering::Equal,
                revision: 1,
            };
            transition(State::AwaitDesiredReplicas { primary }, event)
        };
        assert_eq!(gap(true), go(State::AwaitIndex));
        assert_eq!(gap(false), (State::Proxy, Effect::Release(Fate::Keep)));
    }

    // --- AcquirePipeline ---

    #[test]
    fn acquire_starts_the_pipeline_when_still_primary() {
        let next = transition(
            State::AcquirePipeline { read_through: 2 },
            resolved(Status::Ok, true),
        );
        assert_eq!(next, go(State::StartPipeline));
    }

    #[test]
    fn acquire_lets_the_spool_go_and_resolves_again_when_primacy_moved() {
        for (status, local) in [(Status::Ok, false), (Status::Suspended, true)] {
            let next = transition(
                State::AcquirePipeline { read_through: 2 },
                resolved(status, local),
            );
            assert_eq!(
                next,
                (
                    State::Resolve { read_through: 2 },
                    Effect::Release(Fate::Drop)
                )
            );
        }
    }

    // --- StartPipeline / OpenPipeline ---

    #[test]
    fn start_reuses_a_serving_pipeline_and_opens_otherwise() {
        let kept = |k| transition(State::StartPipeline, Event::Kept(k));
        // A kept pipeline was synchronized by the append that kept it.
        assert_eq!(kept(KeptPipeline::Serves), go(State::UpdateAssignments));
        assert_eq!(kept(KeptPipeline::Stale), go(State::OpenPipeline));
        assert_eq!(kept(KeptPipeline::None), go(State::OpenPipeline));
        assert_eq!(
            transition(State::OpenPipeline, Event::Done),
            go(sync_start())
        );
    }

    #[test]
    fn failing_to_open_lets_the_spool_go_as_it_is() {
        let next = transition(State::OpenPipeline, Event::Failed(err("dial")));
        assert_eq!(next, fail(err("dial"), Fate::Drop));
        let next = transition(State::StartPipeline, Event::Failed(err("x")));
        assert_eq!(next, fail(err("x"), Fate::Drop));
    }

    // --- SyncPipeline ---

    #[test]
    fn sync_agreed_updates_assignments() {
        let next = transition(sync_start(), Event::Synced(Synced::Ok));
        assert_eq!(next, go(State::UpdateAssignments));
    }

    #[test]
    fn sync_read_through_drops_the_pipeline_and_resolves_at_the_peers_revision() {
        let next = transition(sync_start(), Event::Synced(Synced::ReadThrough(42)));
        assert_eq!(
            next,
            (
                State::Resolve { read_through: 42 },
                Effect::Release(Fate::Drop)
            )
        );
    }

    #[test]
    fn sync_rolls_forward_adopting_the_peers_registers_and_keeps_them() {
        let roll = |end, registers| Event::Synced(Synced::RollTo { end, registers });
        let (next, effect) = transition(sync_start(), roll(100, Some(regs("theirs"))));
        assert_eq!(effect, Effect::None);
        assert_eq!(
            next,
            State::SyncPipeline {
                round: 1,
                roll_to: Some(100),
                registers: Some(regs("theirs")),
            }
        );
        // A later roll without registers keeps the adopted ones.
        let (next, _) = transition(next, roll(120, None));
        assert_eq!(
            next,
            State::SyncPipeline {
                round: 2,
                roll_to: Some(120),
                registers: Some(regs("theirs")),
            }
        );
    }

    #[test]
    fn sync_gives_up_after_the_last_round() {
        let last = State::SyncPipeline {
            round: MAX_SYNC_ROUNDS - 1,
            roll_to: Some(5),
            registers: None,
        };
        let roll = Event::Synced(Synced::RollTo {
            end: 10,
            registers: None,
        });
        let (next, effect) = transition(last, roll);
        assert_eq!(effect, Effect::Release(Fate::Rollback));
        assert_eq!(
            next,
            State::Failed(err(
                "gatherSync: replicas did not agree on a fragment after 8 proposals"
            ))
        );
    }

    #[test]
    fn sync_errors_roll_back_and_say_gather_sync() {
        let failed = Event::Failed(RpcError::new(Code::Unavailable, "peer gone"));
        let next = transition(sync_start(), failed);
        assert_eq!(next, fail(err("gatherSync: peer gone"), Fate::Rollback));
    }

    // --- UpdateAssignments ---

    #[test]
    fn written_assignments_resolve_again_keeping_the_pipeline() {
        let next = transition(State::UpdateAssignments, Event::Assignments(Some(77)));
        assert_eq!(
            next,
            (
                State::Resolve { read_through: 77 },
                Effect::Release(Fate::Keep)
            )
        );
    }

    #[test]
    fn consistent_assignments_check_the_replication() {
        let next = transition(State::UpdateAssignments, Event::Assignments(None));
        assert_eq!(next, go(State::AwaitDesiredReplicas { primary: true }));
        let next = transition(State::UpdateAssignments, Event::Failed(err("txn")));
        assert_eq!(next, fail(err("txn"), Fate::Drop));
    }

    // --- AwaitIndex ---

    #[test]
    fn await_index_validates_answers_unhealthy_stores_and_fails_on_close() {
        assert_eq!(
            transition(State::AwaitIndex, Event::Done),
            go(State::ValidatePreconditions)
        );
        let next = transition(State::AwaitIndex, Event::StoreUnhealthy("down".into()));
        assert_eq!(
            next,
            go(State::Respond(Reply::StoreUnhealthy("down".into())))
        );
        let next = transition(State::AwaitIndex, Event::IndexClosed);
        assert_eq!(
            next,
            fail(
                err("journal replica closed before its first listing"),
                Fate::Rollback
            )
        );
    }

    // --- ValidatePreconditions (the decisions themselves are tested in validate.rs) ---

    #[test]
    fn validation_maps_each_verdict_to_its_state() {
        let facts = validate::tests::facts();
        let next = transition(State::ValidatePreconditions, Event::Facts(Box::new(facts)));
        // A fresh spool at the index's start rolls after the first write.
        assert_eq!(
            next,
            go(State::RollSpool {
                plan: plan(Some(0), Status::Ok)
            })
        );
        assert_eq!(
            on_verdict(Verdict::Reject {
                status: Status::WrongAppendOffset,
                registers: None
            }),
            go(State::Respond(Reply::status(Status::WrongAppendOffset)))
        );
        assert_eq!(
            on_verdict(Verdict::SuspendFully { offset: 3 }),
            go(State::SuspendFully { offset: 3 })
        );
        let p = plan(Some(3), Status::Suspended);
        assert_eq!(
            on_verdict(Verdict::Proceed {
                suspend: Some((Level::Partial, 3)),
                plan: p.clone()
            }),
            go(State::UpdateSuspend {
                level: Level::Partial,
                offset: 3,
                plan: p
            })
        );
    }

    #[test]
    fn register_mismatch_answers_with_the_registers() {
        let mut facts = validate::tests::facts();
        facts.registers = regs("a");
        facts.check_registers = Some(validate::tests::sel(&[("k", "b")]));
        let next = transition(State::ValidatePreconditions, Event::Facts(Box::new(facts)));
        let reply = Reply::Status {
            status: Status::RegisterMismatch,
            registers: Some(regs("a")),
        };
        assert_eq!(next, go(State::Respond(reply)));
    }

    // --- UpdateSuspend / SuspendFully / RollSpool ---

    #[test]
    fn suspension_updates_then_roll_then_stream() {
        let p = plan(Some(8), Status::Suspended);
        let next = transition(
            State::UpdateSuspend {
                level: Level::Partial,
                offset: 8,
                plan: p.clone(),
            },
            Event::Done,
        );
        assert_eq!(next, go(State::RollSpool { plan: p.clone() }));
        let next = transition(State::RollSpool { plan: p }, Event::Done);
        assert_eq!(
            next,
            go(State::StreamContent {
                final_status: Status::Suspended
            })
        );
    }

    #[test]
    fn full_suspension_answers_the_new_resolutions_status() {
        let next = transition(
            State::SuspendFully { offset: 4 },
            resolved(Status::Suspended, true),
        );
        assert_eq!(next, go(State::Respond(Reply::status(Status::Suspended))));
    }

    #[test]
    fn failures_after_synchronization_roll_back() {
        for state in [
            State::UpdateSuspend {
                level: Level::None,
                offset: 0,
                plan: plan(None, Status::Ok),
            },
            State::SuspendFully { offset: 0 },
            State::RollSpool {
                plan: plan(None, Status::Ok),
            },
            State::StreamContent {
                final_status: Status::Ok,
            },
            State::UpdateRegisters {
                final_status: Status::Ok,
            },
            State::AwaitIndex,
            State::ValidatePreconditions,
            State::Respond(Reply::status(Status::Ok)),
        ] {
            let next = transition(state, Event::Failed(err("io")));
            assert_eq!(next, fail(err("io"), Fate::Rollback));
        }
    }

    // --- StreamContent ---

    #[test]
    fn refused_content_rolls_the_spool_back_and_answers_not_allowed() {
        let event = Event::Streamed(Streamed {
            not_allowed: true,
            appended: 0,
            modifies_registers: true,
            has_peers: true,
        });
        let next = transition(
            State::StreamContent {
                final_status: Status::Ok,
            },
            event,
        );
        assert_eq!(
            next,
            (
                State::Respond(Reply::status(Status::NotAllowed)),
                Effect::RollbackSpool
            )
        );
    }

    #[test]
    fn an_empty_append_answers_at_once_unless_it_modifies_registers() {
        let s = State::StreamContent {
            final_status: Status::Suspended,
        };
        assert_eq!(
            transition(s.clone(), streamed(0, false, true)),
            go(State::Respond(Reply::Committed {
                status: Status::Suspended
            }))
        );
        assert_eq!(
            transition(s, streamed(0, true, true)),
            fail(
                err("append stream: register modification requires non-empty Append"),
                Fate::Rollback
            )
        );
    }

    #[test]
    fn content_commits_through_the_peers_or_locally() {
        let s = State::StreamContent {
            final_status: Status::Ok,
        };
        assert_eq!(
            transition(s.clone(), streamed(5, true, true)),
            go(State::AwaitCommit {
                final_status: Status::Ok
            })
        );
        assert_eq!(
            transition(s, streamed(5, false, false)),
            go(State::UpdateRegisters {
                final_status: Status::Ok
            })
        );
    }

    // --- AwaitCommit / KeepProposed / UpdateRegisters / Respond ---

    #[test]
    fn a_proposed_commit_lets_the_spool_go_then_awaits_its_acknowledgements() {
        let next = transition(
            State::AwaitCommit {
                final_status: Status::Suspended,
            },
            Event::Done,
        );
        assert_eq!(
            next,
            (
                State::AwaitAcks {
                    final_status: Status::Suspended
                },
                Effect::Release(Fate::Keep)
            )
        );
        let next = transition(next.0, Event::Done);
        assert_eq!(
            next,
            go(State::Respond(Reply::Committed {
                status: Status::Suspended
            }))
        );
    }

    #[test]
    fn unacknowledged_commits_fail_without_touching_the_spool() {
        let next = transition(
            State::AwaitAcks {
                final_status: Status::Ok,
            },
            Event::Failed(err("peer reset")),
        );
        assert_eq!(next, (State::Failed(err("peer reset")), Effect::None));
        assert!(
            !State::AwaitAcks {
                final_status: Status::Ok
            }
            .holds_spool()
        );
    }

    #[test]
    fn a_local_commit_updates_registers_then_answers() {
        let next = transition(
            State::UpdateRegisters {
                final_status: Status::Ok,
            },
            Event::Done,
        );
        assert_eq!(
            next,
            go(State::Respond(Reply::Committed { status: Status::Ok }))
        );
    }

    #[test]
    fn a_failed_commit_round_keeps_the_proposed_content_then_fails() {
        let next = transition(
            State::AwaitCommit {
                final_status: Status::Ok,
            },
            Event::Failed(err("peer reset")),
        );
        assert_eq!(
            next,
            go(State::KeepProposed {
                error: err("peer reset")
            })
        );
        let next = transition(next.0, Event::Done);
        assert_eq!(next, fail(err("peer reset"), Fate::Rollback));
    }

    #[test]
    fn a_sent_reply_keeps_the_pipeline_and_a_failed_send_rolls_back() {
        let respond = State::Respond(Reply::Committed { status: Status::Ok });
        assert_eq!(
            transition(respond.clone(), Event::Done),
            (State::Done, Effect::Release(Fate::Keep))
        );
        assert_eq!(
            transition(respond, Event::Failed(err("reset"))),
            fail(err("reset"), Fate::Rollback)
        );
    }

    // --- Errors before synchronization, terminal states, unexpected events ---

    #[test]
    fn failures_before_synchronization_let_the_spool_go() {
        for state in [
            State::Resolve { read_through: 0 },
            State::ResumeSuspended { read_through: 0 },
            State::AcquirePipeline { read_through: 0 },
        ] {
            let next = transition(state, Event::Failed(err("resolve")));
            assert_eq!(next, fail(err("resolve"), Fate::Drop));
        }
    }

    #[test]
    fn terminal_states_stay() {
        for state in [State::Proxy, State::Done, State::Failed(err("x"))] {
            assert_eq!(transition(state.clone(), Event::Done), go(state));
        }
    }

    #[test]
    fn an_unexpected_event_fails_with_an_internal_error() {
        let (next, effect) = transition(State::StartPipeline, Event::Done);
        assert_eq!(effect, Effect::Release(Fate::Rollback));
        let State::Failed(e) = next else {
            panic!("expected a failure, got {next:?}")
        };
        assert_eq!(e.code, Code::Internal);
        assert!(e.message.contains("unexpected Done in state StartPipeline"));
    }

    /// One of each state and of each event (with the data variants that change decisions).
    fn all_states() -> Vec<State> {
        let p = plan(None, Status::Ok);
        vec![
            State::Resolve { read_through: 0 },
            State::ResumeSuspended { read_through: 0 },
            State::AwaitDesiredReplicas { primary: true },
            State::AwaitDesiredReplicas { primary: false },
            State::AcquirePipeline { read_through: 0 },
            State::StartPipeline,
            State::OpenPipeline,
            sync_start(),
            State::SyncPipeline {
                round: MAX_SYNC_ROUNDS - 1,
                roll_to: None,
                registers: None,
            },
            State::UpdateAssignments,
            State::AwaitIndex,
            State::ValidatePreconditions,
            State::UpdateSuspend {
                level: Level::None,
                offset: 0,
                plan: p.clone(),
            },
            State::SuspendFully { offset: 0 },
            State::RollSpool { plan: p },
            State::StreamContent {
                final_status: Status::Ok,
            },
            State::AwaitCommit {
                final_status: Status::Ok,
            },
            State::AwaitAcks {
                final_status: Status::Ok,
            },
            State::KeepProposed { error: err("x") },
            State::UpdateRegisters {
                final_status: Status::Ok,
            },
            State::Respond(Reply::status(Status::Ok)),
            State::Proxy,
            State::Done,
            State::Failed(err("x")),
        ]
    }

    fn all_events() -> Vec<Event> {
        let mut events = vec![
            Event::Done,
            Event::Kept(KeptPipeline::None),
            Event::Kept(KeptPipeline::Serves),
            Event::Kept(KeptPipeline::Stale),
            Event::Synced(Synced::Ok),
            Event::Synced(Synced::ReadThrough(3)),
            Event::Synced(Synced::RollTo {
                end: 3,
                registers: None,
            }),
            Event::Assignments(None),
            Event::Assignments(Some(3)),
            Event::StoreUnhealthy("x".into()),
            Event::IndexClosed,
            Event::Facts(Box::new(validate::tests::facts())),
            Event::Failed(err("x")),
        ];
        for (status, local, resumes) in [
            (Status::Ok, true, false),
            (Status::Ok, false, false),
            (Status::Suspended, true, true),
            (Status::JournalNotFound, true, false),
        ] {
            events.push(Event::Resolved(Resolved {
                status,
                local,
                revision: 1,
                resumes,
            }));
        }
        for gap in [Ordering::Less, Ordering::Equal, Ordering::Greater] {
            events.push(Event::Gap { gap, revision: 1 });
        }
        for (not_allowed, appended, has_peers) in [
            (true, 0, true),
            (false, 0, true),
            (false, 1, true),
            (false, 1, false),
        ] {
            events.push(Event::Streamed(Streamed {
                not_allowed,
                appended,
                modifies_registers: false,
                has_peers,
            }));
        }
        events
    }

    /// The driver's two loops rely on these: a state that holds the spool is only ever
    /// reached from one that holds it (or from AcquirePipeline, which takes it), every
    /// release leads to a state that does not need the spool, and the spool is never let
    /// go of silently (a terminal state is reached from a held one only with a release).
    #[test]
    fn the_spool_is_held_exactly_where_the_driver_expects_it() {
        for state in all_states() {
            let held = state.holds_spool() || matches!(state, State::AcquirePipeline { .. });
            for event in all_events() {
                let seen_event = format!("{event:?}");
                let (next, effect) = transition(state.clone(), event);
                let seen = format!("{state:?} + {seen_event} -> {next:?}, {effect:?}");
                if let Effect::Release(_) = effect {
                    assert!(!next.holds_spool(), "released into a held state: {seen}");
                    assert!(!matches!(next, State::AcquirePipeline { .. }), "{seen}");
                }
                if !held && !matches!(state, State::Respond(_)) {
                    assert!(
                        !next.holds_spool(),
                        "a free state reached a held one: {seen}"
                    );
                    assert_ne!(effect, Effect::RollbackSpool, "{seen}");
                }
                if held && next.is_terminal() {
                    assert!(matches!(effect, Effect::Release(_)), "silent drop: {seen}");
                }
                if matches!(state, State::Respond(_)) && !next.is_terminal() {
                    panic!("a reply leads nowhere but an end: {seen}");
                }
            }
        }
    }
}
