//! The store service on the control thread, and the handles executor cores use to reach it:
//! the background uploader (persister), store listings, object reads, URL signing and
//! health.
//!
//! Lives on: [`serve`] and its tasks on the control thread; [`StoreHandle`] (`Send`) is
//! cloned to every core, and [`CoreStores`] (`!Send`) is each core's view with a cache of
//! health receivers.
//!
//! Persisting one completed fragment (a [`StoreMsg::Persist`]):
//! 1. *Owner core*: the spool rolled (or recovery returned a completed fragment); the
//!    fragment stays indexed as local, and its file stays on disk.
//! 2. *Control thread*: a task waits for one of `--store.max-uploads` permits (bounded
//!    concurrency, hence bounded memory however many journals roll at once).
//! 3. *Control thread*: the journal's current spec picks the store (`stores[0]`, or the
//!    broker's default store); if the content-addressed object already exists, done.
//! 4. *Blocking pool*: the fragment's bytes are read from its local file, their SHA-1 is
//!    checked against the fragment's sum, and they are compressed with its codec into a
//!    staged file under `<data-dir>/uploads/` (NONE uploads the local file itself).
//! 5. *Control thread*: upload (one PUT, or multipart with bounded parts in flight), then a
//!    HEAD confirms the object and gives its mod time.
//! 6. *Owner core*: the index marks the fragment persisted (backing store, mod time); only
//!    then are the local `.spool` and `.commits` files removed.
//!
//! A failed attempt is retried with exponential backoff (1 s doubling to 60 s) for as long
//! as the journal exists: nothing acknowledged is dropped because a store was down. Local
//! files are never removed for a failed or abandoned upload.

use super::{ActiveStore, Health, ObjectBody, PutSource, StoreError, StoresConfig};
use crate::control::keyspace::Snapshot;
use crate::errors::BrokerError;
use crate::metrics::stores as metrics;
use bytes::Bytes;
use futures_util::StreamExt;
use protocol::{CompressionCodec, Fragment};
use sha1::{Digest, Sha1};
use std::cell::RefCell;
use std::collections::HashMap;
use std::io::Read;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Semaphore, watch};

/// Bound on one store health check (a probe that hangs counts as a failure).
const HEALTH_PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
/// Bound on one upload attempt: Gazette's generous timeout against wedged uploads.
const UPLOAD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);
/// First wait before retrying a failed upload; doubles per failure.
const UPLOAD_BACKOFF_FIRST: std::time::Duration = std::time::Duration::from_secs(1);
/// Longest wait between upload retries.
const UPLOAD_BACKOFF_MAX: std::time::Duration = std::time::Duration::from_secs(60);

/// A gauge held up by one for as long as the guard lives (also when its future is
/// dropped, e.g. by a timeout).
struct Gauge(&'static AtomicI64);

impl Gauge {
    fn inc(g: &'static AtomicI64) -> Gauge {
        g.fetch_add(1, Relaxed);
        Gauge(g)
    }
}

impl Drop for Gauge {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

/// Depth of the control thread's inbox of store requests.
pub const STORE_INBOX_DEPTH: usize = 1024;
/// Raw chunks of one object read buffered between the control thread and the reader.
const READ_CHUNKS_IN_FLIGHT: usize = 4;

/// What executor cores ask of the store service. Dropping one before it runs costs only
/// that request: its reply channel closes and the requester reports (or retries) it.
pub enum StoreMsg {
    /// The health receiver of a store, creating the store (and its checks) on first use.
    Health {
        url: String,
        reply: flume::Sender<watch::Receiver<Health>>,
    },
    /// Lists every fragment of `journal` in `stores` (or the default store if empty).
    List {
        journal: String,
        stores: Vec<String>,
        reply: flume::Sender<Result<Vec<Fragment>, String>>,
    },
    /// Persists a completed local fragment; retried until done or the journal is gone.
    Persist {
        job: PersistJob,
        reply: flume::Sender<PersistOutcome>,
    },
    /// Opens a persisted fragment's object for reading.
    Open {
        fragment: Fragment,
        reply: flume::Sender<Result<ObjectReader, String>>,
    },
    /// Signs GET URLs of persisted fragments.
    Sign {
        fragments: Vec<Fragment>,
        ttl: Duration,
        reply: flume::Sender<Vec<Result<String, String>>>,
    },
    /// FragmentStoreHealth's delete probe.
    CheckDelete {
        url: String,
        prefix: String,
        reply: flume::Sender<Result<(), String>>,
    },
}

/// A completed local fragment to persist.
pub struct PersistJob {
    /// The fragment as indexed locally (no backing store, no mod time).
    pub fragment: Fragment,
    /// Its content file; byte 0 is offset `fragment.begin`.
    pub file: PathBuf,
    /// The spool's first append, for `path_postfix_template`s; unknown (`None`) for
    /// fragments recovered at start-up, which then use the time the upload starts.
    pub first_append: Option<std::time::SystemTime>,
}

#[derive(Debug)]
pub enum PersistOutcome {
    /// The fragment as its store holds it (backing store and mod time set).
    Persisted(Fragment),
    /// The journal was deleted before the fragment could be persisted.
    Dropped,
}

/// A persisted fragment's object being read: raw chunks, in order, then the end of the
/// channel (or an error item). Dropping it stops the download.
pub struct ObjectReader {
    pub gzip_encoded: bool,
    pub chunks: flume::Receiver<Result<Bytes, String>>,
}

/// A cheap, `Send` handle to the store service. Lives on: any core.
#[derive(Clone)]
pub struct StoreHandle {
    tx: flume::Sender<StoreMsg>,
}

impl StoreHandle {
    async fn ask<T>(
        &self,
        make: impl FnOnce(flume::Sender<T>) -> StoreMsg,
    ) -> Result<T, BrokerError> {
        let (reply, rx) = flume::bounded(1);
        self.tx
            .send_async(make(reply))
            .await
            .map_err(|_| BrokerError::ControlStopped)?;
        rx.recv_async()
            .await
            .map_err(|_| BrokerError::ControlDropped("store request"))
    }

    pub async fn list(
        &self,
        journal: String,
        stores: Vec<String>,
    ) -> Result<Vec<Fragment>, BrokerError> {
        self.ask(|reply| StoreMsg::List {
            journal,
            stores,
            reply,
        })
        .await?
        .map_err(BrokerError::Control)
    }

    pub async fn persist(&self, job: PersistJob) -> Result<PersistOutcome, BrokerError> {
        self.ask(|reply| StoreMsg::Persist { job, reply }).await
    }

    pub async fn open(&self, fragment: Fragment) -> Result<ObjectReader, BrokerError> {
        self.ask(|reply| StoreMsg::Open { fragment, reply })
            .await?
            .map_err(BrokerError::Control)
    }

    pub async fn sign(
        &self,
        fragments: Vec<Fragment>,
        ttl: Duration,
    ) -> Result<Vec<Result<String, String>>, BrokerError> {
        self.ask(|reply| StoreMsg::Sign {
            fragments,
            ttl,
            reply,
        })
        .await
    }

    pub async fn check_delete(&self, url: String, prefix: String) -> Result<(), BrokerError> {
        self.ask(|reply| StoreMsg::CheckDelete { url, prefix, reply })
            .await?
            .map_err(BrokerError::Control)
    }

    async fn health(&self, url: String) -> Result<watch::Receiver<Health>, BrokerError> {
        self.ask(|reply| StoreMsg::Health { url, reply }).await
    }
}

/// A core's view of the stores: the handle, the default store, and a cache of health
/// receivers so that an append checks health without leaving its core.
/// Lives on: one core (`!Send`).
pub struct CoreStores {
    pub handle: StoreHandle,
    pub default_store: String,
    health: RefCell<HashMap<String, watch::Receiver<Health>>>,
}

impl CoreStores {
    pub fn new(handle: StoreHandle, default_store: String) -> CoreStores {
        CoreStores {
            handle,
            default_store,
            health: RefCell::default(),
        }
    }

    /// The first of [`CoreStores::stores_of`], borrowed (an append checks its health).
    pub fn first_store_of<'a>(&'a self, spec: &'a protocol::JournalSpec) -> Option<&'a str> {
        stores_or_default(spec, &self.default_store)
            .first()
            .map(String::as_str)
    }

    /// The stores of a journal's spec, or the default store when it names none.
    pub fn stores_of(&self, spec: &protocol::JournalSpec) -> Vec<String> {
        stores_or_default(spec, &self.default_store).to_vec()
    }

    /// The health receiver of `url` (cached per core after the first request).
    pub async fn health(&self, url: &str) -> Result<watch::Receiver<Health>, BrokerError> {
        if let Some(rx) = self.health.borrow().get(url) {
            return Ok(rx.clone());
        }
        let rx = self.handle.health(url.to_string()).await?;
        self.health.borrow_mut().insert(url.to_string(), rx.clone());
        Ok(rx)
    }
}

/// State of the store service on the control thread.
struct Service {
    cfg: StoresConfig,
    keyspace: watch::Receiver<Arc<Snapshot>>,
    stores: Mutex<HashMap<String, Arc<ActiveStore>>>,
    uploads: Semaphore,
}

/// Creates the channel of the store service: the handle for cores, and the receiver that
/// [`serve`] drains on the control thread.
pub fn channel() -> (StoreHandle, flume::Receiver<StoreMsg>) {
    let (tx, rx) = flume::bounded(STORE_INBOX_DEPTH);
    (StoreHandle { tx }, rx)
}

/// Serves store requests on the control thread's runtime until every handle is dropped.
pub async fn serve(
    cfg: StoresConfig,
    keyspace: watch::Receiver<Arc<Snapshot>>,
    inbox: flume::Receiver<StoreMsg>,
) {
    // reqwest (object_store) is built with rustls on ring and no default provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    if let Err(e) = std::fs::create_dir_all(&cfg.file_root) {
        tracing::error!(root = %cfg.file_root.display(), %e, "creating --broker.file-root");
    }
    // Staged uploads of an earlier process are garbage: their fragments are re-staged.
    let _ = std::fs::remove_dir_all(&cfg.staging_dir);
    if let Err(e) = std::fs::create_dir_all(&cfg.staging_dir) {
        tracing::error!(dir = %cfg.staging_dir.display(), %e, "creating the upload staging directory");
    }
    let service = Arc::new(Service {
        uploads: Semaphore::new(cfg.max_uploads),
        cfg,
        keyspace,
        stores: Mutex::default(),
    });
    while let Ok(msg) = inbox.recv_async().await {
        let service = service.clone();
        tokio::spawn(async move { service.handle(msg).await });
    }
}

impl Service {
    async fn handle(self: Arc<Self>, msg: StoreMsg) {
        match msg {
            StoreMsg::Health { url, reply } => {
                let _ = reply.send(self.active(&url).health.subscribe());
            }
            StoreMsg::List {
                journal,
                stores,
                reply,
            } => {
                let _ = reply.send(self.list(&journal, stores).await);
            }
            StoreMsg::Persist { job, reply } => {
                let _ = reply.send(self.persist(job).await);
            }
            StoreMsg::Open { fragment, reply } => {
                let _ = reply.send(self.open(&fragment).await.map_err(|e| e.message));
            }
            StoreMsg::Sign {
                fragments,
                ttl,
                reply,
            } => {
                let mut out = Vec::with_capacity(fragments.len());
                for f in &fragments {
                    let active = self.active(&f.backing_store);
                    let path = active.rewrite(&storage::naming::content_path(f));
                    let signed = match active.get() {
                        Ok(store) => store.sign_get(&path, ttl).await,
                        Err(e) => Err(e),
                    };
                    out.push(signed.map_err(|e| e.message));
                }
                let _ = reply.send(out);
            }
            StoreMsg::CheckDelete { url, prefix, reply } => {
                let active = self.active(&url);
                let probe = tokio::time::timeout(
                    HEALTH_PROBE_TIMEOUT,
                    super::check_delete(&active, &prefix),
                )
                .await
                .unwrap_or_else(|_| Err(StoreError::new("delete probe timed out")));
                let _ = reply.send(probe.map_err(|e| e.message));
            }
        }
    }

    /// The active store of `url`, built (and its health checks started) on first use.
    fn active(&self, url: &str) -> Arc<ActiveStore> {
        let mut stores = self.stores.lock().expect("store registry poisoned");
        if let Some(active) = stores.get(url) {
            return active.clone();
        }
        let active = Arc::new(ActiveStore::new(&self.cfg, url));
        metrics::health(url).store(0, Relaxed);
        if let Err(e) = &active.store {
            tracing::warn!(store = url, error = %e, "fragment store cannot be used");
        } else {
            tokio::spawn(check_loop(active.clone()));
            tracing::info!(store = url, "started fragment store");
        }
        stores.insert(url.to_string(), active.clone());
        active
    }

    async fn list(&self, journal: &str, stores: Vec<String>) -> Result<Vec<Fragment>, String> {
        let stores = if !stores.is_empty() || self.cfg.default_store.is_empty() {
            stores
        } else {
            vec![self.cfg.default_store.clone()]
        };
        let mut out = Vec::new();
        for url in stores {
            let active = self.active(&url);
            let store = active.get().map_err(|e| e.message)?;
            let prefix = active.rewrite(&storage::naming::journal_prefix(journal));
            let objects = store.list(&prefix).await.map_err(|e| {
                metrics::LISTING_ERRORS.fetch_add(1, Relaxed);
                format!("listing {url}: {e}")
            })?;
            for object in objects {
                match storage::naming::parse_relative_path(journal, &object.path) {
                    Ok(mut fragment) => {
                        fragment.backing_store = url.clone();
                        fragment.mod_time = object.mod_time;
                        out.push(fragment);
                    }
                    // Other files may live beside fragments: skip them, never fail.
                    Err(e) => {
                        tracing::warn!(store = %url, journal, path = %object.path, error = %e, "failed to parse fragment")
                    }
                }
            }
        }
        Ok(out)
    }

    async fn persist(&self, job: PersistJob) -> PersistOutcome {
        let mut backoff = UPLOAD_BACKOFF_FIRST;
        // Fixed once, so that every attempt computes the same postfix (hence the same
        // content-addressed path).
        let first_append = job.first_append.unwrap_or_else(std::time::SystemTime::now);
        loop {
            let spec = {
                let snapshot = self.keyspace.borrow().clone();
                snapshot
                    .journals
                    .get(&job.fragment.journal)
                    .map(|item| item.spec.clone())
            };
            let Some(spec) = spec else {
                tracing::info!(journal = %job.fragment.journal, "dropping a completed fragment: its journal was removed");
                return PersistOutcome::Dropped;
            };
            let url = spec
                .fragment
                .as_ref()
                .and_then(|f| f.stores.first().cloned())
                .unwrap_or_else(|| self.cfg.default_store.clone());
            if url.is_empty() {
                // No stores and no default store: the fragment stays local, as in Gazette.
                return PersistOutcome::Dropped;
            }
            let attempt = async {
                let queued = Gauge::inc(&metrics::UPLOAD_QUEUE);
                let _permit = self
                    .uploads
                    .acquire()
                    .await
                    .expect("semaphore never closed");
                drop(queued);
                let _in_flight = Gauge::inc(&metrics::UPLOADS_IN_FLIGHT);
                self.persist_once(&job, &url, &spec, first_append).await
            };
            // Gazette's generous timeout against wedged uploads.
            let outcome = tokio::time::timeout(UPLOAD_TIMEOUT, attempt)
                .await
                .unwrap_or_else(|_| Err(StoreError::new("upload timed out after 5 minutes")));
            match outcome {
                Ok(fragment) => {
                    metrics::UPLOADS_COMPLETED.fetch_add(1, Relaxed);
                    return PersistOutcome::Persisted(fragment);
                }
                Err(e) => {
                    metrics::UPLOADS_FAILED.fetch_add(1, Relaxed);
                    tracing::warn!(journal = %job.fragment.journal, begin = job.fragment.begin, end = job.fragment.end, store = %url, error = %e, retry_in = ?backoff, "failed to persist fragment (will retry)");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(UPLOAD_BACKOFF_MAX);
                }
            }
        }
    }

    async fn persist_once(
        &self,
        job: &PersistJob,
        url: &str,
        spec: &protocol::JournalSpec,
        first_append: std::time::SystemTime,
    ) -> Result<Fragment, StoreError> {
        let active = self.active(url);
        let store = active.get()?.clone();
        let mut fragment = job.fragment.clone();
        fragment.backing_store = url.to_string();
        fragment.path_postfix = path_postfix(&fragment, spec, first_append);
        let path = active.rewrite(&storage::naming::content_path(&fragment));
        if let Some(mod_time) = store.exists(&path).await? {
            fragment.mod_time = mod_time;
            return Ok(fragment);
        }
        let codec = CompressionCodec::try_from(fragment.compression_codec)
            .unwrap_or(CompressionCodec::None);
        let staged = stage(&self.cfg, job, codec).await?;
        let encoding = (codec == CompressionCodec::GzipOffloadDecompression).then_some("gzip");
        let put = store
            .put(
                &path,
                PutSource::File {
                    path: staged.path.clone(),
                    len: staged.len,
                },
                encoding,
            )
            .await;
        if staged.temporary {
            // Best effort: start-up clears leftovers.
            let _ = std::fs::remove_file(&staged.path);
        }
        put?;
        metrics::UPLOAD_BYTES.fetch_add(staged.len, Relaxed);
        let mod_time = store
            .exists(&path)
            .await?
            .ok_or_else(|| StoreError::new(format!("{path} is missing right after its upload")))?;
        fragment.mod_time = mod_time.max(1);
        Ok(fragment)
    }

    async fn open(&self, fragment: &Fragment) -> Result<ObjectReader, StoreError> {
        let active = self.active(&fragment.backing_store);
        let store = active.get()?.clone();
        let path = active.rewrite(&storage::naming::content_path(fragment));
        let ObjectBody {
            gzip_encoded,
            mut chunks,
        } = store.get(&path).await?;
        let (tx, rx) = flume::bounded(READ_CHUNKS_IN_FLIGHT);
        tokio::spawn(async move {
            while let Some(chunk) = chunks.next().await {
                let failed = chunk.is_err();
                if tx.send_async(chunk.map_err(|e| e.message)).await.is_err() || failed {
                    return; // The reader went away, or the download failed.
                }
            }
        });
        Ok(ObjectReader {
            gzip_encoded,
            chunks: rx,
        })
    }
}

/// The fragment's path postfix: its spec's `path_postfix_template` evaluated over the spool
/// (`storage::naming::eval_path_postfix`). A template Courant cannot evaluate, or one that
/// yields an invalid postfix, persists the fragment with no postfix and a warning: the
/// fragment is still found by listings and reads, where Gazette would retry forever.
fn path_postfix(
    fragment: &Fragment,
    spec: &protocol::JournalSpec,
    first_append: std::time::SystemTime,
) -> String {
    use protocol::validate::Validate;
    let template = spec
        .fragment
        .as_ref()
        .map(|f| f.path_postfix_template.as_str())
        .unwrap_or_default();
    if template.is_empty() {
        return String::new();
    }
    let nanos = match first_append.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i128,
        Err(e) => -(e.duration().as_nanos() as i128),
    };
    let input = storage::naming::PostfixInput {
        fragment,
        first_append_unix_nanos: nanos,
        spec,
    };
    let postfix = match storage::naming::eval_path_postfix(template, &input) {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(journal = %fragment.journal, template, error = %e, "cannot evaluate path_postfix_template; persisting without a postfix");
            return String::new();
        }
    };
    let mut check = fragment.clone();
    check.path_postfix = postfix.clone();
    match check.validate() {
        Ok(()) => postfix,
        Err(e) => {
            tracing::warn!(journal = %fragment.journal, template, postfix, error = %e, "path_postfix_template yields an invalid postfix; persisting without one");
            String::new()
        }
    }
}

/// A fragment's content ready to upload.
struct Staged {
    path: PathBuf,
    len: u64,
    /// Whether `path` is a staged copy to remove after the upload.
    temporary: bool,
}

/// Reads the fragment's content from its local file on the blocking pool, checks its
/// SHA-1 against the fragment's sum, and compresses it into a staged file (NONE uploads
/// the local file as it is).
async fn stage(
    cfg: &StoresConfig,
    job: &PersistJob,
    codec: CompressionCodec,
) -> Result<Staged, StoreError> {
    let src = job.file.clone();
    let len = (job.fragment.end - job.fragment.begin) as u64;
    let want = job.fragment.sum.unwrap_or_default();
    let staged = cfg.staging_dir.join(format!(
        "{:016x}-{}",
        rand::random::<u64>(),
        storage::naming::content_name(&job.fragment)
    ));
    tokio::task::spawn_blocking(move || {
        let io = |op: &str, e: std::io::Error| StoreError::new(format!("{op} {}: {e}", src.display()));
        let file = std::fs::File::open(&src).map_err(|e| io("opening", e))?;
        let mut hashing = HashingReader {
            inner: file.take(len),
            sha: Sha1::new(),
            n: 0,
        };
        let (out_path, temporary) = if codec == CompressionCodec::None {
            std::io::copy(&mut hashing, &mut std::io::sink()).map_err(|e| io("reading", e))?;
            (src.clone(), false)
        } else {
            let out = std::fs::File::create(&staged)
                .map_err(|e| StoreError::new(format!("creating {}: {e}", staged.display())))?;
            let mut out = std::io::BufWriter::with_capacity(256 << 10, out);
            storage::codec::compress_stream(codec, &mut hashing, &mut out)
                .and_then(|_| std::io::Write::flush(&mut out))
                .map_err(|e| {
                    let _ = std::fs::remove_file(&staged);
                    StoreError::new(format!("compressing {}: {e}", src.display()))
                })?;
            (staged.clone(), true)
        };
        let digest: [u8; 20] = hashing.sha.finalize().into();
        if hashing.n != len || protocol::sum::sum_from_bytes(&digest) != want {
            if temporary {
                let _ = std::fs::remove_file(&out_path);
            }
            return Err(StoreError::new(format!(
                "local content of {} does not match its fragment ({} of {len} bytes read, or a different SHA-1)",
                src.display(),
                hashing.n
            )));
        }
        let staged_len = std::fs::metadata(&out_path)
            .map_err(|e| StoreError::new(format!("stat {}: {e}", out_path.display())))?
            .len();
        Ok(Staged {
            path: out_path,
            len: if temporary { staged_len } else { len },
            temporary,
        })
    })
    .await
    .map_err(|e| StoreError::new(format!("staging task failed: {e}")))?
}

struct HashingReader<R> {
    inner: R,
    sha: Sha1,
    n: u64,
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.sha.update(&buf[..n]);
        self.n += n as u64;
        Ok(n)
    }
}

/// Background health checks of one store, on Gazette's schedule, forever.
async fn check_loop(active: Arc<ActiveStore>) {
    let mut failed: u32 = 0;
    loop {
        let result = tokio::time::timeout(HEALTH_PROBE_TIMEOUT, super::run_health_check(&active))
            .await
            .unwrap_or_else(|_| Err(StoreError::new("health check timed out")));
        let ok = result.is_ok();
        match &result {
            Ok(()) => tracing::info!(store = %active.url, "store health check succeeded"),
            Err(e) => {
                tracing::warn!(store = %active.url, error = %e, attempt = failed, "store health check failed")
            }
        }
        let delay = super::next_check_delay(ok, failed);
        failed = if ok { 0 } else { failed + 1 };
        metrics::health(&active.url).store(u8::from(ok), Relaxed);
        active.health.send_modify(|h| {
            h.checks += 1;
            h.error = result.err().map(|e| e.message);
        });
        tokio::time::sleep(delay).await;
    }
}

/// The stores of `spec`, else `default_store` unless it is empty (Gazette's behaviour: a
/// journal without stores is never persisted).
fn stores_or_default<'a>(
    spec: &'a protocol::JournalSpec,
    default_store: &'a String,
) -> &'a [String] {
    match spec.fragment.as_ref().map(|f| f.stores.as_slice()) {
        Some(stores) if !stores.is_empty() => stores,
        _ if default_store.is_empty() => &[],
        _ => std::slice::from_ref(default_store),
    }
}

#[cfg(test)]
mod stores_or_default_tests {
    use super::stores_or_default;
    use protocol::JournalSpec;
    use protocol::journal_spec::Fragment;

    fn spec(stores: &[&str]) -> JournalSpec {
        JournalSpec {
            fragment: Some(Fragment {
                stores: stores.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_spec_first_then_the_default() {
        let (default, none) = ("file:///d/".to_string(), String::new());
        let both = spec(&["s3://a/", "gs://b/"]);
        assert_eq!(stores_or_default(&both, &default), ["s3://a/", "gs://b/"]);
        assert_eq!(stores_or_default(&spec(&[]), &default), ["file:///d/"]);
        assert!(stores_or_default(&spec(&[]), &none).is_empty());
        assert!(stores_or_default(&JournalSpec::default(), &none).is_empty());
        assert_eq!(
            stores_or_default(&JournalSpec::default(), &default),
            ["file:///d/"]
        );
    }
}
