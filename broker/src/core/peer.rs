//! Client connections from this core to other brokers: the replication pipeline's
//! `Replicate` streams and proxied Append, Read and ListFragments calls.
//!
//! Lives on: each core keeps its own cache (`!Send`), one HTTP/2 connection per peer
//! endpoint, shared by every call this core makes to that peer. A connection whose driver
//! ends (the peer died, reset, or closed it) leaves the cache, and the next call dials again.

use crate::core::Core;
use crate::io::Io;
use protocol::grpc::{Channel, RpcError};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

/// How long dialing a peer may take before the call fails as UNAVAILABLE.
const DIAL_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Default)]
pub struct PeerChannels {
    /// Live connections by endpoint, each with a generation number so that a finished
    /// driver removes only its own entry.
    conns: RefCell<HashMap<String, (u64, Channel)>>,
    next_gen: std::cell::Cell<u64>,
    /// The simulated network this core's replication streams go through instead (the
    /// simulator's brokers only; test builds only).
    #[cfg(test)]
    pub sim: RefCell<Option<Rc<dyn TestNet>>>,
}

/// A network that stands in for peers' sockets (the simulator's; test builds only). A trait,
/// so that the journal layer does not depend on the simulator that implements it.
#[cfg(test)]
pub trait TestNet {
    /// Opens a `Replicate` stream of `journal` to the broker at `endpoint`.
    fn open(&self, endpoint: &str, journal: &str) -> Result<TestCall, RpcError>;
}

/// The request side of a [`TestNet`] stream.
#[cfg(test)]
pub trait TestLink {
    /// Queues `part` of the request stream (whole gRPC frames, or parts of one).
    fn send_frame(&mut self, part: bytes::Bytes) -> Result<(), RpcError>;
    /// Half-closes the stream: the peer sees EOF after what was sent.
    fn close(&mut self);
}

/// One stream of a [`TestNet`]: its request side, and its response message bodies
/// (`Ok(None)`: the peer ended the stream with OK).
#[cfg(test)]
pub struct TestCall {
    pub link: Box<dyn TestLink>,
    pub responses: flume::Receiver<Result<Option<bytes::Bytes>, RpcError>>,
}

/// One `Replicate` stream to a peer, as the primary's pipeline uses it: an h2 stream, or in
/// the simulator a stream of the simulated network. An enum, so production pays one match
/// per frame and nothing else.
// Production builds have only `H2`; the small test-only variant is what makes them differ.
#[allow(clippy::large_enum_variant)]
pub enum PeerCall {
    H2(protocol::grpc::ClientCall),
    #[cfg(test)]
    Sim(TestCall),
}

impl PeerCall {
    /// The stream's request side and response side, used apart: the spool's holder sends
    /// while appends in flight read their acknowledgements in turn.
    pub fn split(self) -> (PeerSend, PeerRecv) {
        match self {
            PeerCall::H2(call) => {
                let (sender, responses) = call.split();
                (
                    PeerSend {
                        inner: SendInner::H2(sender),
                        closed: false,
                    },
                    PeerRecv::H2(responses),
                )
            }
            #[cfg(test)]
            PeerCall::Sim(call) => (
                PeerSend {
                    inner: SendInner::Sim(call.link),
                    closed: false,
                },
                PeerRecv::Sim(call.responses),
            ),
        }
    }
}

/// The request side of a `Replicate` stream. Dropped without [`PeerSend::close`], it
/// resets the stream (the peer rolls back what it did not commit), as dropping the whole
/// call did.
pub struct PeerSend {
    inner: SendInner,
    closed: bool,
}

enum SendInner {
    H2(protocol::grpc::FrameSender),
    #[cfg(test)]
    Sim(Box<dyn TestLink>),
}

impl PeerSend {
    /// Sends `frame` (a whole gRPC frame, or a part of one).
    pub async fn send_frame(&mut self, frame: bytes::Bytes) -> Result<(), RpcError> {
        match &mut self.inner {
            SendInner::H2(sender) => sender.send_frame(frame, false).await,
            #[cfg(test)]
            SendInner::Sim(link) => link.send_frame(frame),
        }
    }

    /// Half-closes the stream: the peer sees EOF after what was sent.
    pub fn close(&mut self) {
        self.closed = true;
        match &mut self.inner {
            SendInner::H2(sender) => {
                let _ = sender.close();
            }
            #[cfg(test)]
            SendInner::Sim(link) => link.close(),
        }
    }
}

impl Drop for PeerSend {
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        match &mut self.inner {
            SendInner::H2(sender) => sender.cancel(),
            // The simulated link resets itself when dropped unclosed.
            #[cfg(test)]
            SendInner::Sim(_) => {}
        }
    }
}

/// The response side of a `Replicate` stream.
#[allow(clippy::large_enum_variant)]
pub enum PeerRecv {
    H2(protocol::grpc::ClientResponses),
    #[cfg(test)]
    Sim(flume::Receiver<Result<Option<bytes::Bytes>, RpcError>>),
}

impl PeerRecv {
    /// The next response message; `Ok(None)` once the peer ended the stream with OK.
    pub async fn next<M: prost::Message + Default>(&mut self) -> Result<Option<M>, RpcError> {
        match self {
            PeerRecv::H2(responses) => responses.next().await,
            #[cfg(test)]
            PeerRecv::Sim(responses) => match responses.recv_async().await {
                Ok(Ok(Some(body))) => protocol::grpc::decode_message(body).map(Some),
                Ok(Ok(None)) => Ok(None),
                Ok(Err(e)) => Err(e),
                Err(_) => Err(RpcError::unavailable("simulated stream reset")),
            },
        }
    }
}

impl Core {
    /// A channel to the broker at `endpoint`, dialing it if this core has none.
    pub async fn peer_channel(self: &Rc<Self>, endpoint: &str) -> Result<Channel, RpcError> {
        if let Some((_, ch)) = self.peer_channels.conns.borrow().get(endpoint) {
            return Ok(ch.clone());
        }
        let (addr, secure) = crate::tls::peer_addr(endpoint)?;
        let dial = async {
            let stream = glommio::net::TcpStream::connect(addr.as_str())
                .await
                .map_err(|e| RpcError::unavailable(format!("dialing peer {endpoint}: {e}")))?;
            let _ = stream.set_nodelay(true);
            let stream = crate::tls::peer_stream(stream, &addr, secure).await?;
            Channel::handshake(Io(stream), &addr).await
        };
        let (channel, conn) = crate::time::within(DIAL_TIMEOUT, dial, || {
            Err(RpcError::unavailable(format!(
                "dialing peer {endpoint}: timed out after {DIAL_TIMEOUT:?}"
            )))
        })
        .await?;
        // Another task may have dialed meanwhile: keep the first, drop ours.
        if let Some((_, ch)) = self.peer_channels.conns.borrow().get(endpoint) {
            return Ok(ch.clone());
        }
        let generation = self.peer_channels.next_gen.get() + 1;
        self.peer_channels.next_gen.set(generation);
        self.peer_channels
            .conns
            .borrow_mut()
            .insert(endpoint.to_string(), (generation, channel.clone()));
        let core = Rc::downgrade(self);
        let key = endpoint.to_string();
        glommio::spawn_local(async move {
            if let Err(err) = conn.await {
                tracing::debug!(peer = %key, %err, "peer connection ended");
            }
            if let Some(core) = core.upgrade() {
                let mut conns = core.peer_channels.conns.borrow_mut();
                if conns.get(&key).is_some_and(|(g, _)| *g == generation) {
                    conns.remove(&key);
                }
            }
        })
        .detach();
        Ok(channel)
    }

    /// Starts `path` on the broker at `endpoint`, authorized (when `--broker.auth-keys` is
    /// set) by a token this broker signs for `capability` on `journal` alone. A failure to
    /// start the call forgets the connection, so the next call dials again.
    pub async fn peer_call(
        self: &Rc<Self>,
        endpoint: &str,
        path: &str,
        capability: u32,
        journal: &str,
    ) -> Result<protocol::grpc::ClientCall, RpcError> {
        let mut channel = self.peer_channel(endpoint).await?;
        if let Some(token) = self.auth.peer_token(capability, journal) {
            channel = channel.with_metadata("authorization", token);
        }
        channel.call(path).await.inspect_err(|_| {
            self.drop_peer_channel(endpoint);
        })
    }

    /// Starts a `Replicate` stream of `journal` to the broker at `endpoint` (over the
    /// simulated network for the simulator's brokers).
    pub async fn replicate_call(
        self: &Rc<Self>,
        endpoint: &str,
        journal: &str,
    ) -> Result<PeerCall, RpcError> {
        #[cfg(test)]
        {
            let net = self.peer_channels.sim.borrow().clone();
            if let Some(net) = net {
                return net.open(endpoint, journal).map(PeerCall::Sim);
            }
        }
        self.peer_call(
            endpoint,
            "/protocol.Journal/Replicate",
            crate::auth::jwt::REPLICATE,
            journal,
        )
        .await
        .map(PeerCall::H2)
    }

    /// Forgets the connection to `endpoint` (after a call on it failed at the transport).
    pub fn drop_peer_channel(&self, endpoint: &str) {
        self.peer_channels.conns.borrow_mut().remove(endpoint);
    }
}
