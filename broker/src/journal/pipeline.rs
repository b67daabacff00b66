//! The replication Pipeline, primary side (spec §2.2, §2.5): one `Replicate` stream to each
//! other member of the journal's Route, through which the primary's Append proposes, streams
//! content and commits.
//!
//! Appends are pipelined as in Gazette: an append sends its commit proposal, takes a
//! [`Turn`] (the read barrier: its place among the journal's commits awaiting
//! acknowledgements), lets go of the spool and the pipeline for the next append, and only
//! then reads its peers' acknowledgements, in order, when its turn comes. Each stream's
//! request side belongs to the [`Pipeline`]; the response sides are shared ([`Acks`]) by the
//! spool's holder and the turns in flight.
//!
//! Lives on: the journal's owner core. A pipeline belongs to the journal's `Replica` and is
//! only ever used by the append holding the spool (it is taken out of the replica for the
//! append and put back only if the append leaves it healthy); any failure drops it, which
//! resets its streams so that every replica rolls back what it had not committed, and the
//! next append builds a new one. A failed commit round (or a turn abandoned before it read
//! its acknowledgements) marks the pipeline broken: every turn behind it fails, and the
//! pipeline is not kept.

use crate::core::Core;
use crate::core::peer::{PeerRecv, PeerSend};
use crate::journal::routing::resolver;
use protocol::grpc::{RpcError, encode_frame};
use protocol::process_spec::Id;
use protocol::route::equivalent;
use protocol::{Fragment, Header, LabelSet, ReplicateRequest, ReplicateResponse, Route, Status};
use std::cell::Cell;
use std::rc::Rc;
use tokio::sync::{Notify, oneshot};

/// Upper bound on sync rounds (roll-forward and re-proposals) before giving up.
pub const MAX_SYNC_ROUNDS: usize = 8;

struct Peer {
    id: Id,
    call: PeerSend,
}

pub struct Pipeline {
    /// The Route (members and primary) the pipeline was built for.
    pub route: Route,
    header: Header,
    peers: Vec<Peer>,
    /// The next proposal is the first: it carries each peer's header.
    first: bool,
    /// The streams' response sides and the read barrier.
    acks: Rc<Acks>,
}

/// The response sides of a pipeline's streams, read by one reader at a time: the spool's
/// holder (sync rounds and rolls, once no commit awaits acknowledgements) or the [`Turn`]
/// whose turn it is.
pub struct Acks {
    ids: Vec<Id>,
    route: Route,
    recv: tokio::sync::Mutex<Vec<PeerRecv>>,
    /// A commit round failed, or a turn was abandoned before it read its acknowledgements:
    /// what the streams answer next cannot be matched to proposals any more.
    broken: Cell<bool>,
    /// The read barrier: resolves once the last turn taken passed (or was dropped).
    tail: Cell<Option<oneshot::Receiver<()>>>,
    /// The last keyspace revision at which the journal's Route was found to be still
    /// `route` ([`guard`] resolves the Route again only at a new revision: a snapshot's
    /// content is that of its revision).
    verified: Cell<Option<i64>>,
}

/// The journal's commits awaiting acknowledgements (one per replica, across pipelines): the
/// spool's holder waits for none to be left before it rolls the spool or syncs a new
/// pipeline, so that the index only ever grows in the order of the commits.
#[derive(Default)]
pub struct Awaiting {
    count: Cell<usize>,
    idle: Notify,
}

impl Awaiting {
    /// Resolves once no commit awaits acknowledgements.
    pub async fn drained(&self) {
        loop {
            // Created before the check, so a notification in between is not missed.
            let idle = self.idle.notified();
            if self.count.get() == 0 {
                return;
            }
            idle.await;
        }
    }

    pub fn count(&self) -> usize {
        self.count.get()
    }
}

/// One commit's place in the read barrier (Gazette's `pipeline.barrier`): taken by the
/// spool's holder right after it sent the commit proposal, it waits for the commits
/// proposed before to read their acknowledgements, then reads this one's. Dropped without
/// [`Turn::pass`] (its round failed, or its append was abandoned), it marks the pipeline
/// broken, so every turn behind it fails.
pub struct Turn {
    acks: Rc<Acks>,
    wait_for: Option<oneshot::Receiver<()>>,
    pass: Option<oneshot::Sender<()>>,
    awaiting: Rc<Awaiting>,
}

impl Turn {
    /// Waits for this commit's turn, then reads every peer's acknowledgement of it: all must
    /// be OK, and no earlier round may have failed.
    pub async fn gather_ok(&mut self, core: &Core, journal: &str) -> Result<(), RpcError> {
        if let Some(rx) = self.wait_for.take() {
            // Err: the turn before was dropped, and marked the pipeline broken.
            let _ = rx.await;
        }
        if self.acks.broken.get() {
            return Err(RpcError::unknown(
                "replication pipeline: an earlier commit round failed",
            ));
        }
        if crate::mutation::active(crate::mutation::Mutation::AckBeforeReplicas) {
            // Broken on purpose (test builds only): the commit counts as acknowledged
            // before any replica answered; their answers are left for the next read.
            return Ok(());
        }
        let responses = guard(core, journal, &self.acks, self.acks.gather()).await?;
        for (peer, resp) in self.acks.ids.iter().zip(responses) {
            if resp.status != Status::Ok as i32 {
                return Err(RpcError::unknown(format!(
                    "replication to {}: commit not acknowledged: {:?}",
                    describe(peer),
                    Status::try_from(resp.status).unwrap_or(Status::Ok)
                )));
            }
        }
        Ok(())
    }

    /// Passes the turn to the next commit: this one's round succeeded.
    pub fn pass(mut self) {
        if let Some(tx) = self.pass.take() {
            let _ = tx.send(());
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if self.pass.take().is_some() {
            // Its acknowledgements are unread or not all OK: nothing behind it can trust
            // what the streams answer. (The dropped sender wakes the next turn.)
            self.acks.broken.set(true);
        }
        let left = self.awaiting.count.get() - 1;
        self.awaiting.count.set(left);
        if left == 0 {
            self.awaiting.idle.notify_waiters();
        }
    }
}

impl Acks {
    /// Reads one response from every peer, in route order.
    async fn gather(&self) -> Result<Vec<ReplicateResponse>, RpcError> {
        let mut recv = self.recv.lock().await;
        let mut out = Vec::with_capacity(recv.len());
        for (id, peer) in self.ids.iter().zip(recv.iter_mut()) {
            match peer.next::<ReplicateResponse>().await {
                Ok(Some(resp)) => out.push(resp),
                Ok(None) => {
                    return Err(RpcError::unknown(format!(
                        "replication to {}: unexpected EOF",
                        describe(id)
                    )));
                }
                Err(e) => return Err(peer_err(id, "receiving", e)),
            }
        }
        Ok(out)
    }
}

/// What the primary must do after a sync round (Gazette's gatherSync).
#[derive(Debug, PartialEq)]
pub enum Synced {
    /// Every peer agreed.
    Ok,
    /// A peer holds a larger offset, or an incompatible fragment at ours: roll everyone to
    /// `end` (adopting `registers` when given) and sync again.
    RollTo {
        end: i64,
        registers: Option<LabelSet>,
    },
    /// A peer has a different Route at a later keyspace revision: wait for it, resolve again.
    ReadThrough(i64),
}

impl Pipeline {
    /// Opens a Replicate stream to every member of `header.route` other than this broker.
    pub async fn open(
        core: &Rc<Core>,
        journal: &str,
        header: &Header,
    ) -> Result<Pipeline, RpcError> {
        let route = header.route.clone().unwrap_or_default();
        let mut peers = Vec::new();
        let mut recv = Vec::new();
        for (i, member) in route.members.iter().enumerate() {
            if *member == core.process_id {
                continue;
            }
            let endpoint = route.endpoints.get(i).cloned().unwrap_or_default();
            let call = core
                .replicate_call(&endpoint, journal)
                .await
                .map_err(|e| crate::errors::peer_err(&describe(member), None, e))?;
            let (send, responses) = call.split();
            peers.push(Peer {
                id: member.clone(),
                call: send,
            });
            recv.push(responses);
        }
        let acks = Rc::new(Acks {
            ids: peers.iter().map(|p| p.id.clone()).collect(),
            route: route.clone(),
            recv: tokio::sync::Mutex::new(recv),
            broken: Cell::new(false),
            tail: Cell::new(None),
            verified: Cell::new(None),
        });
        Ok(Pipeline {
            route,
            header: header.clone(),
            peers,
            first: true,
            acks,
        })
    }

    /// Whether a commit round of this pipeline failed (it must not be used again).
    pub fn broken(&self) -> bool {
        self.acks.broken.get()
    }

    /// Takes the next turn to read acknowledgements, counted in `awaiting` until it ends;
    /// taken by the spool's holder right after sending a commit proposal.
    pub fn turn(&self, awaiting: &Rc<Awaiting>) -> Turn {
        let (tx, rx) = oneshot::channel();
        let wait_for = self.acks.tail.replace(Some(rx));
        awaiting.count.set(awaiting.count.get() + 1);
        Turn {
            acks: self.acks.clone(),
            wait_for,
            pass: Some(tx),
            awaiting: awaiting.clone(),
        }
    }

    /// Whether this pipeline still matches `route` (and may be reused).
    pub fn serves(&self, route: &Route) -> bool {
        equivalent(&self.route, route)
    }

    pub fn has_peers(&self) -> bool {
        !self.peers.is_empty()
    }

    /// Sends a proposal to every peer; the first one carries the header (its `process_id`
    /// rewritten to each peer) and the journal name, as Gazette's primaries send them.
    pub async fn propose(
        &mut self,
        core: &Core,
        proposal: &Fragment,
        registers: &LabelSet,
        acknowledge: bool,
    ) -> Result<(), RpcError> {
        let acks = self.acks.clone();
        guard(
            core,
            &proposal.journal,
            &acks,
            self.propose_inner(proposal, registers, acknowledge),
        )
        .await
    }

    async fn propose_inner(
        &mut self,
        proposal: &Fragment,
        registers: &LabelSet,
        acknowledge: bool,
    ) -> Result<(), RpcError> {
        let first = std::mem::replace(&mut self.first, false);
        let mut req = ReplicateRequest {
            proposal: Some(proposal.clone()),
            registers: Some(registers.clone()),
            acknowledge,
            ..Default::default()
        };
        if !first {
            return self.scatter(encode_frame(&req)).await;
        }
        req.deprecated_journal = proposal.journal.clone();
        for peer in &mut self.peers {
            let mut header = self.header.clone();
            header.process_id = Some(peer.id.clone());
            req.header = Some(header);
            peer.call
                .send_frame(encode_frame(&req))
                .await
                .map_err(|e| peer_err(&peer.id, "sending", e))?;
        }
        Ok(())
    }

    /// Streams `content`, of which `delta` bytes of this append were already sent.
    pub async fn content(
        &mut self,
        core: &Core,
        journal: &str,
        content: &bytes::Bytes,
        delta: i64,
    ) -> Result<(), RpcError> {
        if self.peers.is_empty() {
            return Ok(());
        }
        let (head, body) = content_frame(content, delta);
        let acks = self.acks.clone();
        guard(core, journal, &acks, self.scatter_parts(&[head, body])).await
    }

    async fn scatter(&mut self, frame: bytes::Bytes) -> Result<(), RpcError> {
        self.scatter_parts(&[frame]).await
    }

    /// Sends the concatenation of `parts` (one gRPC frame) to every peer.
    async fn scatter_parts(&mut self, parts: &[bytes::Bytes]) -> Result<(), RpcError> {
        for peer in &mut self.peers {
            for part in parts {
                peer.call
                    .send_frame(part.clone())
                    .await
                    .map_err(|e| peer_err(&peer.id, "sending", e))?;
            }
        }
        Ok(())
    }

    /// Reads the peers' answers to a sync proposal and decides (Gazette's gatherSync):
    /// PROPOSAL_MISMATCH from a peer ahead of `ours` rolls everyone to its end with its
    /// registers; from a peer that rolled to our end without our content, rolls everyone
    /// to an empty fragment there; WRONG_ROUTE with a later revision re-resolves.
    pub async fn gather_sync(
        &mut self,
        core: &Core,
        ours: &Fragment,
        ours_unknown: bool,
    ) -> Result<Synced, RpcError> {
        if self.broken() {
            return Err(RpcError::unknown(
                "replication pipeline: an earlier commit round failed",
            ));
        }
        let responses = guard(core, &ours.journal, &self.acks, self.acks.gather()).await?;
        let peers: Vec<Id> = self.peers.iter().map(|p| p.id.clone()).collect();
        let revision = self.header.etcd.map_or(0, |e| e.revision);
        decide_sync(
            ours,
            ours_unknown,
            &self.route,
            revision,
            &peers,
            &responses,
        )
        .map_err(RpcError::unknown)
    }

    /// Closes the pipeline gracefully: each replica rolls back anything uncommitted and
    /// releases its spool.
    pub fn close(mut self) {
        for peer in &mut self.peers {
            peer.call.close();
        }
    }
}

/// The gRPC frame of `ReplicateRequest{content, content_delta}` as two buffers: a head of a
/// few bytes (frame prefix, the delta field, the content field's key and length) and the
/// content itself, shared with the local spool write rather than copied into a new message.
pub fn content_frame(content: &bytes::Bytes, delta: i64) -> (bytes::Bytes, bytes::Bytes) {
    use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint, key_len};
    let len = content.len() as u64;
    let mut msg_len = key_len(4) + encoded_len_varint(len) + content.len();
    if delta != 0 {
        msg_len += key_len(5) + encoded_len_varint(delta as u64);
    }
    let mut head = bytes::BytesMut::with_capacity(16);
    head.extend_from_slice(&[0]);
    head.extend_from_slice(&(msg_len as u32).to_be_bytes());
    if delta != 0 {
        encode_key(5, WireType::Varint, &mut head);
        encode_varint(delta as u64, &mut head);
    }
    encode_key(4, WireType::LengthDelimited, &mut head);
    encode_varint(len, &mut head);
    (head.freeze(), content.clone())
}

/// Gazette's gatherSync decision over the peers' answers to a sync proposal of `ours`
/// (the pipeline was built for `route` at keyspace `revision`): PROPOSAL_MISMATCH from a peer
/// ahead of us rolls everyone to its end with its registers; from a peer that rolled to our
/// end without our content, rolls everyone to an empty fragment there (with its registers
/// when `ours_unknown`: ours are those of commits our discarded spool forgot, see
/// `Spool::discard`); WRONG_ROUTE with a different Route at a later revision re-resolves;
/// anything else is an error.
pub fn decide_sync(
    ours: &Fragment,
    ours_unknown: bool,
    route: &Route,
    revision: i64,
    peers: &[Id],
    responses: &[ReplicateResponse],
) -> Result<Synced, String> {
    let mut roll_to = 0i64;
    let mut roll_registers = None;
    let mut read_through = 0i64;
    let mut ahead = false;
    let mut agreeing = 0usize;
    let mut refusing: Vec<&LabelSet> = Vec::new();
    for (peer, resp) in peers.iter().zip(responses) {
        match Status::try_from(resp.status) {
            Ok(Status::Ok) => agreeing += 1,
            Ok(Status::WrongRoute) => {
                let hdr = resp.header.clone().unwrap_or_default();
                let rev = hdr.etcd.map_or(0, |e| e.revision);
                if !equivalent(&hdr.route.unwrap_or_default(), route) && rev > revision {
                    read_through = read_through.max(rev);
                } else {
                    return Err(format!(
                        "replication to {}: unexpected WRONG_ROUTE",
                        describe(peer)
                    ));
                }
            }
            Ok(Status::ProposalMismatch) => {
                let theirs = resp.fragment.clone().unwrap_or_default();
                if crate::mutation::active(crate::mutation::Mutation::SkipRollForward) {
                    // Broken on purpose (test builds only): a peer ahead is ignored.
                    continue;
                }
                if theirs.end > ours.end {
                    ahead = true;
                    if theirs.end > roll_to {
                        roll_to = theirs.end;
                        roll_registers = Some(resp.registers.clone().unwrap_or_default());
                    }
                } else if theirs.end == ours.end && theirs.begin == theirs.end {
                    roll_to = roll_to.max(theirs.end);
                    // We take the peer's registers when ours are unknown (a primary
                    // restarted after kill -9 may propose those of pipelined commits its
                    // discarded spool forgot), or when it refused our empty fragment at its
                    // end, so differs from us only in registers (seed 7409). Else each side
                    // would keep its own at this end forever (a roll in place keeps a
                    // spool's own registers: Gazette's rule).
                    let refused_in_place = ours.begin == ours.end;
                    if refused_in_place && let Some(theirs) = resp.registers.as_ref() {
                        refusing.push(theirs);
                    }
                    if (ours_unknown || refused_in_place) && roll_registers.is_none() {
                        roll_registers = Some(resp.registers.clone().unwrap_or_default());
                    }
                } else {
                    return Err(format!(
                        "replication to {}: unexpected PROPOSAL_MISMATCH: [{}, {})",
                        describe(peer),
                        theirs.begin,
                        theirs.end
                    ));
                }
            }
            other => {
                return Err(format!(
                    "replication to {}: unexpected status {other:?}",
                    describe(peer)
                ));
            }
        }
    }
    let split = agreeing > 0 || refusing.iter().any(|r| *r != refusing[0]);
    if !ahead && read_through == 0 && !refusing.is_empty() && split {
        // Peers at our end differ among themselves in registers only (some hold ours, or
        // the refusing ones hold several), and each refuses a roll in place that offers
        // another's (Gazette's rule): taking one peer's would only move the refusal to
        // the next, round after round (found by the simulator, seed 7409). Every spool is
        // at our empty fragment, so we go on: the next commit's proposal carries its
        // registers to all of them, and each takes them with the commit.
        return Ok(Synced::Ok);
    }
    if roll_to != 0 {
        return Ok(Synced::RollTo {
            end: roll_to,
            registers: roll_registers,
        });
    }
    if read_through != 0 {
        return Ok(Synced::ReadThrough(read_through));
    }
    Ok(Synced::Ok)
}

/// Runs a pipeline operation until it completes or the journal's Route stops matching the
/// pipeline's (a peer that stalls while the allocator moves on must not hold the append).
/// The Route is resolved again only for a keyspace snapshot it was not yet checked in (not
/// on every append), and only if the operation has to wait.
async fn guard<T>(
    core: &Core,
    journal: &str,
    acks: &Acks,
    op: impl std::future::Future<Output = Result<T, RpcError>>,
) -> Result<T, RpcError> {
    let changed = async {
        let mut rx = core.keyspace.subscribe();
        loop {
            let snap = rx.borrow_and_update().clone();
            if acks.verified.get() != Some(snap.revision) {
                let route = resolver::route_of_journal(core, &snap, journal);
                if !equivalent(&route, &acks.route) {
                    return Err(RpcError::unknown(
                        "replication pipeline: the journal's route changed",
                    ));
                }
                acks.verified.set(Some(snap.revision));
            }
            if rx.changed().await.is_err() {
                return futures_lite::future::pending().await;
            }
        }
    };
    futures_lite::future::or(op, changed).await
}

fn describe(id: &Id) -> String {
    format!("{}#{}", id.zone, id.suffix)
}

fn peer_err(id: &Id, what: &str, e: RpcError) -> RpcError {
    crate::errors::peer_err(&describe(id), Some(what), e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    fn fragment(begin: i64, end: i64) -> Fragment {
        Fragment {
            journal: "a/j".into(),
            begin,
            end,
            ..Default::default()
        }
    }

    #[test]
    fn a_peer_rolled_to_our_end_is_joined_there_with_its_registers_if_ours_are_unknown_or_it_refused_ours()
     {
        let theirs = LabelSet {
            labels: vec![protocol::Label {
                name: "k".into(),
                value: "theirs".into(),
                prefix: false,
            }],
        };
        let mismatch = ReplicateResponse {
            status: Status::ProposalMismatch as i32,
            fragment: Some(fragment(31, 31)),
            registers: Some(theirs.clone()),
            ..Default::default()
        };
        let peers = [Id::default()];
        let route = Route::default();
        for (ours, unknown, registers) in [
            // Our fragment with content at their end: roll in place, keeping ours.
            (fragment(0, 31), false, None),
            // Our roll in place refused: only registers differ, so we take theirs.
            (fragment(31, 31), false, Some(theirs.clone())),
            (fragment(31, 31), true, Some(theirs.clone())),
        ] {
            let decided = decide_sync(
                &ours,
                unknown,
                &route,
                1,
                &peers,
                std::slice::from_ref(&mismatch),
            );
            assert_eq!(decided, Ok(Synced::RollTo { end: 31, registers }));
        }
        // Peers at our end split over registers (one holds ours, one refuses with its
        // own): no peer's registers would satisfy both, so the sync goes on.
        let agree = ReplicateResponse {
            status: Status::Ok as i32,
            ..Default::default()
        };
        let two = [Id::default(), Id::default()];
        for responses in [
            [agree.clone(), mismatch.clone()],
            [mismatch.clone(), agree.clone()],
        ] {
            let decided = decide_sync(&fragment(31, 31), false, &route, 1, &two, &responses);
            assert_eq!(decided, Ok(Synced::Ok));
        }
        // Two refusing peers with different registers: the same.
        let other = ReplicateResponse {
            registers: Some(LabelSet::default()),
            ..mismatch.clone()
        };
        let decided = decide_sync(
            &fragment(31, 31),
            false,
            &route,
            1,
            &two,
            &[mismatch.clone(), other],
        );
        assert_eq!(decided, Ok(Synced::Ok));
        // Two refusing peers that agree with each other: we take their registers.
        let decided = decide_sync(
            &fragment(31, 31),
            false,
            &route,
            1,
            &two,
            &[mismatch.clone(), mismatch.clone()],
        );
        assert_eq!(
            decided,
            Ok(Synced::RollTo {
                end: 31,
                registers: Some(theirs.clone())
            })
        );
        // A peer ahead always gives its registers.
        let ahead = ReplicateResponse {
            fragment: Some(fragment(0, 40)),
            ..mismatch
        };
        let decided = decide_sync(&fragment(0, 31), false, &route, 1, &peers, &[ahead]);
        assert_eq!(
            decided,
            Ok(Synced::RollTo {
                end: 40,
                registers: Some(theirs)
            })
        );
    }

    #[test]
    fn content_frames_decode_as_replicate_requests() {
        for (content, delta) in [
            (&b"hello"[..], 0i64),
            (&b""[..], 7),
            (&[7u8; 300][..], 1 << 40),
        ] {
            let content = bytes::Bytes::copy_from_slice(content);
            let (head, body) = content_frame(&content, delta);
            let mut frame = head.to_vec();
            frame.extend_from_slice(&body);
            let want = encode_frame(&ReplicateRequest {
                content: content.clone(),
                content_delta: delta,
                ..Default::default()
            });
            let len = u32::from_be_bytes(frame[1..5].try_into().unwrap()) as usize;
            assert_eq!(len, frame.len() - 5);
            let got = ReplicateRequest::decode(&frame[5..]).unwrap();
            assert_eq!(got.content, content);
            assert_eq!(got.content_delta, delta);
            if !content.is_empty() {
                // Prost leaves an empty bytes field out; ours carries it, equally valid.
                assert_eq!(frame.len(), want.len());
            }
        }
    }
}
