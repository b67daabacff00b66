//! The primary's side of the pipeline on the journal's spool: a sync round (Gazette's
//! send/recv pipeline sync), the roll of every spool to an empty fragment, applying a
//! proposal to the primary's own spool, and keeping the pipeline for the next append.
//!
//! Lives on: the journal's owner core, acting on the spool and pipeline the append holds.

use super::Held;
use super::validate::{codec_of, maybe_roll};
use crate::core::Core;
use crate::journal::pipeline::{Pipeline, Synced};
use crate::journal::replica::Replica;
use crate::journal::routing::resolver;
use protocol::grpc::RpcError;
use protocol::{Fragment, JournalSpec, LabelSet};
use std::rc::Rc;
use std::time::SystemTime;
use storage::spool::Spool;

/// One sync round: proposes the spool's fragment, or a roll to `roll_to` when the spool
/// is due one, with `registers` (`None`: the spool's own) to this broker's spool and every
/// peer, and reports the peers' verdict (a single node agrees with itself).
pub(super) async fn sync_round(
    core: &Rc<Core>,
    held: &mut Held<'_>,
    spec: &JournalSpec,
    roll_to: Option<i64>,
    registers: Option<&LabelSet>,
) -> Result<Synced, RpcError> {
    let unknown = held.spool.registers_unknown();
    let proposal = match roll_due(&held.spool, roll_to, spec) {
        Some(at) => empty_at(&held.spool, at, codec_of(spec)),
        None => held.spool.fragment().clone(),
    };
    if let Some(theirs) = registers
        && proposal.end == held.spool.fragment().end
    {
        // Registers a peer's answer gave for this very end (a roll in place, which keeps a
        // spool's own registers): this spool takes them too.
        held.spool.set_registers(theirs.clone());
    }
    let adopted = registers.is_some();
    let registers = registers.unwrap_or_else(|| held.spool.registers()).clone();
    apply_local(core, held.replica, &mut held.spool, &proposal, &registers).await?;
    if unknown && !adopted {
        // Our spool agreeing with our own proposal says nothing of registers it may have
        // kept from forgotten commits: they stay unknown, for this round's verdict and
        // every later round's, until the peers agree (found by the simulator, seed 1002:
        // a first round that failed after it had cleared the mark left the next ones
        // proposing those registers to a peer holding others at the same end, forever).
        held.spool.set_registers_unknown(true);
    }
    let pln = held.pipeline();
    if !pln.has_peers() {
        return Ok(Synced::Ok);
    }
    pln.propose(core, &proposal, &registers, true).await?;
    let synced = pln.gather_sync(core, &proposal, unknown).await?;
    if synced == Synced::Ok {
        held.spool.set_registers_unknown(false);
    }
    Ok(synced)
}

/// Rolls this broker's spool and every peer's to an empty fragment at the offset
/// [`maybe_roll`] picks for `roll_to`, when a roll is due.
pub(super) async fn roll_if_due(
    core: &Rc<Core>,
    held: &mut Held<'_>,
    spec: &JournalSpec,
    roll_to: Option<i64>,
) -> Result<(), RpcError> {
    let Some(at) = roll_due(&held.spool, roll_to, spec) else {
        return Ok(());
    };
    // The roll shows the completed fragment to readers: the commits in it must all have
    // been acknowledged first, and the streams' answers must be this round's.
    held.replica.awaiting.drained().await;
    if held.pipeline().broken() {
        return Err(RpcError::unknown(
            "replication pipeline: an earlier commit round failed",
        ));
    }
    let proposal = empty_at(&held.spool, at, codec_of(spec));
    let registers = held.spool.registers().clone();
    apply_local(core, held.replica, &mut held.spool, &proposal, &registers).await?;
    let pln = held.pipeline();
    if pln.has_peers() {
        pln.propose(core, &proposal, &registers, true).await?;
        if pln.gather_sync(core, &proposal, false).await? != Synced::Ok {
            return Err(RpcError::unknown(format!(
                "replicas did not accept the roll to {at}"
            )));
        }
    }
    Ok(())
}

fn roll_due(spool: &Spool, roll_to: Option<i64>, spec: &JournalSpec) -> Option<i64> {
    let first_append = spool.first_append_time();
    maybe_roll(
        spool.fragment(),
        roll_to,
        spec,
        first_append,
        SystemTime::now(),
    )
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

/// Keeps the pipeline for the journal's next append, if this broker still leads the
/// journal on the same Route; else closes it at once, so that its replicas (Gazette's hold
/// their spool until the stream ends) can follow the new primary. (`Journals::watch_keyspace`
/// closes kept pipelines on later changes; this covers a change while the append held it.)
pub(super) fn keep_pipeline(core: &Core, replica: &Replica, pln: Pipeline) {
    let snapshot = core.keyspace.current();
    if !snapshot.cluster && !pln.broken() {
        // The single node leads every journal alone: nothing to check per append.
        replica.pipeline.replace(Some(pln));
        return;
    }
    let route = resolver::route_of_journal(core, &snapshot, &replica.journal);
    let leads = usize::try_from(route.primary)
        .ok()
        .and_then(|i| route.members.get(i))
        .is_some_and(|p| *p == core.process_id);
    if pln.broken() {
        // A commit round failed: the next append opens and syncs a new pipeline.
        drop(pln);
    } else if leads && pln.serves(&route) && !replica.index.borrow().is_closed() {
        replica.pipeline.replace(Some(pln));
    } else {
        pln.close();
    }
}

pub(super) fn storage_err(err: storage::StorageError) -> RpcError {
    crate::errors::storage_err(err)
}
