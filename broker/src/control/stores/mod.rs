//! Fragment stores: where persisted fragments live, as Gazette lays them out.
//!
//! Lives on: the control thread. Every store operation (listing, upload, download, signing,
//! health checks) runs there as a tokio task; executor cores reach it only through
//! [`StoreHandle`] (owned [`StoreMsg`]s on a bounded channel, replies on bounded channels).
//!
//! * [`Store`]: the operations Gazette's stores have (`list`, `exists`, `put`, `get`,
//!   `sign_get`, `delete`), on paths relative to the store URL's prefix after the URL's
//!   `find`/`replace` rewriting. Implementations: [`file::FileStore`] (`file://`, rooted at
//!   `--broker.file-root`), [`object::ObjectStoreBackend`] (`s3://`, `azure://` through
//!   the `object_store` crate) and [`gcs::GcsStore`] (`gs://`, reqwest on the JSON API).
//!   `azure-ad://` is not built: such a store fails
//!   its construction, so it reports unhealthy and appends to journals that use it first
//!   get `FRAGMENT_STORE_UNHEALTHY`.
//! * [`ActiveStore`]: a constructed store (or its construction error), its rewriting
//!   arguments and its health, checked in the background as Gazette does.
//! * [`persist`]: the background uploader, listings and reads of persisted fragments.

pub mod confine;
pub mod file;
pub mod gcs;
pub mod object;
pub mod persist;

use bytes::Bytes;
use futures_util::stream::BoxStream;
use protocol::validate::StoreQueryArgs;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Lifetime of the signed URL a health check probes.
const PROBE_URL_LIFETIME: std::time::Duration = std::time::Duration::from_secs(300);

/// A store operation's failure.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct StoreError {
    pub not_found: bool,
    pub message: String,
}

impl StoreError {
    pub fn new(message: impl Into<String>) -> Self {
        StoreError {
            not_found: false,
            message: message.into(),
        }
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        StoreError {
            not_found: true,
            message: message.into(),
        }
    }
}

pub type StoreResult<T> = Result<T, StoreError>;
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = StoreResult<T>> + Send + 'a>>;

/// One object of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Path relative to the listed prefix.
    pub path: String,
    pub size: u64,
    /// Last modification, Unix seconds.
    pub mod_time: i64,
}

/// The body of a fetched object.
pub struct ObjectBody {
    /// Whether the bytes are still `Content-Encoding: gzip` (GZIP_OFFLOAD_DECOMPRESSION
    /// objects fetched from a store that did not decode them).
    pub gzip_encoded: bool,
    pub chunks: BoxStream<'static, StoreResult<Bytes>>,
}

/// What an upload reads from: a local file's first `len` bytes, or bytes in memory.
pub enum PutSource {
    File { path: PathBuf, len: u64 },
    Bytes(Bytes),
}

/// The operations of a fragment store. Paths are relative to the store URL's prefix and
/// already rewritten by its `find`/`replace` arguments.
pub trait Store: Send + Sync {
    /// Every object under `prefix` (recursively), paths relative to `prefix`.
    fn list<'a>(&'a self, prefix: &'a str) -> StoreFuture<'a, Vec<ObjectInfo>>;
    /// The object's mod time (Unix seconds) if it exists.
    fn exists<'a>(&'a self, path: &'a str) -> StoreFuture<'a, Option<i64>>;
    /// Durably writes the object; `content_encoding` is sent as its Content-Encoding.
    fn put<'a>(
        &'a self,
        path: &'a str,
        source: PutSource,
        content_encoding: Option<&'a str>,
    ) -> StoreFuture<'a, ()>;
    /// The object's raw bytes (no decompression of the fragment's codec).
    fn get<'a>(&'a self, path: &'a str) -> StoreFuture<'a, ObjectBody>;
    /// A URL a client can GET the object from until `ttl` passes.
    fn sign_get<'a>(&'a self, path: &'a str, ttl: Duration) -> StoreFuture<'a, String>;
    fn delete<'a>(&'a self, path: &'a str) -> StoreFuture<'a, ()>;
}

/// Health of a store, as published to executor cores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// Completed health checks.
    pub checks: u64,
    /// The last check's error; before the first check, "first health check hasn't
    /// completed yet".
    pub error: Option<String>,
    /// The store could not be constructed: no later check will change anything.
    pub permanent: bool,
}

pub const FIRST_HEALTH_CHECK: &str = "first health check hasn't completed yet";

/// How stores are built, from `courant serve` flags.
#[derive(Debug, Clone)]
pub struct StoresConfig {
    /// Root of `file://` stores.
    pub file_root: PathBuf,
    /// Map every store to a file store at `file_root` with prefix `/`.
    pub file_only: bool,
    /// Store used by journals whose spec names none.
    pub default_store: String,
    /// Uploads in flight at once.
    pub max_uploads: usize,
    /// Where uploads stage compressed content.
    pub staging_dir: PathBuf,
}

/// A constructed store with its URL arguments and health.
pub struct ActiveStore {
    pub url: String,
    pub args: StoreQueryArgs,
    pub store: Result<Arc<dyn Store>, String>,
    pub health: watch::Sender<Health>,
}

impl ActiveStore {
    /// Builds the store of `url` (an error is kept, and reported as its health).
    pub fn new(cfg: &StoresConfig, url: &str) -> ActiveStore {
        let (args, store) = match build(cfg, url) {
            Ok((args, store)) => (args, Ok(store)),
            Err(err) => (StoreQueryArgs::default(), Err(err)),
        };
        let health = match &store {
            Ok(_) => Health {
                checks: 0,
                error: Some(FIRST_HEALTH_CHECK.into()),
                permanent: false,
            },
            Err(err) => Health {
                checks: 1,
                error: Some(err.clone()),
                permanent: true,
            },
        };
        ActiveStore {
            url: url.to_string(),
            args,
            store,
            health: watch::channel(health).0,
        }
    }

    /// The store, or its construction error.
    pub fn get(&self) -> StoreResult<&Arc<dyn Store>> {
        self.store
            .as_ref()
            .map_err(|e| StoreError::new(format!("fragment store {}: {e}", self.url)))
    }

    /// `path` (relative to the store prefix) after `find`/`replace`.
    pub fn rewrite(&self, path: &str) -> String {
        storage::naming::rewrite_path(&self.args.find, &self.args.replace, path)
    }
}

/// Parses and constructs the store of `url`.
fn build(cfg: &StoresConfig, url: &str) -> Result<(StoreQueryArgs, Arc<dyn Store>), String> {
    let parsed = protocol::validate::validate_fragment_store_url(url).map_err(|e| e.to_string())?;
    let args = protocol::validate::parse_store_query_args(&parsed).map_err(|e| e.to_string())?;
    if cfg.file_only {
        return Ok((args, Arc::new(file::FileStore::new(&cfg.file_root, "/"))));
    }
    let store: Arc<dyn Store> = match parsed.scheme.as_str() {
        "file" => Arc::new(file::FileStore::new(&cfg.file_root, &parsed.path)),
        "s3" => Arc::new(object::ObjectStoreBackend::s3(&parsed, &args)?),
        "azure" => Arc::new(object::ObjectStoreBackend::azure(&parsed)?),
        "gs" => Arc::new(gcs::GcsStore::new(&parsed)?),
        other => {
            return Err(format!(
                "{other}:// fragment stores are not supported by this broker (supported: file, s3, azure, gs)"
            ));
        }
    };
    Ok((args, store))
}

/// Gazette's schedule of health checks: 30 minutes after a success; after failures 0,
/// 0.1 s, 1 s, 1 s, 10 s, 10 s, then 100 s; each ±20%.
pub fn next_check_delay(ok: bool, failed_attempts: u32) -> Duration {
    let base = if ok {
        Duration::from_secs(30 * 60)
    } else {
        match failed_attempts {
            0 => Duration::ZERO,
            1 => Duration::from_millis(100),
            2 | 3 => Duration::from_secs(1),
            4 | 5 => Duration::from_secs(10),
            _ => Duration::from_secs(100),
        }
    };
    let jitter = 1.0 + (rand::random::<f64>() - 0.5) * 0.4;
    base.mul_f64(jitter)
}

/// Gazette's health check: PUT `.test/health-check`, GET it back, LIST `.test/` and find
/// it, and sign a GET URL (fetched too when it is http(s)).
pub async fn run_health_check(active: &ActiveStore) -> StoreResult<()> {
    const PATH: &str = ".test/health-check";
    const CONTENT: &[u8] = b"health-check\n";
    let store = active.get()?;
    let err =
        |what: &str, e: StoreError| StoreError::new(format!("health check {what} failed: {e}"));
    store
        .put(PATH, PutSource::Bytes(Bytes::from_static(CONTENT)), None)
        .await
        .map_err(|e| err("PUT", e))?;
    let got = read_all(store.get(PATH).await.map_err(|e| err("GET", e))?)
        .await
        .map_err(|e| err("read", e))?;
    if got != CONTENT {
        return Err(StoreError::new(format!(
            "health check content mismatch: got {:?}, want {:?}",
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(CONTENT)
        )));
    }
    let listed = store.list(".test/").await.map_err(|e| err("LIST", e))?;
    if !listed.iter().any(|o| o.path == "health-check") {
        return Err(StoreError::new("health check LIST did not find test file"));
    }
    let url = store
        .sign_get(PATH, PROBE_URL_LIFETIME)
        .await
        .map_err(|e| err("SignGet", e))?;
    if url.starts_with("http") {
        let resp = reqwest::Client::new()
            .get(&url)
            .send()
            .await
            .map_err(|e| StoreError::new(format!("health check fetch failed: {e}")))?;
        if !resp.status().is_success() {
            return Err(StoreError::new(format!(
                "health check fetch returned status {}",
                resp.status().as_u16()
            )));
        }
        let body = resp
            .bytes()
            .await
            .map_err(|e| StoreError::new(format!("health check fetch read failed: {e}")))?;
        if body.as_ref() != CONTENT {
            return Err(StoreError::new("health check fetch content mismatch"));
        }
    }
    Ok(())
}

/// Gazette's delete probe of FragmentStoreHealth: PUT then DELETE
/// `<prefix>.gazette-delete-probe`.
pub async fn check_delete(active: &ActiveStore, prefix: &str) -> StoreResult<()> {
    const CONTENT: &[u8] = b"gazette-delete-probe\n";
    let store = active.get()?;
    let path = format!("{prefix}.gazette-delete-probe");
    store
        .put(&path, PutSource::Bytes(Bytes::from_static(CONTENT)), None)
        .await
        .map_err(|e| StoreError::new(format!("delete-probe PUT failed: {e}")))?;
    store
        .delete(&path)
        .await
        .map_err(|e| StoreError::new(format!("delete-probe DELETE failed: {e}")))
}

/// Collects a whole object (small objects only: health checks and tests).
pub async fn read_all(body: ObjectBody) -> StoreResult<Vec<u8>> {
    use futures_util::StreamExt;
    let mut chunks = body.chunks;
    let mut out = Vec::new();
    while let Some(chunk) = chunks.next().await {
        out.extend_from_slice(&chunk?);
    }
    Ok(out)
}

/// `StoresConfig` from the serve flags: `--broker.file-root` defaults to
/// `<data-dir>/fragments`, and journals without stores use `file:///` there.
pub fn config_from(cfg: &crate::config::ServeConfig) -> StoresConfig {
    let file_root = cfg
        .file_root
        .clone()
        .unwrap_or_else(|| cfg.data_dir.join("fragments"));
    StoresConfig {
        file_root,
        file_only: cfg.file_only,
        default_store: cfg.default_store.clone(),
        max_uploads: cfg.max_uploads.max(1),
        staging_dir: cfg.data_dir.join("uploads"),
    }
}

/// Retries of a failing store's health that an append waits through before it answers
/// `FRAGMENT_STORE_UNHEALTHY` (Gazette's `storeHealthCheckRetries`).
pub(crate) const STORE_HEALTH_CHECK_RETRIES: u32 = 5;
