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
        let timeout = async {
            glommio::timer::sleep(DIAL_TIMEOUT).await;
            Err(RpcError::unavailable(format!(
                "dialing peer {endpoint}: timed out after {DIAL_TIMEOUT:?}"
            )))
        };
        let (channel, conn) = futures_lite::future::or(dial, timeout).await?;
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

    /// Forgets the connection to `endpoint` (after a call on it failed at the transport).
    pub fn drop_peer_channel(&self, endpoint: &str) {
        self.peer_channels.conns.borrow_mut().remove(endpoint);
    }
}
