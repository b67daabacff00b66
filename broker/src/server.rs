//! Process start-up: the control thread, one executor per core, and per-core accept loops.
//!
//! Every core binds the same port (glommio sets SO_REUSEPORT), so the kernel spreads
//! connections over cores; each connection lives on the core that accepted it.

use crate::config::ServeConfig;
use crate::core::{Core, CoreMsg, INBOX_DEPTH};
use crate::keyspace::embedded::Embedded;
use futures_lite::future;
use glommio::{LocalExecutorBuilder, Placement};
use protocol::grpc::ServerCall;
use protocol::process_spec::Id;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use tokio_util::compat::FuturesAsyncReadCompatExt;

pub fn run(cfg: ServeConfig) -> Result<(), String> {
    use protocol::validate::Validate;
    let cfg = Arc::new(cfg);
    let process_id = Id {
        zone: cfg.zone.clone(),
        suffix: cfg.broker_id(),
    };
    process_id
        .validate()
        .map_err(|e| format!("invalid --broker.zone / --broker.id: {e}"))?;
    std::fs::create_dir_all(&cfg.data_dir)
        .map_err(|e| format!("creating --data-dir {}: {e}", cfg.data_dir.display()))?;

    let member_id =
        crc32c::crc32c(format!("{}#{}", process_id.zone, process_id.suffix).as_bytes()) as u64 | 1;
    let backend = Embedded::open(&cfg.data_dir.join("keyspace"), &cfg.etcd_prefix, member_id)?;
    let keyspace = crate::control::start(Box::new(backend));

    let cores = cfg.cores();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..cores)
        .map(|_| flume::bounded::<CoreMsg>(INBOX_DEPTH))
        .unzip();
    let endpoint = cfg.endpoint();

    // Bind once up front so that a port in use is reported before any executor starts.
    std::net::TcpListener::bind((cfg.bind.as_str(), cfg.port))
        .map_err(|e| format!("binding {}:{}: {e}", cfg.bind, cfg.port))?;

    let mut handles = Vec::new();
    for (index, inbox) in receivers.into_iter().enumerate() {
        let cfg = cfg.clone();
        let keyspace = keyspace.clone();
        let peers = senders.clone();
        let process_id = process_id.clone();
        let endpoint = endpoint.clone();
        let handle = LocalExecutorBuilder::new(Placement::Fixed(index % cpus))
            .name(&format!("courant-core-{index}"))
            .io_memory(cfg.io_memory)
            .spawn(move || async move {
                let core = Rc::new(Core {
                    index,
                    cores,
                    cfg,
                    keyspace,
                    process_id,
                    endpoint,
                    peers,
                    replicas: RefCell::new(Default::default()),
                });
                glommio::spawn_local(core.clone().serve_inbox(inbox)).detach();
                glommio::spawn_local(core.clone().watch_keyspace()).detach();
                if let Err(err) = accept_loop(core).await {
                    tracing::error!(core = index, %err, "accept loop failed");
                    std::process::exit(1);
                }
            })
            .map_err(|e| format!("starting executor {index}: {e}"))?;
        handles.push(handle);
    }
    tracing::info!(cores, %endpoint, "courant serving");
    for h in handles {
        h.join().map_err(|e| format!("executor failed: {e}"))?;
    }
    Ok(())
}

async fn accept_loop(core: Rc<Core>) -> std::io::Result<()> {
    let listener = glommio::net::TcpListener::bind((core.cfg.bind.as_str(), core.cfg.port))?;
    loop {
        let stream = match listener.accept().await {
            Ok(stream) => stream,
            Err(err) => {
                // EMFILE and friends: back off rather than spin, keep serving.
                tracing::warn!(core = core.index, %err, "accept failed");
                glommio::timer::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        glommio::spawn_local(serve_connection(core.clone(), stream)).detach();
    }
}

async fn serve_connection(core: Rc<Core>, stream: glommio::net::TcpStream) {
    let io = stream.compat();
    let handshake = h2::server::Builder::new()
        .initial_window_size(1 << 20)
        .initial_connection_window_size(8 << 20)
        .max_frame_size(256 << 10)
        .max_concurrent_streams(1024)
        .max_header_list_size(64 << 10)
        .max_send_buffer_size(1 << 20)
        .handshake::<_, bytes::Bytes>(io);
    // A peer that never completes the HTTP/2 preface must not hold a connection forever.
    let conn = future::or(async { Some(handshake.await) }, async {
        glommio::timer::sleep(std::time::Duration::from_secs(10)).await;
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
    while let Some(accepted) = conn.accept().await {
        match accepted {
            Ok((req, respond)) => {
                let call = ServerCall::new(req, respond, max_recv);
                glommio::spawn_local(core.clone().dispatch(call)).detach();
            }
            Err(err) => {
                tracing::debug!(%err, "connection error");
                break;
            }
        }
    }
}
