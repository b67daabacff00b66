//! `file://` stores: fragments as files under `--broker.file-root`, laid out as Gazette's
//! file store lays them out (`<root><prefix><journal>/<postfix>/<name>`).
//!
//! Lives on: the control thread; every filesystem call runs on tokio's blocking pool.
//! Uploads write a temporary `.partial-<name>.<random>` beside the target, fsync it, then
//! rename it into place and fsync the directory: the broker removes its local copy of a
//! fragment only after `put` returns, so the rename must be durable. As in Gazette, the
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
    let temp = dir.join(format!(".partial-{name}.{:016x}", rand::random::<u64>()));
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
