//! The Append RPC as Gazette's appendFSM: a state machine ([`fsm`]) whose named states
//! resolve the journal, acquire its pipeline (the spool), start or reuse the pipeline and
//! sync it (rolling forward), advertise the Route, validate the preconditions ([`validate`]),
//! stream the content ([`stream`]), await the commit and update the registers ([`commit`]),
//! and release the spool and pipeline (or proxy, or answer a status, or fail). The
//! machine's transitions are pure; the driver here performs each state's action and feeds
//! its outcome back.
//!
//! Appends are pipelined: with peers, an append lets go of the spool and the pipeline as
//! soon as its commit proposal is sent (and committed to this broker's spool), so the next
//! append streams while it awaits its acknowledgements in turn (`pipeline::Turn`); the
//! commit is shown to readers only once every peer acknowledged it.
//!
//! Lives on: the journal's owner core. The spool is held through an async mutex (Gazette's
//! "acquire pipeline"), never through a `RefCell` borrow across an `.await`; the driver
//! holds it only inside [`Driver::hold`], so that letting go of it is one scope's end.

mod commit;
mod fsm;
mod route;
mod stream;
mod sync;
mod validate;

// The simulation (test builds) proposes rolls as the append does.
#[allow(unused_imports)]
pub(crate) use sync::empty_at;

use crate::core::Core;
use crate::core::call::{CallIn, CallOut};
use crate::journal::journals::Journals;
use crate::journal::pipeline::Pipeline;
use crate::journal::replica::Replica;
use crate::journal::routing::resolver::Resolution;
use fsm::{Effect, Event, Fate, KeptPipeline, Reply, Resolved, State, Streamed, transition};
use protocol::append_request::Suspend as SuspendMode;
use protocol::grpc::RpcError;
use protocol::journal_spec::suspend::Level;
use protocol::{AppendRequest, AppendResponse, JournalSpec, LabelSet, Route, Status};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Instant, SystemTime};
use storage::spool::Spool;
use stream::{Record, StreamCtx};
use validate::{Preconditions, may_carry_content, may_write, suspend_of};

/// Serves one Append call: `req` is its first message, `input` the rest of the client's
/// stream and `out` the reply.
pub async fn append(
    journals: &Rc<Journals>,
    req: AppendRequest,
    input: &mut CallIn,
    out: &mut CallOut,
) -> Result<(), RpcError> {
    crate::errors::validate_append(&req)?;
    let driver = Driver {
        journals,
        core: &journals.core,
        req,
        input,
        out,
        res: None,
        acquired: Instant::now(),
        registers: LabelSet::default(),
        record: Record::default(),
        proposed: None,
    };
    driver.run().await
}

/// What the spool's holder holds: the journal's replica, its locked spool and, once
/// started, the pipeline.
struct Held<'r> {
    replica: &'r Rc<Replica>,
    spool: tokio::sync::MutexGuard<'r, Spool>,
    pln: Option<Pipeline>,
    /// A kept pipeline built for another Route, closed before a new one opens.
    stale: Option<Pipeline>,
}

impl Held<'_> {
    /// The started pipeline (every state after StartPipeline has one).
    fn pipeline(&mut self) -> &mut Pipeline {
        self.pln
            .as_mut()
            .expect("the pipeline is started before it is used")
    }

    /// Takes the replica's kept pipeline: reused if it serves `route`.
    fn take_kept(&mut self, route: &Route) -> KeptPipeline {
        let kept = self.replica.pipeline.borrow_mut().take();
        match kept {
            Some(p) if p.serves(route) && !p.broken() => {
                self.pln = Some(p);
                KeptPipeline::Serves
            }
            Some(stale) => {
                self.stale = Some(stale);
                KeptPipeline::Stale
            }
            None => KeptPipeline::None,
        }
    }

    /// Lets go of the pipeline as `fate` says (the spool goes with `self`).
    fn release(&mut self, core: &Core, fate: Fate) {
        if fate == Fate::Rollback {
            // Replicas roll back what this append sent them when its streams reset.
            self.spool.rollback();
        }
        match (fate, self.pln.take()) {
            (Fate::Keep, Some(pln)) => sync::keep_pipeline(core, self.replica, pln),
            (_, pln) => drop(pln),
        }
    }
}

/// The latest resolution (the machine starts by resolving), borrowed apart from the
/// driver's other fields.
fn resolution(res: &Option<Rc<Resolution>>) -> &Resolution {
    res.as_ref().expect("the append resolves first")
}

/// The resolved journal's spec (every state after an OK resolution has one).
fn spec_of(res: &Option<Rc<Resolution>>) -> &JournalSpec {
    resolution(res)
        .spec
        .as_ref()
        .expect("an OK resolution has a spec")
}

/// Runs one Append call through the machine.
struct Driver<'a> {
    /// This core's journals (the replica's table), and its runtime.
    journals: &'a Rc<Journals>,
    core: &'a Rc<Core>,
    req: AppendRequest,
    input: &'a mut CallIn,
    out: &'a mut CallOut,
    /// The latest resolution (the first state resolves).
    res: Option<Rc<Resolution>>,
    /// When the synchronized primary began validating (the commit's latency metric).
    acquired: Instant,
    /// The journal's registers as validated; the commit updates them.
    registers: LabelSet,
    /// The streamed content's figures, for the commit and the reply.
    record: Record,
    /// The commit proposed and awaiting its acknowledgements (AwaitCommit to AwaitAcks).
    proposed: Option<commit::Proposed>,
}

impl Driver<'_> {
    async fn run(mut self) -> Result<(), RpcError> {
        let mut state = State::Resolve { read_through: 0 };
        loop {
            state = match state {
                State::Done => return Ok(()),
                State::Failed(err) => return Err(err),
                State::Proxy => return Box::pin(self.proxy()).await,
                State::AcquirePipeline { read_through } => self.hold(read_through).await,
                free => {
                    let event = self.perform_free(&free).await;
                    transition(free, event).0
                }
            };
        }
    }

    /// Takes the journal's replica and spool, and drives the machine while holding them,
    /// until a transition lets them go (or the call ends); returns the next state.
    async fn hold(&mut self, read_through: i64) -> State {
        let mut state = State::AcquirePipeline { read_through };
        let journal = self.res().journal.clone();
        let replica = match self.journals.replica(&journal).await {
            Ok(replica) => replica,
            Err(err) => return transition(state, Event::Failed(err)).0,
        };
        let mut held = Held {
            replica: &replica,
            spool: replica.spool.lock().await,
            pln: None,
            stale: None,
        };
        // Discard content of any earlier append that was abandoned mid-stream (its task was
        // dropped on a deadline or cancellation before it could roll back itself).
        held.spool.rollback();
        loop {
            let event = self.perform_held(&state, &mut held).await;
            let (next, effect) = transition(state, event);
            match effect {
                Effect::None => {}
                Effect::RollbackSpool => held.spool.rollback(),
                Effect::Release(fate) => {
                    held.release(self.core, fate);
                    return next;
                }
            }
            if next.is_terminal() {
                return next;
            }
            debug_assert!(
                next.holds_spool() || matches!(next, State::Respond(_)),
                "{next:?} reached without the spool's release"
            );
            state = next;
        }
    }

    /// The actions of the states that run without the spool.
    async fn perform_free(&mut self, state: &State) -> Event {
        match state {
            State::Resolve { read_through } => {
                if *read_through > 0 {
                    self.core.keyspace.wait_for(*read_through).await;
                }
                self.resolve().await
            }
            State::ResumeSuspended { .. } => {
                let offset = suspend_of(self.res().spec.as_ref()).1;
                match Box::pin(route::update_suspend(
                    self.core,
                    self.res(),
                    Level::None,
                    offset,
                ))
                .await
                {
                    Ok(()) => self.resolve().await,
                    Err(err) => Event::Failed(err),
                }
            }
            State::AwaitDesiredReplicas { .. } => {
                let res = self.res();
                Event::Gap {
                    gap: route::replication_gap(self.core, res),
                    revision: res.snapshot.revision,
                }
            }
            State::AwaitAcks { .. } => {
                let proposed = self.proposed.take().expect("AwaitCommit proposed");
                let journal = &resolution(&self.res).journal;
                let awaited =
                    commit::await_acks(self.core, proposed, journal, &self.record, self.acquired);
                match awaited.await {
                    Ok(()) => Event::Done,
                    Err(err) => Event::Failed(err),
                }
            }
            State::Respond(reply) => self.respond(reply).await,
            // The machine never leads here (`fsm` tests the spool's states).
            held => Event::Failed(RpcError::internal(format!(
                "append: {held:?} runs only with the journal's spool"
            ))),
        }
    }

    /// The actions of the states that run with the spool held.
    async fn perform_held(&mut self, state: &State, held: &mut Held<'_>) -> Event {
        let core = self.core;
        let outcome = match state {
            State::AcquirePipeline { .. } => return self.resolve().await,
            State::StartPipeline => {
                let route = self.res().header.route.as_ref();
                return Event::Kept(held.take_kept(route.unwrap_or(&Route::default())));
            }
            State::OpenPipeline => Box::pin(self.open_pipeline(held))
                .await
                .map(|()| Event::Done),
            State::SyncPipeline {
                roll_to, registers, ..
            } => Box::pin(sync::sync_round(
                core,
                held,
                self.spec(),
                *roll_to,
                registers.as_ref(),
            ))
            .await
            .map(Event::Synced),
            State::UpdateAssignments => Box::pin(route::update_assignments(core, self.res()))
                .await
                .map(Event::Assignments),
            State::AwaitIndex => return Box::pin(self.await_index(held)).await,
            State::ValidatePreconditions => {
                return Event::Facts(Box::new(self.preconditions(held)));
            }
            State::UpdateSuspend { level, offset, .. } => {
                Box::pin(route::update_suspend(core, self.res(), *level, *offset))
                    .await
                    .map(|()| Event::Done)
            }
            State::SuspendFully { offset } => {
                match Box::pin(route::update_suspend(
                    core,
                    self.res(),
                    Level::Full,
                    *offset,
                ))
                .await
                {
                    Ok(()) => return self.resolve().await,
                    Err(err) => Err(err),
                }
            }
            State::RollSpool { plan } => {
                Box::pin(sync::roll_if_due(core, held, self.spec(), plan.roll_to))
                    .await
                    .map(|()| Event::Done)
            }
            State::StreamContent { .. } => self.stream(held).await.map(Event::Streamed),
            State::AwaitCommit { .. } => {
                let registers = self.next_registers();
                commit::propose(core, held, registers, &mut self.record)
                    .await
                    .map(|proposed| {
                        self.proposed = Some(proposed);
                        Event::Done
                    })
            }
            State::KeepProposed { .. } => {
                let journal = &self.res().journal;
                Box::pin(commit::keep_proposed(
                    &mut held.spool,
                    self.next_registers(),
                    journal,
                ))
                .await;
                Ok(Event::Done)
            }
            State::UpdateRegisters { .. } => {
                let registers = self.next_registers();
                let journal = &resolution(&self.res).journal;
                commit::commit(held, registers, &mut self.record, journal, self.acquired)
                    .await
                    .map(|()| Event::Done)
            }
            free => return self.perform_free(free).await,
        };
        outcome.unwrap_or_else(Event::Failed)
    }

    async fn resolve(&mut self) -> Event {
        // A resolution is a pure function of the keyspace snapshot and the request: while
        // the core's snapshot is still the one the last resolution read (the usual case when
        // the spool is acquired), resolving again would rebuild the same Resolution.
        let reuse = self
            .res
            .as_ref()
            .is_some_and(|res| Arc::ptr_eq(&res.snapshot, &self.core.keyspace.current()));
        if !reuse {
            match route::resolve(self.core, &self.journals.resolved, &self.req).await {
                Ok(res) => self.res = Some(res),
                Err(err) => return Event::Failed(err),
            }
        }
        let res = self.res();
        Event::Resolved(Resolved {
            status: res.status,
            local: res.local,
            revision: res.snapshot.revision,
            resumes: self.req.suspend == SuspendMode::Resume as i32,
        })
    }

    /// The latest resolution.
    fn res(&self) -> &Resolution {
        resolution(&self.res)
    }

    /// The journal's spec.
    fn spec(&self) -> &JournalSpec {
        spec_of(&self.res)
    }

    fn next_registers(&self) -> LabelSet {
        commit::next_registers(
            &self.registers,
            self.req.subtract_registers.as_ref(),
            self.req.union_registers.as_ref(),
        )
    }

    /// Closes a stale kept pipeline and opens one for the resolved Route, once no commit of
    /// an earlier pipeline awaits acknowledgements (the new one's sync may roll the spool,
    /// which shows what it completes to readers).
    async fn open_pipeline(&self, held: &mut Held<'_>) -> Result<(), RpcError> {
        if let Some(stale) = held.stale.take() {
            stale.close();
        }
        held.replica.awaiting.drained().await;
        let res = self.res();
        held.pln = Some(Pipeline::open(self.core, &res.journal, &res.header).await?);
        Ok(())
    }

    /// The journal's first store must be healthy, and its stores listed at least once.
    async fn await_index(&mut self, held: &Held<'_>) -> Event {
        self.acquired = Instant::now();
        let first_store = self.core.stores.first_store_of(self.spec());
        if let Some(first_store) = first_store
            && let Err(error) =
                crate::journal::store_health::await_healthy(self.core, first_store).await
        {
            return Event::StoreUnhealthy(error);
        }
        loop {
            let changed = held.replica.index.borrow().changed();
            if held.replica.index.borrow().refreshed() {
                return Event::Done;
            }
            changed.await;
            if held.replica.index.borrow().is_closed() {
                return Event::IndexClosed;
            }
        }
    }

    /// Copies the preconditions' facts out of the spool, the index, the spec and the
    /// request; remembers the registers the commit updates.
    fn preconditions(&mut self, held: &Held<'_>) -> Preconditions {
        let spec = spec_of(&self.res);
        let (level, suspend_offset) = suspend_of(Some(spec));
        let (index_min, index_max, index_mod_time) = held.replica.index.borrow().summary();
        self.registers = held.spool.registers().clone();
        Preconditions {
            registers: self.registers.clone(),
            check_registers: self.req.check_registers.clone(),
            spool_begin: held.spool.fragment().begin,
            spool_end: held.spool.fragment().end,
            index_min,
            index_max,
            index_mod_time,
            wrote_before: held.replica.wrote_before,
            level,
            suspend_offset,
            flags: spec.flags,
            flush_interval: validate::flush_interval(spec),
            offset: self.req.offset,
            suspend_mode: self.req.suspend,
            now: validate::unix_secs(SystemTime::now()),
        }
    }

    async fn stream(&mut self, held: &mut Held<'_>) -> Result<Streamed, RpcError> {
        let spec = spec_of(&self.res);
        let cx = StreamCtx {
            core: self.core,
            journal: &resolution(&self.res).journal,
            spec,
            may_append: may_write(spec.flags) && may_carry_content(self.req.suspend),
        };
        stream::stream(&cx, held, self.input, &mut self.record).await?;
        Ok(Streamed {
            not_allowed: self.record.not_allowed,
            appended: self.record.appended,
            modifies_registers: self.req.union_registers.is_some()
                || self.req.subtract_registers.is_some(),
            has_peers: held.pipeline().has_peers(),
        })
    }

    async fn respond(&mut self, reply: &Reply) -> Event {
        // The reply is the call's last message: its header is taken, not copied, unless
        // the resolution is shared (`Journals::resolved`).
        let header = match self.res.as_mut() {
            Some(res) => match Rc::get_mut(res) {
                Some(res) => std::mem::take(&mut res.header),
                None => res.header.clone(),
            },
            None => Default::default(),
        };
        let resp = match reply {
            Reply::Status { status, registers } => AppendResponse {
                status: *status as i32,
                header: Some(header),
                registers: registers.clone(),
                ..Default::default()
            },
            Reply::StoreUnhealthy(error) => AppendResponse {
                status: Status::FragmentStoreUnhealthy as i32,
                header: Some(header),
                store_health_error: error.clone(),
                ..Default::default()
            },
            Reply::Committed { status } => {
                commit::committed_reply(&self.record, &self.res().journal, header, *status)
            }
        };
        match self.out.send(&resp).await {
            Ok(()) => Event::Done,
            Err(err) => Event::Failed(err),
        }
    }

    async fn proxy(self) -> Result<(), RpcError> {
        let header = self.res().header.clone();
        crate::journal::routing::proxy::append(self.core, self.req, header, self.input, self.out)
            .await
    }
}
