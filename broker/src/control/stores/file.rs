//! `file://` stores: fragments as files under `--broker.file-root`, laid out as Gazette's
//! file store lays them out (`<root><prefix><journal>/<postfix>/<name>`).
//!
//! Lives on: the control thread; every filesystem call runs on tokio's blocking pool.
//! Uploads write a temporary `.partial-<name>.<host>-<pid>.<random>` beside the target,
//! fsync it, then rename it into place and fsync the directory: the broker removes its local
//! copy of a fragment only after `put` returns, so the rename must be durable. Listings never
//! return temporary files, and remove those no live upload can own (see [`stale_partial`]):
//! a broker killed mid-upload leaves them behind. As in Gazette, the
//! store's base directory (`root` + prefix) must exist; its subdirectories are created.
//! The "signed URL" is `file://<prefix><path>`, which Gazette clients read through a file
//! transport rooted at the same directory.

use super::{ObjectBody, ObjectInfo, PutSource, Store, StoreError, StoreFuture, StoreResult};
use bytes::Bytes;
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

/// Bytes per chunk of a `get` stream.
const GET_CHUNK: usize = 256 << 10;

/// Name prefix of an upload's temporary file.
const PARTIAL_PREFIX: &str = ".partial-";

/// Age (since its last write) after which a temporary file whose owner cannot be checked
/// is taken for abandoned: an upload writes its file continuously and then renames it.
const PARTIAL_STALE_AFTER: Duration = Duration::from_secs(600);

pub struct FileStore {
    root: PathBuf,
    /// The URL's path: starts and ends with `/`.
    prefix: String,
}

impl FileStore {
    pub fn new(root: &Path, prefix: &str) -> FileStore {
        FileStore {
            root: root.to_path_buf(),
            prefix: prefix.to_string(),
        }
    }

    fn base(&self) -> PathBuf {
        self.root.join(self.prefix.trim_start_matches('/'))
    }

    /// The file of `path`, refused when it would leave the store's root
    /// ([`super::confine`]).
    fn path_of(&self, path: &str) -> StoreResult<PathBuf> {
        super::confine::check_key(&format!("{}{path}", self.prefix.trim_start_matches('/')))?;
        Ok(self.base().join(path))
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> StoreResult<T> + Send + 'static,
) -> StoreResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StoreError::new(format!("file store task failed: {e}")))?
}

fn io_err(op: &str, path: &Path, e: std::io::Error) -> StoreError {
    let msg = format!("{op} {}: {e}", path.display());
    if e.kind() == std::io::ErrorKind::NotFound {
        StoreError::not_found(msg)
    } else {
        StoreError::new(msg)
    }
}

fn mod_time_of(meta: &std::fs::Metadata) -> i64 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs() as i64)
}

impl Store for FileStore {
    fn list<'a>(&'a self, prefix: &'a str) -> StoreFuture<'a, Vec<ObjectInfo>> {
        let dir = self.path_of(prefix);
        Box::pin(async move { blocking(move || list_dir(&dir?)).await })
    }

    fn exists<'a>(&'a self, path: &'a str) -> StoreFuture<'a, Option<i64>> {
        let file = self.path_of(path);
        Box::pin(blocking(move || {
            let file = file?;
            match std::fs::metadata(&file) {
                Ok(meta) => Ok(Some(mod_time_of(&meta))),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(io_err("stat", &file, e)),
            }
        }))
    }

    fn put<'a>(
        &'a self,
        path: &'a str,
        source: PutSource,
        _content_encoding: Option<&'a str>,
    ) -> StoreFuture<'a, ()> {
        let base = self.base();
        let target = self.path_of(path);
        Box::pin(blocking(move || put_file(&base, &target?, source)))
    }

    fn get<'a>(&'a self, path: &'a str) -> StoreFuture<'a, ObjectBody> {
        let file = self.path_of(path);
        Box::pin(async move {
            let file = file?;
            let opened = {
                let file = file.clone();
                blocking(move || std::fs::File::open(&file).map_err(|e| io_err("open", &file, e)))
                    .await?
            };
            let opened = std::sync::Arc::new(opened);
            let chunks = futures_util::stream::unfold(Some(0u64), move |pos| {
                let opened = opened.clone();
                let file = file.clone();
                async move {
                    let pos = pos?;
                    let read = blocking(move || {
                        let mut buf = vec![0u8; GET_CHUNK];
                        let n = opened
                            .read_at(&mut buf, pos)
                            .map_err(|e| io_err("read", &file, e))?;
                        buf.truncate(n);
                        Ok(buf)
                    })
                    .await;
                    match read {
                        Ok(buf) if buf.is_empty() => None,
                        Ok(buf) => {
                            let next = pos + buf.len() as u64;
                            Some((Ok(Bytes::from(buf)), Some(next)))
                        }
                        Err(e) => Some((Err(e), None)),
                    }
                }
            });
            Ok(ObjectBody {
                gzip_encoded: true,
                chunks: Box::pin(chunks),
            })
        })
    }

    fn sign_get<'a>(&'a self, path: &'a str, _ttl: Duration) -> StoreFuture<'a, String> {
        let checked = self
            .path_of(path)
            .map(|_| format!("file://{}{}", self.prefix, path));
        Box::pin(async move { checked })
    }

    fn delete<'a>(&'a self, path: &'a str) -> StoreFuture<'a, ()> {
        let file = self.path_of(path);
        Box::pin(blocking(move || {
            let file = file?;
            std::fs::remove_file(&file).map_err(|e| io_err("remove", &file, e))
        }))
    }
}

fn list_dir(dir: &Path) -> StoreResult<Vec<ObjectInfo>> {
    let mut out = Vec::new();
    if !dir.exists() {
        return Ok(out);
    }
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        let entries = std::fs::read_dir(&next).map_err(|e| io_err("listing", &next, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| io_err("listing", &next, e))?;
            let path = entry.path();
            let meta = match std::fs::metadata(&path) {
                Ok(meta) => meta,
                // Removed while we listed (a finished upload's temporary file).
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err("stat", &path, e)),
            };
            if meta.is_dir() {
                pending.push(path);
                continue;
            }
            if let Some(name) = path.file_name().and_then(|n| n.to_str())
                && name.starts_with(PARTIAL_PREFIX)
            {
                // Never a fragment: skipped quietly, and removed once no upload owns it.
                if stale_partial(name, &meta) {
                    match std::fs::remove_file(&path) {
                        Ok(()) => tracing::info!(path = %path.display(),
                            "removed an abandoned partial upload"),
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => tracing::warn!(path = %path.display(), error = %e,
                            "removing an abandoned partial upload"),
                    }
                }
                continue;
            }
            let Ok(rel) = path.strip_prefix(dir) else {
                continue;
            };
            let Some(rel) = rel.to_str() else {
                tracing::warn!(path = %path.display(), "skipping a file whose name is not UTF-8");
                continue;
            };
            out.push(ObjectInfo {
                path: rel.to_string(),
                size: meta.len(),
                mod_time: mod_time_of(&meta),
            });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

fn put_file(base: &Path, target: &Path, source: PutSource) -> StoreResult<()> {
    if let Err(e) = std::fs::metadata(base) {
        return Err(StoreError::new(format!(
            "invalid file store directory {}: {e}",
            base.display()
        )));
    }
    let dir = target
        .parent()
        .ok_or_else(|| StoreError::new(format!("no parent directory: {}", target.display())))?;
    std::fs::create_dir_all(dir).map_err(|e| io_err("creating", dir, e))?;
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = dir.join(format!(
        "{PARTIAL_PREFIX}{name}.{}.{:016x}",
        owner_tag(),
        rand::random::<u64>()
    ));
    let written = (|| {
        let mut out = std::fs::File::create(&temp).map_err(|e| io_err("creating", &temp, e))?;
        match source {
            PutSource::Bytes(bytes) => out
                .write_all(&bytes)
                .map_err(|e| io_err("writing", &temp, e))?,
            PutSource::File { path, len } => {
                let src = std::fs::File::open(&path).map_err(|e| io_err("opening", &path, e))?;
                let n = std::io::copy(&mut src.take(len), &mut out)
                    .map_err(|e| io_err("copying to", &temp, e))?;
                if n != len {
                    return Err(StoreError::new(format!(
                        "{} holds {n} bytes, expected {len}",
                        path.display()
                    )));
                }
            }
        }
        out.sync_all().map_err(|e| io_err("syncing", &temp, e))?;
        std::fs::rename(&temp, target).map_err(|e| io_err("renaming", &temp, e))?;
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_err("syncing", dir, e))
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

/// `<host>-<pid>` of this process, as written into its temporary files' names.
fn owner_tag() -> &'static str {
    static TAG: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TAG.get_or_init(|| format!("{}-{}", host_name(), std::process::id()))
}

/// The OS hostname, reduced to characters safe in a file name (no `.` or `-`, which
/// separate the parts of a temporary file's name).
fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates on success.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let raw = if rc == 0 {
        String::from_utf8_lossy(buf.get(..end).unwrap_or_default()).into_owned()
    } else {
        String::new()
    };
    raw.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// Whether the temporary upload file `name` can be removed: its owner (named in it) is a
/// process of this host that no longer runs (a broker killed mid-upload), or nothing has
/// written it for [`PARTIAL_STALE_AFTER`] (files of other hosts sharing the store, of
/// older versions without an owner in the name, or whose owner's PID was reused). Files
/// of this process are uploads in flight until the age rule says otherwise.
fn stale_partial(name: &str, meta: &std::fs::Metadata) -> bool {
    let old = meta
        .modified()
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age > PARTIAL_STALE_AFTER);
    if old {
        return true;
    }
    let Some((host, pid)) = partial_owner(name) else {
        return false;
    };
    if host != host_name() || pid <= 0 || pid as u32 == std::process::id() {
        return false;
    }
    // SAFETY: signal 0 only checks whether the process exists.
    let rc = unsafe { libc::kill(pid, 0) };
    rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// The host and PID named in a temporary file's name, if it names them.
fn partial_owner(name: &str) -> Option<(&str, i32)> {
    let rest = name.strip_prefix(PARTIAL_PREFIX)?;
    let (rest, random) = rest.rsplit_once('.')?;
    if random.len() != 16 || !random.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let (_, owner) = rest.rsplit_once('.')?;
    let (host, pid) = owner.rsplit_once('-')?;
    Some((host, pid.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn put_list_get_sign_delete() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("pre")).unwrap();
        let store = FileStore::new(dir.path(), "/pre/");
        rt().block_on(async {
            store
                .put(
                    "j/a/x.raw",
                    PutSource::Bytes(Bytes::from_static(b"hello")),
                    None,
                )
                .await
                .unwrap();
            let src = dir.path().join("src");
            std::fs::write(&src, b"0123456789").unwrap();
            store
                .put("j/y.raw", PutSource::File { path: src, len: 4 }, None)
                .await
                .unwrap();

            let listed = store.list("j/").await.unwrap();
            let paths: Vec<_> = listed.iter().map(|o| (o.path.as_str(), o.size)).collect();
            assert_eq!(paths, vec![("a/x.raw", 5), ("y.raw", 4)]);
            assert!(listed[0].mod_time > 0);
            assert!(store.list("missing/").await.unwrap().is_empty());

            assert!(store.exists("j/y.raw").await.unwrap().is_some());
            assert!(store.exists("j/z.raw").await.unwrap().is_none());
            let body = super::super::read_all(store.get("j/y.raw").await.unwrap())
                .await
                .unwrap();
            assert_eq!(body, b"0123");
            assert!(store.get("j/z.raw").await.err().unwrap().not_found);

            assert_eq!(
                store
                    .sign_get("j/y.raw", Duration::from_secs(1))
                    .await
                    .unwrap(),
                "file:///pre/j/y.raw"
            );
            store.delete("j/y.raw").await.unwrap();
            assert!(store.exists("j/y.raw").await.unwrap().is_none());
            // No temporary files are left behind.
            assert_eq!(store.list("j/").await.unwrap().len(), 1);
        });
    }

    #[test]
    fn partial_uploads_are_never_listed_and_abandoned_ones_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("j")).unwrap();
        let store = FileStore::new(dir.path(), "/");
        let frag = "0000000000000000-0000000000000010-0000000000000000000000000000000000000000.raw";
        std::fs::write(dir.path().join("j").join(frag), b"0123456789abcdef").unwrap();
        // A PID that certainly ran on this host and has exited.
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let dead_pid = gone.id();
        gone.wait().unwrap();
        let host = host_name();
        let name = |owner: &str| format!(".partial-{frag}.{owner}.00000000deadbeef");
        let dead = name(&format!("{host}-{dead_pid}"));
        let ours = name(owner_tag());
        let other_host = name(&format!("elsewhere-{dead_pid}"));
        let untagged = format!(".partial-{frag}.00000000deadbeef");
        let untagged_old = format!(".partial-{frag}.00000000cafef00d");
        for n in [&dead, &ours, &other_host, &untagged, &untagged_old] {
            std::fs::write(dir.path().join("j").join(n), b"partial").unwrap();
        }
        let long_ago = std::time::SystemTime::now() - PARTIAL_STALE_AFTER * 2;
        std::fs::File::options()
            .write(true)
            .open(dir.path().join("j").join(&untagged_old))
            .unwrap()
            .set_modified(long_ago)
            .unwrap();

        let listed = rt().block_on(store.list("j/")).unwrap();
        let paths: Vec<_> = listed.iter().map(|o| o.path.as_str()).collect();
        assert_eq!(paths, vec![frag]);
        let left = |n: &str| dir.path().join("j").join(n).exists();
        assert!(!left(&dead), "a dead owner's upload is removed");
        assert!(!left(&untagged_old), "an old untagged upload is removed");
        assert!(left(&ours), "our own upload may be in flight");
        assert!(left(&other_host), "another host's upload may be in flight");
        assert!(left(&untagged), "a fresh untagged upload may be in flight");
        let me = (host.as_str(), std::process::id() as i32);
        assert_eq!(partial_owner(&ours), Some(me));
        assert_eq!(partial_owner(&untagged), None);
        assert_eq!(partial_owner("x.raw"), None);
    }

    #[test]
    fn put_requires_the_base_directory() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::new(dir.path(), "/missing/");
        let err = rt()
            .block_on(store.put("j/x", PutSource::Bytes(Bytes::from_static(b"x")), None))
            .unwrap_err();
        assert!(
            err.message.contains("invalid file store directory"),
            "{err}"
        );
    }

    #[test]
    fn paths_leaving_the_root_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("pre")).unwrap();
        let store = FileStore::new(&root, "/pre/");
        let escape = "../../escape/j/x.raw";
        rt().block_on(async {
            let err = store
                .put(escape, PutSource::Bytes(Bytes::from_static(b"x")), None)
                .await
                .unwrap_err();
            assert!(err.message.contains("leave the store's root"), "{err}");
            assert!(store.get(escape).await.is_err());
            assert!(store.exists(escape).await.is_err());
            assert!(store.list("../../escape/").await.is_err());
            assert!(
                store
                    .sign_get(escape, Duration::from_secs(1))
                    .await
                    .is_err()
            );
            assert!(store.delete(escape).await.is_err());
        });
        assert!(
            !dir.path().join("escape").exists(),
            "nothing written outside"
        );
        // A prefix that itself climbs out is refused too.
        let store = FileStore::new(&root, "/../");
        let err = rt()
            .block_on(store.put("j/x", PutSource::Bytes(Bytes::from_static(b"x")), None))
            .unwrap_err();
        assert!(err.message.contains("leave the store's root"), "{err}");
    }
}
