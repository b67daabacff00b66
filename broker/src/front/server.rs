//! Per-core accept loops and connections.
//!
//! Every core has its own listener on the same port (SO_REUSEPORT, all bound before any
//! executor starts: `crate::start`), so the kernel spreads connections over cores; each
//! connection lives on the core that accepted it. One port serves both protocols, as
//! Gazette's cmux does: a connection that opens with the HTTP/2 preface is gRPC, anything
//! else is HTTP/1.x (`crate::front::http`).
//!
//! Lives on: each core runs its own accept loops and the connections they accepted.

use crate::journal::journals::Journals;
use bytes::{Buf, BytesMut};
use futures_lite::io::{AsyncRead, AsyncWrite};
use futures_lite::{AsyncReadExt, future};
use glommio::net::{TcpListener, TcpStream};
use protocol::grpc::ServerCall;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// Wait after a failed accept (EMFILE and friends) before accepting again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// How long a connection may take to complete the HTTP/2 preface.
const H2_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Accepts connections on `listener` until the shutdown's draining stage, handing each to
/// `serve`. A failed accept (EMFILE and friends) backs off rather than spins, and the loop
/// keeps serving.
async fn accept_until_draining(
    listener: &TcpListener,
    core: usize,
    mut serve: impl FnMut(TcpStream),
) {
    let mut stage = crate::shutdown::subscribe();
    loop {
        let accepted = future::or(async { Some(listener.accept().await) }, async {
            crate::shutdown::reached(&mut stage, crate::shutdown::Stage::Draining).await;
            None
        })
        .await;
        match accepted {
            None => return,
            Some(Ok(stream)) => serve(stream),
            Some(Err(err)) => {
                tracing::warn!(core, port = ?listener.local_addr().ok(), %err, "accept failed");
                glommio::timer::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

/// `--debug.port`: HTTP/1.1 `/debug/*` routes only, served by core 0.
pub async fn debug_accept_loop(journals: Rc<Journals>, port: u16) {
    let core = &journals.core;
    let listener = match TcpListener::bind((core.cfg.bind.as_str(), port)) {
        Ok(listener) => listener,
        Err(err) => {
            tracing::error!(port, %err, "binding --debug.port");
            std::process::exit(1);
        }
    };
    accept_until_draining(&listener, core.index, |stream| {
        glommio::spawn_local(crate::front::http::serve_on(
            core.clone(),
            Box::new(stream),
            BytesMut::new(),
            crate::front::http::Listener::Debug,
        ))
        .detach();
    })
    .await;
}

/// Serves the shared port on this core: gRPC and HTTP/1.x, over TLS when `tls` is set.
pub async fn accept_loop(
    journals: Rc<Journals>,
    tls: Option<Arc<rustls::ServerConfig>>,
    listener: std::os::fd::OwnedFd,
) {
    use std::os::fd::{FromRawFd, IntoRawFd};
    let tls = tls.map(futures_rustls::TlsAcceptor::from);
    // SAFETY: the descriptor is a listening TCP socket this process owns; ownership moves
    // into the glommio listener, which closes it.
    let listener = unsafe { TcpListener::from_raw_fd(listener.into_raw_fd()) };
    accept_until_draining(&listener, journals.core.index, |stream| {
        let _ = stream.set_nodelay(true);
        glommio::spawn_local(serve_connection(journals.clone(), stream, tls.clone())).detach();
    })
    .await;
    // Shutting down: stop accepting (the listener closes), keep serving the rest.
    drop(listener);
    future::pending::<()>().await;
}

/// The client connection preface of HTTP/2 (RFC 9113 §3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Time a new connection has to show which protocol it speaks.
const SNIFF_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads just enough of a new connection to tell HTTP/2 from HTTP/1.x: bytes until they
/// diverge from the HTTP/2 preface or complete it. `None` if the peer closed or stalled.
async fn sniff<S: AsyncRead + Unpin>(stream: &mut S) -> Option<(bool, BytesMut)> {
    let mut buf = BytesMut::new();
    let read = async {
        loop {
            let mut chunk = [0u8; 64];
            let want = (H2_PREFACE.len() - buf.len()).clamp(1, chunk.len());
            let n = stream.read(&mut chunk[..want]).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
            let common = buf.len().min(H2_PREFACE.len());
            if buf.get(..common) != H2_PREFACE.get(..common) {
                return Some(false);
            }
            if buf.len() >= H2_PREFACE.len() {
                return Some(true);
            }
        }
    };
    let is_h2 = crate::time::within(SNIFF_TIMEOUT, read, || None).await?;
    Some((is_h2, buf))
}

async fn serve_connection(
    journals: Rc<Journals>,
    stream: TcpStream,
    tls: Option<futures_rustls::TlsAcceptor>,
) {
    let Some(acceptor) = tls else {
        return serve_stream(journals, stream).await;
    };
    // A peer that never finishes its TLS handshake must not hold a connection forever.
    let accepted = crate::time::within(
        SNIFF_TIMEOUT,
        async { Some(acceptor.accept(stream).await) },
        || None,
    )
    .await;
    let stream = match accepted {
        Some(Ok(stream)) => stream,
        Some(Err(err)) => {
            tracing::debug!(%err, "TLS handshake failed");
            return;
        }
        None => return,
    };
    // ALPN decides when the client offered it; otherwise sniff as on a plain connection.
    match stream.get_ref().1.alpn_protocol() {
        Some(b"h2") => {
            let io = Rewind {
                prefix: bytes::Bytes::new(),
                inner: stream,
            };
            serve_h2(journals, io).await
        }
        Some(_) => {
            crate::front::http::serve(journals.core.clone(), Box::new(stream), BytesMut::new())
                .await
        }
        None => serve_stream(journals, stream).await,
    }
}

/// Sniffs a (plain or decrypted) stream and serves it as HTTP/2 gRPC or HTTP/1.x. A plain
/// TCP stream's socket may then be received from directly by h2's reads
/// ([`crate::io::RawRead`]).
async fn serve_stream<S>(journals: Rc<Journals>, mut stream: S)
where
    S: AsyncRead + AsyncWrite + crate::io::RawRead + Unpin + 'static,
{
    let Some((is_h2, prefix)) = sniff(&mut stream).await else {
        return;
    };
    if !is_h2 {
        crate::front::http::serve(journals.core.clone(), Box::new(stream), prefix).await;
        return;
    }
    let io = Rewind {
        prefix: prefix.freeze(),
        inner: stream,
    };
    serve_h2(journals, io).await
}

/// The server side of an HTTP/2 connection's handshake, with Courant's windows and limits;
/// `None` if it failed or the peer did not complete the preface within
/// [`H2_HANDSHAKE_TIMEOUT`] (it must not hold a connection forever).
async fn h2_handshake<S>(
    io: Rewind<S>,
) -> Option<h2::server::Connection<crate::io::Io<Rewind<S>>, bytes::Bytes>>
where
    S: AsyncRead + AsyncWrite + crate::io::RawRead + Unpin + 'static,
{
    let io = crate::io::Io(io);
    let handshake = h2::server::Builder::new()
        .initial_window_size(1 << 20)
        .initial_connection_window_size(8 << 20)
        // DATA frames up to the stream window: a message that fits one frame is decoded
        // without a copy (`protocol::grpc::FrameDecoder`).
        .max_frame_size(1 << 20)
        .max_concurrent_streams(1024)
        .max_header_list_size(64 << 10)
        .max_send_buffer_size(1 << 20)
        .handshake::<_, bytes::Bytes>(io);
    let conn = crate::time::within(
        H2_HANDSHAKE_TIMEOUT,
        async { Some(handshake.await) },
        || None,
    )
    .await;
    match conn {
        Some(Ok(conn)) => Some(conn),
        Some(Err(err)) => {
            tracing::debug!(%err, "HTTP/2 handshake failed");
            None
        }
        None => None,
    }
}

/// Serves gRPC on an HTTP/2 connection until it closes (or drains at shutdown).
async fn serve_h2<S>(journals: Rc<Journals>, io: Rewind<S>)
where
    S: AsyncRead + AsyncWrite + crate::io::RawRead + Unpin + 'static,
{
    let Some(mut conn) = h2_handshake(io).await else {
        return;
    };
    let max_recv = journals.core.cfg.max_grpc_recv_size;
    let mut stage = crate::shutdown::subscribe();
    let mut draining = false;
    // Calls in flight on this connection, and when the last one started or ended: a
    // connection with none for `--tpc.h2-idle-timeout` is sent GOAWAY.
    let activity = Rc::new(crate::idle::Activity::new());
    let idle_timeout = journals.core.cfg.h2_idle_timeout;
    // Set once an idle connection was sent GOAWAY: a client that does not close it (or
    // answer the GOAWAY's PING) within the grace period is dropped.
    let mut idle_closing = false;
    enum Wake {
        Drain,
        Idle,
        Abandon,
    }
    // What ends serving (shutdown, or the connection idle), built once for the connection
    // rather than once per accepted stream: each rebuild armed and cancelled a reactor
    // timer and read the clock (together with the reactor's timer work, up to about 2 % of
    // the broker's CPU in a profile of the Go client's 8 × 8 load).
    let mut ends = std::pin::pin!(future::or(
        async {
            crate::shutdown::reached(&mut stage, crate::shutdown::Stage::Draining).await;
            Wake::Drain
        },
        async {
            activity.idle_for(idle_timeout).await;
            Wake::Idle
        },
    ));
    loop {
        let next = future::or(async { Ok(conn.accept().await) }, async {
            if !draining {
                return Err(ends.as_mut().await);
            }
            if idle_closing {
                // Calls that raced the GOAWAY are served before the close.
                loop {
                    glommio::timer::sleep(crate::idle::GOAWAY_GRACE).await;
                    if activity.in_flight() == 0 {
                        return Err(Wake::Abandon);
                    }
                }
            }
            future::pending().await
        })
        .await;
        let next = match next {
            Ok(next) => next,
            Err(Wake::Abandon) => {
                tracing::debug!("closing an idle HTTP/2 connection that ignored GOAWAY");
                break;
            }
            Err(wake) => {
                // GOAWAY (draining, or an idle connection): calls in flight finish, new
                // ones go elsewhere.
                conn.graceful_shutdown();
                draining = true;
                idle_closing = matches!(wake, Wake::Idle);
                continue;
            }
        };
        let Some(accepted) = next else {
            break;
        };
        match accepted {
            Ok((req, respond)) => {
                let guard = activity.start();
                // Spawning moves the task's whole future (its size is that of its largest
                // state, kilobytes for a journal call), and a call's future, once built, is
                // moved again wherever it goes: the task holds only a box, and the call is
                // built into it once, when the task first runs.
                let journals = journals.clone();
                crate::core::call::spawn_call(async move {
                    let call = ServerCall::new(req, respond, max_recv);
                    Box::pin(crate::front::dispatch::dispatch(journals, call)).await;
                    drop(guard);
                });
            }
            Err(err) => {
                tracing::debug!(%err, "connection error");
                break;
            }
        }
    }
}

/// A stream whose first bytes were already read (while sniffing), replayed before the rest.
struct Rewind<S> {
    prefix: bytes::Bytes,
    inner: S,
}

impl<S: crate::io::RawRead> crate::io::RawRead for Rewind<S> {
    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        // The replayed prefix comes first.
        self.inner.raw_fd().filter(|_| self.prefix.is_empty())
    }

    fn arm_readable(&mut self) {
        self.inner.arm_readable()
    }

    fn wait_armed(&mut self, cx: &mut Context<'_>) -> bool {
        // The replayed prefix is read first, at once.
        self.prefix.is_empty() && self.inner.wait_armed(cx)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<std::io::Result<usize>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.len());
            if let (Some(dst), Some(src)) = (buf.get_mut(..n), self.prefix.get(..n)) {
                dst.copy_from_slice(src);
            }
            self.prefix.advance(n);
            return Poll::Ready(Ok(n));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_close(cx)
    }
}
