//! Process start-up: the control thread, one executor per core, and per-core accept loops.
//!
//! Every core has its own listener on the same port (SO_REUSEPORT, all bound before any
//! executor starts), so the kernel spreads connections over cores; each connection lives on
//! the core that accepted it. One port serves both protocols, as Gazette's cmux does: a
//! connection that opens with the HTTP/2 preface is gRPC, anything else is HTTP/1.x
//! (`crate::front::http`).
//!
//! Lives on: the main thread at start-up; then each core runs its own accept loop and
//! connections, and the control thread its own runtime.

use crate::config::ServeConfig;
use crate::control::KeySpaceBackend;
use crate::control::keyspace::embedded::Embedded;
use crate::journal::core::{Core, CoreMsg, INBOX_DEPTH};
use bytes::{Buf, BytesMut};
use futures_lite::io::{AsyncRead, AsyncWrite};
use futures_lite::{AsyncReadExt, future};
use glommio::{LocalExecutorBuilder, Placement};
use protocol::grpc::ServerCall;
use protocol::process_spec::Id;
use std::cell::RefCell;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// Wait after a failed accept (EMFILE and friends) before accepting again.
const ACCEPT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(50);
/// How long a connection may take to complete the HTTP/2 preface.
const H2_HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

pub fn run(cfg: ServeConfig) -> Result<(), String> {
    use protocol::validate::Validate;
    let cfg = Arc::new(cfg);
    crate::limits::raise_nofile();
    let process_id = Id {
        zone: cfg.zone.clone(),
        suffix: cfg.broker_id(),
    };
    process_id
        .validate()
        .map_err(|e| format!("invalid --broker.zone / --broker.id: {e}"))?;
    std::fs::create_dir_all(&cfg.data_dir)
        .map_err(|e| format!("creating --data-dir {}: {e}", cfg.data_dir.display()))?;
    // Held until the process exits (the kernel drops both, also on kill -9).
    let _data_dir_lock = crate::guards::lock_data_dir(&cfg.data_dir)?;
    let _port_claim = crate::guards::claim_port(&cfg.bind, cfg.port)?;
    crate::journal::core::replay_commit_logs(&cfg.data_dir)?;

    let member_id =
        crc32c::crc32c(format!("{}#{}", process_id.zone, process_id.suffix).as_bytes()) as u64 | 1;
    // An empty address (e.g. `address =` in an INI file) also means the embedded mode.
    let backend = match cfg.etcd_address.as_ref().filter(|a| !a.trim().is_empty()) {
        None => KeySpaceBackend::Embedded(Box::new(Embedded::open(
            &cfg.data_dir.join("keyspace"),
            &cfg.etcd_prefix,
            member_id,
        )?)),
        Some(address) => {
            let member = protocol::BrokerSpec {
                process_spec: Some(protocol::ProcessSpec {
                    id: Some(process_id.clone()),
                    endpoint: cfg.endpoint(),
                }),
                journal_limit: cfg.limit,
                exiting: false,
            };
            member
                .validate()
                .map_err(|e| format!("invalid broker spec to announce: {e}"))?;
            KeySpaceBackend::Etcd(crate::control::keyspace::etcd::Config {
                address: address.clone(),
                root: cfg.etcd_prefix.clone(),
                lease_ttl: cfg.etcd_lease,
                member,
                watch_delay: cfg.watch_delay,
                tls: Box::new(crate::control::keyspace::etcd::EtcdTls {
                    cert_file: cfg.etcd_cert_file.clone(),
                    key_file: cfg.etcd_cert_key_file.clone(),
                    ca_file: cfg.etcd_trusted_ca_file.clone(),
                }),
            })
        }
    };
    // Every core's listener is bound and listening before any executor starts, so a port in
    // use is reported at once, and no connection can reach the port before every core can
    // take its share of them; and before the member key is announced, so that peers which
    // see it (and the allocator, which assigns journals to it at once) can connect: until
    // the cores run, connections wait in the backlog instead of being refused.
    let cores = cfg.cores();
    let mut listeners = (0..cores)
        .map(|_| bind_shared(&cfg.bind, cfg.port))
        .collect::<Result<Vec<_>, String>>()?
        .into_iter();
    let store_cfg = crate::control::stores::config_from(&cfg);
    let default_store = store_cfg.default_store.clone();
    let (keyspace, stores) = crate::control::start(backend, store_cfg)?;
    crate::shutdown::install()?;

    let auth = Arc::new(crate::auth::Auth::new(&cfg.auth_keys)?);
    let tls = crate::tls::server_config(&cfg)?;
    crate::tls::init_peer(&cfg)?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let sha1_lanes = storage::summer::lanes_per_group();
    tracing::info!(sha1_lanes, "SHA-1 streams hashed side by side on this CPU");
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..cores)
        .map(|_| flume::bounded::<CoreMsg>(INBOX_DEPTH))
        .unzip();
    let endpoint = cfg.endpoint();
    let owners = crate::journal::owners::Owners::new(cores);

    if let Some(port) = cfg.debug_port {
        std::net::TcpListener::bind((cfg.bind.as_str(), port))
            .map_err(|e| format!("binding --debug.port {}:{port}: {e}", cfg.bind))?;
    }

    let mut handles = Vec::new();
    for (index, inbox) in receivers.into_iter().enumerate() {
        let listener = listeners.next().expect("one listener per core");
        let cfg = cfg.clone();
        let keyspace = keyspace.clone();
        let peers = senders.clone();
        let process_id = process_id.clone();
        let endpoint = endpoint.clone();
        let auth = auth.clone();
        let tls = tls.clone();
        let stores = stores.clone();
        let default_store = default_store.clone();
        let owners = owners.clone();
        let handle = LocalExecutorBuilder::new(Placement::Fixed(index % cpus))
            .name(&format!("courant-core-{index}"))
            .io_memory(cfg.io_memory)
            .spawn(move || async move {
                let syncs = crate::journal::core::sync_batcher(&cfg, index);
                let core = Rc::new(Core {
                    index,
                    cores,
                    cfg,
                    keyspace,
                    process_id,
                    endpoint,
                    peers,
                    auth,
                    replicas: RefCell::new(Default::default()),
                    retired: RefCell::new(Default::default()),
                    stores: crate::control::stores::persist::CoreStores::new(stores, default_store),
                    peer_channels: Default::default(),
                    syncs,
                    owners: crate::journal::owners::CoreOwners::new(owners),
                    resolved: Default::default(),
                });
                crate::metrics::register_core(index);
                glommio::spawn_local(name_blocking_thread(index)).detach();
                glommio::spawn_local(crate::metrics::sample_executor()).detach();
                glommio::spawn_local(core.clone().serve_inbox(inbox)).detach();
                glommio::spawn_local(core.clone().watch_keyspace()).detach();
                glommio::spawn_local(close_on_shutdown(core.clone())).detach();
                glommio::spawn_local(crate::journal::pulse::run(core.clone())).detach();
                if index == 0 && core.keyspace.current().cluster {
                    // The allocator runs on every broker; only the leader acts.
                    glommio::spawn_local(crate::cluster::allocator::run(
                        core.keyspace.clone(),
                        core.cfg.etcd_prefix.clone(),
                        (core.process_id.zone.clone(), core.process_id.suffix.clone()),
                        core.cfg.max_replication.max(0) as u32,
                    ))
                    .detach();
                }
                if index == 0
                    && let Some(port) = core.cfg.debug_port
                {
                    glommio::spawn_local(debug_accept_loop(core.clone(), port)).detach();
                }
                if let Err(err) = accept_loop(core, tls, listener).await {
                    tracing::error!(core = index, %err, "accept loop failed");
                    std::process::exit(1);
                }
            })
            .map_err(|e| format!("starting executor {index}: {e}"))?;
        handles.push(handle);
    }
    tracing::info!(
        cores,
        %endpoint,
        listen = %format!("{}:{}", cfg.bind, cfg.port),
        data_dir = %cfg.data_dir.display(),
        "courant serving"
    );
    for h in handles {
        h.join().map_err(|e| format!("executor failed: {e}"))?;
    }
    Ok(())
}

/// Names the core's blocking-pool thread `courant-blk-<index>` (glommio starts one, on the
/// core's CPU, and it inherits the core thread's name). The spool's block reservations run
/// there (`storage::fragment::reserve`), so that a thread found blocked in the kernel (by
/// `courant-bench`'s sampler, or `ps`) is told apart from the core thread.
async fn name_blocking_thread(index: usize) {
    let name = std::ffi::CString::new(format!("courant-blk-{index}")).expect("no NUL");
    glommio::executor()
        .spawn_blocking(move || {
            // SAFETY: PR_SET_NAME reads a NUL-terminated string (cut to 15 bytes) that
            // outlives the call.
            unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
        })
        .await;
}

/// At the shutdown's closing stage, closes this core's replicas so that their blocked
/// reads end with a clean EOF (as when a journal leaves the keyspace).
async fn close_on_shutdown(core: Rc<Core>) {
    let mut stage = crate::shutdown::subscribe();
    crate::shutdown::reached(&mut stage, crate::shutdown::Stage::Closing).await;
    let replicas: Vec<_> = core.replicas.borrow().values().cloned().collect();
    for cell in replicas {
        if let Some(replica) = cell.get() {
            replica.index.borrow_mut().close();
        }
    }
}

/// `--debug.port`: HTTP/1.1 `/debug/*` routes only, served by core 0.
async fn debug_accept_loop(core: Rc<Core>, port: u16) {
    let listener = match glommio::net::TcpListener::bind((core.cfg.bind.as_str(), port)) {
        Ok(listener) => listener,
        Err(err) => {
            tracing::error!(port, %err, "binding --debug.port");
            std::process::exit(1);
        }
    };
    let mut stage = crate::shutdown::subscribe();
    loop {
        let accepted = future::or(async { Some(listener.accept().await) }, async {
            crate::shutdown::reached(&mut stage, crate::shutdown::Stage::Draining).await;
            None
        })
        .await;
        match accepted {
            None => return,
            Some(Ok(stream)) => {
                let core = core.clone();
                glommio::spawn_local(crate::front::http::serve_on(
                    core,
                    Box::new(stream),
                    BytesMut::new(),
                    crate::front::http::Listener::Debug,
                ))
                .detach();
            }
            Some(Err(err)) => {
                tracing::warn!(%err, "debug port accept failed");
                glommio::timer::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

/// Binds one listening socket of the shared port (SO_REUSEPORT: one per core, the kernel
/// spreads connections over them).
fn bind_shared(host: &str, port: u16) -> Result<std::os::fd::OwnedFd, String> {
    use socket2::{Domain, Socket, Type};
    use std::net::ToSocketAddrs;
    let addr = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("resolving --broker.bind {host}: {e}"))?
        .next()
        .ok_or_else(|| format!("--broker.bind {host} resolves to no address"))?;
    let bind = || -> std::io::Result<Socket> {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        socket.bind(&addr.into())?;
        socket.listen(1024)?;
        Ok(socket)
    };
    bind()
        .map(std::os::fd::OwnedFd::from)
        .map_err(|e| format!("binding {host}:{port}: {e}"))
}

async fn accept_loop(
    core: Rc<Core>,
    tls: Option<Arc<rustls::ServerConfig>>,
    listener: std::os::fd::OwnedFd,
) -> std::io::Result<()> {
    use std::os::fd::{FromRawFd, IntoRawFd};
    let tls = tls.map(futures_rustls::TlsAcceptor::from);
    // SAFETY: the descriptor is a listening TCP socket this process owns; ownership moves
    // into the glommio listener, which closes it.
    let listener = unsafe { glommio::net::TcpListener::from_raw_fd(listener.into_raw_fd()) };
    let mut stage = crate::shutdown::subscribe();
    loop {
        let accepted = future::or(async { Some(listener.accept().await) }, async {
            crate::shutdown::reached(&mut stage, crate::shutdown::Stage::Draining).await;
            None
        })
        .await;
        let Some(accepted) = accepted else {
            // Shutting down: stop accepting (the listener closes), keep serving the rest.
            drop(listener);
            future::pending::<()>().await;
            return Ok(());
        };
        let stream = match accepted {
            Ok(stream) => stream,
            Err(err) => {
                // EMFILE and friends: back off rather than spin, keep serving.
                tracing::warn!(core = core.index, %err, "accept failed");
                glommio::timer::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        glommio::spawn_local(serve_connection(core.clone(), stream, tls.clone())).detach();
    }
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
    let is_h2 = future::or(read, async {
        glommio::timer::sleep(SNIFF_TIMEOUT).await;
        None
    })
    .await?;
    Some((is_h2, buf))
}

async fn serve_connection(
    core: Rc<Core>,
    stream: glommio::net::TcpStream,
    tls: Option<futures_rustls::TlsAcceptor>,
) {
    let Some(acceptor) = tls else {
        return serve_stream(core, stream).await;
    };
    // A peer that never finishes its TLS handshake must not hold a connection forever.
    let accepted = future::or(async { Some(acceptor.accept(stream).await) }, async {
        glommio::timer::sleep(SNIFF_TIMEOUT).await;
        None
    })
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
            serve_h2(core, io).await
        }
        Some(_) => crate::front::http::serve(core, Box::new(stream), BytesMut::new()).await,
        None => serve_stream(core, stream).await,
    }
}

/// Sniffs a (plain or decrypted) stream and serves it as HTTP/2 gRPC or HTTP/1.x. A plain
/// TCP stream's socket may then be received from directly by h2's reads
/// ([`crate::io::RawRead`]).
async fn serve_stream<S>(core: Rc<Core>, mut stream: S)
where
    S: AsyncRead + AsyncWrite + crate::io::RawRead + Unpin + 'static,
{
    let Some((is_h2, prefix)) = sniff(&mut stream).await else {
        return;
    };
    if !is_h2 {
        crate::front::http::serve(core, Box::new(stream), prefix).await;
        return;
    }
    let io = Rewind {
        prefix: prefix.freeze(),
        inner: stream,
    };
    serve_h2(core, io).await
}

/// Serves gRPC on an HTTP/2 connection until it closes (or drains at shutdown).
async fn serve_h2<S>(core: Rc<Core>, io: Rewind<S>)
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
    // A peer that never completes the HTTP/2 preface must not hold a connection forever.
    let conn = future::or(async { Some(handshake.await) }, async {
        glommio::timer::sleep(H2_HANDSHAKE_TIMEOUT).await;
        None
    })
    .await;
    let mut conn = match conn {
        Some(Ok(conn)) => conn,
        Some(Err(err)) => {
            tracing::debug!(%err, "HTTP/2 handshake failed");
            return;
        }
        None => return,
    };
    let max_recv = core.cfg.max_grpc_recv_size;
    let mut stage = crate::shutdown::subscribe();
    let mut draining = false;
    // Calls in flight on this connection, and when the last one started or ended: a
    // connection with none for `--tpc.h2-idle-timeout` is sent GOAWAY.
    let activity = Rc::new(crate::idle::Activity::new());
    let idle_timeout = core.cfg.h2_idle_timeout;
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
                let core = core.clone();
                crate::journal::call::spawn_call(async move {
                    Box::pin(core.dispatch(ServerCall::new(req, respond, max_recv))).await;
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
