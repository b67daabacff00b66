//! Committing an append (Gazette's onReadAcknowledgements): the registers' update, the
//! pipelined commit round through the peers (propose and commit locally while holding the
//! spool, then await the acknowledgements in turn without it, then publish), the local
//! commit of a journal without peers, the keep_proposed rule after a failed proposal, and
//! the committed reply.
//!
//! Lives on: the journal's owner core, committing the spool the append holds.

use super::Held;
use super::stream::Record;
use super::sync::storage_err;
use crate::core::Core;
use crate::journal::pipeline::Turn;
use crate::journal::replica::Replica;
use protocol::grpc::RpcError;
use protocol::{AppendResponse, Fragment, Header, LabelSet, Status};
use std::rc::Rc;
use std::time::Instant;
use storage::LocalFragment;
use storage::spool::Spool;

/// The journal's registers after the append: `subtract` taken out, then `union` added.
pub(super) fn next_registers(
    current: &LabelSet,
    subtract: Option<&LabelSet>,
    union: Option<&LabelSet>,
) -> LabelSet {
    let mut next = current.clone();
    if let Some(sub) = subtract {
        next = protocol::labels::subtract(&next, sub);
    }
    if let Some(uni) = union {
        next = protocol::labels::union(uni, &next);
    }
    next
}

/// A commit proposed to the peers and committed to this broker's spool, not yet shown to
/// readers: what the append needs, once it let go of the spool, to await its peers'
/// acknowledgements and then publish the commit.
pub(super) struct Proposed {
    replica: Rc<Replica>,
    /// The spool's fragment as the commit left it.
    committed: LocalFragment,
    turn: Turn,
    /// Durable mode: the local commit's sync (shared with the commits around it).
    synced: Option<storage::spool::SyncTicket>,
}

/// Proposes the spool's next fragment (the streamed content) with `registers` to every
/// peer, then commits it to this broker's spool at once (as Gazette's primary applies each
/// proposal it sends, and as [`keep_proposed`] does after a failed round: a peer may commit
/// it, so this broker must hold it) without showing it to readers, and takes the commit's
/// turn in the read barrier. The record gets the committed codec and registers.
pub(super) async fn propose(
    core: &Rc<Core>,
    held: &mut Held<'_>,
    registers: LabelSet,
    record: &mut Record,
) -> Result<Proposed, RpcError> {
    let next = held.spool.next();
    held.pipeline()
        .propose(core, &next, &registers, true)
        .await?;
    let committed = held.spool.commit(registers).await.map_err(storage_err)?;
    record.codec = committed.compression_codec;
    record.registers = held.spool.registers().clone();
    let committed = LocalFragment {
        fragment: committed,
        file: held.spool.file(),
    };
    if crate::mutation::active(crate::mutation::Mutation::PublishBeforeAcks) {
        // Broken on purpose (test builds only): readers see the commit before any peer
        // acknowledged it.
        held.replica.index.borrow_mut().add_local(committed.clone());
    }
    let awaiting = held.replica.awaiting.clone();
    let turn = held.pipeline().turn(&awaiting);
    Ok(Proposed {
        replica: held.replica.clone(),
        committed,
        turn,
        synced: held.spool.sync_ticket(),
    })
}

/// Without the spool: waits for the commit's turn, reads every peer's acknowledgement of
/// it, shows it to readers (in commit order: the turns are) and counts it, then passes the
/// turn on. On an error the turn is dropped, which breaks the pipeline: the commits behind
/// fail too, and the next append opens and syncs a new one.
pub(super) async fn await_acks(
    core: &Rc<Core>,
    proposed: Proposed,
    journal: &str,
    record: &Record,
    acquired: Instant,
) -> Result<(), RpcError> {
    let Proposed {
        replica,
        committed,
        mut turn,
        synced,
    } = proposed;
    // Durable mode: this broker's sync runs while the peers' acknowledgements (which
    // follow their own syncs) are awaited; readers and the client see the commit after both.
    let sync = async {
        match synced {
            Some(ticket) => ticket.wait().await.map_err(crate::errors::storage_err),
            None => Ok(()),
        }
    };
    let (acks, sync) = futures_lite::future::zip(turn.gather_ok(core, journal), sync).await;
    acks?;
    sync?;
    replica.index.borrow_mut().add_local(committed);
    let end = record.begin + record.appended;
    crate::metrics::append_committed(journal, record.appended as u64, acquired, end);
    turn.pass();
    Ok(())
}

/// Commits the streamed content with `registers` to the spool, waits until it is on the
/// device in durable mode (see [`crate::journal::replica::durable`]), shows it to readers and counts it; the record
/// gets the committed codec and registers.
pub(super) async fn commit(
    held: &mut Held<'_>,
    registers: LabelSet,
    record: &mut Record,
    journal: &str,
    acquired: Instant,
) -> Result<(), RpcError> {
    let committed = held.spool.commit(registers).await.map_err(storage_err)?;
    crate::journal::replica::durable(&held.spool).await?;
    held.replica.on_commit(&held.spool);
    let end = record.begin + record.appended;
    crate::metrics::append_committed(journal, record.appended as u64, acquired, end);
    record.codec = committed.compression_codec;
    record.registers = held.spool.registers().clone();
    Ok(())
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
pub(super) async fn keep_proposed(spool: &mut Spool, registers: LabelSet, journal: &str) {
    if spool.delta() == 0 {
        return;
    }
    if let Err(err) = spool.commit(registers).await {
        tracing::warn!(journal, error = %err, "keeping proposed content after a failed commit round");
        spool.rollback();
    }
}

/// The reply to a committed append of `journal`.
pub(super) fn committed_reply(
    record: &Record,
    journal: &str,
    header: Header,
    status: Status,
) -> AppendResponse {
    let commit = Fragment {
        journal: journal.to_string(),
        begin: record.begin,
        end: record.begin + record.appended,
        sum: record.sum,
        compression_codec: record.codec,
        ..Default::default()
    };
    AppendResponse {
        status: status as i32,
        header: Some(header),
        commit: Some(commit),
        registers: Some(record.registers.clone()),
        total_chunks: record.total_chunks,
        delayed_chunks: record.delayed_chunks,
        store_health_error: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::append::validate::tests::regs;

    #[test]
    fn registers_are_subtracted_then_unioned() {
        let current = regs(&[("a", "1"), ("b", "2")]);
        assert_eq!(next_registers(&current, None, None), current);
        assert_eq!(
            next_registers(&current, Some(&regs(&[("a", "1")])), None),
            regs(&[("b", "2")])
        );
        assert_eq!(
            next_registers(&current, None, Some(&regs(&[("c", "3")]))),
            regs(&[("a", "1"), ("b", "2"), ("c", "3")])
        );
        // Subtracting first: a label both subtracted and unioned stays.
        assert_eq!(
            next_registers(
                &current,
                Some(&regs(&[("a", "1")])),
                Some(&regs(&[("a", "1")]))
            ),
            current
        );
    }

    #[test]
    fn the_committed_reply_covers_the_clients_bytes() {
        let record = Record {
            begin: 100,
            appended: 20,
            total_chunks: 3,
            delayed_chunks: 1,
            sum: Some(protocol::sum::sum_from_bytes(&[7; 20])),
            codec: protocol::CompressionCodec::Gzip as i32,
            registers: regs(&[("a", "1")]),
            not_allowed: false,
        };
        let header = Header::default();
        let resp = committed_reply(&record, "a/j", header.clone(), Status::Suspended);
        let commit = resp.commit.unwrap();
        assert_eq!(
            (commit.journal.as_str(), commit.begin, commit.end),
            ("a/j", 100, 120)
        );
        assert_eq!(commit.sum, record.sum);
        assert_eq!(commit.compression_codec, record.codec);
        assert_eq!(resp.status, Status::Suspended as i32);
        assert_eq!(resp.header, Some(header));
        assert_eq!(resp.registers, Some(regs(&[("a", "1")])));
        assert_eq!((resp.total_chunks, resp.delayed_chunks), (3, 1));
        assert!(resp.store_health_error.is_empty());
    }
}
