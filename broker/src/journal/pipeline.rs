//! The replication Pipeline, primary side (spec §2.2, §2.5): one `Replicate` stream to each
//! other member of the journal's Route, through which the primary's Append proposes, streams
//! content and commits.
//!
//! Lives on: the journal's owner core. A pipeline belongs to the journal's `Replica` and is
//! only ever used by the append holding the spool (it is taken out of the replica for the
//! append and put back only if the append leaves it healthy); any failure drops it, which
//! resets its streams so that every replica rolls back what it had not committed, and the
//! next append builds a new one.

use crate::journal::core::Core;
use crate::journal::routing::peer::PeerCall;
use crate::journal::routing::resolver;
use protocol::grpc::{RpcError, encode_frame};
use protocol::process_spec::Id;
use protocol::route::equivalent;
use protocol::{Fragment, Header, LabelSet, ReplicateRequest, ReplicateResponse, Route, Status};
use std::rc::Rc;

/// Upper bound on sync rounds (roll-forward and re-proposals) before giving up.
pub const MAX_SYNC_ROUNDS: usize = 8;

struct Peer {
    id: Id,
    call: PeerCall,
}

pub struct Pipeline {
    /// The Route (members and primary) the pipeline was built for.
    pub route: Route,
    header: Header,
    peers: Vec<Peer>,
    /// The next proposal is the first: it carries each peer's header.
    first: bool,
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
        for (i, member) in route.members.iter().enumerate() {
            if *member == core.process_id {
                continue;
            }
            let endpoint = route.endpoints.get(i).cloned().unwrap_or_default();
            let call = core
                .replicate_call(&endpoint, journal)
                .await
                .map_err(|e| crate::errors::peer_err(&describe(member), None, e))?;
            peers.push(Peer {
                id: member.clone(),
                call,
            });
        }
        Ok(Pipeline {
            route,
            header: header.clone(),
            peers,
            first: true,
        })
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
        let route = self.route.clone();
        let journal = proposal.journal.clone();
        guard(
            core,
            &journal,
            &route,
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
        let route = self.route.clone();
        guard(core, journal, &route, self.scatter_parts(&[head, body])).await
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

    /// Reads one response from every peer, in route order.
    async fn gather(&mut self) -> Result<Vec<ReplicateResponse>, RpcError> {
        let mut out = Vec::with_capacity(self.peers.len());
        for peer in &mut self.peers {
            match peer.call.next::<ReplicateResponse>().await {
                Ok(Some(resp)) => out.push(resp),
                Ok(None) => {
                    return Err(RpcError::unknown(format!(
                        "replication to {}: unexpected EOF",
                        describe(&peer.id)
                    )));
                }
                Err(e) => return Err(peer_err(&peer.id, "receiving", e)),
            }
        }
        Ok(out)
    }

    /// Reads the peers' answers to a sync proposal and decides (Gazette's gatherSync):
    /// PROPOSAL_MISMATCH from a peer ahead of `ours` rolls everyone to its end with its
    /// registers; from a peer that rolled to our end without our content, rolls everyone
    /// to an empty fragment there; WRONG_ROUTE with a later revision re-resolves.
    pub async fn gather_sync(&mut self, core: &Core, ours: &Fragment) -> Result<Synced, RpcError> {
        let route = self.route.clone();
        let responses = guard(core, &ours.journal, &route, self.gather()).await?;
        let peers: Vec<Id> = self.peers.iter().map(|p| p.id.clone()).collect();
        let revision = self.header.etcd.map_or(0, |e| e.revision);
        decide_sync(ours, &self.route, revision, &peers, &responses).map_err(RpcError::unknown)
    }

    /// Reads the peers' acknowledgements of a commit proposal: all must be OK.
    pub async fn gather_ok(&mut self, core: &Core, journal: &str) -> Result<(), RpcError> {
        if crate::mutation::active(crate::mutation::Mutation::AckBeforeReplicas) {
            // Broken on purpose (test builds only): the commit counts as acknowledged
            // before any replica answered; their answers are left for the next read.
            return Ok(());
        }
        let route = self.route.clone();
        let responses = guard(core, journal, &route, self.gather()).await?;
        for (peer, resp) in self.peers.iter().zip(responses) {
            if resp.status != Status::Ok as i32 {
                return Err(RpcError::unknown(format!(
                    "replication to {}: commit not acknowledged: {:?}",
                    describe(&peer.id),
                    Status::try_from(resp.status).unwrap_or(Status::Ok)
                )));
            }
        }
        Ok(())
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
/// end without our content, rolls everyone to an empty fragment there; WRONG_ROUTE with a
/// different Route at a later revision re-resolves; anything else is an error.
pub fn decide_sync(
    ours: &Fragment,
    route: &Route,
    revision: i64,
    peers: &[Id],
    responses: &[ReplicateResponse],
) -> Result<Synced, String> {
    let mut roll_to = 0i64;
    let mut roll_registers = None;
    let mut read_through = 0i64;
    for (peer, resp) in peers.iter().zip(responses) {
        match Status::try_from(resp.status) {
            Ok(Status::Ok) => {}
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
                    if theirs.end > roll_to {
                        roll_to = theirs.end;
                        roll_registers = Some(resp.registers.clone().unwrap_or_default());
                    }
                } else if theirs.end == ours.end && theirs.begin == theirs.end {
                    roll_to = roll_to.max(theirs.end);
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
async fn guard<T>(
    core: &Core,
    journal: &str,
    route: &Route,
    op: impl std::future::Future<Output = Result<T, RpcError>>,
) -> Result<T, RpcError> {
    let changed = async {
        let mut rx = core.keyspace.subscribe();
        loop {
            let snap = rx.borrow_and_update().clone();
            if !equivalent(&resolver::route_of_journal(core, &snap, journal), route) {
                return Err(RpcError::unknown(
                    "replication pipeline: the journal's route changed",
                ));
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
