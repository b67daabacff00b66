//! The Append RPC, as a sequence of Gazette's append-FSM steps on the journal's owner core:
//! resolve → acquire the spool → validate preconditions → (update suspension) → stream
//! content → commit (or roll back).
//!
//! Lives on: the journal's owner core. The spool is held through an async mutex (Gazette's
//! "acquire pipeline"), never through a `RefCell` borrow across an `.await`.

use crate::call::{CallIn, CallOut};
use crate::core::Core;
use crate::flow::MinRate;
use crate::pipeline::{MAX_SYNC_ROUNDS, Pipeline, Synced};
use crate::replica::Replica;
use crate::resolver::{self, Args, Resolution};
use protocol::append_request::Suspend as SuspendMode;
use protocol::grpc::RpcError;
use protocol::journal_spec::suspend::Level;
use protocol::validate::Validate;
use protocol::{AppendRequest, AppendResponse, Fragment, JournalSpec, LabelSet, Status};
use std::cmp::Ordering;
use std::rc::Rc;
use std::time::{SystemTime, UNIX_EPOCH};
use storage::Summer;
use storage::spool::Spool;

pub async fn append(
    core: &Rc<Core>,
    req: AppendRequest,
    input: &mut CallIn,
    out: &mut CallOut,
) -> Result<(), RpcError> {
    crate::errors::validate_append(&req)?;
    let mut wait_revision = 0i64;
    let mut slot: Option<Rc<Replica>>;
    // Resolve, acquire the spool and sync the pipeline, until this broker is the
    // journal's primary with a synchronized, consistent and complete Route (or proxies).
    let (res, mut spool, mut pln) = loop {
        if wait_revision > 0 {
            core.keyspace.wait_for(wait_revision).await;
        }
        let mut res = resolve(core, &req).await?;
        // A suspended journal resumes on an ordinary append (SUSPEND_RESUME).
        if res.status == Status::Suspended && req.suspend == SuspendMode::Resume as i32 {
            let offset = suspend_of(res.spec.as_ref()).1;
            update_suspend(core, &res, Level::None, offset).await?;
            res = resolve(core, &req).await?;
        }
        if res.status != Status::Ok {
            return respond_status(out, res.status, res.header, None).await;
        }
        if !res.local {
            // Another broker is primary: once the Route is complete, proxy to it.
            match replication_gap(core, &res) {
                Ordering::Greater => {
                    wait_revision = res.snapshot.revision + 1;
                    continue;
                }
                Ordering::Less => {
                    return respond_status(
                        out,
                        Status::InsufficientJournalBrokers,
                        res.header,
                        None,
                    )
                    .await;
                }
                Ordering::Equal => {}
            }
            return crate::proxy::append(core, req, res.header, input, out).await;
        }
        slot = Some(core.replica(&res.journal).await?);
        let replica = slot.as_ref().expect("just set");
        let mut spool = replica.spool.lock().await;
        // Discard content of any earlier append that was abandoned mid-stream (its task was
        // dropped on a deadline or cancellation before it could roll back itself).
        spool.rollback();
        // The keyspace may have moved while we waited for the spool: resolve again.
        let res = resolve(core, &req).await?;
        if res.status != Status::Ok || !res.local {
            drop(spool);
            continue;
        }
        let spec = res.spec.clone().expect("an OK resolution has a spec");
        let route = res.header.route.clone().unwrap_or_default();

        // The pipeline: reuse the replica's if it was built for this Route.
        let kept = replica.pipeline.borrow_mut().take();
        let mut pln = match kept {
            Some(p) if p.serves(&route) => p,
            other => {
                if let Some(stale) = other {
                    stale.close();
                }
                Pipeline::open(core, &res.journal, &res.header).await?
            }
        };
        match sync(core, replica, &mut spool, &mut pln, &spec).await {
            Ok(Synced::Ok) => {}
            Ok(Synced::ReadThrough(rev)) => {
                wait_revision = rev;
                continue;
            }
            Ok(Synced::RollTo { .. }) => unreachable!("sync resolves roll-forwards itself"),
            Err(err) => {
                spool.rollback();
                return Err(RpcError::unknown(format!("gatherSync: {}", err.message)));
            }
        }
        // Advertise the synchronized Route in the assignments, then resolve again.
        if let Some(rev) = update_assignments(core, &res).await? {
            keep_pipeline(core, replica, pln);
            wait_revision = rev;
            continue;
        }
        match replication_gap(core, &res) {
            Ordering::Greater => {
                // The allocator is about to remove a member: wait for it.
                keep_pipeline(core, replica, pln);
                wait_revision = res.snapshot.revision + 1;
                continue;
            }
            Ordering::Less => {
                keep_pipeline(core, replica, pln);
                return respond_status(out, Status::InsufficientJournalBrokers, res.header, None)
                    .await;
            }
            Ordering::Equal => {}
        }
        break (res, spool, pln);
    };
    let replica = slot.as_ref().expect("set before the spool was taken");
    let outcome =
        validate_and_stream(core, &req, res, replica, &mut spool, &mut pln, input, out).await;
    match outcome {
        Ok(()) => {
            keep_pipeline(core, replica, pln);
        }
        Err(_) => {
            // Replicas roll back what this append sent them when its streams reset.
            spool.rollback();
            drop(pln);
        }
    }
    outcome
}

/// The FSM from "validate preconditions" on, as the journal's synchronized primary.
#[allow(clippy::too_many_arguments)]
async fn validate_and_stream(
    core: &Rc<Core>,
    req: &AppendRequest,
    res: Resolution,
    replica: &Rc<Replica>,
    spool: &mut Spool,
    pln: &mut Pipeline,
    input: &mut CallIn,
    out: &mut CallOut,
) -> Result<(), RpcError> {
    let acquired = std::time::Instant::now();
    let spec = res.spec.clone().expect("an OK resolution has a spec");

    // The journal's first store must be healthy, and its stores listed at least once.
    let first_store = core.stores.stores_of(&spec).into_iter().next();
    if let Some(first_store) = first_store
        && let Err(error) = crate::stores::await_healthy(core, &first_store).await
    {
        let resp = AppendResponse {
            status: Status::FragmentStoreUnhealthy as i32,
            header: Some(res.header),
            store_health_error: error,
            ..Default::default()
        };
        return out.send(&resp).await;
    }
    loop {
        let changed = replica.index.borrow().changed();
        if replica.index.borrow().refreshed() {
            break;
        }
        changed.await;
        if replica.index.borrow().is_closed() {
            return Err(RpcError::unknown(
                "journal replica closed before its first listing",
            ));
        }
    }

    // Validate preconditions, in Gazette's order.
    let registers = spool.registers().clone();
    if let Some(check) = &req.check_registers
        && !registers.labels.is_empty()
        && !protocol::labels::matches(check, &registers)
    {
        return respond_status(out, Status::RegisterMismatch, res.header, Some(registers)).await;
    }
    let (level, suspend_offset) = suspend_of(Some(&spec));
    let mut roll_to: Option<i64> = None;
    if spool.fragment().end < suspend_offset {
        roll_to = Some(suspend_offset);
    }
    let (index_min, index_max, index_mod_time) = replica.index.borrow().summary();
    // Courant's single node is the journal's only writer: when its own earlier fragments
    // were all persisted (and their local files removed), its empty spool resumes at the
    // listed write head rather than failing with INDEX_HAS_GREATER_OFFSET. A journal this
    // broker never wrote keeps Gazette's rule (`gazctl journals reset-head`).
    if roll_to.is_none()
        && replica.wrote_before
        && spool.fragment().begin == spool.fragment().end
        && spool.fragment().end < index_max
    {
        roll_to = Some(index_max);
    }
    let spool_end = roll_to.unwrap_or(spool.fragment().end);
    let max_offset = spool_end.max(index_max);
    if spool_end != max_offset && req.offset == 0 && may_write(&spec) {
        return respond_status(out, Status::IndexHasGreaterOffset, res.header, None).await;
    }
    if req.offset != 0 && req.offset != max_offset {
        return respond_status(out, Status::WrongAppendOffset, res.header, None).await;
    }
    if req.offset != 0 && spool_end != max_offset {
        roll_to = Some(max_offset);
    }
    let spool_end = roll_to.unwrap_or(spool_end);

    let mut final_status = Status::Ok;
    match SuspendMode::try_from(req.suspend).unwrap_or(SuspendMode::Resume) {
        SuspendMode::Resume if level != Level::None => {
            update_suspend(core, &res, Level::None, spool_end).await?;
        }
        SuspendMode::NoResume if level != Level::None => {
            return respond_status(out, Status::Suspended, res.header, None).await;
        }
        SuspendMode::IfFlushed | SuspendMode::Now => {
            if level != Level::Full && index_min == index_max {
                update_suspend(core, &res, Level::Full, spool_end).await?;
                let res = resolve(core, req).await?;
                return respond_status(out, res.status, res.header, None).await;
            }
            // The index is "clean" when its last fragment has been persisted for longer
            // than the flush interval (24 h when unset): the journal is idle.
            let flush_secs = spec
                .fragment
                .as_ref()
                .and_then(|f| f.flush_interval)
                .map_or(0, |d| d.seconds);
            let flush_secs = if flush_secs == 0 {
                24 * 60 * 60
            } else {
                flush_secs
            };
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64);
            let index_dirty = index_mod_time == 0 || index_mod_time > now - flush_secs;
            if level == Level::None && (!index_dirty || req.suspend == SuspendMode::Now as i32) {
                update_suspend(core, &res, Level::Partial, spool_end).await?;
                roll_to = Some(spool_end);
                final_status = Status::Suspended;
            } else if level == Level::Partial {
                final_status = Status::Suspended;
            }
        }
        _ => {}
    }
    // The spool holding the journal's first write is rolled after it, so the first
    // fragment is completed promptly.
    if spool.fragment().begin == index_min && roll_to.is_none() {
        roll_to = Some(spool.fragment().end);
    }

    // Stream content.
    if let Some(at) = maybe_roll(spool, roll_to, &spec) {
        roll(core, replica, spool, pln, &spec, at).await?;
    }
    let begin = spool.fragment().end;
    let mut summer = Summer::new();
    let mut total_chunks: i64 = 0;
    let mut delayed_chunks: i64 = 0;
    let mut appended: i64 = 0;
    let mut min_rate = MinRate::new(core.cfg.min_append_rate);
    let mut committing = false;
    let streamed: Result<Status, RpcError> = async {
        loop {
            let Some(chunk) = min_rate.recv(input).await.map_err(with_context)? else {
                if !committing {
                    return Err(RpcError::unknown("append stream: unexpected EOF"));
                }
                return Ok(Status::Ok);
            };
            total_chunks += 1;
            if committing {
                return Err(RpcError::unknown(
                    "append stream: expected EOF after empty Content chunk",
                ));
            }
            chunk_is_content(&chunk)?;
            if chunk.content.is_empty() {
                committing = true;
                continue;
            }
            if !may_write(&spec) || !may_carry_content(req.suspend) {
                return Ok(Status::NotAllowed);
            }
            if let Some(wait) = replica.max_rate_wait(core, &spec, chunk.content.len()) {
                delayed_chunks += 1;
                glommio::timer::sleep(wait).await;
            }
            min_rate.on_bytes(chunk.content.len());
            pln.content(core, &res.journal, &chunk.content, appended)
                .await?;
            spool
                .write_summing(&chunk.content, Some(&mut summer))
                .await
                .map_err(storage_err)?;
            appended += chunk.content.len() as i64;
        }
    }
    .await;
    let content_status = match streamed {
        Ok(status) => status,
        Err(err) => {
            spool.rollback();
            return Err(err);
        }
    };
    if content_status != Status::Ok {
        spool.rollback();
        return respond_status(out, content_status, res.header, None).await;
    }
    if appended == 0 && (req.union_registers.is_some() || req.subtract_registers.is_some()) {
        return Err(RpcError::unknown(
            "append stream: register modification requires non-empty Append",
        ));
    }

    // Commit: registers are updated with the content, atomically.
    let mut next_registers = registers;
    if let Some(sub) = &req.subtract_registers {
        next_registers = protocol::labels::subtract(&next_registers, sub);
    }
    if let Some(uni) = &req.union_registers {
        next_registers = protocol::labels::union(uni, &next_registers);
    }
    let committed = if appended == 0 {
        spool.fragment().clone()
    } else {
        if pln.has_peers() {
            let replicated = async {
                pln.propose(core, &spool.next(), &next_registers, true)
                    .await?;
                pln.gather_ok(core, &res.journal).await
            }
            .await;
            if let Err(err) = replicated {
                keep_proposed(spool, next_registers, &res.journal).await;
                return Err(err);
            }
        }
        let committed = match spool.commit(next_registers).await {
            Ok(committed) => committed,
            Err(err) => {
                spool.rollback();
                return Err(storage_err(err));
            }
        };
        replica.on_commit(spool);
        crate::metrics::append_committed(&res.journal, appended as u64, acquired, begin + appended);
        committed
    };
    let commit = Fragment {
        journal: res.journal.clone(),
        begin,
        end: begin + appended,
        // Over the client's bytes only; an empty append carries SHA1("") as in Gazette.
        sum: Some(protocol::sum::sum_from_bytes(&summer.digest())),
        compression_codec: committed.compression_codec,
        ..Default::default()
    };
    let resp = AppendResponse {
        status: final_status as i32,
        header: Some(res.header),
        commit: Some(commit),
        registers: Some(spool.registers().clone()),
        total_chunks,
        delayed_chunks,
        store_health_error: String::new(),
    };
    out.send(&resp).await
}

/// After a failed commit round, commits the append's content to this broker's own spool
/// anyway (without showing it to readers yet), as Gazette's primary applies each proposal to
/// its own spool when it sends it. A peer may have committed the proposal before the round
/// failed; the next sync then rolls every replica forward to that end, and if the primary
/// had rolled the content back, the only copy would be on that peer, lost if it leaves the
/// route before persisting it (a hole readers block at). Kept here, the content becomes part
/// of the fragment this broker completes and persists at that roll. The client still gets
/// the error: the outcome is unknown to it, as in Gazette. If this broker was deposed and
/// stays a member, the new primary's sync (which waits for this spool) sees the kept end and
/// rolls everyone past it; if it left the route, its replica is closed and a later open
/// discards the recovered current fragment, so the content reaches no store.
async fn keep_proposed(spool: &mut Spool, registers: LabelSet, journal: &str) {
    if spool.delta() == 0 {
        return;
    }
    if let Err(err) = spool.commit(registers).await {
        tracing::warn!(journal, error = %err, "keeping proposed content after a failed commit round");
        spool.rollback();
    }
}

/// Keeps the pipeline for the journal's next append, if this broker still leads the
/// journal on the same Route; else closes it at once, so that its replicas (Gazette's hold
/// their spool until the stream ends) can follow the new primary. (`Core::watch_keyspace`
/// closes kept pipelines on later changes; this covers a change while the append held it.)
fn keep_pipeline(core: &Core, replica: &Replica, pln: Pipeline) {
    let snapshot = core.keyspace.current();
    if !snapshot.cluster {
        // The single node leads every journal alone: nothing to check per append.
        replica.pipeline.replace(Some(pln));
        return;
    }
    let route = resolver::route_of_journal(core, &snapshot, &replica.journal);
    let leads = usize::try_from(route.primary)
        .ok()
        .and_then(|i| route.members.get(i))
        .is_some_and(|p| *p == core.process_id);
    if leads && pln.serves(&route) && !replica.index.borrow().is_closed() {
        replica.pipeline.replace(Some(pln));
    } else {
        pln.close();
    }
}

/// Synchronizes the pipeline (Gazette's send/recv pipeline sync): proposes the spool's
/// fragment, or a roll when the spool is due one, to this broker's spool and every peer,
/// rolling everyone forward to the largest offset a peer holds (adopting its registers),
/// until all agree.
async fn sync(
    core: &Rc<Core>,
    replica: &Rc<Replica>,
    spool: &mut Spool,
    pln: &mut Pipeline,
    spec: &JournalSpec,
) -> Result<Synced, RpcError> {
    let mut roll_to: Option<i64> = None;
    let mut registers = spool.registers().clone();
    for _ in 0..MAX_SYNC_ROUNDS {
        let proposal = match maybe_roll(spool, roll_to, spec) {
            Some(at) => empty_at(spool, at, codec_of(spec)),
            None => spool.fragment().clone(),
        };
        apply_local(core, replica, spool, &proposal, &registers).await?;
        if !pln.has_peers() {
            return Ok(Synced::Ok);
        }
        pln.propose(core, &proposal, &registers, true).await?;
        match pln.gather_sync(core, &proposal).await? {
            Synced::RollTo {
                end,
                registers: theirs,
            } => {
                roll_to = Some(end);
                if let Some(theirs) = theirs {
                    registers = theirs;
                }
            }
            other => return Ok(other),
        }
    }
    Err(RpcError::unknown(format!(
        "replicas did not agree on a fragment after {MAX_SYNC_ROUNDS} proposals"
    )))
}

/// Rolls this broker's spool and every peer's to an empty fragment at `at`.
async fn roll(
    core: &Rc<Core>,
    replica: &Rc<Replica>,
    spool: &mut Spool,
    pln: &mut Pipeline,
    spec: &JournalSpec,
    at: i64,
) -> Result<(), RpcError> {
    let proposal = empty_at(spool, at, codec_of(spec));
    let registers = spool.registers().clone();
    apply_local(core, replica, spool, &proposal, &registers).await?;
    if pln.has_peers() {
        pln.propose(core, &proposal, &registers, true).await?;
        if pln.gather_sync(core, &proposal).await? != Synced::Ok {
            return Err(RpcError::unknown(format!(
                "replicas did not accept the roll to {at}"
            )));
        }
    }
    Ok(())
}

/// Applies a proposal to the primary's own spool, indexing and persisting what it completes.
async fn apply_local(
    core: &Rc<Core>,
    replica: &Rc<Replica>,
    spool: &mut Spool,
    proposal: &Fragment,
    registers: &LabelSet,
) -> Result<(), RpcError> {
    // The completed spool's first append names its path postfix (if templated).
    let first_append = spool.first_append_time();
    let (ok, completed) = spool
        .apply_proposal(proposal, registers)
        .await
        .map_err(storage_err)?;
    if let Some(done) = completed {
        replica.index.borrow_mut().add_local(done.clone());
        replica.persist(core, done, first_append);
    }
    if !ok {
        return Err(RpcError::unknown(format!(
            "the primary's spool rejected its own proposal [{}, {})",
            proposal.begin, proposal.end
        )));
    }
    Ok(())
}

/// A zero-length proposal at `at`: a roll (also used by the simulation).
pub(crate) fn empty_at(spool: &Spool, at: i64, codec: protocol::CompressionCodec) -> Fragment {
    Fragment {
        journal: spool.fragment().journal.clone(),
        begin: at,
        end: at,
        sum: Some(Default::default()),
        compression_codec: codec as i32,
        ..Default::default()
    }
}

/// Gazette's "update assignments": when an assignment's value is not the journal's
/// current Route, writes the Route (members and primary) into every such value, keeping
/// each key's lease, in one transaction guarded by all of their revisions. Returns the
/// revision to resolve again at, or `None` when the assignments were already consistent.
async fn update_assignments(core: &Rc<Core>, res: &Resolution) -> Result<Option<i64>, RpcError> {
    use crate::keyspace::{Compare, Op, PutLease, assign_key};
    use prost::Message;
    if !res.snapshot.cluster {
        return Ok(None);
    }
    let route = res.header.route.clone().unwrap_or_default();
    let value = protocol::Route {
        members: route.members.clone(),
        primary: route.primary,
        endpoints: Vec::new(),
    }
    .encode_to_vec();
    let root = &core.cfg.etcd_prefix;
    let assignments = res
        .snapshot
        .assignments
        .get(&res.journal)
        .cloned()
        .unwrap_or_default();
    let mut compares = Vec::new();
    let mut ops = Vec::new();
    for a in &assignments {
        let key = assign_key(root, &res.journal, &a.zone, &a.suffix, a.slot);
        if !crate::replicate::equivalent(&a.value, &route) {
            ops.push(Op::Put {
                key: key.clone(),
                value: value.clone().into(),
                lease: PutLease::Keep,
            });
        }
        compares.push(Compare {
            key,
            mod_revision: a.mod_revision,
        });
    }
    if ops.is_empty() {
        return Ok(None);
    }
    let outcome = core
        .keyspace
        .txn(compares, ops)
        .await
        .map_err(|e| RpcError::unknown(format!("updateAssignments: {e}")))?;
    Ok(Some(if outcome.succeeded {
        outcome.revision
    } else {
        // The assignments changed meanwhile (the allocator won the race): resolve again
        // once the change is here.
        res.snapshot.revision + 1
    }))
}

/// How the journal's Route compares to its desired replication (cluster mode only; the
/// embedded single node serves every journal alone).
fn replication_gap(core: &Core, res: &Resolution) -> Ordering {
    if !res.snapshot.cluster {
        return Ordering::Equal;
    }
    let members = res.header.route.as_ref().map_or(0, |r| r.members.len());
    let desired = res.spec.as_ref().map_or(0, |s| {
        crate::allocator::desired_replication(s, core.cfg.max_replication.max(0) as u32)
    });
    members.cmp(&desired)
}

async fn resolve(core: &Rc<Core>, req: &AppendRequest) -> Result<Resolution, RpcError> {
    resolver::resolve(
        core,
        Args {
            journal: &req.journal,
            require_primary: true,
            may_proxy: !req.do_not_proxy,
            min_etcd_revision: req.min_etcd_revision,
            proxy_header: req.header.as_ref(),
        },
    )
    .await
}

async fn respond_status(
    out: &mut CallOut,
    status: Status,
    header: protocol::Header,
    registers: Option<LabelSet>,
) -> Result<(), RpcError> {
    let resp = AppendResponse {
        status: status as i32,
        header: Some(header),
        registers,
        ..Default::default()
    };
    out.send(&resp).await
}

/// A content chunk may carry nothing but content.
fn chunk_is_content(chunk: &AppendRequest) -> Result<(), RpcError> {
    chunk
        .validate()
        .map_err(|e| RpcError::unknown(format!("append stream: {e}")))?;
    if !chunk.journal.is_empty() {
        return Err(RpcError::unknown("append stream: expected Content chunk"));
    }
    Ok(())
}

/// Errors of the client's stream: Go wraps plain errors with "append stream", while gRPC
/// transport statuses (size limits, compression) pass through as they are.
fn with_context(err: RpcError) -> RpcError {
    if err.code != protocol::grpc::Code::Unknown {
        return err;
    }
    RpcError::new(err.code, format!("append stream: {}", err.message))
}

fn storage_err(err: storage::StorageError) -> RpcError {
    crate::errors::storage_err(err)
}

fn may_write(spec: &JournalSpec) -> bool {
    matches!(spec.flags, 0 | 2 | 4)
}

fn codec_of(spec: &JournalSpec) -> protocol::CompressionCodec {
    spec.fragment
        .as_ref()
        .and_then(|f| protocol::CompressionCodec::try_from(f.compression_codec).ok())
        .unwrap_or(protocol::CompressionCodec::None)
}

fn suspend_of(spec: Option<&JournalSpec>) -> (Level, i64) {
    match spec.and_then(|s| s.suspend.as_ref()) {
        Some(s) => (Level::try_from(s.level).unwrap_or(Level::None), s.offset),
        None => (Level::None, 0),
    }
}

/// Gazette's maybeRollFragment: the offset to roll the spool to before this append, if any.
fn maybe_roll(
    spool: &storage::spool::Spool,
    roll_to: Option<i64>,
    spec: &JournalSpec,
) -> Option<i64> {
    let cur = spool.fragment();
    let content_len = cur.end - cur.begin;
    let fragment = spec.fragment.clone().unwrap_or_default();
    let mut flush = content_len == 0
        || content_len > fragment.length
        || roll_to.is_some_and(|r| r != 0 && r != cur.begin);
    let interval = fragment.flush_interval.map_or(0, |d| d.seconds);
    if interval > 0 {
        let first = spool
            .first_append_time()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs() as i64);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        if first / interval != now / interval {
            flush = true;
        }
    }
    if !flush {
        return None;
    }
    let at = roll_to.filter(|&r| r != 0).unwrap_or(cur.end);
    // An empty spool at the right offset with the right codec needs no roll.
    if content_len == 0 && at == cur.end && cur.compression_codec == codec_of(spec) as i32 {
        return None;
    }
    Some(at)
}

/// Writes a new suspension into the journal's spec, guarded by its mod revision.
async fn update_suspend(
    core: &Rc<Core>,
    res: &Resolution,
    level: Level,
    offset: i64,
) -> Result<(), RpcError> {
    use crate::keyspace::{Compare, Op, item_key};
    use prost::Message;
    let item =
        res.snapshot.journals.get(&res.journal).ok_or_else(|| {
            RpcError::unknown("journal spec vanished while updating its suspension")
        })?;
    let mut spec = item.spec.clone();
    spec.suspend = Some(protocol::journal_spec::Suspend {
        level: level as i32,
        offset,
    });
    let key = item_key(&core.cfg.etcd_prefix, &res.journal);
    let out = core
        .keyspace
        .txn(
            vec![Compare {
                key: key.clone(),
                mod_revision: item.mod_revision,
            }],
            vec![Op::put(key, spec.encode_to_vec())],
        )
        .await
        .map_err(|e| RpcError::unknown(format!("updating journal suspension: {e}")))?;
    if !out.succeeded {
        return Err(RpcError::unknown(
            "updating journal suspension: the journal spec changed concurrently; retry",
        ));
    }
    core.keyspace.wait_for(out.revision).await;
    Ok(())
}

/// Only ordinary appends may carry content; suspension controls are empty barriers.
fn may_carry_content(mode: i32) -> bool {
    mode == SuspendMode::Resume as i32 || mode == SuspendMode::NoResume as i32
}
