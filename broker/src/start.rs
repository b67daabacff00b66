//! Process start-up: checks the identity and data directory, replays the commit logs,
//! starts the control thread (keyspace and fragment stores), binds every core's listener,
//! and starts one executor per core with its runtime ([`Core`]), its journals
//! ([`Journals`]) and its tasks; then waits for the executors.
//!
//! Lives on: the main thread at start-up; then each core runs its own tasks, and the
//! control thread its own runtime.

use crate::config::ServeConfig;
use crate::control::KeySpaceBackend;
use crate::control::keyspace::embedded::Embedded;
use crate::core::Core;
use crate::core::msg::{CoreMsg, INBOX_DEPTH};
use crate::journal::journals::Journals;
use glommio::{LocalExecutorBuilder, Placement};
use protocol::process_spec::Id;
use std::rc::Rc;
use std::sync::Arc;

/// Serves until shutdown: the `courant serve` command.
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
    replay_commit_logs(&cfg.data_dir)?;

    let backend = keyspace_backend(&cfg, &process_id)?;
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
    let owners = crate::core::owners::Owners::new(cores);

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
                let syncs = crate::core::sync_batcher(&cfg, index);
                let core = Rc::new(Core {
                    index,
                    cores,
                    cfg,
                    keyspace,
                    process_id,
                    endpoint,
                    peers,
                    auth,
                    stores: crate::control::stores::persist::CoreStores::new(stores, default_store),
                    peer_channels: Default::default(),
                    syncs,
                    owners: crate::core::owners::CoreOwners::new(owners),
                });
                serve_core(core, inbox, tls, listener).await;
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

/// The keyspace this broker serves from: etcd at `--etcd.address`, announcing this broker
/// as a member, or (without one) the embedded keyspace under the data directory.
fn keyspace_backend(cfg: &ServeConfig, process_id: &Id) -> Result<KeySpaceBackend, String> {
    use protocol::validate::Validate;
    let member_id =
        crc32c::crc32c(format!("{}#{}", process_id.zone, process_id.suffix).as_bytes()) as u64 | 1;
    // An empty address (e.g. `address =` in an INI file) also means the embedded mode.
    Ok(
        match cfg.etcd_address.as_ref().filter(|a| !a.trim().is_empty()) {
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
        },
    )
}

/// Runs core `core.index`: its journals, its tasks (the inbox of forwarded calls, the
/// keyspace watch, the shutdown's close, pulses, the allocator and debug port on core 0),
/// then its accept loop, until shutdown.
async fn serve_core(
    core: Rc<Core>,
    inbox: flume::Receiver<CoreMsg>,
    tls: Option<Arc<rustls::ServerConfig>>,
    listener: std::os::fd::OwnedFd,
) {
    let index = core.index;
    let journals = Rc::new(Journals::new(core.clone()));
    crate::metrics::register_core(index);
    glommio::spawn_local(name_blocking_thread(index)).detach();
    glommio::spawn_local(crate::metrics::sample_executor()).detach();
    glommio::spawn_local(crate::front::dispatch::serve_inbox(journals.clone(), inbox)).detach();
    glommio::spawn_local(journals.clone().watch_keyspace()).detach();
    glommio::spawn_local(close_on_shutdown(journals.clone())).detach();
    glommio::spawn_local(crate::journal::pulse::run(journals.clone())).detach();
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
        glommio::spawn_local(crate::front::server::debug_accept_loop(
            journals.clone(),
            port,
        ))
        .detach();
    }
    crate::front::server::accept_loop(journals, tls, listener).await;
}

/// Replays the commit logs of durable mode into the spools under `data_dir` (blocking; at
/// start, before any spool opens). Logs of a run without `--tpc.durable` are replayed too.
pub fn replay_commit_logs(data_dir: &std::path::Path) -> Result<(), String> {
    storage::spool::wal::replay(&data_dir.join("spools"))
        .map(|_| ())
        .map_err(|e| format!("replaying the commit logs of durable mode: {e}"))
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
async fn close_on_shutdown(journals: Rc<Journals>) {
    let mut stage = crate::shutdown::subscribe();
    crate::shutdown::reached(&mut stage, crate::shutdown::Stage::Closing).await;
    journals.close_all();
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
