//! A pool of HTTP/2 connections, one per broker endpoint, dialled on first use and
//! redialled once the previous connection has ended.
//!
//! Lives on: [`crate::Client`] (shared by every clone); each connection's h2 driver runs as
//! its own tokio task, which marks the connection dead when it ends.

use crate::endpoint::Endpoint;
use protocol::grpc::{Channel, RpcError};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::net::TcpStream;

struct Conn {
    channel: Channel,
    alive: Arc<AtomicBool>,
}

/// Connections by endpoint authority.
pub(crate) struct Pool {
    conns: Mutex<HashMap<String, Conn>>,
    dial_timeout: Duration,
}

impl Pool {
    pub(crate) fn new(dial_timeout: Duration) -> Pool {
        Pool {
            conns: Mutex::new(HashMap::new()),
            dial_timeout,
        }
    }

    /// A live channel to `endpoint`, dialling it if needed. Failures are `Unavailable`, the
    /// code the retry logic treats as "nothing reached the broker".
    pub(crate) async fn channel(&self, endpoint: &Endpoint) -> Result<Channel, RpcError> {
        if let Some(conn) = self.lock().get(&endpoint.authority)
            && conn.alive.load(Ordering::Acquire)
        {
            return Ok(conn.channel.clone());
        }
        let conn = tokio::time::timeout(self.dial_timeout, dial(endpoint))
            .await
            .map_err(|_| {
                RpcError::unavailable(format!(
                    "connecting to {}: no answer within {:?}",
                    endpoint.url(),
                    self.dial_timeout
                ))
            })??;
        let channel = conn.channel.clone();
        self.lock().insert(endpoint.authority.clone(), conn);
        Ok(channel)
    }

    /// Drops the pooled connection to `endpoint` (after a transport failure on it), so the
    /// next call dials afresh.
    pub(crate) fn forget(&self, endpoint: &Endpoint) {
        self.lock().remove(&endpoint.authority);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Conn>> {
        // The map holds no invariant a panicking holder could break: use it regardless.
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Dials `endpoint` with `TCP_NODELAY`, performs the HTTP/2 handshake and spawns the
/// connection's driver.
async fn dial(endpoint: &Endpoint) -> Result<Conn, RpcError> {
    let url = endpoint.url();
    let tcp = TcpStream::connect(&endpoint.authority)
        .await
        .map_err(|e| RpcError::unavailable(format!("connecting to {url}: {e}")))?;
    tcp.set_nodelay(true)
        .map_err(|e| RpcError::unavailable(format!("setting TCP_NODELAY to {url}: {e}")))?;
    let (channel, driver) = Channel::handshake(tcp, &endpoint.authority)
        .await
        .map_err(|e| RpcError::unavailable(format!("HTTP/2 handshake with {url}: {e}")))?;
    let alive = Arc::new(AtomicBool::new(true));
    let flag = alive.clone();
    tokio::spawn(async move {
        // The connection's end (closed by the peer, or an error) is seen by callers as
        // failed calls; here it only marks the pooled entry dead so it is redialled.
        let _ = driver.await;
        flag.store(false, Ordering::Release);
    });
    Ok(Conn { channel, alive })
}
